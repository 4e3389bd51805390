/**
 * `toolrefFetch`: a `fetch` that sends LLM requests as edits once their receiver reads them.
 *
 * - For AI SDK 5, 6 and 7's `DefaultChatTransport` (the one-line useChat integration), or any
 *   code that POSTs `{messages: [...]}` as JSON:
 *
 *       new DefaultChatTransport({ api: "/api/chat", fetch: toolrefFetch() })
 *
 * - For the official `openai` and `@anthropic-ai/sdk` Node clients (their `fetch` option), as
 *   Python's `toolref.Transport` is for theirs: a POST to an LLM endpoint (`endpoints.ts`:
 *   Chat Completions, Responses, Messages), its messages under that API's key.
 *
 *       new OpenAI({ baseURL: "http://gateway/llm/openai/v1", fetch: toolrefFetch() })
 *
 * Such a request goes as the app wrote it with `Toolref-Edits: 6` until the endpoint answers
 * `Toolref-Edits`, then as an edit (`manager.ts`). The state (what the endpoint reads, the
 * recipes it confirmed) is shared per endpoint (`shared.ts`), so the one-liner written inline
 * in a component, called again on every render, still sends edits. Everything else goes
 * through untouched. The answer is handed back unread: a streamed answer stays a stream.
 * In Node, an edit to an endpoint whose receiver names a channel (`Toolref-Channel`) goes as
 * a frame on it (`channel/`, issue 39), over HTTP whenever the channel cannot carry it.
 */

import { told, viaChannel } from "./channel/channels.js";
import { channelsHere, fetchDispatched } from "./channel/upgrade.js";
import { cutBody, isSecret, type BodyCut } from "./edits/segments.js";
import { MEDIA_TYPE } from "./edits/wire.js";
import { endpoint } from "./endpoints.js";
import { UsageError } from "./errors.js";
import { MANAGER_OPTIONS, RETIRED_OPTIONS, ToolReferenceManager, settle, type ManagerOptions } from "./manager.js";
import { checkOptions } from "./options.js";
import { EDITS_HEADER, PROTOCOL_HEADER, TOOLREF_PREFIX } from "./protocol.js";
import { endpointOf, managerOptions, sharedManager } from "./shared.js";

type Fetch = typeof globalThis.fetch;

/** What one request cost, for an app that shows the bytes saved. */
export interface ExchangeInfo {
  /** Bytes of the body the app handed to fetch (the whole conversation). */
  rawBytes: number;
  /** Body bytes toolref put on the wire for it, all attempts together. */
  wireBytes: number;
  /** The recipe the receiver confirmed for the request (`Toolref-History: tb_...`), the base
   * of the next one; null if it confirmed none (a request sent as it is). */
  historyRef: string | null;
  /** The recipe the request was sent as an edit of (only what changed travelled); null if
   * none (sent as it is, or an edit with every segment inline). */
  continued: string | null;
  /** True when the receiver lacked what an edit named and the request was sent again. */
  resent: boolean;
  /** Requests sent for it (1 unless resent). */
  attempts: number;
  /** It went as an edit (false: as the app wrote it, with the offer `Toolref-Edits: 6`). */
  edit: boolean;
  /** Segments of the request the receiver held already, sent by reference. */
  reused: number;
  /** HTTP status of the answer handed back. */
  status: number;
}

