// Unit tests: canonical JSON edge cases, markers, the manager's resends and negotiation, and
// toolrefFetch's pass-through rules, against a scripted server (no network).
import { describe, expect, it } from "vitest";
import {
  CanonicalizationError,
  ToolReferenceManager,
  UsageError,
  base32,
  canonicalJson,
  fromMarker,
  gunzip,
  historyRef,
  isHistoryRef,
  isRef,
  longestConfirmed,
  memberSpans,
  refOf,
  toMarker,
  toolrefFetch,
  withToolRef,
  gzip,
  type ExchangeInfo,
} from "../src/index.js";

describe("canonical JSON", () => {
  it("refuses NaN and infinities, saying what to send instead", () => {
    for (const value of [NaN, Infinity, -Infinity]) {
      expect(() => canonicalJson({ x: value })).toThrow(/finite number/);
    }
  });

  it("reads values as JSON.stringify does", () => {
    expect(canonicalJson({ b: undefined, a: [undefined, () => 1], d: new Date(0) })).toBe(
      '{"a":[null,null],"d":"1970-01-01T00:00:00.000Z"}',
    );
    expect(canonicalJson({ n: -0, big: 12345678901234567890n })).toBe('{"big":12345678901234567890,"n":0}');
  });

  it("refuses cycles and lone surrogates", () => {
    const cycle: Record<string, unknown> = {};
    cycle["self"] = cycle;
    expect(() => canonicalJson(cycle)).toThrow(CanonicalizationError);
    expect(() => canonicalJson("\ud800")).toThrow(/lone UTF-16 surrogate \(\\ud800\)/);
  });

  it("base32 is RFC 4648's, lowercase, unpadded", () => {
    const encoder = new TextEncoder();
    expect(base32(encoder.encode("foobar"))).toBe("mzxw6ytboi");
    expect(base32(encoder.encode("f"))).toBe("my");
  });
});

describe("refs and markers", () => {
  it("ref syntax", () => {
    const ref = refOf({ name: "t", args: {}, result: 1 });
    expect(isRef(ref)).toBe(true);
    expect(ref).toHaveLength(29);
    expect(isRef(ref.replace("tr_", "th_"))).toBe(false);
    expect(isHistoryRef(ref.replace("tr_", "th_"))).toBe(true);
  });

  it("a marker keeps member order, listing it when the default would not restore it", () => {
    const part = { type: "tool-x", output: 2, toolCallId: "c", input: 1 };
    const marker = toMarker(part, ["input", "output"], "tr_x");
    expect(marker).toEqual({ type: "tool-x", toolRef: "tr_x", toolCallId: "c", toolRefOrder: ["type", "output", "toolCallId", "input"] });
    expect(JSON.stringify(fromMarker(marker, { input: 1, output: 2 }))).toBe(JSON.stringify(part));
    const plain = toMarker({ a: 1, input: 1, output: 2, z: 3 }, ["input", "output"], "tr_x");
    expect(Object.keys(plain)).toEqual(["a", "toolRef", "z"]);
  });

  it("longestConfirmed picks the longest history still a prefix", () => {
    const chain = [1, 2, 3].map((n) => new Uint8Array(32).fill(n));
    const refs = chain.map(historyRef);
    expect(longestConfirmed(chain, [[refs[0]!, 1], [refs[1]!, 2], ["th_other", 3]])).toBe(1);
    expect(longestConfirmed(chain.slice(0, 1), [[refs[1]!, 2]])).toBe(-1);
  });

  it("memberSpans finds top-level members as written", () => {
    const text = ' { "a" : [1, {"x": "]}"}] , "b":1.0,"c":"\\"" } ';
    const spans = memberSpans(text)!;
    expect(spans.map((span) => [span.key, text.slice(span.valueStart, span.end)])).toEqual([
      ["a", '[1, {"x": "]}"}]'],
      ["b", "1.0"],
      ["c", '"\\""'],
    ]);
  });
});

// --- a scripted server --------------------------------------------------------------------

type Reply = (request: { headers: Headers; text: string; body: Record<string, unknown> }) => Response;

function server(reply: Reply): { fetch: typeof fetch; requests: { headers: Headers; text: string; body: Record<string, unknown> }[] } {
  const requests: { headers: Headers; text: string; body: Record<string, unknown> }[] = [];
  const send = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    const headers = request.headers;
    let bytes = new Uint8Array(await request.arrayBuffer());
    if (headers.get("content-encoding") === "gzip") bytes = new Uint8Array(await gunzip(bytes));
    const text = new TextDecoder().decode(bytes);
    const body = JSON.parse(text) as Record<string, unknown>;
    requests.push({ headers, text, body });
    return reply({ headers, text, body });
  };
  return { fetch: send as typeof fetch, requests };
}

