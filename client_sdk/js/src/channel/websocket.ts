/**
 * A small WebSocket client (RFC 6455, the client's side) over `node:net` / `node:tls`, for
 * the channel (issue 39). Node's own `WebSocket` (undici's) cannot serve it: it offers
 * permessage-deflate with no way to refuse it (one compression context across turns lets
 * an attacker's text be measured against a secret sent beside it: the size guard forbids
 * it), it hides the 101's headers (where a receiver grants the channel's window), and a
 * browser's sends `Origin`, which a receiver's channel refuses. So: no extension offered
 * (one answered is refused), binary messages, masked frames, pings answered (while the
 * socket's buffer has room: a peer that reads nothing cannot grow it), the close handshake
 * (a peer's close code checked, 1002 for one no peer may send, and its reason's UTF-8, 1007;
 * the connection failed with its close frame sent after what was queued before it), and
 * bounds checked as bytes arrive: the 101's head at `MAX_HEAD` bytes, a message at
 * `maxMessage` bytes and `MAX_FRAGMENTS` frames (past either the client closes 1009), a
 * refusal's body kept up to `MAX_REFUSAL`.
 * Every byte is copied at most once on its way in (linear in what arrives).
 *
 * Node only, reached through `process.getBuiltinModule` (as `zstd.ts` reaches `node:zlib`),
 * so a browser bundle never imports `node:net`: `builtin("node:net")` is undefined there.
 */

import type { Pairs } from "./frames.js";

/** What the client uses of a `node:net` / `node:tls` socket, typed here so that the
 * package's types need no `@types/node`. */
