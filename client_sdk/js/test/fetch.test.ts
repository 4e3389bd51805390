// toolrefFetch as apps write it, against a scripted receiver of edits (test/receiver.ts, no
// network): the negotiation (as it is with the offer, then edits), exact requests restored,
// misses and 415s recovered before the app sees anything, answers unread, credentials beside
// the edit, the state shared per endpoint, the LLM APIs' keys, and the retired options.
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  MEDIA_TYPE,
  PIECE_MIN,
  Recipes,
  SHARED_ENDPOINTS,
  VERSION,
  ToolReferenceManager,
  UsageError,
  entryOf,
  forgetSharedState,
  isPiece,
  recipeRef,
  sharedEndpoints,
  toolrefFetch,
  type ExchangeInfo,
} from "../src/index.js";
import { Receiver } from "./receiver.js";

afterEach(() => forgetSharedState());

const decoder = new TextDecoder();

function uiConversation(turns: number): unknown[] {
  const messages: unknown[] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ id: `u${turn}`, role: "user", parts: [{ type: "text", text: `read file ${turn}, please, and say what it does é😀` }] });
    messages.push({
      id: `a${turn}`,
      role: "assistant",
      parts: [{ type: "tool-read", toolCallId: `c${turn}`, state: "output-available", input: { n: turn, x: 1.5 }, output: `line ${turn}\n`.repeat(300) }],
    });
  }
  return messages;
}

const HEADERS = { "content-type": "application/json", authorization: "Bearer sk-secret", "x-app": "1" };

function post(send: typeof fetch, url: string, body: unknown, headers: Record<string, string> = HEADERS): Promise<Response> {
  return send(url, { method: "POST", headers, body: JSON.stringify(body) });
}

/** A conversation of `turns` requests through `send`; the bodies the app wrote. */
async function converse(send: typeof fetch, turns: number, url = "http://app.test/api/chat"): Promise<string[]> {
  const bodies: string[] = [];
  for (let turn = 1; turn <= turns; turn++) {
    const body = { id: "chat", messages: uiConversation(turn), trigger: "submit-message" };
    bodies.push(JSON.stringify(body));
    const answer = await post(send, url, body);
    expect(answer.status).toBe(200);
    await answer.text();
  }
  return bodies;
}

