/**
 * `ChannelTransport`: a sender's turns over one WebSocket to one receiver (Python's
 * `toolref.sending.channel_transport.ChannelTransport`, the same rules). The channel opens
 * at the first turn (`GET {origin}{path}` upgraded, with windows asked for and the turn's
 * credentials repeated on the upgrade) and carries every turn after it, concurrently, each
 * answer streamed as it comes. `send` answers null where the turn is to go over HTTP: the
 * channel cannot be had (the upgrade refused, 404 / 401 / 429, or the receiver unreachable:
 * HTTP for the back-off's wait, 30 s doubled each failure in a row, at most `retryMaxMs`),
 * 64 turns are in flight on it, the body is over `MAX_FRAME_BYTES`, the channel closed before
 * the turn went out or drained before reading it (`DRAINED`: a clean close, the next turn
 * opens a new channel at once), or the receiver answered it `Toolref-Channel: busy`. A
 * channel closed before it lived `HEALTHY_MS` with no answer ended on it, or failing a turn,
 * counts as a failure; one idle `IDLE_MS` is closed before the next turn (a NAT may have
 * dropped it without a word) and a new one opened, as is one a turn's read timeout retired
 * (`Link`: its last answers read on to their end meanwhile). A turn whose caller leaves (its
 * `signal`) while the channel connects fails at once with the signal's reason; once every turn
 * waiting for that connection left, the connection is dropped (not a failure: no back-off).
 */

import { BASES_HEADER, BASES_OFFER } from "./bases.js";
import { BUSY, MAX_FRAME_BYTES, MAX_MESSAGE, MAX_STREAMS, WINDOW, WINDOW_HEADER, type Pairs } from "./frames.js";
import { Link, Unsent } from "./link.js";
import { connect } from "./upgrade.js";
import { Refusal } from "./websocket.js";

/** A channel idle this long is closed before the next turn and a new one opened. */
export const IDLE_MS = 60_000;
export const FIRST_MS = 30_000;
export const LONGEST_MS = 600_000;
/** A channel that lived this long with answers on it starts the failures' count again. */
export const HEALTHY_MS = 300_000;
const CONNECT_TIMEOUT_MS = 10_000;
const TOKEN = /^[A-Za-z0-9._-]{1,64}$/;

/** How long turns go over HTTP after the channel could not be had (Python's `Backoff`):
 * the n-th failure in a row waits `first` * 2^(n-1), at most `longest`, drawn between half
 * and all of that. */
export class Backoff {
  failures = 0;
  until = 0;
  constructor(
    readonly first: number,
    readonly longest: number,
    private readonly random: () => number = Math.random,
  ) {}

  over(now: number): boolean {
    return now >= this.until;
  }

  failed(now: number): number {
    const full = Math.min(this.first * 2 ** Math.min(this.failures, 62), this.longest);
    this.failures += 1;
    const wait = full * (0.5 + this.random() / 2);
    this.until = now + wait;
    return wait;
  }

  lived(ms: number): void {
    if (ms >= HEALTHY_MS) this.failures = 0;
  }
}

export interface TransportOptions {
  /** Told one line when the channel cannot be had. */
  report: (line: string) => void;
  /** The back-off's cap, ms. */
  retryMaxMs?: number;
  clock?: () => number;
  /** Link's `READ_TIMEOUT_MS` (tests). */
  readTimeoutMs?: number;
}

/** A connection being opened: the link it becomes, the turns waiting for it (`waitFor`), and
 * the signal that drops it once they all left. */
interface Opening {
  link: Promise<Link | null>;
  waiting: number;
  readonly dropped: AbortController;
}

export class ChannelTransport {
  readonly url: string;
  private link: Link | null = null;
  private readonly older = new Set<Link>(); // retired (a turn's read timeout), answers still coming
  private opening: Opening | null = null;
  private retired = false;
  private readonly backoff: Backoff;
  private readonly clock: () => number;

  constructor(
    readonly origin: string,
    path: string,
    private readonly upgrade: Pairs,
    private readonly options: TransportOptions,
  ) {
    this.url = origin + path;
    this.clock = options.clock ?? (() => performance.now());
    const longest = options.retryMaxMs ?? LONGEST_MS;
    this.backoff = new Backoff(Math.min(FIRST_MS, longest), longest);
  }

  /** Whether turns are in flight on its channel. */
  get busy(): boolean {
    for (const link of this.older) if (link.over) this.older.delete(link);
    return (this.link !== null && !this.link.closed && this.link.streams.size > 0) || this.older.size > 0;
  }

  /** The turn's answer over the channel, or null: send it over HTTP (nothing of it was done). */
  async send(target: string, headers: Pairs, body: Uint8Array, signal?: AbortSignal): Promise<Response | null> {
    if (body.length > MAX_FRAME_BYTES) return null;
    signal?.throwIfAborted();
    const link = await this.open(signal);
    if (link === null || link.streams.size >= MAX_STREAMS) return null;
    let answer: Response;
    try {
      answer = await link.send(target, headers, body, signal);
    } catch (error) {
      if (error instanceof Unsent) return null;
      throw error;
    }
    if (answer.status === 503 && answer.headers.get(BUSY[0]) === BUSY[1]) {
      await answer.body?.cancel(); // the receiver did nothing with it
      return null;
    }
    return answer;
  }

