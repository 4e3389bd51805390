// toolrefFetch on a page whose backend is on another origin (a web chat on
// http://localhost:5173, its backend on http://localhost:8000): the browser's CORS checks
// simulated in front of the scripted receiver. A preflight refusing a request header fails
// fetch with a TypeError before anything is sent; answer headers not exposed are hidden.
// tests/browser/test_cross_origin.py runs the same in Chromium.
import { gzipSync } from "node:zlib";
import { afterEach, describe, expect, it, vi } from "vitest";
import { exposeValue } from "../src/backend-parts.js";
import { tapFor } from "../src/edits/answer.js";
import { forgetSharedState, toolrefFetch, withToolRef, type ExchangeInfo } from "../src/index.js";
import { Receiver } from "./receiver.js";

afterEach(() => {
  forgetSharedState();
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

const PAGE = "http://localhost:5173";
const API = "http://localhost:8000/api/chat";

/** Content types a request may carry with no preflight (CORS-safelisted). */
const SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"];

/** A browser's fetch to `receiver` from a page on PAGE: request headers beyond `allow` (and
 * the safelisted ones) are refused by the preflight; answer headers beyond `expose` hidden. */
function browser(receiver: Receiver, allow: string[], expose: string[]): { fetch: typeof fetch; sent: Headers[] } {
  const sent: Headers[] = [];
  const allowed = new Set(["accept", "accept-language", "content-language", ...allow.map((name) => name.toLowerCase())]);
  const exposed = new Set(["content-type", "content-length", "cache-control", ...expose.map((name) => name.toLowerCase())]);
  const send = (async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const headers = new Headers(init?.headers);
    sent.push(headers);
    const simple = (name: string): boolean =>
      name === "content-type" && SIMPLE_TYPES.includes((headers.get(name) ?? "").split(";")[0]!.trim().toLowerCase());
    for (const name of headers.keys()) if (!allowed.has(name) && !simple(name)) throw new TypeError("Failed to fetch");
    const answer = await receiver.fetch(input, init);
    const shown = new Headers();
    answer.headers.forEach((value, name) => { if (exposed.has(name)) shown.set(name, value); });
    return new Response(answer.body, { status: answer.status, headers: shown });
  }) as typeof fetch;
  return { fetch: send, sent };
}

async function converse(send: typeof fetch, turns: number): Promise<string[]> {
  const answers: string[] = [];
  const messages: unknown[] = [];
  for (let turn = 1; turn <= turns; turn++) {
    messages.push({ role: "user", content: `turn ${turn}: read the file` });
    const answer = await send(API, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages }) });
    answers.push(`${answer.status} ${await answer.text()}`);
    messages.push({ role: "assistant", content: `answer ${turn}`, tool: { result: `file ${turn} `.repeat(600) } });
  }
  return answers;
}

