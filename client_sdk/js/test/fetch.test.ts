// toolrefFetch as apps write it: its state shared per endpoint (the one-liner inline in a
// component), its options checked, the LLM APIs' requests (openai, @anthropic-ai/sdk)
// recognised, and transcripts of formats whose results come in later messages; against a
// scripted server that keeps histories as the registry does (no network).
import { afterEach, describe, expect, it } from "vitest";
import {
  SHARED_ENDPOINTS,
  ToolReferenceManager,
  UsageError,
  chainForm,
  detect,
  forgetSharedState,
  heads,
  historyRef,
  sharedEndpoints,
  toolrefFetch,
  gunzip,
  type ExchangeInfo,
} from "../src/index.js";
import { readFileSync } from "node:fs";

const vectors = JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as {
  conversations: { name: string; format: string; messages: unknown[] }[];
};

type Body = Record<string, unknown>;

/** A server keeping histories as the registry does: it confirms the head of the whole
 * conversation (the history continued, then the messages sent) and continues any it holds. */
function keeper(): { fetch: typeof fetch; bodies: Body[]; urls: string[] } {
  const held = new Map<string, unknown[]>();
  const bodies: Body[] = [];
  const urls: string[] = [];
  const send = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    let bytes = new Uint8Array(await request.arrayBuffer());
    if (request.headers.get("content-encoding") === "gzip") bytes = new Uint8Array(await gunzip(bytes));
    const body = JSON.parse(new TextDecoder().decode(bytes)) as Body;
    bodies.push(body);
    urls.push(request.url);
    const key = Array.isArray(body["input"]) ? "input" : "messages";
    const continued = body["historyRef"];
    const before = typeof continued === "string" ? held.get(continued) : [];
    if (before === undefined) {
      return new Response(JSON.stringify({ type: "urn:toolref:problem:missing-history", status: 409 }), {
        status: 409,
        headers: { "content-type": "application/problem+json", "Toolref-Protocol": "2" },
      });
    }
    const all = [...before, ...(body[key] as unknown[])];
    const head = historyRef(heads(chainForm(all, detect(all)!)).at(-1)!);
    held.set(head, all);
    return new Response("data: {}\n\n", {
      headers: { "content-type": "text/event-stream", "Toolref-Protocol": "2", "Toolref-History": head },
    });
  };
  return { fetch: send as typeof fetch, bodies, urls };
}

function uiConversation(turns: number): unknown[] {
  const messages: unknown[] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ id: `u${turn}`, role: "user", parts: [{ type: "text", text: `q${turn}` }] });
    messages.push({
      id: `a${turn}`,
      role: "assistant",
      parts: [{ type: "tool-read", toolCallId: `c${turn}`, state: "output-available", input: { n: turn }, output: "x".repeat(3000) + turn }],
    });
  }
  return messages;
}

/** A model's answer in text alone, in any of the LLM APIs' formats. */
function answered(message: unknown): boolean {
  const { role, content, type, tool_calls: calls } = message as Body;
  if (role !== "assistant" || calls !== undefined) return false;
  if (typeof content === "string") return true;
  return Array.isArray(content) && content.every((block) => ["text", "output_text"].includes((block as Body)["type"] as string)) && (type === undefined || type === "message");
}