describe("negotiation and edits", () => {
  it("as it is with the offer until the receiver answers Toolref-Edits, then edits the receiver restores exactly", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const bodies = await converse(send, 5);
    expect(receiver.arrived.map((item) => decoder.decode(item.restored.body))).toEqual(bodies);
    const first = receiver.arrived[0]!;
    expect(first.edit).toBeNull();
    expect(first.headers.get("Toolref-Edits")).toBe(String(VERSION));
    expect(decoder.decode(first.wire)).toBe(bodies[0]); // the app's exact bytes
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true, true, true]);
    expect(exchanges[0]).toMatchObject({ wireBytes: exchanges[0]!.rawBytes, historyRef: null, continued: null });
    // The second has no base (the first was sent as it is); each later one is an edit of the one before.
    expect(exchanges[1]!.continued).toBeNull();
    for (const [index, info] of exchanges.entries()) {
      if (index < 2) continue;
      expect(info.continued).toBe(exchanges[index - 1]!.historyRef);
      expect(info.reused).toBeGreaterThan(0);
      expect(info.wireBytes * 5).toBeLessThan(info.rawBytes);
    }
    // Segment 0: the app's headers, the credential name-only (its value travels beside the edit).
    const edited = receiver.arrived[4]!;
    expect(edited.restored.headers).toEqual([
      ["authorization", "Bearer sk-secret"],
      ["content-type", "application/json"],
      ["x-app", "1"],
    ]);
    expect([...edited.headers.keys()].sort()).toEqual(["authorization", "content-type"]);
    expect(edited.headers.get("content-type")).toBe(MEDIA_TYPE);
    // Records: gzip on Node without zstd (kind 2), zstd where zlib has it (kind 1), raw when smaller.
    const kinds = new Set(receiver.arrived.flatMap((item) => item.edit?.records ?? []));
    expect([...kinds].every((kind) => [0, 1, 2].includes(kind))).toBe(true);
    expect(kinds.size).toBeGreaterThan(1);
  });

  it("a receiver that does not speak toolref gets the app's exact bytes every time", async () => {
    const receiver = new Receiver();
    receiver.speaks = false;
    const exchanges: ExchangeInfo[] = [];
    const bodies = await converse(toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) }), 3);
    expect(receiver.arrived.map((item) => decoder.decode(item.wire))).toEqual(bodies);
    expect(exchanges.every((info) => !info.edit && info.wireBytes === info.rawBytes)).toBe(true);
  });

  it("a registry emptied mid-conversation: 409 missing-history, resent with no base, unseen by the app", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const bodies: string[] = [];
    for (let turn = 1; turn <= 5; turn++) {
      if (turn === 4) receiver.forget();
      const body = { messages: uiConversation(turn) };
      bodies.push(JSON.stringify(body));
      const answer = await post(send, "http://app.test/api/chat", body);
      expect(answer.status).toBe(200);
    }
    expect(receiver.arrived.map((item) => decoder.decode(item.restored.body))).toEqual(bodies);
    expect(exchanges.map((info) => info.attempts)).toEqual([1, 1, 1, 2, 1]);
    expect(exchanges[3]).toMatchObject({ resent: true, continued: null });
    expect(exchanges[4]!.continued).toBe(exchanges[3]!.historyRef);
  });

  it("pieces the receiver lost (409 missing-pieces) are sent inline again", async () => {
    const file = { id: "f", role: "user", parts: [{ type: "text", text: "z".repeat(17_000) }] }; // a piece (16 KiB or more)
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    await converse(send, 8);
    await post(send, "http://app.test/api/chat", { messages: [file, { id: "g", role: "user", parts: [{ type: "text", text: "another chat" }] }] });
    receiver.forget(true); // the pieces only: the recipes are still held
    const body = { id: "chat", messages: [...uiConversation(8), file], trigger: "submit-message" };
    const answer = await post(send, "http://app.test/api/chat", body);
    expect(answer.status).toBe(200);
    expect(exchanges.at(-1)).toMatchObject({ attempts: 2, resent: true });
    expect(exchanges.at(-1)!.continued).toBe(exchanges[7]!.historyRef); // its own conversation, the file named, then inline
    expect(decoder.decode(receiver.arrived.at(-1)!.restored.body)).toBe(JSON.stringify(body));
  });

  it("a 415 to an edit: the request goes as it is, and edits pause a while, doubling", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    let now = 1_000_000;
    const clock = vi.spyOn(performance, "now").mockImplementation(() => now);
    try {
      await converse(send, 2);
      receiver.refuses = true;
      const body = { messages: uiConversation(3) };
      const answer = await post(send, "http://app.test/api/chat", body);
      expect(answer.status).toBe(200);
      expect(decoder.decode(receiver.arrived.at(-1)!.wire)).toBe(JSON.stringify(body));
      expect(exchanges.at(-1)).toMatchObject({ attempts: 2, edit: false });
      now += 500; // paused (1 s): as it is, one request
      await post(send, "http://app.test/api/chat", { messages: uiConversation(4) });
      expect(exchanges.at(-1)).toMatchObject({ attempts: 1, edit: false });
      now += 600; // over: an edit tried, refused again, as it is; paused 2 s now
      await post(send, "http://app.test/api/chat", { messages: uiConversation(5) });
      expect(exchanges.at(-1)).toMatchObject({ attempts: 2, edit: false });
      receiver.refuses = false;
      now += 1500; // still paused
      await post(send, "http://app.test/api/chat", { messages: uiConversation(6) });
      expect(exchanges.at(-1)).toMatchObject({ attempts: 1, edit: false });
      now += 600; // over: an edit, answered
      await post(send, "http://app.test/api/chat", { messages: uiConversation(7) });
      expect(exchanges.at(-1)).toMatchObject({ attempts: 1, edit: true });
    } finally {
      clock.mockRestore();
    }
  });

  it("hands back the very answer the receiver sent: a stream stays a stream", async () => {
    let sent: Response | null = null;
    const receiver = new Receiver(() => {
      const stream = new ReadableStream<Uint8Array>({ start: (controller) => controller.enqueue(new TextEncoder().encode("data: 1\n\n")) });
      sent = new Response(stream, { headers: { "content-type": "text/event-stream" } });
      return sent;
    });
    const send = toolrefFetch({ fetch: receiver.fetch });
    for (const turn of [1, 2]) {
      const answer = await post(send, "http://app.test/api/chat", { messages: uiConversation(turn) });
      expect(answer).toBe(sent); // the same object, never read (its stream never ends)
      expect(answer.bodyUsed).toBe(false);
    }
  });

  it("passes through what is no LLM request, or speaks toolref already", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    await send("http://app.test/api/chat", { method: "GET" });
    await send("http://app.test/api/chat", { method: "POST", body: "not json" });
    await send("http://app.test/api/chat", { method: "POST", body: '{"prompt":"no messages"}' });
    await send("http://app.test/api/chat", { method: "POST", headers: { "Toolref-Protocol": "2" }, body: '{"messages":[]}' });
    await send("http://app.test/api/chat", { method: "POST", headers: { "Content-Encoding": "gzip" }, body: '{"messages":[]}' });
    expect(exchanges).toEqual([]);
    expect(receiver.arrived.every((item) => !item.headers.has("Toolref-Edits"))).toBe(true);
  });
});

