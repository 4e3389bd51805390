/**
 * The registry call of `withToolRef`, bounded as ToolRefMiddleware's is: a deadline (the
 * Python `AsyncRegistryClient` waits 5 s), the client's leaving aborts it, a redirect is
 * never followed (the conversation goes to the registry named, nowhere else), and the answer
 * is read incrementally up to a cap. Each failure is the registry being unavailable, which
 * the caller answers as the middleware does (an edit gets a 415 on which the client sends the
 * request as it is; protocol-2 full payloads pass as protocol 1, refs get a 409 the client
 * resends on); a client that left is not answered at all.
 */

import { TooLargeError, readAll } from "./compression.js";
import { printable } from "./shown.js";

type Fetch = typeof globalThis.fetch;

/** The registry's answer, read whole (within the cap). */
export interface RegistryAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly bytes: Uint8Array;
}

/** The bounds of one call. */
export interface CallBounds {
  /** The whole call, answer read included, in milliseconds. */
  readonly timeoutMs: number;
  /** The most answer bytes read; past them the registry is unavailable. */
  readonly maxAnswerBytes: number;
  /** The incoming request's signal: the client leaving aborts the call. */
  readonly signal: AbortSignal | null;
  /** The request's method (default POST; PUT keeps an answer; GET sends no body). */
  readonly method?: "POST" | "PUT" | "GET";
}

/** The registry did not help (unreachable, too slow, a redirect, an answer too large). */
export class RegistryUnavailable extends Error {
  override name = "RegistryUnavailable";
}

/** The client left while the registry was asked: nobody is waiting for an answer. */
export class ClientGone extends Error {
  override name = "ClientGone";
}

/** POST `body` to `url` within `bounds`; throws `RegistryUnavailable` or `ClientGone`. */
export async function postBounded(
  fetch: Fetch,
  url: string,
  headers: Record<string, string>,
  body: string | Uint8Array,
  bounds: CallBounds,
): Promise<RegistryAnswer> {
  const client = bounds.signal;
  if (client?.aborted) throw new ClientGone("the client left before the registry was asked");
  const controller = new AbortController();
  const { signal } = controller;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, bounds.timeoutMs);
  const leave = (): void => controller.abort();
  client?.addEventListener("abort", leave, { once: true });
  // Ends the wait even for a fetch (options.fetch) that ignores the signal.
  const aborted = new Promise<never>((_, fail) => signal.addEventListener("abort", () => fail(signal.reason), { once: true }));
  aborted.catch(() => undefined);
  try {
    const method = bounds.method ?? "POST";
    const sent = fetch(url, { method, headers, body: (method === "GET" ? undefined : body) as BodyInit, signal, redirect: "manual" });
    sent.then((late) => signal.aborted && void late.body?.cancel().catch(() => undefined)).catch(() => undefined);
    const response = await Promise.race([sent, aborted]);
    const { status } = response;
    if (response.type === "opaqueredirect" || (status >= 300 && status < 400)) {
      void response.body?.cancel().catch(() => undefined);
      const location = response.headers.get("location");
      throw new RegistryUnavailable(
        `the registry answered a redirect (${status}${location ? ` to ${printable(location)}` : ""}), which is not followed: ` +
          "set options.registry to the registry's own URL",
      );
    }
    const declared = Number(response.headers.get("content-length") ?? NaN);
    if (declared > bounds.maxAnswerBytes) {
      void response.body?.cancel().catch(() => undefined);
      throw new TooLargeError(bounds.maxAnswerBytes);
    }
    const bytes = response.body === null ? new Uint8Array(0) : await readAll(response.body, bounds.maxAnswerBytes, signal);
    return { status, headers: response.headers, bytes };
  } catch (error) {
    if (client?.aborted) throw new ClientGone("the client left while the registry was asked");
    if (error instanceof RegistryUnavailable) throw error;
    if (timedOut) throw new RegistryUnavailable(`the registry did not answer within ${bounds.timeoutMs} ms (options.timeoutMs)`);
    if (error instanceof TooLargeError) {
      throw new RegistryUnavailable(`the registry's answer is over ${error.limit} bytes (options.maxAnswerBytes)`);
    }
    throw new RegistryUnavailable(`the registry is unreachable (${String(error)})`);
  } finally {
    clearTimeout(timer);
    client?.removeEventListener("abort", leave);
  }
}
