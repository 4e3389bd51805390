/**
 * `withToolRef`: toolref for a JavaScript chat backend (a Next.js route handler, or any
 * `(request: Request) => Response` handler), as ToolRefMiddleware is for a Python one.
 *
 *     export const POST = withToolRef(handler, { registry: "http://127.0.0.1:8750" });
 *
 * - An edit (`Content-Type: application/vnd.toolref.edit`) is applied through the registry's
 *   `POST /v1/edits:apply` (one round trip; nothing kept here): the handler gets the request
 *   it stands for, its body byte for byte, its headers those of the edit's segment 0 (each
 *   credential line filled from the request's real header of that name), then every real
 *   header segment 0 does not name (what a browser adds: `cookie`, `origin`, ...) but the
 *   body's framing and toolref's own, then the body's `content-length`. A real header named
 *   in segment 0 replaces its line there (a proxy in front may set it), but for credentials
 *   and fetch's own defaults (`user-agent`, `accept`, `accept-encoding`, `accept-language`);
 *   segment 0 never names a header that describes a hop (`host`, framing). The handler's answer
 *   is handed on unread (streams stay streams) with `Toolref-History` (the recipe kept),
 *   `Toolref-Edits: 6` and `Toolref-Savings`; a streamed answer of an LLM API is read as it
 *   passes and, once whole, kept by the registry (`PUT /v1/answers/{recipe}`) before its last
 *   piece goes on: the dictionary of the client's next edit (edits/answer.ts). A refusal
 *   the client resends on (409 missing-history or missing-pieces, 400 dictionary-mismatch)
 *   goes back to it as it is, the handler not called; any other refusal, and a registry that
 *   cannot be asked, is a 415 on which the client sends the request as it is.
 * - A request as it is with the offer (`Toolref-Edits`) goes to the handler; its answer
 *   is marked `Toolref-Edits: 6`, so the client sends edits from then on.
 * - A protocol-2 request (`Toolref-Protocol: 2`, an older client): its `toolRef` markers are
 *   hydrated by the registry's `POST /v1/messages:hydrate`, each message spliced in as text in
 *   place of the client's own (all else the client's bytes, its whitespace too), as before;
 *   history refs (`Toolref-History`, `historyRef`, checkpoints, kept bodies) are retired: 400
 *   `history-refs-retired`, naming the upgrade.
 *
 * - An answer marked with toolref headers whose request has an `Origin` (a browser page's)
 *   names them in `Access-Control-Expose-Headers`, after the app's own names
 *   (backend-parts.ts `exposed`): a page on another origin reads them whatever CORS sits in
 *   front; no CORS allow header is added.
 *
 * Bounded as ToolRefMiddleware: the body as sent and inflated, the registry call (a deadline,
 * aborted when the client leaves, no redirect followed, its answer capped: `registry.ts`), and
 * the `Toolref-References` header (ASCII, at most 8 KiB, else left out).
 */

import { TooLargeError, readAll } from "./compression.js";
import { tapFor } from "./edits/answer.js";
import { RECENT_MS } from "./edits/said.js";
import { describesHop, headerLine, isSecret } from "./edits/segments.js";
import { MEDIA_TYPE, VERSION } from "./edits/wire.js";
import { UsageError } from "./errors.js";
import { FORMATS } from "./formats/index.js";
import { checkOptions, type Spec } from "./options.js";
import { EDITS_HEADER, HISTORY_HEADER, PROBLEM_TYPE, PROTOCOL_HEADER, SAVINGS_HEADER, TOOLREF_PREFIX, problemType, savingsValue } from "./protocol.js";
import { MAX_PROBLEM_BYTES } from "./refusals.js";
import { ClientGone, postBounded, type RegistryAnswer } from "./registry.js";
import { type Context, type Handler, LIMITS, type Limit, type ToolRefBackendOptions, UNAVAILABLE, exposed, gone, problem, withHeaders } from "./backend-parts.js";
import { hydrated } from "./hydrated.js";

export type { Handler, ToolRefBackendOptions } from "./backend-parts.js";

/** What the registry answers an edit with: segment 0, an empty line, the body. */
export const REQUEST_MEDIA_TYPE = "application/vnd.toolref.request";
/** Real headers never passed beside the restored ones: the body's framing, toolref's own. */
const FRAMING = new Set(["content-type", "content-length", "content-encoding", "transfer-encoding"]);
/** The refusals of an edit its client resends on (the editor's misses). */
const RESENT_ON: ReadonlyMap<number, ReadonlySet<string>> = new Map([
  [409, new Set([problemType("missing-history"), problemType("missing-pieces")])],
  [400, new Set([problemType("dictionary-mismatch")])],
]);

