// The manager and toolrefFetch against the REAL Python service: a registry and a chat
// backend behind ToolRefMiddleware (tests/js_backend.py), started here from the repo's .venv.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolrefFetch, withToolRef, type ExchangeInfo } from "../src/index.js";
import { backend, missingPython, registry, type Service } from "./services.js";

const missing = missingPython();
if (missing !== null && process.env["CI"] === "true") {
  throw new Error(`integration tests need the Python service under CI=true: ${missing}`);
}
if (missing !== null) console.warn(`SKIPPING the integration tests: ${missing}`);

type Message = { id: string; role: string; parts: Record<string, unknown>[] };

/** One useChat turn as DefaultChatTransport sends it; the assistant message read from the stream. */
async function turn(
  send: typeof fetch,
  url: string,
  messages: Message[],
): Promise<{ reply: Message; response: Response }> {
  const response = await send(url + "/api/chat", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ id: "chat-1", messages, trigger: "submit-message", messageId: undefined }),
  });
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toContain("text/event-stream");
  expect(response.bodyUsed).toBe(false); // handed back unread: a stream
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  const events = text
    .split("\n\n")
    .filter((block) => block.startsWith("data: ") && block !== "data: [DONE]")
    .map((block) => JSON.parse(block.slice(6)) as { type: string; message?: Message });
  const reply = events.find((event) => event.type === "message")?.message;
  expect(reply).toBeDefined();
  return { reply: reply!, response };
}

function user(index: number): Message {
  return { id: `u${index}`, role: "user", parts: [{ type: "text", text: `read module ${index} é😀` }] };
}

async function seen(service: Service): Promise<string[]> {
  return ((await (await fetch(service.url + "/seen")).json()) as { seen: string[] }).seen;
}

describe.skipIf(missing !== null)("against the Python service", () => {
  let reg: Awaited<ReturnType<typeof registry>>;
  let chat: Service;
  let plain: Service;

  beforeAll(async () => {
    reg = await registry();
    [chat, plain] = await Promise.all([backend(reg.service.url), backend(reg.service.url, true)]);
  });

  afterAll(async () => {
    await Promise.all([chat?.stop(), plain?.stop()]);
    await reg?.cleanup();
  });

  it("a 12-turn useChat conversation: the app gets exactly the client's messages, the wire carries only the new ones", async () => {
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ onExchange: (info) => exchanges.push(info) });
    const messages: Message[] = [];
    const sent: string[] = [];
    for (let index = 0; index < 12; index++) {
      messages.push(user(index));
      sent.push(JSON.stringify(messages));
      const { reply } = await turn(send, chat.url, messages);
      messages.push(reply);
    }
    if (process.env["TOOLREF_JS_VERBOSE"]) console.log(exchanges);
    expect(await seen(chat)).toEqual(sent); // byte for byte: key order, number forms (1.0 -> 1), unicode
    expect(exchanges).toHaveLength(12);
    expect(exchanges.every((info) => !info.resent)).toBe(true);
    expect(exchanges.every((info) => info.historyRef !== null)).toBe(true);
    // From the second turn on, only the messages after the confirmed history travel.
    expect(exchanges.slice(1).every((info) => info.continued !== null)).toBe(true);
    const last = exchanges.at(-1)!;
    expect(last.rawBytes / last.wireBytes).toBeGreaterThan(20);
    const raw = exchanges.reduce((sum, info) => sum + info.rawBytes, 0);
    const wire = exchanges.reduce((sum, info) => sum + info.wireBytes, 0);
    expect(raw / wire).toBeGreaterThan(5);
  });

  it("regenerate and edit: a conversation cut back or changed continues the longest history still valid", async () => {
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ onExchange: (info) => exchanges.push(info) });
    const messages: Message[] = [];
    for (let index = 0; index < 4; index++) {
      messages.push(user(index));
      messages.push((await turn(send, chat.url, messages)).reply);
    }
    const before = (await seen(chat)).length;
    // Regenerate: the last answer dropped, the same question sent again (nothing new at all).
    messages.pop();
    await turn(send, chat.url, messages);
    // Edit the second question: only the history of the first question still fits.
    const edited = [...messages.slice(0, 2), { ...user(1), parts: [{ type: "text", text: "read module 9 instead" }] }];
    await turn(send, chat.url, edited);
    expect((await seen(chat)).slice(before)).toEqual([JSON.stringify(messages), JSON.stringify(edited)]);
    const [regenerate, edit] = exchanges.slice(-2);
    expect(regenerate!.continued).toBe(exchanges[3]!.historyRef);
    expect(edit!.continued).toBe(exchanges[0]!.historyRef); // the history of [u0]: the only one still valid
    expect(exchanges.every((info) => !info.resent && info.historyRef !== null)).toBe(true);
  });

  it("a backend without toolref gets full payloads and works unchanged", async () => {
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ onExchange: (info) => exchanges.push(info) });
    const messages: Message[] = [];
    const sent: string[] = [];
    for (let index = 0; index < 4; index++) {
      messages.push(user(index));
      sent.push(JSON.stringify(messages));
      messages.push((await turn(send, plain.url, messages)).reply);
    }
    expect(await seen(plain)).toEqual(sent);
    for (const info of exchanges) {
      expect(info.wireBytes).toBe(info.rawBytes); // the very body the app wrote
      expect(info.historyRef).toBeNull();
      expect(info.refsSent).toBe(0);
    }
  });

  it("a registry restart mid-conversation (histories and refs lost) is recovered by resending, unnoticed by the app", async () => {
    const fresh = await registry(undefined, true);
    const app = await backend(fresh.service.url);
    try {
      const exchanges: ExchangeInfo[] = [];
      const send = toolrefFetch({ onExchange: (info) => exchanges.push(info) });
      const messages: Message[] = [];
      const sent: string[] = [];
      const port = Number(new URL(fresh.service.url).port);
      let restarted: Awaited<ReturnType<typeof registry>> | null = null;
      try {
        for (let index = 0; index < 6; index++) {
          if (index === 3) {
            await fresh.cleanup(); // the registry goes, with all it held...
            restarted = await registry(port, true); // ...and comes back empty on the same port
          }
          messages.push(user(index));
          sent.push(JSON.stringify(messages));
          messages.push((await turn(send, app.url, messages)).reply);
        }
      } finally {
        await restarted?.cleanup();
      }
      expect(await seen(app)).toEqual(sent);
      expect(exchanges[3]!.resent).toBe(true);
      expect(exchanges[3]!.historyRef).not.toBeNull();
      expect(exchanges.slice(4).every((info) => !info.resent && info.continued !== null)).toBe(true);
    } finally {
      await app.stop();
      await fresh.cleanup();
    }
  });
});