export interface ToolrefFetchOptions extends ManagerOptions {
  /** The fetch that sends (default: globalThis.fetch at call time). Part of the state's
   * identity: define it once (module level), not inline. */
  fetch?: Fetch;
  /** Use this manager (and nothing shared); otherwise the endpoint's shared one. Its own
   * options apply: `messagesKey`, `maxRecipes` or `maxRecipeBytes` beside it fail. */
  manager?: ToolReferenceManager;
  /** Called once per LLM request, after its answer's headers arrived. */
  onExchange?: (info: ExchangeInfo) => void;
  /** Send edits over one WebSocket per receiver where its answers tell of a channel
   * (`Toolref-Channel`: the gateway, `ToolRefMiddleware(channel_path=...)`), a frame a turn
   * instead of an HTTP request each (docs/js.md, "The channel"). Node only; it connects
   * straight to the receiver's origin, past any dispatcher or proxy the `fetch` given
   * uses: so by default (undefined) only where no `fetch` is given and the platform's is
   * dispatched by no proxy of the app's (`setGlobalDispatcher`, `NODE_USE_ENV_PROXY`);
   * `true` with any, `false` never. */
  channel?: boolean;
}

/** toolrefFetch's options and what each holds. */
const FETCH_OPTIONS = { ...MANAGER_OPTIONS, fetch: "function", manager: "object", onExchange: "function", channel: "boolean" } as const;

const encoder = new TextEncoder();

/** The bytes of a body fetch was given, when they can be read without consuming anything:
 * a copy taken now, as fetch takes one when called (the app may reuse or transfer its buffer
 * once fetch returned, while the edit is still being made, or resent after a 409 or a 415),
 * and a plain `Uint8Array` (a Node `Buffer`'s `slice` is a view: a piece kept from it would
 * hold the app's whole buffer). A stream, a Blob, FormData, URLSearchParams: null (never read). */
function bytesOf(body: BodyInit | null | undefined): Uint8Array | null {
  if (typeof body === "string") return encoder.encode(body); // fetch's UTF-8 (a lone surrogate: U+FFFD)
  if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
  if (ArrayBuffer.isView(body)) return new Uint8Array(new Uint8Array(body.buffer, body.byteOffset, body.byteLength));
  return null;
}

/** The `Content-Type` fetch gives a string body when the request names none. */
const TEXT_TYPE = "text/plain;charset=UTF-8";

/** The headers fetch sends for `input` and `init` (the Request constructor's rule): `init`'s
 * when it has some (they replace a Request's, never merge with them), else the Request's; for
 * a string body and no `Content-Type`, fetch's own `text/plain;charset=UTF-8`, which the bytes
 * toolref hands fetch would not get (the receiver restores what the app's fetch sends). */
function headersOf(input: RequestInfo | URL, init: RequestInit | undefined): Headers {
  const headers = new Headers(init?.headers !== undefined ? init.headers : input instanceof Request ? input.headers : undefined);
  if (typeof init?.body === "string" && !headers.has("content-type")) headers.set("content-type", TEXT_TYPE);
  return headers;
}

/** What an edit carries beside it: the request's credentials (their values never travel in
 * the edit) and toolref's own headers (`Toolref-Key`); every other header is in segment 0. */
function besideAnEdit(headers: Headers): Headers {
  const beside = new Headers();
  headers.forEach((value, name) => {
    if (isSecret(name) || name.toLowerCase().startsWith(TOOLREF_PREFIX)) beside.append(name, value);
  });
  return beside;
}

/** `url` leaves the page's origin: sent from a browser page (or worker) to another origin,
 * where toolref's headers need the receiver's CORS to allow them. False where there is no
 * page (Node: no CORS). */
function crossOrigin(url: string): boolean {
  const here = (globalThis as { location?: { origin?: unknown; href?: unknown } }).location;
  if (typeof here?.origin !== "string" || typeof here.href !== "string") return false;
  try {
    return new URL(url, here.href).origin !== here.origin;
  } catch {
    return false; // fetch refuses such a URL itself
  }
}