describe("the LLM APIs' requests (the openai and @anthropic-ai/sdk clients' fetch)", () => {
  it("Responses: its messages are the `input` list; an app route ending in /responses keeps `messages`", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const input = (turns: number) => Array.from({ length: turns }, (_, n) => ({ role: "user", content: `question ${n} `.repeat(10) }));
    for (const turns of [1, 2, 3]) await post(send, "http://gateway.test/llm/openai/v1/responses", { model: "m", input: input(turns) });
    for (const turns of [1, 2, 3]) await post(send, "http://app.test/api/responses", { messages: input(turns) });
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true, false, true, true]);
    expect(exchanges[2]!.continued).not.toBeNull();
    expect(exchanges[5]!.continued).not.toBeNull();
    expect(sharedEndpoints()).toBe(2);
  });
});

describe("state shared per endpoint", () => {
  it("a new toolrefFetch() every turn (the one-liner inline in a component) still sends edits", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    for (let turn = 1; turn <= 4; turn++) {
      const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) }); // a render
      await post(send, "http://app.test/api/chat?render=" + turn, { id: "c", messages: uiConversation(turn) });
    }
    expect(exchanges.map((info) => info.continued !== null)).toEqual([false, false, true, true]);
    for (const info of exchanges.slice(2)) expect(info.wireBytes * 4).toBeLessThan(info.rawBytes);
    expect(sharedEndpoints()).toBe(1);
  });

  it("a fetch written inline (a new one each render) gets its own state each time: warned once, naming the fix", async () => {
    const receiver = new Receiver();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      for (let turn = 1; turn <= 3; turn++) await post(toolrefFetch({ fetch: receiver.fetch }), "http://app.test/api/chat", { messages: uiConversation(turn) });
      await post(toolrefFetch({ fetch: receiver.fetch }), "http://other.test/api/chat", { messages: uiConversation(1) });
      expect(warn).not.toHaveBeenCalled(); // one fetch, however many toolrefFetch(): shared state
      for (let render = 1; render <= 12; render++) {
        const send = toolrefFetch({ fetch: (input, init) => receiver.fetch(input, init) }); // a render
        await post(send, "http://app.test/api/chat", { messages: uiConversation(render) });
      }
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/http:\/\/app\.test\/api\/chat.*new `fetch`.*module level/);
    } finally {
      warn.mockRestore();
    }
  });

  it("endpoints and options have their own state, within SHARED_ENDPOINTS", async () => {
    const receiver = new Receiver();
    await post(toolrefFetch({ fetch: receiver.fetch }), "http://app.test/api/chat", { messages: uiConversation(1) });
    await post(toolrefFetch({ fetch: receiver.fetch }), "http://other.test/api/chat", { messages: uiConversation(1) });
    await post(toolrefFetch({ fetch: receiver.fetch, maxRecipes: 8 }), "http://app.test/api/chat", { messages: uiConversation(1) });
    expect(sharedEndpoints()).toBe(3);
    for (let index = 0; index < SHARED_ENDPOINTS + 5; index++) {
      await post(toolrefFetch({ fetch: receiver.fetch }), `http://app.test/api/chat${index}`, { messages: uiConversation(1) });
    }
    expect(sharedEndpoints()).toBe(SHARED_ENDPOINTS);
  });

  it("savings count a miss resent, never a request sent as it is after a refusal (Python's `Savings` alike)", async () => {
    const receiver = new Receiver();
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: receiver.fetch, manager });
    const turn = async (n: number) => {
      const answer = await post(send, "http://app.test/api/chat", { id: "chat", messages: uiConversation(n), trigger: "submit-message" });
      expect(answer.status).toBe(200);
      await answer.text();
    };
    for (const n of [1, 2, 3]) await turn(n);
    expect(manager.savings.resends).toBe(0);
    receiver.forget(); // its registry emptied: the next edit is a 409 and one resend
    await turn(4);
    expect(manager.savings.resends).toBe(1);
    receiver.refuses = true; // a 415: the request goes as it is, no resend
    await turn(5);
    expect(manager.savings).toMatchObject({ requests: 5, resends: 1 });
  });

  it("an explicit manager is used alone", async () => {
    const receiver = new Receiver();
    const manager = new ToolReferenceManager();
    await converse(toolrefFetch({ fetch: receiver.fetch, manager }), 3);
    expect(manager.edits).toBe(2);
    expect(manager.savings).toMatchObject({ requests: 3, edits: 2, resends: 0 });
    expect(manager.editor.recipes.size).toBe(1); // each recipe replaced the one it continued
    expect(sharedEndpoints()).toBe(0);
  });
});