export interface NodeSocket {
  write(data: Uint8Array, done?: (error?: Error | null) => void): boolean;
  end(): void;
  destroy(): void;
  ref(): void;
  unref(): void;
  pause(): void;
  resume(): void;
  setNoDelay(yes: boolean): void;
  setKeepAlive(yes: boolean, delayMs: number): void;
  readonly destroyed: boolean;
  readonly writableLength: number;
  on(event: string, listener: (...args: never[]) => void): unknown;
  once(event: string, listener: (...args: never[]) => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
}

/** A timer that keeps no process alive (Node's `unref`; a browser's has none). */
export function unrefTimer(handle: unknown): void {
  (handle as { unref?: () => void }).unref?.();
}

/** Bytes of the upgrade's answer's head at most, and of a refusal's body kept. */
export const MAX_HEAD = 16 * 1024;
export const MAX_REFUSAL = 64 * 1024;
/** Frames of one message at most (past them the client closes 1009): the message limit
 * counts payload bytes, so without it endless empty continuation frames would each be held
 * (2 bytes on the wire, an object in memory). A receiver sends a message as one frame. */
export const MAX_FRAGMENTS = 1024;
/** Milliseconds the close handshake is waited for before the socket is dropped. */
const CLOSE_TIMEOUT_MS = 5000;
/** Bytes queued on the socket past which a ping goes unanswered (RFC 6455 5.5.3: a later
 * pong answers earlier pings). */
const PONG_ROOM = 1 << 20;
export const ABNORMAL = 1006;
export const PROTOCOL_ERROR = 1002;
export const INVALID_DATA = 1007;
export const TOO_LARGE = 1009;

/** Whether a peer may send close code `code` (RFC 6455 7.4: 1000-1003 and 1007-1014, the
 * ones IANA registered, and 3000-4999; 1005, 1006 and 1015 are never sent, nor an
 * unassigned one). Another fails the connection 1002 (RFC 6455 7.4.1). */
export function closeCodeValid(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/** `reason` as a close frame carries it: at most 123 bytes of UTF-8, cut between characters
 * (a cut inside one would be invalid UTF-8, which the peer fails with 1007). */
export function closeReason(reason: string): Uint8Array {
  const said = new TextEncoder().encode(reason);
  if (said.length <= 123) return said;
  let end = 123;
  while ((said[end]! & 0xc0) === 0x80) end--; // a continuation byte: back to its character's start
  return said.subarray(0, end);
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** A Node built-in module, or undefined where there is none (a browser, a worker). */
export function builtin<T>(id: string): T | undefined {
  const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  if (typeof proc?.getBuiltinModule !== "function") return undefined;
  try {
    return proc.getBuiltinModule(id) as T | undefined;
  } catch {
    return undefined;
  }
}

/** The upgrade was answered with a plain HTTP answer (404, 401, 429, ...). */
export class Refusal extends Error {
  override name = "Refusal";
  constructor(
    readonly status: number,
    readonly headers: Pairs,
    readonly body: Uint8Array,
  ) {
    super(`the upgrade was answered ${status}`);
  }
}

/** No WebSocket was had: the receiver unreachable, or its answer not a WebSocket's. */
export class Unreachable extends Error {
  override name = "Unreachable";
}

/** The connection is over: the close code and reason the peer sent (1006 when it ended
 * without one), or the client's own (`byUs`: 1009 a message too large, 1002 a bad frame). */
export interface Closed {
  readonly code: number;
  readonly reason: string;
  readonly byUs: boolean;
}

export interface Events {
  /** One whole message (`text`: a text message's UTF-8 bytes). */
  message(data: Uint8Array, text: boolean): void;
  /** Once, when the connection is over. */
  closed(closed: Closed): void;
}

/** Bytes arriving, taken out in the sizes asked for, each copied at most once. */
class Incoming {
  private chunks: Uint8Array[] = [];
  private first = 0; // bytes of chunks[0] taken already
  size = 0;

  clear(): void {
    this.chunks = [];
    this.first = this.size = 0;
  }

  push(chunk: Uint8Array): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
  }

  take(count: number): Uint8Array {
    const head = this.chunks[0]!;
    let out: Uint8Array;
    if (head.length - this.first >= count) {
      out = head.subarray(this.first, this.first + count);
      this.first += count;
    } else {
      out = new Uint8Array(count);
      let at = 0;
      while (at < count) {
        const chunk = this.chunks[0]!;
        const part = chunk.subarray(this.first, this.first + Math.min(count - at, chunk.length - this.first));
        out.set(part, at);
        at += part.length;
        this.first += part.length;
        if (this.first === chunk.length) this.chunks.shift(), (this.first = 0);
      }
    }
    if (this.chunks.length && this.first === this.chunks[0]!.length) this.chunks.shift(), (this.first = 0);
    this.size -= count;
    return out;
  }
}

/** A client frame: `payload` masked with a random key (RFC 6455 5.3), XORed a word at a time. */
export function clientFrame(opcode: number, payload: Uint8Array, mask?: Uint8Array): Uint8Array {
  const n = payload.length;
  const lengthBytes = n < 126 ? 0 : n < 65536 ? 2 : 8;
  const head = 2 + lengthBytes + 4;
  const pad = (4 - (head % 4)) % 4; // the payload starts on a word
  const buffer = new Uint8Array(pad + head + n);
  const out = buffer.subarray(pad);
  out[0] = 0x80 | opcode;
  out[1] = 0x80 | (lengthBytes === 0 ? n : lengthBytes === 2 ? 126 : 127);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  if (lengthBytes === 2) view.setUint16(2, n);
  if (lengthBytes === 8) view.setUint32(6, n); // n < 2^32: a frame is at most MAX_FRAME_BYTES
  const key = mask ?? crypto.getRandomValues(new Uint8Array(4));
  out.set(key, 2 + lengthBytes);
  out.set(payload, head);
  const words = new Uint32Array(buffer.buffer, buffer.byteOffset + pad + head, n >>> 2);
  const key32 = new Uint32Array(Uint8Array.from(key).buffer)[0]!;
  for (let index = 0; index < words.length; index++) words[index]! ^= key32;
  for (let index = n & ~3; index < n; index++) out[head + index]! ^= key[index & 3]!;
  return out;
}

/** One open WebSocket: see the module docstring. */
export class WebSocketClient {
  /** The 101's headers, names lower-cased. */
  readonly accepted: Pairs;
  private readonly incoming = new Incoming();
  private state: "head" | "length" | "payload" = "head";
  private need = 2;
  private fin = false;
  private opcode = 0;
  private length = 0;
  private message: Uint8Array[] = [];
  private messageBytes = 0;
  private messageText = false;
  private inMessage = false;
  private closing = false; // a close frame sent
  private failed = false; // the connection failed: nothing more read
  private ours: Closed | null = null; // the close this side began (idle, a bad frame)
  private done: Closed | null = null; // how it ended, once it did
  private events: Events | null = null;

  constructor(
    private readonly socket: NodeSocket,
    accepted: Pairs,
    private readonly maxMessage: number,
    private readonly rest: Uint8Array,
  ) {
    this.accepted = accepted;
  }

  /** Start reading (the socket was paused since the 101): bytes that came with the 101
   * first, then each as it comes, told to `events`. */
  listen(events: Events): void {
    this.events = events;
    const socket = this.socket;
    socket.on("data", (chunk: Uint8Array) => this.feed(chunk));
    socket.on("close", () => this.end({ code: ABNORMAL, reason: "the connection ended", byUs: false }));
    socket.on("error", () => undefined); // "close" follows
    if (this.rest.length) this.feed(this.rest);
    if (socket.destroyed) this.end({ code: ABNORMAL, reason: "the connection ended", byUs: false });
    else socket.resume();
  }

  /** Whether a message sent now goes out (no close sent or received). */
  get open(): boolean {
    return this.done === null && !this.closing;
  }

  /** One binary message, written once the socket took it; false when closing or over. */
  send(data: Uint8Array): Promise<boolean> {
    if (!this.open) return Promise.resolve(false);
    return new Promise((done) => this.socket.write(clientFrame(2, data), (error?: Error | null) => done(!error)));
  }

  /** The close handshake (the socket dropped after `CLOSE_TIMEOUT_MS` without it). */
  close(code = 1000, reason = ""): void {
    if (this.done !== null || this.closing) return;
    this.closing = true;
    this.ours = { code, reason, byUs: true };
    const said = closeReason(reason);
    const payload = new Uint8Array(2 + said.length);
    new DataView(payload.buffer).setUint16(0, code);
    payload.set(said, 2);
    this.socket.write(clientFrame(8, payload));
    unrefTimer(setTimeout(() => this.socket.destroy(), CLOSE_TIMEOUT_MS));
  }

  /** Drop the connection at once. */
  abort(): void {
    this.socket.destroy();
  }

  /** Whether the socket keeps the process alive (a channel in use does; an idle one not). */
  hold(yes: boolean): void {
    if (yes) this.socket.ref();
    else this.socket.unref();
  }

  private feed(chunk: Uint8Array): void {
    this.incoming.push(chunk);
    if (this.failed) return; // failed: what still comes is dropped, the close on its way
    while (this.incoming.size >= this.need && !this.socket.destroyed && !this.failed) {
      const data = this.incoming.take(this.need);
      if (this.state === "head") this.head(data);
      else if (this.state === "length") this.lengthRead(data);
      else this.payload(data);
    }
  }

  private head(data: Uint8Array): void {
    this.fin = (data[0]! & 0x80) !== 0;
    this.opcode = data[0]! & 0x0f;
    if ((data[0]! & 0x70) !== 0 || (data[1]! & 0x80) !== 0) return this.fail("a reserved bit set, or a masked frame from the server");
    const control = this.opcode >= 8;
    if (![0, 1, 2, 8, 9, 10].includes(this.opcode)) return this.fail(`opcode ${this.opcode}`);
    if (control && (!this.fin || (data[1]! & 0x7f) > 125)) return this.fail("a control frame fragmented or over 125 bytes");
    if (!control && (this.opcode === 0) !== this.inMessage) return this.fail("a message's frames out of order");
    const short = data[1]! & 0x7f;
    if (short < 126) return this.sized(short);
    this.state = "length";
    this.need = short === 126 ? 2 : 8;
  }

  private lengthRead(data: Uint8Array): void {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    if (data.length === 2) return this.sized(view.getUint16(0));
    const high = view.getUint32(0);
    this.sized(high >= 0x200000 ? Infinity : high * 2 ** 32 + view.getUint32(4));
  }

  private sized(length: number): void {
    if (this.opcode < 8 && this.messageBytes + length > this.maxMessage) {
      return this.fail(`message over ${this.maxMessage} bytes`, TOO_LARGE);
    }
    if (this.opcode < 8 && this.message.length >= MAX_FRAGMENTS) {
      return this.fail(`message in over ${MAX_FRAGMENTS} frames`, TOO_LARGE);
    }
    this.length = length;
    if (length === 0) return this.payload(new Uint8Array(0));
    this.state = "payload";
    this.need = length;
  }

  private payload(data: Uint8Array): void {
    this.state = "head";
    this.need = 2;
    if (this.opcode >= 8) return this.control(data);
    if (this.opcode !== 0) this.messageText = this.opcode === 1;
    this.inMessage = !this.fin;
    if (this.done !== null || this.closing) return; // closing: what still comes is not delivered
    this.message.push(data);
    this.messageBytes += data.length;
    if (!this.fin) return;
    const parts = this.message;
    const whole = parts.length === 1 ? parts[0]! : new Uint8Array(this.messageBytes);
    if (parts.length !== 1) parts.reduce((at, part) => (whole.set(part, at), at + part.length), 0);
    this.message = [];
    this.messageBytes = 0;
    this.events?.message(whole, this.messageText);
  }

  private control(data: Uint8Array): void {
    if (this.opcode === 9) {
      if (this.open && this.socket.writableLength + data.length <= PONG_ROOM) this.socket.write(clientFrame(10, data));
      return;
    }
    if (this.opcode === 10) return;
    if (data.length === 1) return this.fail("a close frame of one byte");
    const code = data.length >= 2 ? new DataView(data.buffer, data.byteOffset).getUint16(0) : 1005;
    if (data.length >= 2 && !closeCodeValid(code)) return this.fail(`a close code of ${code}`);
    let reason: string;
    try {
      reason = strictUtf8.decode(data.subarray(2));
    } catch {
      return this.fail("a close reason that is no UTF-8", INVALID_DATA);
    }
    if (!this.closing) {
      this.closing = true;
      this.socket.write(clientFrame(8, data.subarray(0, 2))); // the close answered with its code
    }
    this.end({ code, reason, byUs: false });
    this.socket.end();
    unrefTimer(setTimeout(() => this.socket.destroy(), CLOSE_TIMEOUT_MS));
  }

  /** Fail the connection (RFC 6455 7.1.7): the close frame sent after what was queued
   * before it (`end` flushes the socket, then closes it; it is destroyed `CLOSE_TIMEOUT_MS`
   * later if the peer reads none of it), nothing more read. */
  private fail(reason: string, code = PROTOCOL_ERROR): void {
    this.failed = true;
    this.close(code, reason);
    this.end({ code, reason, byUs: true });
    this.incoming.clear();
    this.socket.end();
  }

  /** Said once: the close this side began, else the peer's, else 1006. */
  private end(closed: Closed): void {
    if (this.done !== null) return;
    this.done = this.ours ?? closed;
    this.events?.closed(this.done);
  }
}
