/**
 * `toolrefFetch`: a `fetch` that sends refs and history refs instead of payloads.
 *
 * - For AI SDK 5, 6 and 7's `DefaultChatTransport` (the one-line useChat integration), or any
 *   code that POSTs `{messages: [...]}` as JSON:
 *
 *       new DefaultChatTransport({ api: "/api/chat", fetch: toolrefFetch() })
 *
 * - For the official `openai` and `@anthropic-ai/sdk` Node clients (their `fetch` option), as
 *   Python's `toolref.Transport` is for theirs: a POST to an LLM endpoint (`endpoints.ts`:
 *   Chat Completions, Responses, Messages) whose messages are in that API's format.
 *
 *       new OpenAI({ baseURL: "http://gateway/llm/openai/v1", fetch: toolrefFetch() })
 *
 * The state (confirmed refs and histories) is shared per endpoint (`shared.ts`), so the
 * one-liner written inline in a component, called again on every render, still continues
 * the histories the backend confirmed. Everything else goes through untouched. The answer is
 * handed back unread: only its headers are learned from, so a streamed answer stays a stream.
 */

import { endpoint } from "./endpoints.js";
import { UsageError } from "./errors.js";
import { detect } from "./formats/index.js";
import { MANAGER_OPTIONS, ToolReferenceManager, settle, type ManagerOptions } from "./manager.js";
import { checkOptions } from "./options.js";
import { PROTOCOL_HEADER, JSON_TYPE } from "./protocol.js";
import { endpointOf, managerOptions, sharedManager } from "./shared.js";

type Fetch = typeof globalThis.fetch;

/** What one request cost, for an app that shows the bytes saved. */
export interface ExchangeInfo {
  /** UTF-8 bytes of the body the app handed to fetch (the whole conversation, full payloads). */
  rawBytes: number;
  /** Bytes toolref put on the wire for it, all attempts together (after gzip when used). */
  wireBytes: number;
  /** The history ref the server confirmed for the conversation; null if it confirmed none. */
  historyRef: string | null;
  /** True when the server asked for a resend (a ref or history it no longer held). */
  resent: boolean;
  /** Requests sent for it (1 unless resent). */
  attempts: number;
  /** Tool invocations sent as refs. */
  refsSent: number;
  /** The history the request continued (only the messages after it were sent); null if none. */
  continued: string | null;
  /** HTTP status of the answer handed back. */
  status: number;
}

export interface ToolrefFetchOptions extends ManagerOptions {
  /** The fetch that sends (default: globalThis.fetch at call time). Part of the state's
   * identity: define it once (module level), not inline. */
  fetch?: Fetch;
  /** Use this manager (and nothing shared); otherwise the endpoint's shared one. */
  manager?: ToolReferenceManager;
  /** Called once per rewritten request, after its answer's headers arrived. */
  onExchange?: (info: ExchangeInfo) => void;
}

/** toolrefFetch's options and what each holds. */
const FETCH_OPTIONS = { ...MANAGER_OPTIONS, fetch: "function", manager: "object", onExchange: "function" } as const;

const encoder = new TextEncoder();

/** What to rewrite a request with: the manager, where its messages sit, and the body. */
interface Rewritable {
  readonly manager: ToolReferenceManager;
  readonly body: Record<string, unknown>;
}

/** A fetch-compatible function that sends refs and history refs. */
export function toolrefFetch(options: ToolrefFetchOptions = {}): Fetch {
  checkOptions("toolrefFetch", options, FETCH_OPTIONS);
  if (options.manager !== undefined && !(options.manager instanceof ToolReferenceManager)) {
    throw new UsageError("toolrefFetch({ manager }) takes a ToolReferenceManager (new ToolReferenceManager(options)); or leave it out");
  }
  settle(managerOptions(options)); // a misused option fails here, not at the first request
  const send: Fetch = (input, init) => (options.fetch ?? globalThis.fetch)(input, init);

  /** The manager and body of a request to rewrite; null to send it as it is. */
  const rewritable = (url: string, method: string, headers: Headers, text: string): Rewritable | null => {
    if (headers.has(PROTOCOL_HEADER)) return null; // the caller speaks toolref itself
    const encoding = (headers.get("content-encoding") ?? "identity").trim().toLowerCase();
    if (encoding !== "identity") return null;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return null; // not JSON: not ours to touch
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) return null;
    const object = body as Record<string, unknown>;
    const where = endpointOf(url);
    if (options.manager !== undefined) {
      return Array.isArray(object[options.manager.messagesKey]) ? { manager: options.manager, body: object } : null;
    }
    // An LLM API's request (openai, @anthropic-ai/sdk): that API's format and messages key,
    // unless the options name their own, or its messages are in another format (an AI SDK
    // app whose route happens to end in /messages).
    const llm = options.format == null && options.messagesKey === undefined ? endpoint(method, new URL(where, "http://x").pathname) : null;
    if (llm !== null) {
      const messages = object[llm.messagesKey];
      if (Array.isArray(messages) && detect(messages, llm.format) !== null) {
        const manager = sharedManager(where, { ...options, format: llm.format, messagesKey: llm.messagesKey }, options.fetch);
        return { manager, body: object };
      }
    }
    const manager = sharedManager(where, options, options.fetch);
    return Array.isArray(object[manager.messagesKey]) ? { manager, body: object } : null;
  };

  const wrapped = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    const text = init?.body;
    if (method !== "POST" || typeof text !== "string") return send(input, init);
    const base = new Headers(input instanceof Request ? input.headers : undefined);
    new Headers(init?.headers).forEach((value, name) => base.set(name, value));
    const url = input instanceof Request ? input.url : String(input);
    const found = rewritable(url, method, base, text);
    if (found === null) return send(input, init);
    const { manager, body } = found;
    const sent = await manager.send(
      body,
      (content, extra) => {
        const headers = new Headers(base);
        headers.delete("content-length");
        for (const [name, value] of Object.entries(extra)) headers.set(name, value);
        return send(input, { ...init, body: content as BodyInit, headers });
      },
      encoder.encode(text).length,
    );
    const { response } = sent;
    learnJsonAnswer(manager, response);
    options.onExchange?.({
      rawBytes: sent.rawBytes,
      wireBytes: sent.wireBytes,
      historyRef: sent.historyRef,
      resent: sent.attempts > 1,
      attempts: sent.attempts,
      refsSent: sent.refsSent,
      continued: sent.continued,
      status: response.status,
    });
    return response;
  };
  return wrapped as Fetch;
}
/** A JSON answer's `toolReferences` are learned from a clone, in the background: the app's
 * body is never read here. Streams (event-stream answers) carry them in a header instead. */
function learnJsonAnswer(manager: ToolReferenceManager, response: Response): void {
  const type = response.headers.get("content-type") ?? "";
  if (!manager.refsAccepted || response.status >= 400 || !type.startsWith(JSON_TYPE) || response.body === null) return;
  response
    .clone()
    .json()
    .then((value: unknown) => manager.learnAnswer(response.status, response.headers, value))
    .catch(() => undefined);
}