describe("options", () => {
  it("an option of the history-ref protocol fails loudly, naming the fix", () => {
    expect(() => toolrefFetch({ historyRefs: true } as never)).toThrow(/historyRefs.*no longer an option.*retired for edits.*remove it/);
    expect(() => toolrefFetch({ maxPriorBytes: 0 } as never)).toThrow(/maxPriorBytes.*no longer an option.*maxRecipeBytes/);
    expect(() => toolrefFetch({ compress: false } as never)).toThrow(/compress.*no longer an option/);
    expect(() => toolrefFetch({ format: "ai-sdk-v5" } as never)).toThrow(/format.*no longer an option.*messagesKey/);
    expect(() => new ToolReferenceManager({ maxHistories: 4 } as never)).toThrow(/maxHistories.*maxRecipes/);
  });

  it("an unknown option fails naming the nearest known one; a wrong type, the value and the fix", () => {
    expect(() => toolrefFetch({ onExchnage: () => undefined } as never)).toThrow(/did you mean onExchange\?/);
    expect(() => new ToolReferenceManager({ maxRecipe: 5 } as never)).toThrow(/did you mean maxRecipes\?/);
    expect(() => toolrefFetch({ zzz: 1 } as never)).toThrow(/zzz.*is not an option.*Known options: messagesKey, maxRecipes/);
    expect(() => toolrefFetch({ maxRecipes: 1.5 })).toThrow(/maxRecipes.*whole number/);
    expect(() => toolrefFetch({ maxRecipeBytes: 0 })).toThrow(/maxRecipeBytes is 0/);
    expect(() => toolrefFetch({ messagesKey: "" })).toThrow(/messagesKey/);
    expect(() => toolrefFetch({ onExchange: "log" as never })).toThrow(/takes a function/);
    expect(() => toolrefFetch("fast" as never)).toThrow(UsageError);
    expect(() => toolrefFetch({ manager: {} as never })).toThrow(/takes a ToolReferenceManager/);
  });
});

