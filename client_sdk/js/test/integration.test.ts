// The manager and toolrefFetch against the REAL Python service: a registry and a chat
// backend behind ToolRefMiddleware (tests/js_backend.py), started here from the repo's .venv.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolrefFetch, type ExchangeInfo } from "../src/index.js";
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