function resentOn(status: number, body: Uint8Array): boolean {
  const types = RESENT_ON.get(status);
  if (types === undefined) return false;
  try {
    const found: unknown = JSON.parse(new TextDecoder().decode(body));
    return typeof found === "object" && found !== null && types.has(String((found as { type?: unknown }).type));
  } catch {
    return false;
  }
}

/** What the client's HTTP stack adds to the edit request itself (fetch's defaults): of these,
 * the values the app's SDK wrote, in segment 0, are the request's. */
const CLIENT_DEFAULTS = new Set(["user-agent", "accept", "accept-encoding", "accept-language"]);
/** The lowest version of edits there is: a registry saying less applies none. */
const FIRST_VERSION = 1;
/** The most bytes of the registry's capabilities read (they are about 1 KiB). */
const CAPABILITIES_BYTES = 64 << 10;
const decoder = new TextDecoder();

/** withToolRef's options and what each holds (an unknown name fails naming the nearest:
 * `apiKey` for `key` would otherwise send no key, and every edit would be a 415). */
const BACKEND_OPTIONS: Spec = {
  registry: "any", // checked below, with its own fix
  key: "string",
  fetch: "any",
  messagesKey: "string",
  format: "format",
  maxBodyBytes: "any", // the limits: checkedLimits
  maxInflatedBytes: "any",
  timeoutMs: "any",
  maxAnswerBytes: "any",
};

export function withToolRef(handler: Handler, options: ToolRefBackendOptions): (request: Request) => Promise<Response> {
  if (typeof handler !== "function") throw new UsageError("withToolRef(handler, options): handler must be a function of a Request");
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new UsageError(`withToolRef(handler, options) takes an object of options such as { registry: "http://127.0.0.1:8750" }`);
  }
  checkOptions("withToolRef", options, BACKEND_OPTIONS);
  if (typeof options?.registry !== "string" || !/^https?:\/\//.test(options.registry)) {
    throw new UsageError(
      `withToolRef needs options.registry, the registry's base URL such as "http://127.0.0.1:8750"; got ${JSON.stringify(options?.registry)}`,
    );
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new UsageError(`withToolRef({ fetch }) takes a function, not ${typeof options.fetch}; pass one or leave it out`);
  }
  if (options.messagesKey === "") throw new UsageError("withToolRef({ messagesKey }) is empty; name the body member holding the messages, or leave it out");
  if (options.format != null && !FORMATS.some((known) => known.name === options.format)) {
    throw new UsageError(
      `withToolRef({ format }) is ${JSON.stringify(options.format)}; use one of ${FORMATS.map((known) => known.name).join(", ")}, or leave it out to have it detected`,
    );
  }
  const context: Context = { handler, options, limits: checkedLimits(options), registry: options.registry.replace(/\/+$/, "") };

  return async (request: Request): Promise<Response> => {
    if (request.method !== "POST") return handler(request);
    const media = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    const offered = request.headers.has(EDITS_HEADER);
    if (media === MEDIA_TYPE || offered) raiseDue(context); // a registry rolled forward: asked again
    if (media === MEDIA_TYPE) return exposed(request, await applied(context, request));
    const refs = speaksRefs(request.headers);
    if (!offered && !refs) return handler(request);
    const asked = offered ? withoutOffer(request) : request; // the offer is toolref's, not the app's
    const response = refs ? await hydrated(context, asked) : await handler(asked);
    const told = offered ? await editsTold(context) : 0;
    return exposed(request, told >= FIRST_VERSION ? withHeaders(response, edits(told)) : response);
  };
}

/** Whether the request asks for protocol 2 or later: its `Toolref-Protocol` an integer of
 * at most 9 digits (Python's `negotiate`); a header that is no version (`0x2`, `2.0`, `2e0`,
 * `2, 2`, which `Number` reads as 2 or NaN) is not ours to judge, and the app sees the
 * request as it came, as `ToolRefMiddleware`'s `speaks_refs` has it. */
function speaksRefs(headers: Headers): boolean {
  const text = (headers.get(PROTOCOL_HEADER) ?? "1").trim();
  return /^[0-9]{1,9}$/.test(text) && Number(text) >= 2;
}

/** The least time between two questions of the registry's version after it refused edits as
 * unreadable (400 malformed-body: a registry rolled back), ms (Python's
 * `registry_edits.RECHECK_SECONDS`). */
