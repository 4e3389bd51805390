/**
 * `Link`: one open channel (Python's `toolref.sending.channel_link.Link`): the frames'
 * memory, the turns in flight on it and their answers. A turn is written as one frame and
 * answered as a `Response` once its head frame came, whose body streams its pieces as they
 * come. A turn the channel closed before it went out, or whose receiver stopped before
 * reading it (`DRAINED`: no answer frame of it came), rejects `Unsent`: its caller sends it
 * over HTTP. A turn written on a channel that then broke fails as a request on a dropped
 * connection fails (`TypeError`, as fetch's): it may have been served, and a POST is never
 * sent twice.
 *
 * Memory: per turn in flight its pieces not yet read. Where the receiver keeps windows (the
 * 101's `Toolref-Channel-Window`: the gateway and `ToolRefMiddleware` do) at most a window
 * of them: the body is read by pull, and each read granted back half a window at a time, so
 * an answer its caller leaves unread waits at the receiver; a receiver that sends past the
 * window drops the channel. An older receiver's answers are held as they come.
 *
 * A turn waiting `READ_TIMEOUT_MS` for its next frame (its head, or a piece its reader asked
 * for) fails alone, as over HTTP (undici's `headersTimeout` and `bodyTimeout`), and its
 * receiver is told (`{"c":1}`); when no frame came on the channel for any turn meanwhile the
 * channel is suspect (a hung receiver, a connection a NAT dropped in use): with another
 * turn's answer still coming (its reader paused) it is retired, taking no new turn and
 * closing once that answer ended, else dropped (Python's `Link.next_piece`).
 *
 * An answer the app drops unread (its body collected: nothing can read it any more, as
 * undici cancels a collected `Response`'s body) is cancelled at its receiver (`{"c":1}`),
 * as its caller leaving is: it would otherwise wait at the receiver for ever, its window
 * never granted back, and hold its slot on the channel (`MAX_STREAMS`) and the channel.
 */

import { SenderBases, basesKept } from "./bases.js";
import { BROKEN, DRAINED, END, FrameError, FrameSender, HEAD, PIECE, WINDOW_HEADER, answered, headOf, windowKept, type Pairs } from "./frames.js";
import { unrefTimer, type Closed, type WebSocketClient } from "./websocket.js";

/** The channel could not carry the turn, and nothing was done with it: send it over HTTP. */
export class Unsent extends Error {
  override name = "Unsent";
}

/** A turn in flight: its head awaited, then its pieces not yet read. */
class Stream {
  heard = false; // a frame of its answer came
  responded = false; // its head was handed on
  done = false; // its END or BROKEN came, or it was cancelled
  since: number | null = null; // it began waiting for its next frame (null: it waits for none)
  heardAt = 0; // the channel's frames come when it began waiting
  owed = 0; // bytes of pieces received beyond those granted back (windows)
  read = 0; // bytes read since the last grant
  pieces: Uint8Array[] = [];
  failure: unknown = null; // the error its body ends with
  wake: (() => void) | null = null;
  unlisten: (() => void) | null = null; // the caller's signal no longer listened to
  constructor(
    private head: ((response: Response) => void) | null,
    public refuse: (error: unknown) => void,
  ) {}

  /** Its caller's promise resolved with `response`: its resolving functions are let go (they
   * hold the promise, which holds the Response: the app's dropping it must let it go). */
  answer(response: Response): void {
    const head = this.head;
    this.head = null;
    this.refuse = () => undefined;
    head?.(response);
  }

