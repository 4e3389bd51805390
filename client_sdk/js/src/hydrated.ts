/**
 * Protocol 2 at a JS backend (`withToolRef`, backend.ts): a request of an older client
 * (`Toolref-Protocol: 2`) whose `toolRef` markers the registry's `POST /v1/messages:hydrate`
 * fills, each message spliced in as text in place of the client's own (all else the
 * client's bytes, its whitespace too); history refs retired (400 `history-refs-retired`,
 * naming the upgrade). As ToolRefMiddleware's hydrator reads it.
 */

import { TooLargeError, gunzip, readAll } from "./compression.js";
import { type Context, type Handler, type Limit, type ToolRefBackendOptions, UNAVAILABLE, gone, problem, withHeaders } from "./backend-parts.js";
import {
  EDITS_SINCE,
  HEADER_LIMIT,
  JSON_TYPE,
  PROBLEM_TYPE,
  PROTOCOL_HEADER,
  REFERENCES_HEADER,
  RETIRED_HEADERS,
  asciiJson,
} from "./protocol.js";
import { ClientGone, postBounded, type RegistryAnswer } from "./registry.js";
import { elementSpans, memberSpans, type ElementSpan, type MemberSpan } from "./spans.js";

/** A marker's ref as any JSON writer puts it (Python's `": "` too), as hydrator.py finds it. */
const MARKER_REF = /"toolRef"\s*:\s*"(tr_[a-z2-7]{26})"/g;
/** A client's body as JSON reads it, or a throw (not UTF-8; a BOM kept, which no JSON
 * parser takes): such a body goes to the app as sent, as Python's strict decode leaves it. */
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const decoder = new TextDecoder();
const encoder = new TextEncoder();

export async function hydrated(context: Context, request: Request): Promise<Response> {
  const { handler, options, limits } = context;
  const retired = RETIRED_HEADERS.find((name) => request.headers.has(name));
  if (retired !== undefined) return retiredHistory(retired);
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
    return problem(415, "unsupported-media-type", `this backend reads protocol-2 bodies plain or gzip, not ${encoding}; send it plain or gzip`);
  }
  // Where the messages sit: `messagesKey`, or the first of MESSAGES_KEYS whose value is a
  // list, as ToolRefMiddleware's hydrator reads them (`messages_keys`).
  const keys = options.messagesKey === undefined ? MESSAGES_KEYS : [options.messagesKey];
  // Only a JSON body is hydrated, as ToolRefMiddleware reads it: any other goes on as sent.
  const media = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  let text: string;
  try {
    text = media === JSON_TYPE ? strict.decode(raw) : "";
  } catch {
    text = "";
  }
  const read = text === "" ? null : readBody(text, keys);
  if (read === null) return handler(rebuilt(request, raw));
  const { spans, key } = read;
  if (spans.some((span) => span.key === "historyRef")) return retiredHistory("a `historyRef`");
  // The last member of that key, as JSON.parse (and readBody) took it.
  const listed = spans.findLast((span) => span.key === key)!;
  const sentMessages = text.slice(listed.valueStart, listed.end);
  let answer: RegistryAnswer;
  try {
    answer = await hydrate(options, limits, request.signal ?? null, context.registry, sentMessages);
  } catch (error) {
    if (error instanceof ClientGone) return gone();
    return unavailable(handler, request, raw, sentMessages, error instanceof Error ? error.message : String(error));
  }
  const type = answer.headers.get("content-type") ?? "";
  // Down, refusing this backend, over its quota: markers are missing refs, full payloads pass.
  if (answer.status >= 500 || UNAVAILABLE.has(answer.status)) {
    return unavailable(handler, request, raw, sentMessages, `registry answered ${answer.status}`);
  }
  if (answer.status >= 400 && answer.status !== 409 && sentMessages.search(MARKER_REF) < 0) {
    // A body the registry refuses (400, 413, 422) that the app alone would take: the app's, as
    // protocol 1 (the client sends full payloads), as hydrator.py leaves it.
    return unavailable(handler, request, raw, sentMessages, `registry refused it (${answer.status})`);
  }
  if (answer.status >= 400) {
    // The client's to fix or resend (409 missing-refs or a conflict; a refused body with markers).
    const headers = new Headers({ "content-type": type.startsWith(PROBLEM_TYPE) ? type : PROBLEM_TYPE, [PROTOCOL_HEADER]: "2" });
    return new Response(answer.bytes as BodyInit, { status: answer.status, headers });
  }
  const answerText = decoder.decode(answer.bytes);
  const hydratedMessages = readBody(answerText, ["messages"])?.spans.findLast((span) => span.key === "messages");
  if (hydratedMessages === undefined) {
    return unavailable(handler, request, raw, sentMessages, `${context.registry} answered hydrate with no messages: is it a toolref registry?`);
  }
  const sent = elementSpans(text, listed.valueStart);
  const answered = elementSpans(answerText, hydratedMessages.valueStart);
  if (answered.length !== sent.length) {
    const counts = `${answered.length} messages hydrated for the ${sent.length} sent`;
    return unavailable(handler, request, raw, sentMessages, `${context.registry} answered hydrate with ${counts}: is it a toolref registry?`);
  }
  const parsed = JSON.parse(answerText) as { toolReferences?: Record<string, string> };
  const body = spliced(text, sent, answerText, answered);
  const response = await handler(rebuilt(request, encoder.encode(body)));
  const extra: Record<string, string> = { [PROTOCOL_HEADER]: "2" };
  const known = new Set([...sentMessages.matchAll(MARKER_REF)].map((match) => match[1]));
  const lacking = Object.fromEntries(Object.entries(parsed.toolReferences ?? {}).filter(([, ref]) => !known.has(ref)));
  // Any call id fits (ASCII); a header past 8 KiB is left out: those refs are confirmed on a
  // later turn, as ToolRefMiddleware leaves them.
  const header = asciiJson(lacking);
  if (Object.keys(lacking).length && header.length <= HEADER_LIMIT) extra[REFERENCES_HEADER] = header;
  return withHeaders(response, extra);
}