const post = (send: typeof fetch, url: string, body: Body) =>
  send(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

afterEach(() => forgetSharedState());

describe("state shared per endpoint", () => {
  it("a new toolrefFetch() every turn (the one-liner inline in a component) still continues the confirmed history", async () => {
    // Fails before the fix: each toolrefFetch() had its own manager, so every turn went
    // whole (raw = wire), as issue 32 measured with AI SDK 6.
    const server = keeper();
    const exchanges: ExchangeInfo[] = [];
    for (let turns = 1; turns <= 4; turns++) {
      const send = toolrefFetch({ fetch: server.fetch, onExchange: (info) => exchanges.push(info) }); // a render
      await post(send, "http://app.test/api/chat?render=" + turns, { id: "c", messages: uiConversation(turns) });
    }
    expect(exchanges.map((info) => info.continued !== null)).toEqual([false, true, true, true]);
    for (const info of exchanges.slice(1)) expect(info.wireBytes * 4).toBeLessThan(info.rawBytes);
    expect((server.bodies[3]!["messages"] as unknown[]).length).toBe(2); // only the new turn
    expect(sharedEndpoints()).toBe(1);
  });

  it("endpoints and options have their own state, within SHARED_ENDPOINTS", async () => {
    const server = keeper();
    await post(toolrefFetch({ fetch: server.fetch }), "http://app.test/api/chat", { messages: uiConversation(1) });
    await post(toolrefFetch({ fetch: server.fetch }), "http://other.test/api/chat", { messages: uiConversation(1) });
    await post(toolrefFetch({ fetch: server.fetch, compress: false }), "http://app.test/api/chat", { messages: uiConversation(1) });
    expect(sharedEndpoints()).toBe(3);
    // Another origin never continues this one's history.
    const exchanges: ExchangeInfo[] = [];
    await post(toolrefFetch({ fetch: server.fetch, onExchange: (info) => exchanges.push(info) }), "http://third.test/api/chat", {
      messages: uiConversation(2),
    });
    expect(exchanges[0]!.continued).toBeNull();
    for (let index = 0; index < SHARED_ENDPOINTS + 5; index++) {
      await post(toolrefFetch({ fetch: server.fetch }), `http://app.test/api/chat${index}`, { messages: uiConversation(1) });
    }
    expect(sharedEndpoints()).toBe(SHARED_ENDPOINTS);
  });

  it("an explicit manager is used alone", async () => {
    const server = keeper();
    const manager = new ToolReferenceManager();
    await post(toolrefFetch({ fetch: server.fetch, manager }), "http://app.test/api/chat", { messages: uiConversation(1) });
    expect(manager.confirmedHistories().length).toBe(1);
    expect(sharedEndpoints()).toBe(0);
  });
});

describe("options", () => {
  it("an unknown option fails naming the nearest known one", () => {
    // Fails before the fix: `historyRef: true` was accepted and did nothing.
    expect(() => toolrefFetch({ historyRef: true } as never)).toThrow(/historyRef.*did you mean historyRefs\?/);
    expect(() => toolrefFetch({ onExchnage: () => undefined } as never)).toThrow(/did you mean onExchange\?/);
    expect(() => new ToolReferenceManager({ maxRef: 5 } as never)).toThrow(/did you mean maxRefs\?/);
    expect(() => toolrefFetch({ zzz: 1 } as never)).toThrow(/zzz.*is not an option.*Known options: format, messagesKey/);
  });

  it("a value of the wrong type fails naming the option, the value and the fix", () => {
    expect(() => toolrefFetch({ historyRefs: "yes" } as never)).toThrow(/historyRefs.*takes true or false, not the string "yes"/);
    expect(() => toolrefFetch({ compress: 1 } as never)).toThrow(/compress.*true, false or null, not number 1/);
    expect(() => toolrefFetch({ maxRefs: 1.5 })).toThrow(/maxRefs.*whole number/);
    expect(() => toolrefFetch({ maxHistories: 0 })).toThrow(/maxHistories is 0/);
    expect(() => toolrefFetch({ format: "ai-sdk-v6" as never })).toThrow(/format "ai-sdk-v6" is not one the JS SDK reads/);
    expect(() => toolrefFetch("fast" as never)).toThrow(UsageError);
    expect(() => toolrefFetch({ manager: {} as never })).toThrow(/takes a ToolReferenceManager/);
  });
});

describe("the LLM APIs' requests (the openai and @anthropic-ai/sdk clients' fetch)", () => {
  const cases = vectors.conversations.filter((item) => ["openai-chat", "anthropic", "openai-responses"].includes(item.format));
  const paths: Record<string, [string, string]> = {
    "openai-chat": ["/llm/openai/v1/chat/completions", "messages"],
    anthropic: ["/llm/anthropic/v1/messages", "messages"],
    "openai-responses": ["/llm/openai/v1/responses", "input"],
  };

  for (const item of cases) {
    it(`${item.name}: each turn sends only what follows the confirmed history`, async () => {
      const [path, key] = paths[item.format]!;
      const server = keeper();
      const send = toolrefFetch({ fetch: server.fetch });
      // Requests end where the model answered in text: every call before has its result (a
      // call answered later changes its message's chain form, and the history before it is
      // then the one that fits: docs/history.md).
      const ends = item.messages.flatMap((message, index) => (answered(message) ? [index + 1] : []));
      const cuts = [ends[Math.floor(ends.length / 3)]!, ends[Math.floor((2 * ends.length) / 3)]!, item.messages.length];
      const exchanges: ExchangeInfo[] = [];
      const watched = toolrefFetch({ fetch: server.fetch, onExchange: (info) => exchanges.push(info) });
      for (const [turn, length] of cuts.entries()) {
        await post(turn === 0 ? send : watched, "http://gateway.test" + path, { model: "m", stream: true, [key]: item.messages.slice(0, length) });
      }
      expect(server.bodies[0]![key]).toEqual(item.messages.slice(0, cuts[0]));
      for (const [index, info] of exchanges.entries()) {
        expect(info.continued).not.toBeNull();
        expect((server.bodies[index + 1]![key] as unknown[]).length).toBeLessThan(cuts[index + 1]!);
        expect(info.wireBytes).toBeLessThan(info.rawBytes);
      }
    });
  }

  it("an AI SDK app whose route ends in /messages keeps its own format", async () => {
    const server = keeper();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: server.fetch, onExchange: (info) => exchanges.push(info) });
    await post(send, "http://app.test/api/messages", { messages: uiConversation(1) });
    await post(send, "http://app.test/api/messages", { messages: uiConversation(2) });
    expect(exchanges[1]!.continued).not.toBeNull();
  });

  it("a request already speaking toolref passes through as it is", async () => {
    const server = keeper();
    const send = toolrefFetch({ fetch: server.fetch });
    const body = { model: "m", messages: [{ role: "user", content: "hi" }] };
    await send("http://gateway.test/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json", "Toolref-Protocol": "1" },
      body: JSON.stringify(body),
    });
    expect(server.bodies[0]).toEqual(body);
    expect(sharedEndpoints()).toBe(0);
  });

  for (const item of cases) {
    it(`${item.name}: a turn prepared from its transcript equals one prepared from scratch`, async () => {
      const key = paths[item.format]![1];
      const kept = new ToolReferenceManager({ messagesKey: key, format: item.format as never });
      const all = () => true;
      const lengths = [3, 7, 12, 9, item.messages.length, item.messages.length - 1, item.messages.length];
      for (const length of lengths) {
        const body = { [key]: item.messages.slice(0, length) };
        const a = await kept.upload(body, all, true, false);
        const fresh = new ToolReferenceManager({ messagesKey: key, format: item.format as never, maxConversations: 0 });
        const b = await fresh.upload(body, all, true, false);
        expect(new TextDecoder().decode(a.body)).toBe(new TextDecoder().decode(b.body));
        expect(a.head).toBe(b.head);
        expect(a.head).toBe(historyRef(heads(chainForm(body[key]!, detect(body[key]!)!)).at(-1)!));
      }
    });
  }
});
