/**
 * The WebSocket upgrade (RFC 6455 4.1, the client's side) over `node:net` / `node:tls`: the
 * `GET` with `Upgrade: websocket`, a random `Sec-WebSocket-Key` and the caller's headers
 * (no `Origin`, no extension offered), and its answer read: a 101 whose
 * `Sec-WebSocket-Accept` matches the key, naming no extension, is a `WebSocketClient`; any
 * other status a `Refusal` (its body kept up to `MAX_REFUSAL` bytes); no answer within
 * `connectTimeoutMs`, a head over `MAX_HEAD` bytes, or one that does not read, `Unreachable`.
 */

import type { Pairs } from "./frames.js";
import { MAX_HEAD, MAX_REFUSAL, Refusal, Unreachable, WebSocketClient, builtin, unrefTimer, type NodeSocket } from "./websocket.js";

/** What the upgrade uses of `node:net`, `node:tls` and `node:crypto` (typed here: the
 * package's types need no `@types/node`). */
interface Net {
  connect(options: { host: string; port: number }): NodeSocket;
  isIP(host: string): number;
}
interface Tls {
  connect(options: { host: string; port: number; servername?: string | undefined; ALPNProtocols: string[] }): NodeSocket;
}
interface Crypto {
  createHash(name: "sha1"): { update(data: string): { digest(encoding: "base64"): string } };
}

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const KEEPALIVE_MS = 30_000;
const HEAD_END = Uint8Array.from([13, 10, 13, 10]);

const LAST_CHUNK = Uint8Array.from([13, 10, 48, 13, 10, 13, 10]); // "\r\n0\r\n\r\n"

/** A chunked body's bytes (as far as they read: a refusal's body is only reported). */
export function dechunked(data: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let at = 0;
  for (;;) {
    const line = indexOf(data, HEAD_END.subarray(0, 2), at);
    if (line < 0) break;
    const size = parseInt(latin1(data.subarray(at, line)).split(";")[0]!.trim(), 16);
    if (!Number.isSafeInteger(size) || size <= 0) break;
    parts.push(data.subarray(line + 2, Math.min(line + 2 + size, data.length)));
    at = line + 2 + size + 2;
    if (at > data.length) break;
  }
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  parts.reduce((offset, part) => (out.set(part, offset), offset + part.length), 0);
  return out;
}

/** Whether this runtime can open a channel (Node: `node:net`, `node:tls`, `node:crypto`). */
export function channelsHere(): boolean {
  return builtin("node:net") !== undefined && builtin("node:tls") !== undefined && builtin("node:crypto") !== undefined;
}

/** Whether the platform's `fetch` goes through a dispatcher of the app's (undici's
 * `setGlobalDispatcher`: a `ProxyAgent`, an `EnvHttpProxyAgent`, a `MockAgent`) or Node's
 * environment proxy (`NODE_USE_ENV_PROXY`, `--use-env-proxy`): a channel would go past it,
 * so `toolrefFetch` takes none by default. Read at each edit (one may be set later). */
export function fetchDispatched(): boolean {
  const dispatcher = (globalThis as Record<symbol, unknown>)[Symbol.for("undici.globalDispatcher.1")];
  if (dispatcher != null && (dispatcher as { constructor?: { name?: unknown } }).constructor?.name !== "Agent") return true;
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined>; execArgv?: string[] } }).process;
  const env = proc?.env ?? {};
  const proxying = env["NODE_USE_ENV_PROXY"] === "1" || (proc?.execArgv ?? []).includes("--use-env-proxy");
  return proxying && ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"].some((name) => !!env[name]);
}

export interface ConnectOptions {
  /** Bytes of one message at most (past it the client closes 1009). */
  maxMessage: number;
  /** The connection, TLS and the 101 within this many milliseconds. */
  connectTimeoutMs: number;
  /** Drops the connection (the socket destroyed, the promise rejected with its reason) while
   * the upgrade is unanswered: every turn waiting for it left. */
  signal?: AbortSignal;
}

/** Bytes as latin-1 text (a head, a chunk size line: bounded), a piece at a time. */
function latin1(data: Uint8Array): string {
  let text = "";
  for (let at = 0; at < data.length; at += 8192) text += String.fromCharCode(...data.subarray(at, at + 8192));
  return text;
}

/** Where `needle` (a few bytes) first is in `data` from `from`, or -1. Linear in `data`. */
function indexOf(data: Uint8Array, needle: Uint8Array, from: number): number {
  outer: for (let at = from; at + needle.length <= data.length; at++) {
    for (let index = 0; index < needle.length; index++) if (data[at + index] !== needle[index]) continue outer;
    return at;
  }
  return -1;
}

/** The status line and headers of an answer's head (names lower-cased); null: it does not read. */
export function parseHead(head: string): { status: number; headers: Pairs } | null {
  const lines = head.split("\r\n");
  const found = /^HTTP\/1\.[01] ([1-5][0-9]{2})(?: |$)/.exec(lines[0] ?? "");
  if (found === null) return null;
  const headers: Pairs = [];
  for (const line of lines.slice(1)) {
    if (!line) continue;
    const colon = line.indexOf(":");
    if (colon <= 0) return null;
    headers.push([line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()]);
  }
  return { status: Number(found[1]), headers };
}

const named = (headers: Pairs, name: string): string | null => headers.find(([key]) => key === name)?.[1] ?? null;

/** The `Sec-WebSocket-Accept` a server answers `key` with. */
export function acceptFor(key: string): string {
  const crypto = builtin<Crypto>("node:crypto")!;
  return crypto.createHash("sha1").update(key + GUID).digest("base64");
}