export const RECHECK_MS = 30_000;
/** The time between two questions while the version told is below this SDK's (a registry
 * rolled forward), ms (Python's `registry_edits.RAISE_SECONDS`). */
export const RAISE_MS = RECENT_MS;

/** The version of edits this backend tells its clients: the lower of this SDK's and the
 * registry's (its capabilities' `edits`), so a sender writes only what the registry
 * applies; this SDK's when the registry does not say. Asked at the first request, and again
 * while `withToolRef` runs (`askAgain`), as ToolRefMiddleware's `registry_edits`: when the
 * registry refuses an edit as unreadable (`unreadableRefused`, before its 415: the answers
 * after it tell the lower version, so every sender steps down), and while the version told is
 * below this SDK's (`raiseDue`). One question in flight; one that fails keeps the version. */
function editsTold(context: Context): Promise<number> {
  if (context.told === undefined) {
    context.askedAt = performance.now();
    context.told = askEdits(context).then((found) => (context.version = found ?? VERSION));
  }
  return context.told;
}

/** The registry's version asked again: the question in flight, or a new one. */
function askAgain(context: Context): Promise<number> {
  if (context.asking !== undefined) return context.asking;
  const was = editsTold(context);
  context.askedAt = performance.now();
  const asking = Promise.all([was, askEdits(context)]).then(([before, found]) => {
    const version = found ?? before;
    context.version = version;
    context.told = Promise.resolve(version);
    context.asking = undefined;
    return version;
  });
  context.asking = asking;
  return asking;
}

/** The registry refused an edit as unreadable (rolled back): its version asked again, at
 * most once per RECHECK_MS (else the question in flight), and waited for. */
async function unreadableRefused(context: Context): Promise<void> {
  if (context.asking === undefined) {
    const now = performance.now();
    if (context.refusedAt !== undefined && now - context.refusedAt < RECHECK_MS) return;
    context.refusedAt = now;
  }
  await askAgain(context);
}

/** Asked again in the background while the version told is below this SDK's, RAISE_MS after
 * the last question: a registry rolled forward is told again within about that. */
function raiseDue(context: Context): void {
  const { version, askedAt } = context;
  if (version === undefined || version >= VERSION || context.asking !== undefined) return;
  if (askedAt === undefined || performance.now() - askedAt >= RAISE_MS) void askAgain(context);
}

/** The registry's version (the lower of it and this SDK's; this SDK's when its capabilities
 * name none); null when it could not be asked (unreachable, slow, not 200). */
async function askEdits(context: Context): Promise<number | null> {
  const bounds = { timeoutMs: context.limits.timeoutMs, maxAnswerBytes: CAPABILITIES_BYTES, signal: null, method: "GET" as const };
  try {
    const answer = await postBounded(context.options.fetch ?? globalThis.fetch, context.registry + "/v1/capabilities", {}, "", bounds);
    if (answer.status !== 200) return null;
    const found: unknown = JSON.parse(decoder.decode(answer.bytes));
    const theirs = typeof found === "object" && found !== null ? (found as { edits?: unknown }).edits : undefined;
    return typeof theirs === "number" && Number.isInteger(theirs) ? Math.min(VERSION, theirs) : VERSION;
  } catch {
    return null; // unknown: an edit it cannot read costs that turn a 415 and a resend
  }
}

function edits(version: number): Record<string, string> {
  return { [EDITS_HEADER]: String(Math.max(version, FIRST_VERSION)) };
}

// --- edits ----------------------------------------------------------------------------

/** `request` without the offer `Toolref-Edits`, its body handed on unread. */
function withoutOffer(request: Request): Request {
  const headers = new Headers(request.headers);
  headers.delete(EDITS_HEADER);
  return new Request(request, { headers });
}

/** Bytes of a restored request's head (its header lines) allowed beside its body: the
 * registry's own bound on segment 0's headers is far below it. */
const RESTORED_HEAD_BYTES = 1 << 20;

