/**
 * `withToolRef`: toolref for a JavaScript chat backend (a Next.js route handler, or any
 * `(request: Request) => Response` handler), as ToolRefMiddleware is for a Python one.
 *
 *     export const POST = withToolRef(handler, { registry: "http://127.0.0.1:8750" });
 *
 * A protocol-2 request's body (plain or gzip) goes to the registry's POST
 * /v1/messages:hydrate, which answers the whole conversation in full (payloads for refs, the
 * history for a history ref); the handler gets a Request whose body is the client's with
 * those messages spliced in, as text (nothing parsed and written again). Its Response is
 * handed back unread (streams stay streams) with the confirmation headers added:
 * `Toolref-History` (the head the registry confirmed) or `Toolref-References`. A 409 from
 * the registry (a ref or history it no longer holds) goes back to the client, which resends.
 *
 * Bounded as ToolRefMiddleware: the body as sent and inflated, the registry call (a deadline,
 * aborted when the client leaves, no redirect followed, its answer capped: `registry.ts`), and
 * the `Toolref-References` header (ASCII, at most 8 KiB, else left out).
 */

import { TooLargeError, gunzip, readAll } from "./compression.js";
import { UsageError } from "./errors.js";
import type { FormatName } from "./formats/index.js";
import { HISTORY_HEADER, KEEP_HISTORY, isHistoryRef } from "./history.js";
import {
  HEADER_LIMIT,
  JSON_TYPE,
  MISSING_HISTORY,
  MISSING_REFS,
  PROBLEM_TYPE,
  PROTOCOL_HEADER,
  REFERENCES_HEADER,
  asciiJson,
} from "./protocol.js";
import { ClientGone, postBounded, type RegistryAnswer } from "./registry.js";
import { memberSpans, type MemberSpan } from "./spans.js";

type Fetch = typeof globalThis.fetch;
export type Handler = (request: Request) => Response | Promise<Response>;

export interface ToolRefBackendOptions {
  /** The registry's base URL, e.g. "http://127.0.0.1:8750". */
  registry: string;
  /** The registry API key (sent as `Authorization: Bearer <key>`). */
  key?: string;
  /** The fetch that calls the registry (default: globalThis.fetch at call time). */
  fetch?: Fetch;
  /** The body member holding the messages. Default "messages". */
  messagesKey?: string;
  /** The messages' format; the registry detects it when absent. */
  format?: FormatName;
  /** Larger protocol-2 bodies, as sent, are refused with 413. Default 32 MiB (as ToolRefMiddleware). */
  maxBodyBytes?: number;
  /** The same for a gzip body once inflated. Default 64 MiB. */
  maxInflatedBytes?: number;
  /** The registry call's deadline, its answer read included, in ms. Default 5000 (the Python client's 5 s). */
  timeoutMs?: number;
  /** The most bytes of a registry answer read; a larger one is the registry unavailable. Default 128 MiB. */
  maxAnswerBytes?: number;
}

/** Each limit: its unit, its default, its largest value. */
const LIMITS = {
  maxBodyBytes: ["bytes", 32 << 20, Number.MAX_SAFE_INTEGER],
  maxInflatedBytes: ["bytes", 64 << 20, Number.MAX_SAFE_INTEGER],
  timeoutMs: ["milliseconds", 5000, 2 ** 31 - 1], // setTimeout's longest delay (24.8 days)
  maxAnswerBytes: ["bytes", 128 << 20, Number.MAX_SAFE_INTEGER],
} as const;
type Limit = keyof typeof LIMITS;

const MARKER_REF = /"toolRef":"(tr_[a-z2-7]{26})"/g;
const decoder = new TextDecoder();
const encoder = new TextEncoder();