// Found in review (CHANGELOG 0.3.0, "Fixed (the JS SDK, found in review)").
describe("what the receiver restores is what the app's fetch would have sent", () => {
  const URL_ = "http://app.test/api/chat";
  const JSON_HEADERS = { "content-type": "application/json" };
  const text = (turns: number) => JSON.stringify({ messages: uiConversation(turns) });

  it("a body buffer the app reuses or transfers once fetch returned changes nothing: edits and the resend after a 415 carry the bytes given", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const encoder = new TextEncoder();
    for (const turns of [1, 2, 3]) {
      const body = encoder.encode(text(turns));
      const pending = send(URL_, { method: "POST", headers: JSON_HEADERS, body });
      body.fill(0x20); // fetch took its copy when called: the app may reuse its buffer
      expect((await pending).status).toBe(200);
      expect(decoder.decode(receiver.arrived.at(-1)!.restored.body)).toBe(text(turns));
    }
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true]);
    receiver.refuses = true; // a 415 to the edit: the request goes again as it is, later
    const buffer = encoder.encode(text(4)).buffer;
    const pending = send(URL_, { method: "POST", headers: JSON_HEADERS, body: buffer });
    structuredClone(buffer, { transfer: [buffer] }); // handed to a worker: detached here
    expect(buffer.byteLength).toBe(0);
    expect((await pending).status).toBe(200);
    expect(exchanges.at(-1)).toMatchObject({ attempts: 2, edit: false });
    expect(decoder.decode(receiver.arrived.at(-1)!.wire)).toBe(text(4));
  });

  it("a Buffer body: the pieces kept are copies of their own, not views holding the app's whole body", async () => {
    const receiver = new Receiver();
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: receiver.fetch, manager });
    const file = { id: "f", role: "user", parts: [{ type: "text", text: "z".repeat(PIECE_MIN + 100) }] };
    for (const turns of [1, 2]) {
      const body = Buffer.from(JSON.stringify({ messages: [file, ...uiConversation(turns)] }));
      await (await send(URL_, { method: "POST", headers: JSON_HEADERS, body })).text();
    }
    const recipes = manager.editor.recipes;
    const recipe = recipes.get(recipes.refs()[0]!)!;
    const pieces = recipe.entries.map((entry, index) => (isPiece(entry) ? recipes.segment(recipe, index) : null)).filter((piece) => piece !== null);
    expect(pieces.length).toBeGreaterThan(0);
    for (const piece of pieces) expect(piece.buffer.byteLength).toBe(piece.length);
    // The same for a recipe kept straight from Buffer segments (a transport of one's own).
    const body = Buffer.from("y".repeat(4 * PIECE_MIN));
    const segments = [body.subarray(0, PIECE_MIN), body.subarray(PIECE_MIN)];
    const entries = await Promise.all(segments.map(entryOf));
    const own = new Recipes();
    expect(own.keep(await recipeRef(entries), entries, segments)).toBe(true);
    const kept = own.get(own.refs()[0]!)!;
    for (const index of [0, 1]) expect(own.segment(kept, index).buffer.byteLength).toBe(segments[index]!.length);
  });

  it("a string body with no Content-Type: the receiver gets fetch's own text/plain;charset=UTF-8, as it is and restored from an edit", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const expected = new Request(URL_, { method: "POST", body: text(1) }).headers.get("content-type");
    expect(expected).toBe("text/plain;charset=UTF-8");
    for (const turns of [1, 2, 3]) await (await send(URL_, { method: "POST", body: text(turns) })).text();
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true]);
    for (const item of receiver.arrived) {
      expect(new Map(item.restored.headers).get("content-type")).toBe(expected);
    }
    expect(receiver.arrived.map((item) => decoder.decode(item.restored.body))).toEqual([text(1), text(2), text(3)]);
  });

  it("a Request as input with init's headers: init's replace the Request's (they never merge), as fetch does", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    const request = new Request(URL_, { method: "POST", headers: { "x-old": "1", authorization: "Bearer old" } });
    const init = { method: "POST", headers: { ...JSON_HEADERS, "x-new": "2" } };
    const expected = [...new Request(request, { ...init, body: "{}" }).headers.keys()].sort();
    expect(expected).toEqual(["content-type", "x-new"]);
    for (const turns of [1, 2, 3]) await (await send(request, { ...init, body: text(turns) })).text();
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true]);
    for (const item of receiver.arrived) {
      expect(item.restored.headers.map(([name]) => name).filter((name) => name !== "toolref-edits").sort()).toEqual(expected);
    }
    // The same Request and init without headers: the Request's.
    await (await send(request, { method: "POST", body: text(4) })).text();
    expect(new Map(receiver.arrived.at(-1)!.restored.headers).get("x-old")).toBe("1");
  });
});