async function applied(context: Context, request: Request): Promise<Response> {
  const { options, limits } = context;
  const told = editsTold(context); // asked once, beside this request's own work
  let data: Uint8Array;
  try {
    data = request.body === null ? new Uint8Array(0) : await readAll(request.body, limits.maxBodyBytes);
  } catch (error) {
    if (request.signal?.aborted) return gone();
    // The request whole is the app's to take (its own limits): a 415, as ToolRefMiddleware
    // answers it; a 413 was handed to the app by the client, the turn failed.
    if (error instanceof TooLargeError) return cannotApply(`the edit is over the limit of ${error.limit} bytes (maxBodyBytes)`);
    return problem(400, "malformed-body", `the edit could not be read (${String(error)}); send it again`, {}, edits(await told));
  }
  const headers: Record<string, string> = { "Content-Type": MEDIA_TYPE, Accept: `${REQUEST_MEDIA_TYPE}, ${PROBLEM_TYPE}` };
  if (options.key) headers["Authorization"] = `Bearer ${options.key}`;
  let answer: RegistryAnswer;
  try {
    answer = await postBounded(options.fetch ?? globalThis.fetch, context.registry + "/v1/edits:apply", headers, data, {
      timeoutMs: limits.timeoutMs,
      // the restored request: its body within maxInflatedBytes (below), its head with it
      maxAnswerBytes: Math.min(limits.maxAnswerBytes, limits.maxInflatedBytes + RESTORED_HEAD_BYTES),
      signal: request.signal ?? null,
    });
  } catch (error) {
    if (error instanceof ClientGone) return gone();
    return cannotApply(error instanceof Error ? error.message : String(error));
  }
  const { status } = answer;
  if (status >= 500 || UNAVAILABLE.has(status)) return cannotApply(`the registry answered ${status}`, causeOf(answer.bytes));
  if (status >= 400) {
    // A refusal the client resends on (409 missing-history / missing-pieces, 400
    // dictionary-mismatch), as it is; any other (an edit over a limit, of a version the
    // registry does not read) a 415, on which the client sends the request whole.
    if (!resentOn(status, answer.bytes)) {
      const cause = causeOf(answer.bytes);
      // unreadable: a registry rolled back to a version that does not read the edit's bytes
      if (status === 400 && cause["cause"] === problemType("malformed-body")) await unreadableRefused(context);
      return cannotApply(`the registry refused the edit (${status})`, cause);
    }
    const type = answer.headers.get("content-type") ?? PROBLEM_TYPE;
    return new Response(answer.bytes as BodyInit, { status, headers: { "content-type": type, ...edits(await told) } });
  }
  const restored = status === 200 && (answer.headers.get("content-type") ?? "").startsWith(REQUEST_MEDIA_TYPE) ? parseRequest(answer.bytes) : null;
  if (restored === null) return cannotApply(`${context.registry} answered the edit with no request: is it a toolref registry?`);
  if (restored.body.length > limits.maxInflatedBytes) {
    // As ToolRefMiddleware's `reserved`: the client sends the request whole, for the app's own limits.
    return cannotApply(`the edit restores a body of ${restored.body.length} bytes, over this backend's limit of ${limits.maxInflatedBytes} (maxInflatedBytes); send the request whole`);
  }
  // The app's headers (as `toolref.receiving.restoring.merged_headers`): segment 0's, none
  // that describes a hop; a real header in place of segment 0's of its name (a proxy in
  // front may set it, and the client must not override it from inside its body), but for
  // credentials and the HTTP stack's own defaults on the edit request; then every other
  // real header but the body's framing and toolref's.
  const merged = new Headers();
  const named = new Set<string>();
  const replaced = new Set<string>();
  for (const [name, value] of restored.lines) {
    const low = name.toLowerCase();
    if (describesHop(low)) continue;
    named.add(low);
    let real: string | null;
    try {
      real = request.headers.get(name);
    } catch {
      return cannotApply(`the edit's first segment holds a header no HTTP request carries (${JSON.stringify(name.slice(0, 60))})`);
    }
    if (real !== null && !isSecret(low) && !CLIENT_DEFAULTS.has(low) && !FRAMING.has(low) && !low.startsWith(TOOLREF_PREFIX)) {
      if (!replaced.has(low)) merged.append(name, real); // the network's word, once
      replaced.add(low);
      continue;
    }
    const filled = value ?? request.headers.get(name);
    if (filled === null) {
      // A proxy in front may have taken it (after checking it): the request whole goes as is.
      return cannotApply(`the edit's first segment names the credential ${name}, which the request does not carry as a real header`);
    }
    try {
      merged.append(name, filled);
    } catch {
      return cannotApply(`the edit's first segment holds a header no HTTP request carries (${JSON.stringify(name.slice(0, 60))})`);
    }
  }
  request.headers.forEach((value, name) => {
    const low = name.toLowerCase();
    if (!named.has(low) && !FRAMING.has(low) && !low.startsWith(TOOLREF_PREFIX)) merged.append(name, value);
  });
  merged.set("content-length", String(restored.body.length));
  const rebuilt = new Request(request.url, { method: "POST", headers: merged, body: restored.body as BodyInit, signal: request.signal });
  let response: Response;
  try {
    response = await context.handler(rebuilt);
  } catch (error) {
    // Answered here, marked below as this backend's answer: a framework's unmarked 500 reads
    // as a backend that no longer reads edits, and the client would send the request again
    // as it is (the handler running twice). The error is logged, as a framework logs it.
    console.error("toolref withToolRef: the handler threw on a restored request", error);
    response = problem(500, "internal", "the app failed on this request (an error its handler did not handle: see the server's log); it was not sent again", {}, {});
  }
  const marks: Record<string, string> = { ...edits(await told), [SAVINGS_HEADER]: savingsValue(restored.body.length, data.length) };
  const history = answer.headers.get(HISTORY_HEADER);
  if (history !== null) {
    marks[HISTORY_HEADER] = history;
    response = keptAnswer(context, response, new URL(request.url).pathname, history.trim());
  }
  return withHeaders(response, marks);
}