/** A JS chat handler as a Next.js route would be: records what it got, streams its answer. */
function jsChat(): { handle: (request: Request) => Promise<Response>; seen: string[] } {
  const seen: string[] = [];
  const handle = async (request: Request): Promise<Response> => {
    const text = await request.text();
    seen.push(text);
    const { messages } = JSON.parse(text) as { messages: Message[] };
    const turn = messages.filter((message) => message.role === "user").length;
    const output = Array.from({ length: 60 }, (_, n) => `${turn}:${n} def handler_${n}(request): pass  # é😀`).join("\n");
    const message: Message = {
      id: `a${turn}`,
      role: "assistant",
      parts: [
        { type: "tool-read_file", toolCallId: `call_${turn}`, state: "output-available", input: { path: `m${turn}.py` }, output },
        { type: "text", text: `Read m${turn}.py`, state: "done" },
      ],
    };
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        const encoder = new TextEncoder();
        controller.enqueue(encoder.encode('data: {"type":"start"}\n\n'));
        controller.enqueue(encoder.encode(`data: ${JSON.stringify({ type: "message", message })}\n\n`));
        controller.enqueue(encoder.encode("data: [DONE]\n\n"));
        controller.close();
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream" } });
  };
  return { handle, seen };
}

describe.skipIf(missing !== null)("withToolRef (a JS backend) against the Python registry", () => {
  let reg: Awaited<ReturnType<typeof registry>>;

  beforeAll(async () => {
    reg = await registry();
  });

  afterAll(async () => {
    await reg?.cleanup();
  });

  it("toolrefFetch -> withToolRef -> handler: the handler gets the client's exact body, the wire only new messages", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({
      fetch: async (input, init) => handle(new Request(input as string, init)),
      onExchange: (info) => exchanges.push(info),
    });
    const messages: Message[] = [];
    const bodies: string[] = [];
    for (let index = 0; index < 8; index++) {
      messages.push(user(index));
      bodies.push(JSON.stringify({ id: "chat-1", messages, trigger: "submit-message", messageId: undefined }));
      messages.push((await turn(send, "http://backend.test", messages)).reply);
    }
    // The handler got the very body the app wrote (turn() writes it so), not the wire's.
    expect(chat.seen).toEqual(bodies);
    expect(exchanges.slice(1).every((info) => info.continued !== null && info.historyRef !== null)).toBe(true);
    const last = exchanges.at(-1)!;
    expect(last.rawBytes / last.wireBytes).toBeGreaterThan(10);
  });

  it("ai-sdk-v4 (toolInvocations): the registry confirms the heads the client computes", async () => {
    const seenBodies: string[] = [];
    const handle = withToolRef(
      async (request) => (seenBodies.push(await request.text()), new Response("{}", { headers: { "content-type": "application/json" } })),
      { registry: reg.service.url },
    );
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: async (input, init) => handle(new Request(input as string, init)), onExchange: (info) => exchanges.push(info) });
    const messages: unknown[] = [];
    const bodies: string[] = [];
    for (let index = 0; index < 6; index++) {
      messages.push({ id: `u${index}`, role: "user", content: `list dir ${index}` });
      bodies.push(JSON.stringify({ messages }));
      const answer = await send("http://backend.test/api/chat", { method: "POST", body: JSON.stringify({ messages }) });
      expect(answer.status).toBe(200);
      messages.push({
        id: `a${index}`,
        role: "assistant",
        content: "",
        toolInvocations: [
          { state: "result", toolCallId: `call_${index}`, toolName: "list_dir", args: { path: `d${index}`, depth: 1.5 }, result: "f.py\n".repeat(300) + index },
          { state: "call", toolCallId: `pending_${index}`, toolName: "list_dir", args: { path: "later" } },
        ],
      });
    }
    expect(seenBodies).toEqual(bodies);
    expect(exchanges.every((info) => info.historyRef !== null && !info.resent)).toBe(true);
    expect(exchanges.slice(1).every((info) => info.continued !== null)).toBe(true);
  });

  it("keeps a non-JS client's number forms and member order byte for byte", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const text =
      '{"z":1.0,"messages":[{"id":"u0","role":"user","parts":[{"type":"text","text":"x"}]},' +
      '{"id":"a0","role":"assistant","parts":[{"type":"tool-t","toolCallId":"c1","state":"output-available",' +
      '"output":{"b":-0.0,"a":1e-7},"input":{"n":1.50}}]},{"id":"u1","role":"user","parts":[{"type":"text","text":"y"}]}],"trigger":"submit-message"}';
    const first = await handle(
      new Request("http://backend.test/api/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Toolref-Protocol": "2" },
        body: text,
      }),
    );
    expect(first.status).toBe(200);
    expect(chat.seen[0]).toBe(text);
    const references = JSON.parse(first.headers.get("Toolref-References") ?? "{}") as Record<string, string>;
    expect(Object.keys(references)).toEqual(["c1"]);
    // The same conversation with that invocation as a ref: the handler gets the same bytes.
    const marked = text.replace('"output":{"b":-0.0,"a":1e-7},"input":{"n":1.50}', `"toolRef":"${references["c1"]}","toolRefOrder":["type","toolCallId","state","output","input"]`);
    const second = await handle(
      new Request("http://backend.test/api/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Toolref-Protocol": "2" },
        body: marked,
      }),
    );
    expect(second.status).toBe(200);
    expect(chat.seen[1]).toBe(text);
  });

  it("a call id above U+00FF (call_€) is confirmed in an ASCII header, and sent as a ref on the next turn", async () => {
    // Issue 28: `Toolref-References` was written as JSON.stringify wrote it, and fetch refuses
    // header characters above U+00FF, so every turn of such a conversation threw.
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({
      historyRefs: false, // refs confirmed one by one, in the header
      fetch: async (input, init) => handle(new Request(input as string, init)),
      onExchange: (info) => exchanges.push(info),
    });
    const tool = { type: "tool-read_file", toolCallId: "call_€😀", state: "output-available", input: { path: "a.py" }, output: "x = 1\n".repeat(400) };
    const messages: Message[] = [user(0), { id: "a0", role: "assistant", parts: [tool] }, user(1)];
    const first = await send("http://backend.test/api/chat", { method: "POST", body: JSON.stringify({ messages }) });
    expect(first.status).toBe(200);
    const header = first.headers.get("Toolref-References")!;
    expect(header).toMatch(/^[\x20-\x7e]+$/);
    expect(Object.keys(JSON.parse(header) as object)).toEqual(["call_€😀"]);
    await first.text();
    messages.push({ id: "a1", role: "assistant", parts: [{ type: "text", text: "ok" }] }, user(2));
    const second = await send("http://backend.test/api/chat", { method: "POST", body: JSON.stringify({ messages }) });
    expect(second.status).toBe(200);
    await second.text();
    expect(exchanges.map((info) => info.refsSent)).toEqual([0, 1]);
    expect(chat.seen[1]).toBe(JSON.stringify({ messages })); // the handler got it in full
  });

  it("a ref the registry does not hold is a 409 the client resends on", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const body = JSON.stringify({
      messages: [
        { id: "a", role: "assistant", parts: [{ type: "tool-t", toolCallId: "c9", state: "output-available", toolRef: "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa" }] },
      ],
    });
    const answer = await handle(
      new Request("http://backend.test/api/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Toolref-Protocol": "2" },
        body,
      }),
    );
    expect(answer.status).toBe(409);
    expect(answer.headers.get("content-type")).toContain("application/problem+json");
    expect(((await answer.json()) as { missingRefs: string[] }).missingRefs).toEqual(["tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"]);
    expect(chat.seen).toHaveLength(0);
  });
});
