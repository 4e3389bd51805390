// toolrefFetch against the REAL Python service, started here from the repo's .venv: a chat
// backend behind ToolRefMiddleware (tests/js_backend.py), and withToolRef (a JS backend)
// applying edits through the real registry's POST /v1/edits:apply: the handler gets the
// client's exact bytes and headers, the wire carries edits from the second request, a
// registry emptied or gone mid-conversation is recovered without the app noticing, the
// handler's stream reaches the client as it is written, protocol-2 markers still hydrate.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, VERSION, toolrefFetch, withToolRef, type ExchangeInfo } from "../src/index.js";
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
  headers: Record<string, string> = {},
): Promise<{ reply: Message; response: Response }> {
  const response = await send(url + "/api/chat", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
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

/** Whether the Python middleware answers the offer (ToolRefMiddleware speaks edits from issue 38). */
async function speaksEdits(service: Service): Promise<boolean> {
  const answer = await fetch(service.url + "/api/chat", {
    method: "POST",
    headers: { "content-type": "application/json", "Toolref-Edits": "2" },
    body: JSON.stringify({ id: "probe", messages: [user(0)], trigger: "submit-message" }),
  });
  await answer.text();
  return Number(answer.headers.get("Toolref-Edits") ?? "0") >= 2; // 3 since issue 39: the JS SDK writes 2
}

describe.skipIf(missing !== null)("against the Python service (a backend behind ToolRefMiddleware)", () => {
  let reg: Awaited<ReturnType<typeof registry>>;
  let chat: Service;
  let plain: Service;
  let edits = false;

  beforeAll(async () => {
    reg = await registry();
    [chat, plain] = await Promise.all([backend(reg.service.url), backend(reg.service.url, true)]);
    edits = await speaksEdits(chat);
    if (!edits) console.warn("ToolRefMiddleware does not answer Toolref-Edits here: its requests are checked as sent as they are");
  });

  afterAll(async () => {
    await Promise.all([chat?.stop(), plain?.stop()]);
    await reg?.cleanup();
  });

  it("a 12-turn useChat conversation: the app gets exactly the client's messages, edits from the second turn", async () => {
    const before = (await seen(chat)).length;
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
    expect((await seen(chat)).slice(before)).toEqual(sent); // byte for byte: key order, number forms (1.0 -> 1), unicode
    expect(exchanges.every((info) => !info.resent)).toBe(true);
    if (!edits) return void expect(exchanges.every((info) => !info.edit && info.wireBytes === info.rawBytes)).toBe(true);
    expect(exchanges.map((info) => info.edit)).toEqual([false, ...Array<boolean>(11).fill(true)]);
    expect(exchanges.slice(2).every((info, index) => info.continued === exchanges[index + 1]!.historyRef)).toBe(true);
    const last = exchanges.at(-1)!;
    expect(last.rawBytes / last.wireBytes).toBeGreaterThan(20);
  });

  it("a backend without toolref gets the app's very bytes, and works unchanged", async () => {
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
    for (const info of exchanges) expect(info).toMatchObject({ edit: false, wireBytes: info.rawBytes, historyRef: null, continued: null });
  });

  it("a registry restarted empty mid-conversation is recovered by resending, unnoticed by the app", async () => {
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
      if (!edits) return;
      expect(exchanges[3]!.resent).toBe(true);
      expect(exchanges.slice(4).every((info) => !info.resent && info.continued !== null)).toBe(true);
    } finally {
      await app.stop();
      await fresh.cleanup();
    }
  });
});

/** A JS chat handler as a Next.js route would be: records what it got (body and headers),
 * streams its answer, `gapMs` between its events, noting when it wrote the last. */
function jsChat(gapMs = 0): { handle: (request: Request) => Promise<Response>; seen: string[]; headers: Headers[]; lastWritten: number } {
  const state = {
    seen: [] as string[],
    headers: [] as Headers[],
    lastWritten: 0,
    handle: async (request: Request): Promise<Response> => {
      const text = await request.text();
      state.seen.push(text);
      state.headers.push(request.headers);
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
      const encoder = new TextEncoder();
      const events = ['data: {"type":"start"}\n\n', `data: ${JSON.stringify({ type: "message", message })}\n\n`, "data: [DONE]\n\n"];
      const stream = new ReadableStream<Uint8Array>({
        async start(controller) {
          for (const [index, event] of events.entries()) {
            if (index > 0 && gapMs > 0) await new Promise((done) => setTimeout(done, gapMs));
            if (index === events.length - 1) state.lastWritten = performance.now();
            controller.enqueue(encoder.encode(event));
          }
          controller.close();
        },
      });
      return new Response(stream, { headers: { "content-type": "text/event-stream" } });
    },
  };
  return state;
}

const PROTOCOL_2 = { "Content-Type": "application/json", "Toolref-Protocol": "2" };

describe.skipIf(missing !== null)("withToolRef (a JS backend) against the Python registry", () => {
  let reg: Awaited<ReturnType<typeof registry>>;

  beforeAll(async () => {
    reg = await registry(undefined, true);
  });

  afterAll(async () => {
    await reg?.cleanup();
  });

  /** toolrefFetch to `handle` as a browser would reach it: the page's own headers, the ones
   * the browser adds (`cookie`, `origin`) beside. */
  function client(handle: (request: Request) => Promise<Response>, exchanges: ExchangeInfo[]): typeof fetch {
    return toolrefFetch({
      fetch: async (input, init) => {
        const headers = new Headers(init?.headers);
        headers.set("cookie", "session=s3cr3t");
        headers.set("origin", "http://backend.test");
        return handle(new Request(input as string, { ...init, headers }));
      },
      onExchange: (info) => exchanges.push(info),
    });
  }

  it("toolrefFetch -> withToolRef -> handler: exact bytes and headers, edits from the second request, marked answers", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const exchanges: ExchangeInfo[] = [];
    const answers: Response[] = [];
    const send = client(async (request) => {
      const answer = await handle(request);
      answers.push(answer);
      return answer;
    }, exchanges);
    const messages: Message[] = [];
    const bodies: string[] = [];
    for (let index = 0; index < 8; index++) {
      messages.push(user(index));
      bodies.push(JSON.stringify({ id: "chat-1", messages, trigger: "submit-message", messageId: undefined }));
      messages.push((await turn(send, "http://backend.test", messages, { authorization: "Bearer app-token", "x-trace": "t1" })).reply);
    }
    // The handler got the very body the app wrote (turn() writes it so), not the wire's.
    expect(chat.seen).toEqual(bodies);
    // The app's headers as it wrote them (the credential filled in), the browser's beside,
    // the body's own length; nothing of toolref's.
    for (const headers of chat.headers) {
      expect(Object.fromEntries(headers)).toMatchObject({
        authorization: "Bearer app-token",
        "content-type": "application/json",
        "x-trace": "t1",
        cookie: "session=s3cr3t",
        origin: "http://backend.test",
      });
      expect([...headers.keys()].filter((name) => name.startsWith("toolref-"))).toEqual([]);
    }
    expect(chat.headers.slice(1).map((headers) => headers.get("content-length"))).toEqual(bodies.slice(1).map((body) => String(Buffer.byteLength(body))));
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true, true, true, true, true, true]);
    expect(exchanges.every((info) => !info.resent && info.status === 200)).toBe(true);
    for (const [index, info] of exchanges.entries()) if (index > 1) expect(info.continued).toBe(exchanges[index - 1]!.historyRef);
    expect(answers[0]!.headers.get("Toolref-Edits")).toBe(String(VERSION)); // the offer answered
    for (const [index, answer] of answers.entries()) {
      if (index === 0) continue;
      expect(answer.headers.get("Toolref-History")).toBe(exchanges[index]!.historyRef);
      expect(answer.headers.get("Toolref-Savings")).toMatch(new RegExp(`^raw=${exchanges[index]!.rawBytes}, wire=${exchanges[index]!.wireBytes}, ratio=[0-9.]+$`));
    }
    const last = exchanges.at(-1)!;
    expect(last.rawBytes / last.wireBytes).toBeGreaterThan(10);
  });

  it("a handler that throws on a restored edit runs once: answered 500, marked as this backend's, not sent again", async () => {
    let runs = 0;
    const handle = withToolRef(async (request: Request) => {
      runs += 1;
      await request.text();
      if (runs > 1) throw new Error("the model call failed");
      return new Response('{"reply":"ok"}', { headers: { "content-type": "application/json" } });
    }, { registry: reg.service.url });
    // as a framework serves it: a thrown error becomes its own (unmarked) 500
    const framework = async (request: Request): Promise<Response> => {
      try {
        return await handle(request);
      } catch {
        return new Response("Internal Server Error", { status: 500 });
      }
    };
    const exchanges: ExchangeInfo[] = [];
    const send = client(framework, exchanges);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const post = (messages: Message[]): Promise<Response> =>
        send("http://backend.test/api/chat", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ id: "chat-throws", messages }),
        });
      const first = await post([user(0)]);
      expect(first.status).toBe(200);
      expect(first.headers.get("Toolref-Edits")).toBe(String(VERSION));
      const failed = await post([user(0), user(1)]);
      expect(exchanges.map((info) => info.edit)).toEqual([false, true]);
      expect(failed.status).toBe(500);
      expect(failed.headers.get("Toolref-History")).toMatch(/^tb_/);
      expect(((await failed.json()) as { detail: string }).detail).toMatch(/it was not sent again/);
      expect(runs).toBe(2); // once per turn: the failed one was not sent again as it is
      expect(logged).toHaveBeenCalledTimes(1);
    } finally {
      logged.mockRestore();
    }
  });

  it("a streamed LLM answer to an edit is kept by the registry once its last piece reached the client, before its stream closes", async () => {
    const events = [
      { type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", content: [], model: "m" } },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Reading the file é😀 now." } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "read", input: {} } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"path":"src/' } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: 'a.py"}' } },
      { type: "content_block_stop", index: 1 },
      { type: "message_stop" },
    ];
    const frames = events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
    const handler = (): Response =>
      new Response(
        new ReadableStream<Uint8Array>({
          start(controller) {
            for (const frame of frames) controller.enqueue(new TextEncoder().encode(frame));
            controller.close();
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    const order: string[] = [];
    const kept: { url: string; status: number; body: string }[] = [];
    const registryFetch: typeof fetch = async (input, init) => {
      const answer = await fetch(input, init);
      if (init?.method === "PUT") {
        kept.push({ url: String(input), status: answer.status, body: new TextDecoder().decode(init.body as Uint8Array) });
        order.push("kept");
      }
      return answer;
    };
    const handle = withToolRef(handler, { registry: reg.service.url, fetch: registryFetch });
    const exchanges: ExchangeInfo[] = [];
    const send = client(handle, exchanges);
    const body = (turns: number) =>
      JSON.stringify({ model: "m", max_tokens: 64, stream: true, messages: Array.from({ length: turns }, (_, n) => ({ role: "user", content: `turn ${n} ` + "x".repeat(400) })) });
    for (let turns = 1; turns <= 3; turns++) {
      const response = await send("http://backend.test/v1/messages", { method: "POST", headers: { "content-type": "application/json", "x-api-key": "sk-u" }, body: body(turns) });
      const reader = response.body!.getReader();
      let text = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
        if (text.includes("message_stop")) order.push("end");
      }
      expect(text).toBe(frames.join(""));
    }
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true]);
    // Turns 2 and 3 were edits: each answer kept under the recipe the edit made, after the
    // client read its end event and before its stream closed (so before the next turn).
    expect(kept.map((item) => item.url)).toEqual(exchanges.slice(1).map((info) => `${reg.service.url}/v1/answers/${info.historyRef}`));
    expect(kept.every((item) => item.status === 204)).toBe(true);
    expect(kept[0]!.body).toBe(
      '{"role":"assistant","content":[{"type":"text","text":"Reading the file é😀 now."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"src/a.py"}}]}\n{"path":"src/a.py"}',
    );
    expect(order).toEqual(["end", "end", "kept", "end", "kept"]);
  });

  it("a Gemini conversation (streamGenerateContent): sent as edits, and each streamed answer kept for the next edit", async () => {
    // Before, no JS endpoint was Gemini's: toolrefFetch sent these as they are, and
    // withToolRef, answering `Toolref-Edits: 6` (Gemini answers kept), kept none, so a Python
    // sender's edit naming the answer was refused (dictionary-mismatch) and resent every turn.
    const parts = (turn: number) => [{ text: `Reading part ${turn} é😀` }, { functionCall: { name: "read", args: { path: `src/${turn}.py` } } }];
    const frames = (turn: number) => {
      const [text, call] = parts(turn);
      const chunk = (content: unknown[], finish?: string) =>
        `data: ${JSON.stringify({ candidates: [{ content: { role: "model", parts: content }, ...(finish ? { finishReason: finish } : {}) }] })}\r\n\r\n`;
      return [chunk([text]), chunk([call], "STOP")];
    };
    const seen: string[] = [];
    const paths: string[] = [];
    let turn = 0;
    const handler = async (request: Request): Promise<Response> => {
      seen.push(await request.text());
      paths.push(new URL(request.url).pathname + new URL(request.url).search);
      const sent = frames(turn++);
      return new Response(
        new ReadableStream<Uint8Array>({
          start(controller) {
            for (const frame of sent) controller.enqueue(new TextEncoder().encode(frame));
            controller.close();
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    };
    const kept: { url: string; status: number; body: string }[] = [];
    const registryFetch: typeof fetch = async (input, init) => {
      const answer = await fetch(input, init);
      if (init?.method === "PUT") kept.push({ url: String(input), status: answer.status, body: new TextDecoder().decode(init.body as Uint8Array) });
      return answer;
    };
    const exchanges: ExchangeInfo[] = [];
    const send = client(withToolRef(handler, { registry: reg.service.url, fetch: registryFetch }), exchanges);
    const url = "http://backend.test/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse";
    const contents: unknown[] = [{ role: "user", parts: [{ text: "Build it. " + "x".repeat(400) }] }];
    const bodies: string[] = [];
    for (let n = 0; n < 3; n++) {
      bodies.push(JSON.stringify({ contents, generationConfig: { temperature: 0 } }));
      const response = await send(url, { method: "POST", headers: { "content-type": "application/json", "x-goog-api-key": "AIza-k" }, body: bodies.at(-1)! });
      expect(await response.text()).toBe(frames(n).join(""));
      contents.push({ role: "model", parts: parts(n) }, { role: "user", parts: [{ functionResponse: { name: "read", response: { content: "ok ".repeat(200) } } }] });
    }
    expect(seen).toEqual(bodies); // the handler got the client's very bytes
    expect(paths.every((path) => path === "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse")).toBe(true);
    expect(exchanges.map((info) => info.edit)).toEqual([false, true, true]);
    expect(exchanges.every((info) => !info.resent)).toBe(true); // on a Node with zstd, each edit names the answer
    // Turns 2 and 3 were edits: each answer kept under the recipe the edit made, the bytes
    // Python's tap makes of it (the model's content as Gemini CLI writes it back).
    expect(kept.map((item) => item.url)).toEqual(exchanges.slice(1).map((info) => `${reg.service.url}/v1/answers/${info.historyRef}`));
    expect(kept.every((item) => item.status === 204)).toBe(true);
    expect(kept.map((item) => item.body)).toEqual([1, 2].map((n) => JSON.stringify({ role: "model", parts: parts(n) })));
  });

  it("the handler's stream reaches the client as the handler writes it", async () => {
    const chat = jsChat(150);
    const exchanges: ExchangeInfo[] = [];
    const send = client(withToolRef(chat.handle, { registry: reg.service.url }), exchanges);
    const messages: Message[] = [user(0)];
    messages.push((await turn(send, "http://backend.test", messages)).reply, user(1));
    const response = await send("http://backend.test/api/chat", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ id: "c", messages }) });
    expect(exchanges.at(-1)!.edit).toBe(true);
    const reader = response.body!.getReader();
    const first = (await reader.read(), performance.now());
    while (!(await reader.read()).done);
    expect(first).toBeLessThan(chat.lastWritten - 200); // two gaps before the last event was written
  });

  it("a registry gone, then back empty: the turn without it goes as it is (415), the next is resent whole (409)", async () => {
    const own = await registry(undefined, true);
    const port = Number(new URL(own.service.url).port);
    let back: Awaited<ReturnType<typeof registry>> | null = null;
    try {
      const chat = jsChat();
      const exchanges: ExchangeInfo[] = [];
      const send = client(withToolRef(chat.handle, { registry: own.service.url, timeoutMs: 2000 }), exchanges);
      const messages: Message[] = [];
      const bodies: string[] = [];
      for (let index = 0; index < 6; index++) {
        if (index === 3) await own.cleanup(); // gone...
        if (index === 4) back = await registry(port, true); // ...and back, empty
        if (index === 4) await new Promise((resolve) => setTimeout(resolve, 1100)); // the client's pause after its 415 is over
        messages.push(user(index));
        bodies.push(JSON.stringify({ id: "chat-1", messages, trigger: "submit-message", messageId: undefined }));
        messages.push((await turn(send, "http://backend.test", messages)).reply);
      }
      expect(chat.seen).toEqual(bodies); // one body a turn: every refusal was answered before the handler
      expect(exchanges.map((info) => [info.attempts, info.edit])).toEqual([
        [1, false],
        [1, true],
        [1, true],
        [2, false], // 415: the registry cannot be asked; as it is
        [2, true], // 409 missing-history: its base is gone; every segment inline
        [1, true],
      ]);
      expect(exchanges[4]!.continued).toBeNull();
      expect(exchanges[5]!.continued).toBe(exchanges[4]!.historyRef);
    } finally {
      await back?.cleanup();
      await own.cleanup();
    }
  });

  it("a registry problem is the client's as it is: an edit of a base it does not hold, 409, the handler not called", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const edit = '{"v":2,"b":"tb_aaaaaaaaaaaaaaaaaaaaaaaaaa","o":[[0,3]],"n":0}\n';
    const answer = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: edit }));
    expect(answer.status).toBe(409);
    expect(answer.headers.get("content-type")).toContain("application/problem+json");
    expect(answer.headers.get("Toolref-Edits")).toBe(String(VERSION));
    expect(((await answer.json()) as { type: string }).type).toBe("urn:toolref:problem:missing-history");
    expect(chat.seen).toHaveLength(0);
  });

  it("protocol 2: a non-JS client's number forms and member order byte for byte, markers hydrated", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const text =
      '{"z":1.0,"messages":[{"id":"u0","role":"user","parts":[{"type":"text","text":"x"}]},' +
      '{"id":"a0","role":"assistant","parts":[{"type":"tool-t","toolCallId":"c1","state":"output-available",' +
      '"output":{"b":-0.0,"a":1e-7},"input":{"n":1.50}}]},{"id":"u1","role":"user","parts":[{"type":"text","text":"y"}]}],"trigger":"submit-message"}';
    const first = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body: text }));
    expect(first.status).toBe(200);
    expect(chat.seen[0]).toBe(text);
    const references = JSON.parse(first.headers.get("Toolref-References") ?? "{}") as Record<string, string>;
    expect(Object.keys(references)).toEqual(["c1"]);
    // The same conversation with that invocation as a ref: the handler gets the same bytes.
    const marked = text.replace('"output":{"b":-0.0,"a":1e-7},"input":{"n":1.50}', `"toolRef":"${references["c1"]}","toolRefOrder":["type","toolCallId","state","output","input"]`);
    const second = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body: marked }));
    expect(second.status).toBe(200);
    expect(chat.seen[1]).toBe(text);
  });

  it("protocol 2: a pretty-printed body (Python's `, ` and `: `, whitespace between messages) reaches the app as sent, the marker filled", async () => {
    // Found in review: withToolRef rebuilt the whole object, joining its members with ","
    // (and trimming the whitespace after `"messages":`) and taking the registry's separators
    // between messages, so such a body reached the app changed. The client's text is kept
    // now but for each message, the registry's hydrated one. (The part a marker stands for is
    // the registry's as it fills it: written compactly, as a JS client writes it.)
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const py = (value: unknown): string => JSON.stringify(value).replaceAll(',"', ', "').replaceAll('":', '": '); // no `,"` or `":` inside these strings
    const tool = { type: "tool-read_file", toolCallId: "c7", state: "output-available", input: { path: "a.py" }, output: "x = 1\n".repeat(40) };
    const texts = [py(user(0)), `{"id": "a0", "role": "assistant", "parts": [${JSON.stringify(tool)}]}`, py(user(1))];
    const text = `{\n  "id": "chat-7", \n  "messages":  [\n    ${texts[0]},\n    ${texts[1]} ,${texts[2]}\n  ]\t, "trigger": "submit-message"\n}\n`;
    const first = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body: text }));
    expect(first.status).toBe(200);
    expect(first.headers.get("Toolref-Protocol")).toBe("2");
    expect(chat.seen[0]).toBe(text);
    const references = JSON.parse(first.headers.get("Toolref-References") ?? "{}") as Record<string, string>;
    expect(Object.keys(references)).toEqual(["c7"]);
    const payload = `,"input":${JSON.stringify(tool.input)},"output":${JSON.stringify(tool.output)}`;
    expect(text).toContain(payload);
    const marker = `,"toolRef":"${references["c7"]}","toolRefOrder":["type","toolCallId","state","input","output"]`;
    const marked = text.replace(payload, marker);
    const second = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body: marked }));
    expect(second.status).toBe(200);
    expect(second.headers.get("Toolref-Protocol")).toBe("2");
    expect(chat.seen[1]).toBe(text);
  });

  it("protocol 2: a call id above U+00FF (call_€) is confirmed in an ASCII header", async () => {
    // Issue 28: `Toolref-References` was written as JSON.stringify wrote it, and fetch refuses
    // header characters above U+00FF, so every turn of such a conversation threw.
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const tool = { type: "tool-read_file", toolCallId: "call_€😀", state: "output-available", input: { path: "a.py" }, output: "x = 1\n".repeat(400) };
    const body = JSON.stringify({ messages: [user(0), { id: "a0", role: "assistant", parts: [tool] }, user(1)] });
    const first = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body }));
    expect(first.status).toBe(200);
    const header = first.headers.get("Toolref-References")!;
    expect(header).toMatch(/^[\x20-\x7e]+$/);
    expect(Object.keys(JSON.parse(header) as object)).toEqual(["call_€😀"]);
    expect(chat.seen[0]).toBe(body);
  });

  it("protocol 2: a ref the registry does not hold is a 409 the client resends on", async () => {
    const chat = jsChat();
    const handle = withToolRef(chat.handle, { registry: reg.service.url });
    const body = JSON.stringify({
      messages: [
        { id: "a", role: "assistant", parts: [{ type: "tool-t", toolCallId: "c9", state: "output-available", toolRef: "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa" }] },
      ],
    });
    const answer = await handle(new Request("http://backend.test/api/chat", { method: "POST", headers: PROTOCOL_2, body }));
    expect(answer.status).toBe(409);
    expect(answer.headers.get("content-type")).toContain("application/problem+json");
    expect(((await answer.json()) as { missingRefs: string[] }).missingRefs).toEqual(["tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"]);
    expect(chat.seen).toHaveLength(0);
  });
});