function conversation(turns: number): unknown[] {
  const messages: unknown[] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ id: `u${turn}`, role: "user", parts: [{ type: "text", text: `q${turn}` }] });
    messages.push({
      id: `a${turn}`,
      role: "assistant",
      parts: [{ type: "tool-read", toolCallId: `c${turn}`, state: "output-available", input: { n: turn }, output: "x".repeat(2000) + turn }],
    });
  }
  return messages;
}

const problem = (status: number, slug: string, extra: Record<string, unknown>) =>
  new Response(JSON.stringify({ type: `urn:toolref:problem:${slug}`, status, ...extra }), {
    status,
    headers: { "content-type": "application/problem+json", "Toolref-Protocol": "2" },
  });

function post(send: typeof fetch, messages: unknown[]): Promise<Response> {
  return send("http://app.test/api/chat", {
    method: "POST",
    headers: { "content-type": "application/json", "x-app": "1" },
    body: JSON.stringify({ id: "c", messages }),
  });
}

describe("toolrefFetch against a scripted server", () => {
  it("passes through what it does not rewrite", async () => {
    const seen: RequestInit[] = [];
    const send = toolrefFetch({ fetch: (async (_input: RequestInfo | URL, init?: RequestInit) => (seen.push(init ?? {}), new Response("ok"))) as typeof fetch });
    await send("http://x/get");
    await send("http://x/post", { method: "POST", body: "not json" });
    await send("http://x/post", { method: "POST", body: JSON.stringify({ prompt: "no messages" }) });
    expect(seen.map((init) => init.body)).toEqual([undefined, "not json", '{"prompt":"no messages"}']);
  });

  it("a protocol-1 server gets the body as written, with no refs ever", async () => {
    const fake = server(() => new Response("ok"));
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: fake.fetch, onExchange: (info) => exchanges.push(info) });
    for (let turns = 1; turns <= 3; turns++) await post(send, conversation(turns));
    expect(fake.requests.map((request) => request.text)).toEqual([1, 2, 3].map((n) => JSON.stringify({ id: "c", messages: conversation(n) })));
    expect(fake.requests[0]!.headers.get("Toolref-Protocol")).toBe("2");
    expect(fake.requests[0]!.headers.get("x-app")).toBe("1");
    expect(exchanges.every((info) => info.refsSent === 0 && info.historyRef === null && info.wireBytes === info.rawBytes)).toBe(true);
  });

  it("sends confirmed refs as markers, and resends in full on 409 missing-refs", async () => {
    let forgetful = false;
    const fake = server(({ body }) => {
      const text = JSON.stringify(body);
      if (forgetful && text.includes('"toolRef"')) {
        return problem(409, "missing-refs", { missingRefs: [...text.matchAll(/"toolRef":"(tr_[a-z2-7]+)"/g)].map((m) => m[1]) });
      }
      const messages = body["messages"] as unknown[];
      const refs: Record<string, string> = {};
      for (const [index, message] of messages.entries()) {
        const part = (message as { parts: Record<string, unknown>[] }).parts[0]!;
        if (part["output"] !== undefined) refs[`c${index}`] = refOf({ name: "read", args: part["input"], result: part["output"] });
      }
      return new Response("data: x\n\n", {
        headers: { "content-type": "text/event-stream", "Toolref-Protocol": "2", "Toolref-References": JSON.stringify(refs) },
      });
    });
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: fake.fetch, historyRefs: false, onExchange: (info) => exchanges.push(info) });
    await post(send, conversation(1));
    await post(send, conversation(2));
    expect(exchanges[1]!.refsSent).toBe(1);
    expect(fake.requests[1]!.text).toContain('"toolRef":"tr_');
    expect(fake.requests[1]!.text).not.toContain("x".repeat(2000) + "0");
    forgetful = true;
    const answer = await post(send, conversation(3));
    expect(await answer.text()).toBe("data: x\n\n"); // the app gets the answer to the resend
    expect(exchanges[2]!.resent).toBe(true);
    expect(exchanges[2]!.attempts).toBe(2);
    expect(fake.requests.at(-1)!.text).not.toContain("toolRef");
  });

  it("history refs: continues the confirmed history, falls back on edits and on 409 missing-history", async () => {
    let lose = false;
    const fake = server(({ headers, body }) => {
      if (lose && body["historyRef"] !== undefined) return problem(409, "missing-history", { missingHistory: body["historyRef"] });
      // Confirm what the client asked to keep: the test trusts the client's own head here;
      // the integration tests check it against the real registry.
      return new Response("{}", { headers: { "content-type": "application/json", "Toolref-Protocol": "2", ...confirm(headers, body) } });
    });
    let expected: string | null = null;
    const confirm = (headers: Headers, body: Record<string, unknown>): Record<string, string> => {
      void headers;
      void body;
      return expected === null ? {} : { "Toolref-History": expected };
    };
    const manager = new ToolReferenceManager({ compress: false });
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: fake.fetch, manager, onExchange: (info) => exchanges.push(info) });
    // The head the client will compute is learnt by asking the manager for the upload first.
    const headOf = async (messages: unknown[]) => (await manager.upload({ messages }, () => false, false, false)).head;
    for (let turns = 1; turns <= 3; turns++) {
      expected = await headOf(conversation(turns));
      await post(send, conversation(turns));
    }
    expect(fake.requests[0]!.headers.get("Toolref-History")).toBe("?1");
    expect(fake.requests[2]!.body["historyRef"]).toBe(exchanges[1]!.historyRef);
    expect((fake.requests[2]!.body["messages"] as unknown[]).length).toBe(2); // only the new turn
    expect(exchanges.map((info) => info.historyRef !== null)).toEqual([true, true, true]);
    // An edit of message 3 falls back to the history of its first 2 messages.
    const edited = conversation(3);
    edited[3] = { ...(edited[3] as object), id: "edited" };
    expected = await headOf(edited);
    await post(send, edited);
    expect(fake.requests.at(-1)!.body["historyRef"]).toBe(exchanges[0]!.historyRef);
    expect((fake.requests.at(-1)!.body["messages"] as unknown[]).length).toBe(4);
    // The server lost its histories: the whole conversation is resent.
    lose = true;
    expected = await headOf(conversation(4));
    await post(send, conversation(4));
    expect(exchanges.at(-1)!.resent).toBe(true);
    expect(fake.requests.at(-1)!.body["historyRef"]).toBeUndefined();
    expect((fake.requests.at(-1)!.body["messages"] as unknown[]).length).toBe(8);
  });

  it("gzips bodies once the server confirmed a history", async () => {
    let head: string | null = null;
    const fake = server(() => new Response("{}", { headers: { "Toolref-Protocol": "2", ...(head ? { "Toolref-History": head } : {}) } }));
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: fake.fetch, manager });
    head = (await manager.upload({ messages: conversation(2) }, () => false, false, false)).head;
    await post(send, conversation(2));
    expect(fake.requests[0]!.headers.get("content-encoding")).toBeNull();
    head = null;
    await post(send, conversation(3));
    expect(fake.requests[1]!.headers.get("content-encoding")).toBe("gzip");
  });

  it("a 400 dictionary-mismatch is answered by one resend without compression", async () => {
    const fake = server(({ headers }) =>
      headers.get("content-encoding") ? problem(400, "dictionary-mismatch", {}) : new Response("ok", { headers: { "Toolref-Protocol": "2" } }),
    );
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: fake.fetch, compress: true, onExchange: (info) => exchanges.push(info) });
    const answer = await post(send, conversation(2));
    expect(await answer.text()).toBe("ok");
    expect(fake.requests.map((request) => request.headers.get("content-encoding"))).toEqual(["gzip", null]);
    expect(exchanges[0]!.resent).toBe(true);
  });

  it("hands back the very Response the server sent (a stream stays a stream)", async () => {
    const sent: Response[] = [];
    const stream = () => new ReadableStream<Uint8Array>({ pull: (controller) => controller.enqueue(new Uint8Array(1)) }); // endless
    const fake = server(() => {
      const response = new Response(stream(), { headers: { "content-type": "text/event-stream", "Toolref-Protocol": "2" } });
      sent.push(response);
      return response;
    });
    const answer = await post(toolrefFetch({ fetch: fake.fetch }), conversation(1));
    expect(answer).toBe(sent[0]);
    expect(answer.bodyUsed).toBe(false);
    await answer.body!.cancel();
  });
});

