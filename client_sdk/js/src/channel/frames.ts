/**
 * The channel's frames (issue 39; Python's `toolref.websocket.channel`, byte for byte): a
 * sender's turns and their answers on one WebSocket to its receiver (the gateway's
 * `/v1/channel`, a backend's `ToolRefMiddleware(channel_path=...)`), no HTTP head per turn.
 *
 * Each WebSocket message (binary) is one frame. The sender's, one per request:
 *
 *     varint(stream) varint(len(meta)) meta body
 *
 * `meta` is what changed since the channel's previous turn: empty when the target and the
 * headers are the same, else JSON with `"p"` (path and query) and/or `"h"` (the headers as
 * `[name, value]` pairs, in order), written as Python's `json.dumps(separators=(",", ":"))`
 * writes it (all but printable ASCII escaped), so both SDKs put the same bytes on the wire. `{"c":1}` and
 * no body cancels a stream; `{"w":N}` and no body grants a stream N more bytes of its answer
 * (windows). The receiver's, per stream in order: `varint(stream) 0x00` and JSON
 * `{"s":status,"h":[[name,value],...]}` (the head), `0x01` and bytes (a piece of the body),
 * `0x02` (its end), `0x03` and a reason (it broke off). Pure: bytes in, bytes out, each read
 * linear in its frame (bounded by the WebSocket's message limit).
 */

import type { SenderBases } from "./bases.js";
import { CHANNEL_HEADER } from "./paths.js";

/** Turns served at once on one channel (a sender sends no more: past them, HTTP). */
export const MAX_STREAMS = 64;
/** A request larger than this goes over HTTP, not on the channel: a receiver's WebSocket
 * message limit (uvicorn's 16 MiB) would close the channel, and every turn on it. */
export const MAX_FRAME_BYTES = 8 << 20;
/** The bytes of one answer frame the sender reads at most (Python's `MAX_MESSAGE`). */
export const MAX_MESSAGE = 64 << 20;
/** On the head of the answer to a turn the receiver had no room for: nothing was done with
 * it, and the sender sends it over HTTP. */
export const BUSY: readonly [string, string] = [CHANNEL_HEADER, "busy"];
/** The close a receiver sends once every turn it read was answered (its graceful stop, or
 * the channel idle): a turn with no answer frame at it was never read, and goes over HTTP. */
export const DRAINED: readonly [number, string] = [1012, "toolref: every turn read was answered"];
/** Windows: the header asking for them on the upgrade (and granting them on the 101), the
 * window asked for, and the bounds a receiver keeps. */
export const WINDOW_HEADER = "toolref-channel-window";
export const WINDOW = 1 << 20;
export const MIN_WINDOW = 64 << 10;
export const MAX_WINDOW = 16 << 20;
export const HEAD = 0;
export const PIECE = 1;
export const END = 2;
export const BROKEN = 3;

export type Pairs = [string, string][];

/** A frame that does not read: the channel is dropped (the sender opens a new one). */
export class FrameError extends Error {
  override name = "FrameError";
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `value` as an unsigned LEB128 varint (Python's `toolref.kit.varints.varint`). */
export function varint(value: number): Uint8Array {
  const out: number[] = [];
  let left = value;
  while (left >= 0x80) {
    out.push((left % 0x80) | 0x80);
    left = Math.floor(left / 0x80);
  }
  out.push(left);
  return Uint8Array.from(out);
}

/** The varint at `at` (at most 8 bytes: a stream id, a meta's length) and the offset after
 * it; null when cut short or longer. */
export function readVarint(data: Uint8Array, at: number): [number, number] | null {
  let value = 0;
  let scale = 1;
  for (let index = at; index < data.length && index < at + 8; index++) {
    const byte = data[index]!;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return [value, index + 1];
    scale *= 0x80;
  }
  return null;
}

/** `value` as Python's `json.dumps(value, separators=(",", ":"))` writes it: every character
 * past `~` as `\uXXXX` (a header's latin-1 text included), so the meta's bytes are the same. */
export function pythonJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (found) => "\\u" + found.charCodeAt(0).toString(16).padStart(4, "0"));
}