describe("a page on another origin than its backend", () => {
  it("a backend whose CORS allows only the app's own headers: every request answered as without toolref (before: Failed to fetch)", async () => {
    vi.stubGlobal("location", new URL(`${PAGE}/chat`));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const receiver = new Receiver();
    const page = browser(receiver, ["content-type"], []);
    const exchanges: ExchangeInfo[] = [];
    const answers = await converse(toolrefFetch({ fetch: page.fetch, onExchange: (info) => exchanges.push(info) }), 4);
    const plain = await converse(browser(new Receiver(), ["content-type"], []).fetch, 4);
    expect(answers).toEqual(plain);
    expect(receiver.arrived.map((item) => item.edit)).toEqual([null, null, null, null]);
    // The offer was tried once; refused, the endpoint's requests go as the app wrote them.
    expect(page.sent.map((headers) => headers.has("toolref-edits"))).toEqual([true, false, false, false, false]);
    expect(exchanges.map((info) => [info.edit, info.attempts, info.wireBytes === info.rawBytes])).toEqual(Array(4).fill([false, 1, true]));
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toContain("Toolref-Edits");
  });

  it("a preflight that passes the offer but refuses the edit: the request goes as it is, answered", async () => {
    vi.stubGlobal("location", new URL(`${PAGE}/`));
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const receiver = new Receiver();
    // text/plain bodies need no Content-Type allowed; the edit's media type does.
    const page = browser(receiver, ["toolref-edits"], ["toolref-edits", "toolref-history"]);
    const send = toolrefFetch({ fetch: page.fetch });
    const messages = [{ role: "user", content: "x".repeat(5000) }];
    for (let turn = 0; turn < 3; turn++) {
      const answer = await send(API, { method: "POST", body: JSON.stringify({ messages }) });
      expect(answer.status).toBe(200);
      await answer.text();
    }
    expect(receiver.arrived.map((item) => item.edit === null)).toEqual([true, true, true]);
    expect(receiver.arrived.map((item) => item.headers.has("toolref-edits"))).toEqual([true, false, false]);
  });

  it("the documented CORS settings: edits from the second request, nothing refused", async () => {
    vi.stubGlobal("location", new URL(`${PAGE}/`));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const receiver = new Receiver();
    const page = browser(receiver, ["content-type", "toolref-edits", "toolref-key"], ["toolref-edits", "toolref-history", "toolref-savings", "toolref-channel"]);
    const exchanges: ExchangeInfo[] = [];
    await converse(toolrefFetch({ fetch: page.fetch, onExchange: (info) => exchanges.push(info) }), 4);
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true, true]);
    expect(exchanges[3]!.wireBytes * 5).toBeLessThan(exchanges[3]!.rawBytes);
    expect(warn).not.toHaveBeenCalled();
  });

  it("a network failure is the app's to see: same origin, or once the offer passed, nothing is sent again", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    let calls = 0;
    const down = (async () => {
      calls += 1;
      throw new TypeError("Failed to fetch");
    }) as typeof fetch;
    // Same origin (no CORS): the failure is handed on, the request sent once.
    vi.stubGlobal("location", new URL("http://localhost:8000/"));
    await expect(converse(toolrefFetch({ fetch: down }), 1)).rejects.toThrow("Failed to fetch");
    expect(calls).toBe(1);
    // Cross-origin, the offer answered before: a later failure is the network's.
    vi.stubGlobal("location", new URL(`${PAGE}/`));
    const receiver = new Receiver();
    let up = true;
    const flaky = (async (input: RequestInfo | URL, init?: RequestInit) => {
      if (up) return receiver.fetch(input, init);
      calls += 1;
      throw new TypeError("Failed to fetch");
    }) as typeof fetch;
    const send = toolrefFetch({ fetch: flaky });
    await converse(send, 2);
    up = false;
    calls = 0;
    await expect(converse(send, 3)).rejects.toThrow("Failed to fetch");
    expect(calls).toBe(1);
  });
});

