import type { Exchange } from "./exchange";

// The bytes of one turn: every request it took (a resend counts too).
export interface Turn {
  turn: number;
  requests: number;
  rawBytes: number;
  wireBytes: number;
  historyRef: string | null;
  continued: boolean; // a request was an edit of one the backend kept
  resent: boolean;
}

export function addExchange(turns: Turn[], turn: number, exchange: Exchange): Turn[] {
  const last = turns[turns.length - 1];
  if (last && last.turn === turn) {
    const merged: Turn = {
      turn,
      requests: last.requests + 1,
      rawBytes: last.rawBytes + exchange.rawBytes,
      wireBytes: last.wireBytes + exchange.wireBytes,
      historyRef: exchange.historyRef ?? last.historyRef,
      continued: last.continued || Boolean(exchange.continued),
      resent: last.resent || exchange.resent,
    };
    return [...turns.slice(0, -1), merged];
  }
  const { rawBytes, wireBytes, historyRef, resent } = exchange;
  const continued = Boolean(exchange.continued);
  return [...turns, { turn, requests: 1, rawBytes, wireBytes, historyRef, continued, resent }];
}