function joined(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** The sender's side: a request as a frame, only what changed since the last one sent;
 * with `bases`, an edit's base named by the stream that made it (`bases.ts`). */
export class FrameSender {
  private target: string | null = null;
  private headers: string | null = null; // the last headers sent, as their JSON

  constructor(private readonly bases: SenderBases | null = null) {}

  /** Stream `stream`'s answer head came (`bases` remembers the recipe it names). */
  made(stream: number, status: number, headers: Pairs): void {
    this.bases?.made(stream, status, headers);
  }

  turn(stream: number, target: string, headers: Pairs, body: Uint8Array): Uint8Array {
    const meta: { p?: string; h?: Pairs } = {};
    if (target !== this.target) meta.p = this.target = target;
    const listed = pythonJson(headers);
    if (listed !== this.headers) {
      this.headers = listed;
      meta.h = headers;
    }
    const said = meta.p === undefined && meta.h === undefined ? new Uint8Array(0) : encoder.encode(pythonJson(meta));
    const carried = this.bases === null ? body : this.bases.written(stream, headers, body);
    return joined(varint(stream), varint(said.length), said, carried);
  }

  static cancel(stream: number): Uint8Array {
    const said = encoder.encode('{"c":1}');
    return joined(varint(stream), varint(said.length), said);
  }

  static credit(stream: number, size: number): Uint8Array {
    const said = encoder.encode(`{"w":${size}}`);
    return joined(varint(stream), varint(said.length), said);
  }
}

/** A frame of an answer: its stream, its kind (HEAD, PIECE, END, BROKEN), its bytes. */
export interface Answered {
  readonly stream: number;
  readonly kind: number;
  readonly data: Uint8Array;
}

/** An answer frame read; `FrameError` when it does not read. */
export function answered(frame: Uint8Array): Answered {
  const found = readVarint(frame, 0);
  if (found === null || found[1] >= frame.length || frame[found[1]]! > BROKEN) throw new FrameError("an answer frame does not read");
  const [stream, at] = found;
  return { stream, kind: frame[at]!, data: frame.subarray(at + 1) };
}

/** The status and headers of a HEAD frame; `FrameError` when it is none. */
export function headOf(frame: Answered): { status: number; headers: Pairs } {
  if (frame.kind !== HEAD) throw new FrameError(`stream ${frame.stream}'s answer starts with kind ${frame.kind}, not its head`);
  let found: unknown;
  try {
    found = JSON.parse(decoder.decode(frame.data));
  } catch {
    throw new FrameError("an answer's head does not read (not JSON)");
  }
  const { s: status, h: pairs } = (found ?? {}) as { s?: unknown; h?: unknown };
  if (typeof status !== "number" || !Number.isInteger(status) || status < 100 || status > 599) {
    throw new FrameError(`an answer's status is ${JSON.stringify(status)}`);
  }
  if (!Array.isArray(pairs) || !pairs.every((pair) => Array.isArray(pair) && pair.length === 2)) {
    throw new FrameError("an answer's head names its headers as no [name, value] pairs");
  }
  return { status, headers: pairs.map(([name, value]) => [String(name), String(value)] as [string, string]) };
}

/** The window a receiver keeps for a sender that asked for `asked` (null: it asked for none). */
export function windowGranted(asked: string | null): number | null {
  if (asked === null || !/^[0-9]{1,10}$/.test(asked)) return null;
  return Math.min(Math.max(Number(asked), MIN_WINDOW), MAX_WINDOW);
}

/** The window the 101's `Toolref-Channel-Window` grants: null where it keeps none (an older
 * receiver), or names one beyond the bounds. */
export function windowKept(value: string | null): number | null {
  const granted = windowGranted(value);
  return granted !== null && String(granted) === value ? granted : null;
}
