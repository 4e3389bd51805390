/**
 * What `withToolRef`'s two paths share (backend.ts: edits and requests as they are;
 * hydrated.ts: protocol 2): its options and their limits, the context of one wrapped
 * handler, and the answers it gives of its own.
 */

import { MISSING_REFS, PROBLEM_TYPE, PROTOCOL_HEADER, problemType } from "./protocol.js";
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
  /** The version of edits told to clients, once asked of the registry (`editsTold`). */
  told?: Promise<number>;
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

/** `response` with `extra` headers, its body handed on unread (a stream stays a stream). */
export function withHeaders(response: Response, extra: Record<string, string>): Response {
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(extra)) headers.set(name, value);
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