/** `response`, its streamed answer read as it passes (edits/answer.ts `tapFor`): once whole,
 * kept by the registry as recipe `ref`'s (`PUT /v1/answers/{recipe}`) right after the piece
 * that ends it goes on (the client has the answer's end without waiting for the registry;
 * the stream closes once it is kept, before the client's next edit, compressed against it,
 * can reach the registry). A
 * registry that cannot keep it costs that edit one resend (400 dictionary-mismatch), never
 * this answer. As it is when it cannot be an answer. */
function keptAnswer(context: Context, response: Response, path: string, ref: string): Response {
  const tap = response.body !== null ? tapFor(path, response.status, response.headers) : null;
  if (tap === null || response.body === null) return response;
  const { options, limits } = context;
  const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
  if (options.key) headers["Authorization"] = `Bearer ${options.key}`;
  const keep = async (answer: Uint8Array): Promise<void> => {
    const url = `${context.registry}/v1/answers/${encodeURIComponent(ref)}`;
    const bounds = { timeoutMs: limits.timeoutMs, maxAnswerBytes: limits.maxAnswerBytes, signal: null, method: "PUT" as const };
    await postBounded(options.fetch ?? globalThis.fetch, url, headers, answer, bounds).catch(() => undefined);
  };
  const tapped = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      async transform(chunk, controller) {
        const whole = tap.feed(chunk) ? tap.answer : null;
        controller.enqueue(chunk);
        if (whole !== null) await keep(whole);
      },
    }),
  );
  return new Response(tapped, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** The registry's answer to an edit: segment 0's lines (a credential's value null), then an
 * empty line, then the body; null when it is not that. */
export function parseRequest(data: Uint8Array): { lines: [string, string | null][]; body: Uint8Array } | null {
  const lines: [string, string | null][] = [];
  let at = 0;
  while (!(data[at] === 0x0d && data[at + 1] === 0x0a)) {
    const line = headerLine(data, at);
    if (line === null) return null;
    lines.push(line.pair);
    at = line.end;
  }
  return { lines, body: data.subarray(at + 2) };
}

/** The edit is not applied here, and its client resends on no refusal of it (the registry
 * cannot be asked, refused it, a credential it names is missing): a 415, on which a toolref
 * client sends the request as it is (and pauses its edits to this endpoint for a while).
 * `cause`: the registry's refusal it stands for (`causeOf`), as ToolRefMiddleware names it: a
 * 413 too-many-items with its `limit`, on which a client learns the limit instead of pausing
 * (edits/entries.ts). */
function cannotApply(reason: string, cause: Record<string, unknown> = {}): Response {
  return problem(415, "unsupported-media-type", `this backend cannot apply edits now (${reason}); send the request as it is`, cause);
}

/** The registry's refusal a 415 names: `cause`, its toolref problem type, and a
 * `too-many-items` one's `limit`; nothing for an answer that is no toolref problem (nor one
 * past `MAX_PROBLEM_BYTES`: toolref's are under 2 KiB). */
function causeOf(body: Uint8Array): Record<string, unknown> {
  if (body.length > MAX_PROBLEM_BYTES) return {};
  let found: unknown;
  try {
    found = JSON.parse(decoder.decode(body));
  } catch {
    return {};
  }
  const type = typeof found === "object" && found !== null ? (found as Record<string, unknown>)["type"] : undefined;
  if (typeof type !== "string" || !type.startsWith(problemType(""))) return {};
  const limit = (found as Record<string, unknown>)["limit"];
  return type === problemType("too-many-items") && typeof limit === "number" ? { cause: type, limit } : { cause: type };
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

