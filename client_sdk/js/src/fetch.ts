/**
 * `toolrefFetch`: a `fetch` for AI SDK 5's `DefaultChatTransport` (the one-line useChat
 * integration), or any code that POSTs `{messages: [...]}` as JSON.
 *
 *     new DefaultChatTransport({ api: "/api/chat", fetch: toolrefFetch() })
 *
 * JSON POST bodies with a messages list are rewritten by a {@link ToolReferenceManager};
 * everything else goes through untouched. The answer is handed back unread: only its
 * headers are learned from, so a streamed answer stays a stream.
 */

import { ToolReferenceManager, type ManagerOptions } from "./manager.js";
import { UsageError } from "./errors.js";
import { JSON_TYPE } from "./protocol.js";

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
  /** The fetch that sends (default: globalThis.fetch at call time). */
  fetch?: Fetch;
  /** Share one manager between several fetches; otherwise each toolrefFetch() has its own. */
  manager?: ToolReferenceManager;
  /** Called once per rewritten request, after its answer's headers arrived. */
  onExchange?: (info: ExchangeInfo) => void;
}

const encoder = new TextEncoder();

/** A fetch-compatible function that sends refs and history refs. */
export function toolrefFetch(options: ToolrefFetchOptions = {}): Fetch {
  for (const name of ["fetch", "onExchange"] as const) {
    if (options[name] !== undefined && typeof options[name] !== "function") {
      throw new UsageError(`toolrefFetch({ ${name} }) takes a function, not ${typeof options[name]}; pass one or leave it out`);
    }
  }
  if (options.manager !== undefined && !(options.manager instanceof ToolReferenceManager)) {
    throw new UsageError("toolrefFetch({ manager }) takes a ToolReferenceManager (new ToolReferenceManager(options)); or leave it out");
  }
  const manager = options.manager ?? new ToolReferenceManager(options);
  const key = manager.messagesKey;
  const send: Fetch = (input, init) => (options.fetch ?? globalThis.fetch)(input, init);

  const wrapped = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    const text = init?.body;
    if (method !== "POST" || typeof text !== "string") return send(input, init);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return send(input, init); // not JSON: not ours to touch
    }
    if (typeof body !== "object" || body === null || Array.isArray(body) || !Array.isArray((body as Record<string, unknown>)[key])) {
      return send(input, init);
    }
    const base = new Headers(input instanceof Request ? input.headers : undefined);
    new Headers(init?.headers).forEach((value, name) => base.set(name, value));
    const sent = await manager.send(
      body as Record<string, unknown>,
      (content, extra) => {
        const headers = new Headers(base);
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