export function withToolRef(handler: Handler, options: ToolRefBackendOptions): (request: Request) => Promise<Response> {
  if (typeof handler !== "function") throw new UsageError("withToolRef(handler, options): handler must be a function of a Request");
  if (typeof options?.registry !== "string" || !/^https?:\/\//.test(options.registry)) {
    throw new UsageError(
      `withToolRef needs options.registry, the registry's base URL such as "http://127.0.0.1:8750"; got ${JSON.stringify(options?.registry)}`,
    );
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new UsageError(`withToolRef({ fetch }) takes a function, not ${typeof options.fetch}; pass one or leave it out`);
  }
  const limits = checkedLimits(options);
  const registry = options.registry.replace(/\/+$/, "");
  const key = options.messagesKey ?? "messages";

  return async (request: Request): Promise<Response> => {
    const version = Number((request.headers.get(PROTOCOL_HEADER) ?? "1").trim());
    if (request.method !== "POST" || !(version >= 2)) return handler(request);
    const encoding = (request.headers.get("content-encoding") ?? "identity").trim().toLowerCase();
    const { maxBodyBytes: maxBody, maxInflatedBytes: maxInflated } = limits;
    let raw: Uint8Array;
    let inflated = false; // where a limit was hit: reading the body, or inflating it
    try {
      raw = request.body === null ? new Uint8Array(0) : await readAll(request.body, maxBody);
      inflated = true;
      if (encoding === "gzip") raw = await gunzip(raw, maxInflated);
    } catch (error) {
      if (request.signal?.aborted) return gone();
      if (error instanceof TooLargeError) {
        return problem(
          413,
          inflated ? "decompressed-too-large" : "body-too-large",
          `the ${inflated ? "inflated " : ""}body is over the limit of ${error.limit} bytes; send fewer messages`,
          { limit: error.limit },
        );
      }
      return problem(400, "malformed-body", `the gzip body is corrupt (${String(error)}); send it whole, or uncompressed`);
    }
    if (encoding !== "identity" && encoding !== "gzip") {
      // zstd against a history needs its dictionary: answering a mismatch makes a toolref
      // client resend the body without it (docs/js.md, "The backend helper").
      const history = request.headers.get(HISTORY_HEADER);
      return problem(
        encoding === "zstd" && isHistoryRef(history?.trim()) ? 400 : 415,
        encoding === "zstd" && isHistoryRef(history?.trim()) ? "dictionary-mismatch" : "unsupported-media-type",
        `this backend reads protocol-2 bodies plain or gzip, not ${encoding}; send it plain or gzip`,
      );
    }
    const text = decoder.decode(raw);
    const spans = readBody(text, key);
    if (spans === null) return handler(rebuilt(request, raw));
    const messages = spans.find((span) => span.key === key)!;
    const listed = spans.find((span) => span.key === "historyRef");
    const header = request.headers.get(HISTORY_HEADER)?.trim() ?? null;
    const historyRef = listed ? (JSON.parse(text.slice(listed.valueStart, listed.end)) as unknown) : isHistoryRef(header) ? header : null;
    if (historyRef !== null && !isHistoryRef(historyRef)) {
      return problem(422, "invalid-ref", `historyRef ${JSON.stringify(historyRef)} is not a history ref; send it as the server confirmed it`);
    }
    const keep = header === KEEP_HISTORY || historyRef !== null;
    const sentMessages = text.slice(messages.valueStart, messages.end);
    let answer: RegistryAnswer;
    try {
      answer = await hydrate(options, limits, request.signal ?? null, registry, sentMessages, historyRef, keep);
    } catch (error) {
      if (error instanceof ClientGone) return gone();
      return unavailable(handler, request, raw, sentMessages, historyRef, error instanceof Error ? error.message : String(error));
    }
    const type = answer.contentType;
    if (answer.status >= 500 || answer.status === 401 || answer.status === 403) {
      return unavailable(handler, request, raw, sentMessages, historyRef, `registry answered ${answer.status}`);
    }
    if (answer.status >= 400) {
      // The client's to fix or resend (409 missing-refs / missing-history, 400, 413, 422).
      const headers = new Headers({ "content-type": type.startsWith(PROBLEM_TYPE) ? type : PROBLEM_TYPE, [PROTOCOL_HEADER]: "2" });
      return new Response(answer.text, { status: answer.status, headers });
    }
    const answerText = answer.text;
    const hydrated = readBody(answerText, "messages")?.find((span) => span.key === "messages");
    if (hydrated === undefined) {
      return unavailable(handler, request, raw, sentMessages, historyRef, `${registry} answered hydrate with no messages: is it a toolref registry?`);
    }
    const parsed = JSON.parse(answerText) as { toolReferences?: Record<string, string>; historyRef?: string };
    const body = spliced(text, spans, key, answerText.slice(hydrated.valueStart, hydrated.end));
    const response = await handler(rebuilt(request, encoder.encode(body)));
    const extra: Record<string, string> = { [PROTOCOL_HEADER]: "2" };
    if (keep && isHistoryRef(parsed.historyRef)) {
      extra[HISTORY_HEADER] = parsed.historyRef; // a confirmed head stands for every ref in it
    } else {
      const known = new Set([...sentMessages.matchAll(MARKER_REF)].map((match) => match[1]));
      const lacking = Object.fromEntries(Object.entries(parsed.toolReferences ?? {}).filter(([, ref]) => !known.has(ref)));
      // Any call id fits (ASCII); a header past 8 KiB is left out: those refs are confirmed
      // on a later turn, as ToolRefMiddleware leaves them.
      const header = asciiJson(lacking);
      if (Object.keys(lacking).length && header.length <= HEADER_LIMIT) extra[REFERENCES_HEADER] = header;
    }
    return withHeaders(response, extra);
  };
}