describe("manager options", () => {
  it("misuse fails loudly with the fix", () => {
    expect(() => toolrefFetch({ onExchange: "log" as unknown as () => void })).toThrow(/takes a function/);
    expect(() => new ToolReferenceManager({ format: "gemini" as "ai-sdk-v5" })).toThrow(/use one of "openai-chat", "anthropic", "openai-responses", "ai-sdk-v5", "ai-sdk-v4"/);
    expect(() => new ToolReferenceManager({ maxRefs: 0 })).toThrow(UsageError);
    expect(() => new ToolReferenceManager({ messagesKey: "" })).toThrow(/messagesKey/);
  });

  it("memory stays within its bounds", async () => {
    const manager = new ToolReferenceManager({ maxConversations: 3, maxConversationBytes: 1 << 20, maxRefs: 5 });
    for (let chat = 0; chat < 10; chat++) {
      const messages = conversation(3).map((message, index) => (index === 0 ? { ...(message as object), id: `chat${chat}` } : message));
      await manager.upload({ messages }, () => false, true, false);
    }
    expect(manager.memory().conversations).toBe(3);
    manager.confirm(Array.from({ length: 20 }, (_, n) => refOf({ name: "t", args: n, result: n })));
    expect(manager.memory().refs).toBe(5);
    const small = new ToolReferenceManager({ maxConversationBytes: 10_000 });
    await small.upload({ messages: conversation(5) }, () => false, true, false);
    expect(small.memory().conversationBytes).toBeLessThanOrEqual(10_000);
  });

  it("a turn prepared from its transcript equals one prepared from scratch", async () => {
    const kept = new ToolReferenceManager();
    const fresh = () => new ToolReferenceManager({ maxConversations: 0 });
    const all = () => true;
    for (const messages of [conversation(2), conversation(4), conversation(3), [...conversation(3), { id: "x", role: "user", parts: [] }]]) {
      const a = await kept.upload({ messages }, all, true, false);
      const b = await fresh().upload({ messages }, all, true, false);
      expect(new TextDecoder().decode(a.body)).toBe(new TextDecoder().decode(b.body));
      expect(a.head).toBe(b.head);
    }
  });
});