/** A request of the retired history-ref protocol: refused, naming the upgrade. */
function retiredHistory(what: string): Response {
  return problem(
    400,
    "history-refs-retired",
    `the request sends ${what}: history refs were retired in toolref ${EDITS_SINCE}, which sends each request as an edit; upgrade the client's toolref SDK (@toolref/client or toolref ${EDITS_SINCE} or later), or send the whole conversation without it`,
  );
}

/** The body's members and the first of `keys` holding a list (the messages); null where
 * none does, or the body is not a JSON object. */
function readBody(text: string, keys: readonly string[]): { spans: MemberSpan[]; key: string } | null {
  let key: string | undefined;
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
    key = keys.find((name) => Array.isArray((value as Record<string, unknown>)[name]));
  } catch {
    return null; // the handler answers its own malformed input
  }
  const spans = key === undefined ? null : memberSpans(text);
  return key === undefined || spans === null ? null : { spans, key };
}

/** Where a protocol-2 body's messages may sit, the first present as a list winning (Chat
 * Completions and Anthropic, Responses, Gemini), as ToolRefMiddleware reads them. */
const MESSAGES_KEYS = ["messages", "input", "contents"] as const;

async function hydrate(
  options: ToolRefBackendOptions,
  limits: Record<Limit, number>,
  signal: AbortSignal | null,
  registry: string,
  messages: string,
): Promise<RegistryAnswer> {
  let body = '{"messages":' + messages + ',"mode":"full"';
  if (options.format) body += ',"format":' + JSON.stringify(options.format);
  body += "}";
  const headers: Record<string, string> = { [PROTOCOL_HEADER]: "2", "Content-Type": JSON_TYPE, Accept: JSON_TYPE };
  if (options.key) headers["Authorization"] = `Bearer ${options.key}`;
  return postBounded(options.fetch ?? globalThis.fetch, registry + "/v1/messages:hydrate", headers, body, {
    timeoutMs: limits.timeoutMs,
    maxAnswerBytes: limits.maxAnswerBytes,
    signal,
  });
}

/** The client's body `text` with each of its messages (at `sent`) replaced by the registry's
 * hydrated one (at `answered` in `answer`, as many): everything else is the client's, byte
 * for byte (the text around the array, and the whitespace after `[`, between each two
 * messages and before `]`). */
function spliced(text: string, sent: readonly ElementSpan[], answer: string, answered: readonly ElementSpan[]): string {
  const parts: string[] = [];
  let at = 0;
  sent.forEach((span, index) => {
    const message = answered[index]!;
    parts.push(text.slice(at, span.start), answer.slice(message.start, message.end));
    at = span.end;
  });
  parts.push(text.slice(at));
  return parts.join("");
}

/** The request the handler gets: the same but for its body (and toolref's own headers); its
 * `Content-Type` the client's (a charset, a multipart boundary kept). */
function rebuilt(request: Request, body: Uint8Array): Request {
  const headers = new Headers(request.headers);
  for (const name of ["content-encoding", "content-length", "toolref-protocol", "toolref-edits"]) headers.delete(name);
  return new Request(request.url, { method: request.method, headers, body: body as BodyInit, signal: request.signal });
}

/** The registry cannot help: full payloads pass through as protocol 1; refs cannot. */
async function unavailable(handler: Handler, request: Request, raw: Uint8Array, messages: string, reason: string): Promise<Response> {
  const refs = [...new Set([...messages.matchAll(MARKER_REF)].map((match) => match[1]!))];
  if (refs.length) {
    return problem(409, "missing-refs", `the registry is unavailable (${reason}), so no ref can be resolved; resend these payloads in full`, {
      missingRefs: refs,
    });
  }
  const response = await handler(rebuilt(request, raw));
  return withHeaders(response, { [PROTOCOL_HEADER]: "1" });
}