function readBody(text: string, key: string): MemberSpan[] | null {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== "object" || value === null || !Array.isArray((value as Record<string, unknown>)[key])) return null;
  } catch {
    return null; // the handler answers its own malformed input
  }
  return memberSpans(text);
}

/** The limits in force: each option a whole number within its bounds, or its default. */
function checkedLimits(options: ToolRefBackendOptions): Record<Limit, number> {
  const found = {} as Record<Limit, number>;
  for (const [name, [unit, fallback, most]] of Object.entries(LIMITS) as [Limit, readonly [string, number, number]][]) {
    const value = options[name] ?? fallback;
    if (!Number.isSafeInteger(value) || value < 1 || value > most) {
      const range = most === Number.MAX_SAFE_INTEGER ? "of at least 1" : `from 1 to ${most}`;
      throw new UsageError(`withToolRef({ ${name} }) is ${String(value)}; use a whole number of ${unit} ${range}, or leave it out for ${fallback}`);
    }
    found[name] = value;
  }
  return found;
}

async function hydrate(
  options: ToolRefBackendOptions,
  limits: Record<Limit, number>,
  signal: AbortSignal | null,
  registry: string,
  messages: string,
  historyRef: string | null,
  keep: boolean,
): Promise<RegistryAnswer> {
  let body = '{"messages":' + messages + ',"mode":"full"';
  if (options.format) body += ',"format":' + JSON.stringify(options.format);
  if (historyRef !== null) body += ',"historyRef":' + JSON.stringify(historyRef);
  body += "}";
  const headers: Record<string, string> = { [PROTOCOL_HEADER]: "2", "Content-Type": JSON_TYPE, Accept: JSON_TYPE };
  if (keep) headers[HISTORY_HEADER] = KEEP_HISTORY;
  if (options.key) headers["Authorization"] = `Bearer ${options.key}`;
  return postBounded(options.fetch ?? globalThis.fetch, registry + "/v1/messages:hydrate", headers, body, {
    timeoutMs: limits.timeoutMs,
    maxAnswerBytes: limits.maxAnswerBytes,
    signal,
  });
}

/** The client's body with `messages` in place of its own and without `historyRef`. */
function spliced(text: string, spans: MemberSpan[], key: string, messages: string): string {
  const parts: string[] = [];
  for (const span of spans) {
    if (span.key === "historyRef") continue;
    if (span.key === key) parts.push(text.slice(span.start, span.valueStart).trimEnd() + messages);
    else parts.push(text.slice(span.start, span.end));
  }
  return "{" + parts.join(",") + "}";
}

/** The request the handler gets: the same but for its body (and toolref's own headers). */
function rebuilt(request: Request, body: Uint8Array): Request {
  const headers = new Headers(request.headers);
  for (const name of ["content-encoding", "content-length", "toolref-history", "toolref-protocol"]) headers.delete(name);
  headers.set("content-type", JSON_TYPE);
  return new Request(request.url, { method: request.method, headers, body: body as BodyInit, signal: request.signal });
}

/** The registry cannot help: full payloads pass through as protocol 1; refs and histories cannot. */
async function unavailable(
  handler: Handler,
  request: Request,
  raw: Uint8Array,
  messages: string,
  historyRef: string | null,
  reason: string,
): Promise<Response> {
  if (historyRef !== null) {
    return problem(409, "missing-history", `history ${historyRef} cannot be rebuilt now (${reason}); send the whole conversation`, {
      missingHistory: historyRef,
    });
  }
  const refs = [...new Set([...messages.matchAll(MARKER_REF)].map((match) => match[1]!))];
  if (refs.length) {
    return problem(409, "missing-refs", `the registry is unavailable (${reason}), so no ref can be resolved; resend these payloads in full`, {
      missingRefs: refs,
    });
  }
  const response = await handler(rebuilt(request, raw));
  return withHeaders(response, { [PROTOCOL_HEADER]: "1" });
}

/** The client left: the handler is not called, and this answer reaches nobody. */
function gone(): Response {
  return problem(499, "client-closed-request", "the client closed the request before it was answered; nothing was sent to the handler");
}

function problem(status: number, slug: string, detail: string, extra: Record<string, unknown> = {}): Response {
  const type = slug === "missing-refs" ? MISSING_REFS : slug === "missing-history" ? MISSING_HISTORY : `urn:toolref:problem:${slug}`;
  return new Response(JSON.stringify({ type, title: slug, status, detail, ...extra }), {
    status,
    headers: { "content-type": PROBLEM_TYPE, [PROTOCOL_HEADER]: "2" },
  });
}

/** `response` with `extra` headers, its body handed on unread (a stream stays a stream). */
function withHeaders(response: Response, extra: Record<string, string>): Response {
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(extra)) headers.set(name, value);
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