describe("withToolRef without a registry call", () => {
  const never = (async () => {
    throw new Error("the registry must not be called");
  }) as typeof fetch;
  const echo = async (request: Request) => new Response(await request.text());

  it("misuse fails loudly with the fix", () => {
    expect(() => withToolRef(echo, { registry: "localhost:8750" })).toThrow(/base URL such as "http:\/\/127.0.0.1:8750"/);
  });

  it("protocol-1 requests reach the handler untouched", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const answer = await handle(new Request("http://app.test/", { method: "POST", body: '{"messages":[1.0]}' }));
    expect(await answer.text()).toBe('{"messages":[1.0]}');
  });

  it("refuses bodies over the limits, before any work", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never, maxBodyBytes: 1000, maxInflatedBytes: 5000 });
    const headers = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
    const big = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(2000) }] });
    const tooBig = await handle(new Request("http://app.test/", { method: "POST", headers, body: big }));
    expect(tooBig.status).toBe(413);
    expect(((await tooBig.json()) as { type: string }).type).toBe("urn:toolref:problem:body-too-large");
    const bomb = await gzip(new TextEncoder().encode(JSON.stringify({ messages: [{ role: "user", content: "x".repeat(100_000) }] })));
    expect(bomb.length).toBeLessThan(1000);
    const inflated = await handle(
      new Request("http://app.test/", { method: "POST", headers: { ...headers, "Content-Encoding": "gzip" }, body: bomb as BodyInit }),
    );
    expect(inflated.status).toBe(413);
    expect(((await inflated.json()) as { type: string }).type).toBe("urn:toolref:problem:decompressed-too-large");
  });

  it("an unreachable registry: full payloads pass as protocol 1, refs get a 409 to resend", async () => {
    const handle = withToolRef(echo, { registry: "http://registry.test", fetch: never });
    const headers = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
    const full = '{"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}';
    const passed = await handle(new Request("http://app.test/", { method: "POST", headers, body: full }));
    expect(await passed.text()).toBe(full);
    expect(passed.headers.get("Toolref-Protocol")).toBe("1");
    const ref = refOf({ name: "t", args: 1, result: 2 });
    const marked = JSON.stringify({ messages: [{ role: "assistant", parts: [{ type: "tool-t", toolCallId: "c", state: "output-available", toolRef: ref }] }] });
    const refused = await handle(new Request("http://app.test/", { method: "POST", headers, body: marked }));
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { missingRefs: string[] }).missingRefs).toEqual([ref]);
  });
});