/** Open a WebSocket to `url` (`http:`/`ws:` or `https:`/`wss:`) with `headers` on the upgrade. */
export function connect(url: string, headers: Pairs, options: ConnectOptions): Promise<WebSocketClient> {
  const net = builtin<Net>("node:net");
  const tls = builtin<Tls>("node:tls");
  if (net === undefined || tls === undefined) return Promise.reject(new Unreachable("no node:net here"));
  const where = new URL(url);
  const secure = where.protocol === "https:" || where.protocol === "wss:";
  if (!secure && where.protocol !== "http:" && where.protocol !== "ws:") return Promise.reject(new Unreachable(`a channel at ${where.protocol}`));
  const host = where.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = Number(where.port || (secure ? 443 : 80));
  const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
  const lines = [
    `GET ${where.pathname}${where.search} HTTP/1.1`,
    `Host: ${where.host}`,
    "Upgrade: websocket",
    "Connection: Upgrade",
    `Sec-WebSocket-Key: ${key}`,
    "Sec-WebSocket-Version: 13",
    ...headers.filter(([name]) => !/[\r\n:]/.test(name)).map(([name, value]) => `${name}: ${value.replace(/[\r\n]/g, " ")}`),
  ];
  const text = lines.join("\r\n") + "\r\n\r\n";
  const request = Uint8Array.from(text, (char) => char.charCodeAt(0) & 0xff); // header text is latin-1
  return new Promise((resolve, reject) => {
    const socket: NodeSocket = secure
      ? tls.connect({ host, port, servername: net.isIP(host) ? undefined : host, ALPNProtocols: ["http/1.1"] })
      : net.connect({ host, port });
    socket.setNoDelay(true);
    socket.setKeepAlive(true, KEEPALIVE_MS); // a connection dropped while idle is found out
    let settled = false;
    let received = new Uint8Array(0);
    let refused: { status: number; headers: Pairs; at: number; length: number; chunked: boolean } | null = null;
    const fail = (error: unknown): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", dropped);
      socket.destroy();
      reject(error);
    };
    const timer = setTimeout(() => fail(refused !== null ? refusal() : new Unreachable(`no answer to the upgrade within ${options.connectTimeoutMs} ms`)), options.connectTimeoutMs);
    const dropped = (): void => fail(options.signal!.reason);
    if (options.signal?.aborted) dropped();
    options.signal?.addEventListener("abort", dropped, { once: true });
    const refusal = (): Refusal => {
      const { status, headers: pairs, at, length, chunked } = refused!;
      const body = received.slice(at, at + Math.min(length, MAX_REFUSAL));
      return new Refusal(status, pairs, chunked ? dechunked(body) : body);
    };
    const whole = (): boolean => {
      const { at, length, chunked } = refused!;
      if (received.length - at >= Math.min(length, MAX_REFUSAL)) return true;
      return chunked && (indexOf(received, LAST_CHUNK, at) >= 0 || latin1(received.subarray(at, at + 5)) === "0\r\n\r\n");
    };
    socket.once(secure ? "secureConnect" : "connect", () => socket.write(request));
    const onError = (error: Error): void => fail(new Unreachable(error.message));
    const onClose = (): void => fail(refused !== null ? refusal() : new Unreachable("the connection ended before the upgrade was answered"));
    socket.on("error", onError);
    socket.on("close", onClose);
    const onData = (chunk: Uint8Array): void => {
      const grown = new Uint8Array(received.length + chunk.length); // bounded: the head, a refusal's kept body
      grown.set(received);
      grown.set(chunk, received.length);
      received = grown;
      if (refused !== null) {
        if (whole()) fail(refusal());
        return;
      }
      const end = indexOf(received, HEAD_END, 0);
      if (end < 0) {
        if (received.length > MAX_HEAD) fail(new Unreachable(`the upgrade's answer has a head over ${MAX_HEAD} bytes`));
        return;
      }
      const head = parseHead(latin1(received.subarray(0, end)));
      if (head === null) return fail(new Unreachable("the upgrade's answer does not read as HTTP"));
      if (head.status !== 101) {
        const length = named(head.headers, "content-length");
        const chunked = (named(head.headers, "transfer-encoding") ?? "").toLowerCase().includes("chunked");
        const empty = head.status === 204 || head.status === 304;
        const size = empty ? 0 : !chunked && length !== null && /^[0-9]+$/.test(length) ? Number(length) : MAX_REFUSAL;
        refused = { ...head, at: end + 4, length: size, chunked: chunked && !empty };
        if (whole()) fail(refusal());
        return;
      }
      const upgrade = (named(head.headers, "upgrade") ?? "").toLowerCase();
      const connection = (named(head.headers, "connection") ?? "").toLowerCase().split(",").map((token) => token.trim());
      if (upgrade !== "websocket" || !connection.includes("upgrade") || named(head.headers, "sec-websocket-accept") !== acceptFor(key)) {
        return fail(new Unreachable("the 101 is no WebSocket's (Upgrade, Connection or Sec-WebSocket-Accept)"));
      }
      if (named(head.headers, "sec-websocket-extensions") !== null) return fail(new Unreachable("the 101 names an extension none was offered"));
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", dropped);
      socket.off("data", onData);
      socket.off("close", onClose);
      socket.off("error", onError);
      socket.on("error", () => undefined); // "close" follows, told once listened to
      socket.pause();
      resolve(new WebSocketClient(socket, head.headers, options.maxMessage, received.subarray(end + 4)));
    };
    socket.on("data", onData);
  });
}