/** A fetch-compatible function that sends LLM requests as edits once their receiver reads them. */
export function toolrefFetch(options: ToolrefFetchOptions = {}): Fetch {
  checkOptions("toolrefFetch", options, FETCH_OPTIONS, RETIRED_OPTIONS);
  if (options.manager !== undefined && !(options.manager instanceof ToolReferenceManager)) {
    throw new UsageError("toolrefFetch({ manager }) takes a ToolReferenceManager (new ToolReferenceManager(options)); or leave it out");
  }
  // The manager's own options apply: one given beside it would be ignored without a word.
  const beside = options.manager !== undefined ? Object.keys(managerOptions(options))[0] : undefined;
  if (beside !== undefined) {
    throw new UsageError(
      `toolrefFetch({ manager, ${beside} }): ${beside} beside a manager of your own is not used; ` +
        `give it to the manager, new ToolReferenceManager({ ${beside} }), or leave the manager out`,
    );
  }
  settle(managerOptions(options)); // a misused option fails here, not at the first request
  const send: Fetch = (input, init) => (options.fetch ?? globalThis.fetch)(input, init);
  // Edits over the receiver's channel (channel/): Node only, and by default only with the
  // platform's own fetch, dispatched by no proxy of the app's (the channel would go past it).
  const channel = (options.channel ?? options.fetch === undefined) && channelsHere();
  const direct = (): boolean => options.channel === true || !fetchDispatched();

  /** The manager and the body's cut of an LLM request; null to send it as it is. */
  const llm = (url: string, method: string, headers: Headers, data: Uint8Array): { manager: ToolReferenceManager; cut: BodyCut } | null => {
    if (headers.has(PROTOCOL_HEADER) || headers.has(EDITS_HEADER)) return null; // the caller speaks toolref itself
    if ((headers.get("content-encoding") ?? "identity").trim().toLowerCase() !== "identity") return null;
    if ((headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase() === MEDIA_TYPE) return null;
    const where = endpointOf(url);
    // An LLM API's request (openai, @anthropic-ai/sdk): that API's messages key, unless the
    // options name one, or the body holds none there (an AI SDK app whose route happens to
    // end in /responses).
    const api = options.manager === undefined && options.messagesKey === undefined ? endpoint(method, new URL(where, "http://x").pathname) : null;
    const own = options.manager?.messagesKey ?? options.messagesKey ?? "messages";
    for (const key of new Set([api?.messagesKey ?? own, own])) {
      const cut = cutBody(data, key, true); // the long window's cut, which the editor sends
      if (cut === null) return null; // not one JSON object: not ours to touch
      if (!cut.listed) continue;
      return { manager: options.manager ?? sharedManager(where, { ...options, messagesKey: key }, options.fetch), cut };
    }
    return null;
  };

  const wrapped = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
    const data = method === "POST" ? bytesOf(init?.body) : null;
    if (data === null) return send(input, init);
    const headers = headersOf(input, init);
    const url = input instanceof Request ? input.url : String(input);
    const found = llm(url, method, headers, data);
    if (found === null) return send(input, init);
    const signal = init?.signal ?? (input instanceof Request ? input.signal : undefined);
    const sent = await found.manager.send(
      data,
      async (content, extra, edit) => {
        const sending = edit ? besideAnEdit(headers) : new Headers(headers);
        sending.delete("content-length");
        for (const [name, value] of Object.entries(extra)) sending.set(name, value);
        const carried = channel && edit && direct() ? await viaChannel(url, sending, content, signal) : null;
        const response = carried ?? (await send(input, { ...init, body: content as BodyInit, headers: sending }));
        if (channel) told(url, response);
        return response;
      },
      headers,
      found.manager.editor.longWindow ? found.cut : undefined,
      new URL(url, "http://x").pathname,
      crossOrigin(url),
      signal,
    );
    const { response } = sent;
    options.onExchange?.({
      rawBytes: sent.rawBytes,
      wireBytes: sent.wireBytes,
      historyRef: sent.historyRef,
      continued: sent.continued,
      resent: sent.attempts > 1,
      attempts: sent.attempts,
      edit: sent.edit,
      reused: sent.reused,
      status: response.status,
    });
    return response;
  };
  return wrapped as Fetch;
}