describe("the receiver exposes the toolref headers it marks an answer with", () => {
  it("exposeValue: each toolref header named after the app's own names, every one kept", () => {
    expect(exposeValue(null, ["toolref-edits", "toolref-history"])).toBe("Toolref-Edits, Toolref-History");
    expect(exposeValue("X-Request-Id, toolref-edits", ["toolref-edits", "toolref-savings", "toolref-savings"])).toBe("X-Request-Id, toolref-edits, Toolref-Savings");
    expect(exposeValue("TOOLREF-EDITS", ["toolref-edits"])).toBeNull(); // named already: as it is
    expect(exposeValue("X-Request-Id", [])).toBeNull();
    // `*` exposes every header only to a request without credentials; with cookies it is a
    // header named `*` (Fetch): the names go beside it, read either way.
    expect(exposeValue("*", ["toolref-edits"])).toBe("*, Toolref-Edits");
  });

  /** A registry stand-in for withToolRef's offer path: its capabilities, nothing else. */
  const registry = (async () => Response.json({ edits: 5 })) as typeof fetch;
  const app = async (): Promise<Response> => Response.json({ ok: true }, { headers: { "Access-Control-Expose-Headers": "X-Request-Id" } });
  const offer = (headers: Record<string, string>): Request =>
    new Request(API, { method: "POST", headers: { "Content-Type": "application/json", "Toolref-Edits": "5", ...headers }, body: '{"messages":[]}' });

  it("withToolRef: an offer from a page (an Origin) is answered with Toolref-Edits exposed, no CORS allow header added", async () => {
    const handle = withToolRef(app, { registry: "http://registry.test", fetch: registry });
    const answer = await handle(offer({ Origin: PAGE }));
    expect(answer.headers.get("toolref-edits")).toBe("5");
    expect(answer.headers.get("access-control-expose-headers")).toBe("X-Request-Id, Toolref-Edits");
    expect([...answer.headers.keys()].filter((name) => name.startsWith("access-control-allow"))).toEqual([]);
    // No Origin (a server's SDK), or a request toolref does not handle: the app's answer as it is.
    expect((await handle(offer({}))).headers.get("access-control-expose-headers")).toBe("X-Request-Id");
    const plain = new Request(API, { method: "POST", headers: { "Content-Type": "application/json", Origin: PAGE }, body: "{}" });
    expect((await handle(plain)).headers.get("access-control-expose-headers")).toBe("X-Request-Id");
  });

  it("withToolRef: an encoded event stream's Content-Encoding exposed with its toolref headers, so the page's tap gives no answer as the receiver's", async () => {
    const body = gzipSync(new TextEncoder().encode('event: message_stop\ndata: {"type":"message_stop"}\n\n'));
    const gzipped = async (): Promise<Response> =>
      new Response(body, { headers: { "Content-Type": "text/event-stream", "Content-Encoding": "gzip" } });
    const handle = withToolRef(gzipped, { registry: "http://registry.test", fetch: registry });
    const answer = await handle(offer({ Origin: PAGE }));
    expect(new Uint8Array(await answer.arrayBuffer())).toEqual(new Uint8Array(body)); // as the app sent it
    expect(tapFor("/v1/messages", 200, answer.headers)).toBeNull(); // the receiver's tap: none
    // What the page reads (safelisted and exposed headers): before, no Content-Encoding, a tap
    // of the decoded stream, an answer the receiver never kept.
    const exposed = new Set((answer.headers.get("access-control-expose-headers") ?? "").split(",").map((name) => name.trim().toLowerCase()));
    const seen = [...answer.headers].filter(([name]) => name === "content-type" || exposed.has(name));
    expect(seen).toContainEqual(["content-encoding", "gzip"]);
    expect(tapFor("/v1/messages", 200, seen)).toBeNull();
    // An answer toolref marks nothing on: as the app wrote it.
    const plain = new Request(API, { method: "POST", headers: { "Content-Type": "application/json", Origin: PAGE }, body: "{}" });
    expect((await handle(plain)).headers.get("access-control-expose-headers")).toBeNull();
  });

  it("an edit answered with Toolref-Edits readable but Toolref-History hidden: one console.warn naming it", async () => {
    vi.stubGlobal("location", new URL(`${PAGE}/`));
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const receiver = new Receiver();
    const page = browser(receiver, ["content-type", "toolref-edits"], ["toolref-edits"]);
    const exchanges: ExchangeInfo[] = [];
    await converse(toolrefFetch({ fetch: page.fetch, onExchange: (info) => exchanges.push(info) }), 4);
    expect(exchanges.map((info) => [info.edit, info.continued])).toEqual([[false, null], [true, null], [true, null], [true, null]]);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toContain("Expose Toolref-History");
    // Same origin, nothing hidden by a browser: no word.
    forgetSharedState();
    vi.stubGlobal("location", new URL("http://localhost:8000/"));
    await converse(toolrefFetch({ fetch: browser(new Receiver(), ["content-type", "toolref-edits"], ["toolref-edits"]).fetch }), 3);
    expect(warn).toHaveBeenCalledTimes(1);
  });
});