describe("a receiver that stops reading edits (Python's Sender recovers: so does this)", () => {
  const URL_ = "http://app.test/api/chat";

  /** A receiver of edits until `rolledBack`; then a backend without toolref answering an
   * edit with `refusal` (the body could not be parsed as the app's JSON). */
  function rollingBack(refusal: () => Response) {
    const receiver = new Receiver();
    const state = { rolledBack: false, plain: [] as string[] };
    const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      if (!state.rolledBack) return receiver.fetch(input, init);
      const request = new Request(input, init);
      const body = await request.text();
      if (request.headers.get("content-type") === MEDIA_TYPE) return refusal();
      state.plain.push(body);
      return new Response("answered: " + body.length, { headers: { "content-type": "text/plain" } });
    }) as typeof globalThis.fetch;
    return { state, fetch };
  }

  for (const [what, refusal] of [
    ["a 400 its JSON parser wrote", () => new Response('{"error":"Unexpected token"}', { status: 400, headers: { "content-type": "application/json" } })],
    ["a 500 (a route's request.json() threw)", () => new Response("Internal Server Error", { status: 500 })],
    ["a 422 problem+json of its own that is no JSON object", () => new Response("[]", { status: 422, headers: { "content-type": "application/problem+json" } })],
  ] as const) {
    it(`${what} to an edit: the request goes again as it is, unseen, and the next ones as they are`, async () => {
      const { state, fetch } = rollingBack(refusal);
      const exchanges: ExchangeInfo[] = [];
      const send = toolrefFetch({ fetch, onExchange: (info) => exchanges.push(info) });
      for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: JSON.stringify({ messages: uiConversation(turns) }) })).text();
      state.rolledBack = true;
      for (const turns of [3, 4]) {
        const body = JSON.stringify({ messages: uiConversation(turns) });
        const answer = await send(URL_, { method: "POST", headers: HEADERS, body });
        expect(answer.status).toBe(200);
        expect(await answer.text()).toBe("answered: " + body.length);
        expect(state.plain.at(-1)).toBe(body);
      }
      expect(exchanges.map((info) => [info.edit, info.attempts])).toEqual([
        [false, 1],
        [true, 1],
        [false, 2], // the edit refused, then as it is
        [false, 1], // forgotten: as it is, with the offer
      ]);
    });
  }

  it("a toolref problem without Toolref-Edits (a gateway's 401) is handed back, the endpoint not forgotten", async () => {
    const problem = JSON.stringify({ type: "urn:toolref:problem:unauthorized", status: 401, detail: "unknown Toolref-Key" });
    const { state, fetch } = rollingBack(() => new Response(problem, { status: 401, headers: { "content-type": "application/problem+json" } }));
    const exchanges: ExchangeInfo[] = [];
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch, manager, onExchange: (info) => exchanges.push(info) });
    for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: JSON.stringify({ messages: uiConversation(turns) }) })).text();
    state.rolledBack = true;
    const answer = await send(URL_, { method: "POST", headers: HEADERS, body: JSON.stringify({ messages: uiConversation(3) }) });
    expect(answer.status).toBe(401);
    expect(await answer.text()).toBe(problem);
    expect(exchanges.at(-1)).toMatchObject({ edit: true, attempts: 1 });
    expect(manager.edits).toBe(2);
  });

  it("a problem handed back is the receiver's bytes, not a decoding of them", async () => {
    // The app's own 400 problem to a request an edit stood for (it names the recipe): a BOM
    // and a byte that is no UTF-8, which response.text() would drop and replace.
    const bytes = Uint8Array.from([0xef, 0xbb, 0xbf, ...new TextEncoder().encode('{"type":"urn:app:bad","detail":"'), 0xff, 0x22, 0x7d]);
    const receiver = new Receiver((arrived) =>
      arrived.edit === null ? new Response("ok") : new Response(bytes as BodyInit, { status: 400, headers: { "content-type": "application/problem+json" } }),
    );
    const send = toolrefFetch({ fetch: receiver.fetch });
    await (await post(send, URL_, { messages: uiConversation(1) })).text();
    const answer = await post(send, URL_, { messages: uiConversation(2) });
    expect(answer.status).toBe(400);
    expect(answer.headers.get("Toolref-History")).not.toBeNull();
    expect(new Uint8Array(await answer.arrayBuffer())).toEqual(bytes);
  });
});