  /** Close the channel for good: turns go over HTTP from now. */
  retire(): void {
    this.retired = true;
    this.link?.close();
    for (const link of this.older) link.close();
    this.older.clear();
  }

  private async open(signal?: AbortSignal): Promise<Link | null> {
    const link = this.link;
    const lived = link !== null && link.heard ? link.used - link.opened : 0;
    this.backoff.lived(lived);
    if (link !== null && link.closed && link.failed && lived < HEALTHY_MS) {
      this.link = null;
      const wait = this.backoff.failed(this.clock());
      const how = link.heard ? `broke ${Math.round(lived / 1000)}s after it opened` : "closed before any answer came on it";
      this.options.report(`toolref: the channel to ${this.origin} ${how}; turns go over HTTP, the channel is tried again in ${Math.round(wait / 1000)}s`);
      return null;
    }
    if (link !== null && !link.closed && !link.streams.size && this.clock() - link.used > IDLE_MS) link.close();
    if (this.link !== null && !this.link.closed) {
      this.link.used = this.clock();
      return this.link;
    }
    if (this.retired || !this.backoff.over(this.clock())) return null;
    if (this.opening === null) {
      const opening: Opening = { link: null!, waiting: 0, dropped: new AbortController() };
      opening.link = this.connect(opening.dropped.signal).finally(() => {
        if (this.opening === opening) this.opening = null;
      });
      this.opening = opening;
    }
    return this.waitFor(this.opening, signal); // one open at a time; those waiting see how it went
  }

  /** The link `opening` connects, or the reason of `signal` once it aborts; the connection is
   * dropped once every turn waiting for it left (the next turn connects anew). */
  private waitFor(opening: Opening, signal?: AbortSignal): Promise<Link | null> {
    if (signal === undefined) {
      opening.waiting += 1; // never leaves
      return opening.link;
    }
    signal.throwIfAborted();
    opening.waiting += 1;
    return new Promise<Link | null>((resolve, reject) => {
      const left = (): void => {
        if (--opening.waiting === 0) {
          if (this.opening === opening) this.opening = null;
          opening.dropped.abort();
        }
        reject(signal.reason);
      };
      signal.addEventListener("abort", left, { once: true });
      opening.link.then(
        (link) => {
          signal.removeEventListener("abort", left);
          resolve(link);
        },
        (error: unknown) => {
          signal.removeEventListener("abort", left);
          reject(error);
        },
      );
    });
  }

  private async connect(dropped: AbortSignal): Promise<Link | null> {
    const headers: Pairs = [[WINDOW_HEADER, String(WINDOW)], [BASES_HEADER, BASES_OFFER], ...this.upgrade];
    try {
      const socket = await connect(this.url, headers, { maxMessage: MAX_MESSAGE, connectTimeoutMs: CONNECT_TIMEOUT_MS, signal: dropped });
      if (this.retired || dropped.aborted) {
        socket.abort(); // retired while it connected, or every turn waiting for it left
        return null;
      }
      for (const link of this.older) if (link.over) this.older.delete(link);
      if (this.link !== null && this.link.retired && !this.link.over) this.older.add(this.link);
      return (this.link = new Link(socket, this.clock, this.options.readTimeoutMs));
    } catch (error) {
      if (dropped.aborted) return null; // every turn waiting for it left: not the receiver's failure
      const wait = this.backoff.failed(this.clock());
      this.options.report(`toolref: no channel to ${this.origin} (${why(error)}); turns go over HTTP, the channel is tried again in ${Math.round(wait / 1000)}s`);
      return null;
    }
  }
}

/** Why no channel was had: a refused upgrade's status and its toolref problem's slug (and
 * quota), short tokens only, so a receiver cannot write the report line. */
export function why(error: unknown): string {
  if (!(error instanceof Refusal)) return `${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}`;
  let problem: Record<string, unknown> | null = null;
  try {
    const found: unknown = JSON.parse(new TextDecoder().decode(error.body));
    if (typeof found === "object" && found !== null && !Array.isArray(found)) problem = found as Record<string, unknown>;
  } catch {
    problem = null;
  }
  const kind = problem?.["type"];
  const slug = typeof kind === "string" && kind.startsWith("urn:toolref:problem:") ? kind.slice("urn:toolref:problem:".length) : null;
  const quota = problem?.["quota"];
  const said = slug === null || !TOKEN.test(slug) ? "" : typeof quota === "string" && TOKEN.test(quota) ? `: ${slug}, quota ${quota}` : `: ${slug}`;
  return `the upgrade was answered ${error.status}${said}`;
}