  /** Something came for its body: a pull waiting is woken. */
  poke(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

/** Milliseconds a turn waits for its next frame before it fails (undici's `headersTimeout` and
 * `bodyTimeout` for a request over HTTP): see the module docstring. */
export const READ_TIMEOUT_MS = 300_000;

/** A turn whose answer's body was collected unread: see the module docstring. */
interface Unread {
  readonly link: Link;
  readonly stream: number;
  readonly state: Stream;
}

/** Told of each answer's body collected before its turn ended (none where the runtime has
 * no `FinalizationRegistry`). Each turn's entry is dropped when the turn ends (`finish`). */
const collected =
  typeof FinalizationRegistry === "function" ? new FinalizationRegistry<Unread>(({ link, stream, state }) => link.unread(stream, state)) : null;

/** Statuses whose answer has no body (the Response constructor refuses one). */
const BODILESS = new Set([204, 205, 304]);

export class Link {
  /** The window the receiver keeps (null: an older receiver, none). */
  readonly window: number | null;
  readonly streams = new Map<number, Stream>();
  used: number; // a turn last went out, or a frame came
  readonly opened: number;
  heard = 0; // answer frames come
  answered = 0; // answers ended
  broke = false; // a turn failed at the close
  drained = false; // closed by its receiver's stop (or idle), every turn it read answered
  ours = false; // closed by its sender (idle, retired)
  retired = false; // takes no new turn; closed once its turns' answers ended
  closed = false;
  over = false; // its turns were told it ended
  private next = 0;
  private readonly sender: FrameSender;
  private waits = 0; // turns waiting for a frame: their head, or a piece their reader asked for
  private watchdog: ReturnType<typeof setInterval> | null = null;

  constructor(
    private readonly socket: WebSocketClient,
    private readonly clock: () => number,
    private readonly readTimeoutMs = READ_TIMEOUT_MS,
  ) {
    this.used = this.opened = clock();
    this.window = windowKept(socket.accepted.find(([name]) => name === WINDOW_HEADER)?.[1] ?? null);
    this.sender = new FrameSender(basesKept(socket.accepted) ? new SenderBases() : null);
    socket.hold(false); // an idle channel keeps no process alive
    socket.listen({ message: (data, text) => this.received(data, text), closed: (closed) => this.ended(closed) });
  }

  /** Closed, not by its sender nor by its receiver's drain, having ended no answer or
   * failing a turn: the channel cannot be had (the sender backs off). */
  get failed(): boolean {
    return this.closed && !this.ours && !this.drained && (this.answered === 0 || this.broke);
  }

  /** Send one turn: its answer once its head came. `Unsent` when nothing of it was done. */
  send(target: string, headers: Pairs, body: Uint8Array, signal?: AbortSignal): Promise<Response> {
    if (this.closed || !this.socket.open) return Promise.reject(new Unsent("the channel closed"));
    signal?.throwIfAborted();
    const stream = this.next++;
    return new Promise<Response>((resolve, reject) => {
      const state = new Stream(resolve, reject);
      this.streams.set(stream, state);
      this.wait(state, true); // for its head, until `responded` or `finish`
      this.socket.hold(true);
      const frame = this.sender.turn(stream, target, headers, body); // in the order written
      this.used = this.clock();
      void this.socket.send(frame).then((written) => {
        if (!written && !state.heard) this.finish(stream, state, new Unsent("the channel closed as the turn was written"));
      });
      if (signal !== undefined) {
        const left = (): void => this.leave(stream, state, signal.reason);
        signal.addEventListener("abort", left, { once: true });
        state.unlisten = () => signal.removeEventListener("abort", left);
      }
    });
  }

  /** A turn begins (`yes`) or stops waiting for its next frame: while any waits, a watchdog
   * looks every eighth of `readTimeoutMs` for turns that waited it all (`expired`). */
  private wait(state: Stream, yes: boolean): void {
    if (yes === (state.since !== null)) return;
    state.since = yes ? this.clock() : null;
    state.heardAt = this.heard;
    this.waits += yes ? 1 : -1;
    if (this.waits > 0 && this.watchdog === null) {
      this.watchdog = setInterval(() => this.expired(), Math.max(this.readTimeoutMs / 8, 10));
      unrefTimer(this.watchdog);
    } else if (this.waits === 0 && this.watchdog !== null) {
      clearInterval(this.watchdog);
      this.watchdog = null;
    }
  }

  /** Turns that waited `readTimeoutMs` for their next frame fail, each alone (its receiver
   * told); one in whose wait no frame came on the channel for any turn retires the channel
   * (another turn's answer still coming) or drops it. O(turns in flight) a tick. */
  private expired(): void {
    const now = this.clock();
    let quiet = false;
    for (const [stream, state] of [...this.streams]) {
      if (state.since === null || now - state.since < this.readTimeoutMs) continue;
      quiet ||= this.heard === state.heardAt;
      const why = new Error(`no answer frame within the read timeout (${this.readTimeoutMs / 1000}s)`);
      this.cancel(stream);
      this.finish(stream, state, new TypeError(state.responded ? "terminated" : "fetch failed", { cause: why }));
    }
    if (!quiet || this.over) return;
    console.warn(`toolref: the channel ${this.streams.size ? "retired" : "dropped"}, no answer frame came on it within ${this.readTimeoutMs / 1000}s`);
    if (this.streams.size) this.retire();
    else this.drop();
  }

  /** Take no new turn (the next opens a new channel: not a failure) and close once every
   * turn in flight ended (`finish`). */
  retire(): void {
    this.closed = this.ours = this.retired = true;
    if (!this.streams.size) this.close();
  }

  /** Drop the connection at once (a frame that does not read): the channel is over. */
  drop(): void {
    this.closed = true;
    this.socket.abort();
  }

  /** Close the channel (idle, or its sender retired): turns still in flight fail. */
  close(): void {
    this.closed = this.ours = true;
    this.socket.close(1000, "");
    this.ended({ code: 1000, reason: "", byUs: true });
  }

  private received(data: Uint8Array, text: boolean): void {
    let frame;
    try {
      if (text) throw new FrameError("a text message came where answer frames are binary");
      frame = answered(data);
    } catch (error) {
      console.warn(`toolref: the channel closed, an answer frame does not read (${(error as Error).message})`);
      return this.drop();
    }
    this.used = this.clock();
    this.heard += 1;
    if (frame.kind === END) this.answered += 1;
    const state = this.streams.get(frame.stream);
    if (state === undefined) return; // a turn its caller left: its pieces dropped
    const first = !state.heard;
    state.heard = true;
    this.wait(state, false); // a pull waiting is woken (and waits again if it must)
    if (first) {
      if (frame.kind === BROKEN) return this.finish(frame.stream, state, brokeOff(frame.data));
      try {
        const head = headOf(frame);
        this.sender.made(frame.stream, head.status, head.headers);
        const response = this.response(frame.stream, state, head);
        state.responded = true;
        state.answer(response);
      } catch (error) {
        this.cancel(frame.stream);
        this.finish(frame.stream, state, new TypeError("fetch failed", { cause: error }));
      }
      return;
    }
    if (frame.kind === HEAD) return this.finish(frame.stream, state, new TypeError("terminated", { cause: new FrameError("a second head") }));
    if (frame.kind === PIECE) {
      state.owed += frame.data.length;
      if (this.window !== null && state.owed > this.window) {
        console.warn(`toolref: the channel closed, stream ${frame.stream} was sent ${state.owed} bytes beyond those granted back, over its window of ${this.window}`);
        return this.drop();
      }
      state.pieces.push(frame.data);
      return state.poke();
    }
    this.finish(frame.stream, state, frame.kind === END ? null : brokeOff(frame.data));
  }

  /** The answer of a head: its body read by pull, each read granted back (windows). */
  private response(stream: number, state: Stream, head: { status: number; headers: Pairs }): Response {
    const headers = new Headers(head.headers);
    if (head.status < 200) throw new FrameError(`an answer's status is ${head.status}`);
    const body = new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          while (!state.pieces.length && !state.done) {
            this.wait(state, true);
            await new Promise<void>((wake) => (state.wake = wake));
          }
          const piece = state.pieces.shift();
          if (piece !== undefined) {
            controller.enqueue(piece);
            return this.taken(stream, state, piece.length);
          }
          if (state.failure !== null) controller.error(state.failure);
          else controller.close();
        },
        cancel: () => this.leave(stream, state, null),
      },
      { highWaterMark: 0 },
    );
    if (BODILESS.has(head.status)) return new Response(null, { status: head.status, headers }); // its end still comes
    collected?.register(body, { link: this, stream, state }, state);
    return new Response(decoded(body, headers.get("content-encoding")), { status: head.status, headers });
  }

  /** `size` bytes of a turn's answer were read: granted back half a window at a time. */
  private taken(stream: number, state: Stream, size: number): void {
    if (this.window === null) return;
    state.read += size;
    if (state.read >= this.window / 2 && !state.done) {
      state.owed -= state.read;
      void this.socket.send(FrameSender.credit(stream, state.read));
      state.read = 0;
    }
  }

  /** The turn's answer was collected unread (`collected`): the receiver is told. */
  unread(stream: number, state: Stream): void {
    this.leave(stream, state, null);
  }

  /** The caller left the turn (aborted, or cancelled its body): the receiver is told. */
  private leave(stream: number, state: Stream, reason: unknown): void {
    if (state.done) return;
    this.cancel(stream);
    this.finish(stream, state, reason ?? new DOMException("This operation was aborted", "AbortError"));
    state.pieces = [];
  }

  private cancel(stream: number): void {
    if (!this.over) void this.socket.send(FrameSender.cancel(stream)); // a retired one's too
  }

  /** The turn is over: its head refused or its body ended (`failure` null: whole). */
  private finish(stream: number, state: Stream, failure: unknown): void {
    if (state.done) return;
    state.done = true;
    state.failure = failure;
    collected?.unregister(state);
    this.wait(state, false);
    if (!state.responded) state.refuse(failure ?? new TypeError("fetch failed"));
    state.unlisten?.();
    state.poke();
    this.streams.delete(stream);
    if (this.streams.size) return;
    this.socket.hold(false);
    if (this.retired && !this.over) this.close(); // its last answer ended
  }

  /** The channel is over: each turn in flight told once. One with no answer frame at a
   * drained close was never read (`Unsent`); any other unended one fails. */
  private ended(closed: Closed): void {
    if (this.watchdog !== null) clearInterval(this.watchdog);
    this.watchdog = null;
    if (!this.over) this.drained = closed.code === DRAINED[0] && closed.reason === DRAINED[1];
    this.over = this.closed = true;
    for (const [stream, state] of [...this.streams]) {
      const unread = this.drained && !state.heard;
      if (!unread) this.broke = true;
      const why = new Error(`the channel closed (${closed.code} ${closed.reason})`);
      const failure = unread ? new Unsent("the channel's receiver stopped before reading the turn") : new TypeError(state.responded ? "terminated" : "fetch failed", { cause: why });
      this.finish(stream, state, failure);
    }
  }
}

function brokeOff(data: Uint8Array): TypeError {
  return new TypeError("terminated", { cause: new Error(`the answer broke off (${new TextDecoder().decode(data)})`) });
}

/** A body sent with `Content-Encoding` gzip or deflate decoded, as fetch decodes one (the
 * channel asks for none: a receiver that compresses anyway). */
function decoded(body: ReadableStream<Uint8Array>, encoding: string | null): ReadableStream<Uint8Array> {
  const coding = (encoding ?? "").trim().toLowerCase();
  if (coding === "gzip" || coding === "x-gzip") return body.pipeThrough(new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>);
  if (coding === "deflate") return body.pipeThrough(new DecompressionStream("deflate") as unknown as TransformStream<Uint8Array, Uint8Array>);
  return body;
}
