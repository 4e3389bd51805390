/**
 * What `withToolRef`'s two paths share (backend.ts: edits and requests as they are;
 * hydrated.ts: protocol 2): its options and their limits, the context of one wrapped
 * handler, and the answers it gives of its own.
 */

import { MISSING_REFS, PROBLEM_TYPE, PROTOCOL_HEADER, TOOLREF_PREFIX, problemType } from "./protocol.js";
import type { FormatName } from "./formats/index.js";

type Fetch = typeof globalThis.fetch;
export type Handler = (request: Request) => Response | Promise<Response>;

export interface ToolRefBackendOptions {
  /** The registry's base URL, e.g. "http://127.0.0.1:8750". */
  registry: string;
  /** The registry API key (sent as `Authorization: Bearer <key>`). */
  key?: string;
  /** The fetch that calls the registry (default: globalThis.fetch at call time). */
  fetch?: Fetch;
  /** The body member holding the messages of a protocol-2 request. Default: the first of
   * "messages", "input", "contents" holding a list (as ToolRefMiddleware). */
  messagesKey?: string;
  /** The messages' format (protocol 2); the registry detects it when absent. */
  format?: FormatName;
  /** Larger bodies (an edit, a protocol-2 body), as sent, are refused with 413. Default 32 MiB (as ToolRefMiddleware). */
  maxBodyBytes?: number;
  /** The same for a gzip protocol-2 body once inflated. Default 64 MiB. */
  maxInflatedBytes?: number;
  /** The registry call's deadline, its answer read included, in ms. Default 5000 (the Python client's 5 s). */
  timeoutMs?: number;
  /** The most bytes of a registry answer read; a larger one is the registry unavailable. Default 128 MiB. */
  maxAnswerBytes?: number;
}

/** Each limit: its unit, its default, its largest value. */
export const LIMITS = {
  maxBodyBytes: ["bytes", 32 << 20, Number.MAX_SAFE_INTEGER],
  maxInflatedBytes: ["bytes", 64 << 20, Number.MAX_SAFE_INTEGER],
  timeoutMs: ["milliseconds", 5000, 2 ** 31 - 1], // setTimeout's longest delay (24.8 days)
  maxAnswerBytes: ["bytes", 128 << 20, Number.MAX_SAFE_INTEGER],
} as const;
export type Limit = keyof typeof LIMITS;

/** Registry answers that mean it cannot apply anything now (down, misconfigured, too old). */
export const UNAVAILABLE = new Set([401, 403, 404, 405, 429]);

export interface Context {
  readonly handler: Handler;
  readonly options: ToolRefBackendOptions;
  readonly limits: Record<Limit, number>;
  readonly registry: string;
  /** The version of edits told to clients, as last asked of the registry (`editsTold`). */
  told?: Promise<number>;
  /** That version once known; the question asking it again (`askAgain`), while in flight. */
  version?: number;
  asking?: Promise<number>;
  /** When (`performance.now()`) the registry was last asked; last asked after a refusal. */
  askedAt?: number;
  refusedAt?: number;
}

/** The client left: the handler is not called, and this answer reaches nobody. */
export function gone(): Response {
  return problem(499, "client-closed-request", "the client closed the request before it was answered; nothing was sent to the handler");
}

export function problem(status: number, slug: string, detail: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = { [PROTOCOL_HEADER]: "2" }): Response {
  const type = slug === "missing-refs" ? MISSING_REFS : problemType(slug);
  return new Response(JSON.stringify({ type, title: slug, status, detail, ...extra }), {
    status,
    headers: { "content-type": PROBLEM_TYPE, ...headers },
  });
}

/** The `Access-Control-Expose-Headers` value naming each of `ours` (toolref headers an answer
 * carries, lowercase) after the app's own `value` (every name of it kept, as written); null
 * when it names them all. A `*` of the app's counts for none: it exposes every header only to
 * a request without credentials (the Fetch standard; to one with cookies it is a header named
 * `*`), and names beside it are read either way. Linear in the two. */
export function exposeValue(value: string | null, ours: readonly string[]): string | null {
  const theirs = (value ?? "").trim();
  const named = new Set(theirs.split(",").map((name) => name.trim().toLowerCase()));
  const missing = [...new Set(ours)].filter((name) => !named.has(name)).map(titled);
  if (missing.length === 0) return null;
  return [...(theirs ? [theirs] : []), ...missing].join(", ");
}

/** `toolref-edits` as the docs write it, `Toolref-Edits` (the case is the reader's). */
function titled(name: string): string {
  return name.replace(/(^|-)([a-z])/g, (_, dash: string, letter: string) => dash + letter.toUpperCase());
}

/** `response`, the toolref headers it carries named in its `Access-Control-Expose-Headers`
 * (`exposeValue`) when `request` has an `Origin` (a browser page's: on another origin, the
 * page reads no answer header its backend does not expose, whatever CORS sits in front, one
 * allowing every request header included), and its `Content-Encoding` with them. Never a CORS
 * allow header: whether the origin may read the answer at all is the app's to say. */
export function exposed(request: Request, response: Response): Response {
  if (!request.headers.get("origin")) return response;
  const ours: string[] = [];
  response.headers.forEach((_, name) => {
    if (name.toLowerCase().startsWith(TOOLREF_PREFIX)) ours.push(name.toLowerCase());
  });
  // Content-Encoding too, when such an answer has one: the page's browser decodes the body
  // and, the header hidden, its tap would read a plain stream and make an answer this
  // receiver (which taps the encoded bytes) never keeps, each next edit naming it refused
  // `dictionary-mismatch` (docs/edits.md, "The answer as dictionary"), as Python's `exposed`.
  if (ours.length > 0 && response.headers.has("content-encoding")) ours.push("content-encoding");
  const value = exposeValue(response.headers.get(EXPOSE_HEADER), ours);
  return value === null ? response : withHeaders(response, { [EXPOSE_HEADER]: value });
}

const EXPOSE_HEADER = "Access-Control-Expose-Headers";

/** `response` with `extra` headers, its body handed on unread (a stream stays a stream). */
export function withHeaders(response: Response, extra: Record<string, string>): Response {
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(extra)) headers.set(name, value);
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
