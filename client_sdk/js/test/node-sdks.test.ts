// The official Node SDKs (`openai`, `@anthropic-ai/sdk`), unchanged but for their `fetch`
// option, through toolrefFetch to the REAL Python service's gateway (`toolref-server serve`
// with TOOLREF_UPSTREAMS, started from .venv), which applies the edits and forwards to a
// scripted provider in this process (test/provider.ts): Chat Completions, Responses and
// Messages, streamed and not. The first request goes as the SDK wrote it with the offer
// (`Toolref-Edits: 5`), every later one as an edit; the provider receives exactly the bytes
// the SDK built and its credentials, every request; from the second request on, the wire
// carries a fraction of the body; a registry restarted empty mid-conversation is recovered by
// a resend the SDK never sees; a streamed answer reaches the SDK while the provider streams.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forgetSharedState, toolrefFetch, type ExchangeInfo } from "../src/index.js";
import { Provider, pacing } from "./provider.js";
import { freePort, missingPython, registry } from "./services.js";

const missing = missingPython();
if (missing !== null && process.env["CI"] === "true") {
  throw new Error(`the Node SDK tests need the Python service under CI=true: ${missing}`);
}
if (missing !== null) console.warn(`SKIPPING the Node SDK tests: ${missing}`);

type Message = Record<string, unknown>;
type Api = "chat" | "responses" | "messages";

/** What one conversation cost and carried, request by request. */
class Run {
  readonly sdk: string[] = []; // the bodies the SDK built
  readonly wire: number[] = []; // bytes each request put on the wire (resends apart)
  readonly exchanges: ExchangeInfo[] = [];
  /** The SDK's fetch: record its body, then toolrefFetch (whose sends are recorded too). */
  readonly fetch: typeof fetch;

  constructor() {
    const inner = ((input: RequestInfo | URL, init?: RequestInit) => {
      const body = init?.body;
      this.wire.push(body instanceof Uint8Array ? body.length : typeof body === "string" ? Buffer.byteLength(body) : 0);
      return fetch(input, init);
    }) as typeof fetch;
    const send = toolrefFetch({ fetch: inner, onExchange: (info) => this.exchanges.push(info) });
    this.fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
      if (typeof init?.body === "string") this.sdk.push(init.body);
      return send(input, init);
    }) as typeof fetch;
  }
}

/** The file the client's tool reads: several KB, each turn's its own. */
function file(turn: number): string {
  const lines: string[] = [];
  for (let line = 0; line < 90; line++) lines.push(`def handler_${turn}_${line}(request, limit=${(line * 37 + turn) % 101}):  # é😀`);
  return lines.join("\n");
}

async function chatTurn(client: OpenAI, messages: Message[], stream: boolean): Promise<Message> {
  const params = { model: "m", messages: messages as never, tools: [{ type: "function" as const, function: { name: "read_file", parameters: { type: "object" } } }] };
  if (!stream) return (await client.chat.completions.create(params)).choices[0]!.message as unknown as Message;
  const final = await client.chat.completions.stream(params).finalChatCompletion();
  const message = final.choices[0]!.message as unknown as Message;
  const { role, content, tool_calls } = message;
  return tool_calls && (tool_calls as unknown[]).length ? { role, content, tool_calls } : { role, content };
}

async function responsesTurn(client: OpenAI, input: Message[], stream: boolean): Promise<Message[]> {
  const params = { model: "m", input: input as never };
  const response = stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
  return response.output as unknown as Message[];
}

async function messagesTurn(client: Anthropic, messages: Message[], stream: boolean): Promise<Message> {
  const params = { model: "m", max_tokens: 64, messages: messages as never };
  const message = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
  return { role: "assistant", content: message.content };
}

/** `turns` questions, each answered after one tool call: two requests a turn. `between` runs
 * before each turn (a registry restart, say). */
async function converse(api: Api, gateway: string, run: Run, stream: boolean, turns: number, between?: (turn: number) => Promise<void>): Promise<void> {
  const openai = new OpenAI({ baseURL: `${gateway}/llm/fake/v1`, apiKey: "k", maxRetries: 0, fetch: run.fetch });
  const anthropic = new Anthropic({ baseURL: `${gateway}/llm/fake`, apiKey: "k", maxRetries: 0, fetch: run.fetch });
  const history: Message[] = [];
  for (let turn = 1; turn <= turns; turn++) {
    await between?.(turn);
    const question = `read module ${turn} and say what it does`;
    if (api === "chat") {
      history.push({ role: "user", content: question });
      const call = await chatTurn(openai, history, stream);
      history.push(call);
      const id = (call["tool_calls"] as { id: string }[])[0]!.id;
      history.push({ role: "tool", tool_call_id: id, content: file(turn) });
      history.push(await chatTurn(openai, history, stream));
    } else if (api === "responses") {
      history.push({ role: "user", content: [{ type: "input_text", text: question }] });
      const output = await responsesTurn(openai, history, stream);
      history.push(...output);
      const id = output[0]!["call_id"] as string;
      history.push({ type: "function_call_output", call_id: id, output: file(turn) });
      history.push(...(await responsesTurn(openai, history, stream)));
    } else {
      history.push({ role: "user", content: question });
      const call = await messagesTurn(anthropic, history, stream);
      history.push(call);
      const id = ((call["content"] as Message[])[0]!["id"]) as string;
      history.push({ role: "user", content: [{ type: "tool_result", tool_use_id: id, content: file(turn) }] });
      history.push(await messagesTurn(anthropic, history, stream));
    }
  }
}

const PATHS: Record<Api, string> = { chat: "/v1/chat/completions", responses: "/v1/responses", messages: "/v1/messages" };

describe.skipIf(missing !== null)("the official Node SDKs through the Python gateway", () => {
  const provider = new Provider();
  let port = 0;
  let service: Awaited<ReturnType<typeof registry>>;

  const start = async () => {
    service = await registry(port, true, { TOOLREF_UPSTREAMS: `fake=${provider.url}` });
  };

  beforeAll(async () => {
    await provider.start();
    port = await freePort();
    await start();
  });

  afterAll(async () => {
    await service?.cleanup();
    await provider.stop();
  });

  for (const api of ["chat", "responses", "messages"] as const) {
    for (const stream of [false, true]) {
      it(`${api}, ${stream ? "streamed" : "not streamed"}: the provider gets the SDK's bodies, the wire only what is new`, async () => {
        forgetSharedState();
        const run = new Run();
        const before = provider.received.length;
        await converse(api, service.service.url, run, stream, 3);
        const received = provider.received.slice(before);
        expect(received.map((item) => item.path)).toEqual(run.sdk.map(() => PATHS[api]));
        expect(received.map((item) => item.raw)).toEqual(run.sdk); // byte for byte
        for (const item of received) {
          // The SDK's own headers, restored by the gateway, its credential among them.
          expect(item.headers["authorization"]).toBe("Bearer k");
          expect(item.headers["content-type"]).toBe("application/json");
          expect(item.headers["toolref-edits"]).toBeUndefined(); // the offer stays home
        }
        expect(run.wire.length).toBe(run.sdk.length); // no resend
        const raw = run.exchanges.map((info) => info.rawBytes);
        const wire = run.exchanges.map((info) => info.wireBytes);
        expect(raw).toEqual(run.sdk.map((body) => Buffer.byteLength(body)));
        expect(wire).toEqual(run.wire); // the SDK's count is what the wire carried
        expect(run.exchanges.map((info) => info.edit)).toEqual([false, true, true, true, true, true]);
        expect(wire[0]).toBe(raw[0]); // as it is, with the offer
        for (const [index, info] of run.exchanges.entries()) {
          if (index < 2) continue;
          expect(info.continued).toBe(run.exchanges[index - 1]!.historyRef); // each an edit of the one before
        }
        // From the second request on, the wire is a fraction of the body: what changed, each
        // new segment compressed alone.
        for (const index of [1, 2, 3, 4, 5]) expect(wire[index]! * 3).toBeLessThan(raw[index]!);
        const sum = (list: number[]) => list.reduce((a, b) => a + b, 0);
        expect(sum(wire) * 2).toBeLessThan(sum(raw));
        if (process.env["TOOLREF_JS_VERBOSE"]) console.log(api, stream, raw, wire);
      });
    }
  }

  it("a registry restarted empty mid-conversation: the SDK sees nothing, the next requests save again", async () => {
    forgetSharedState();
    const run = new Run();
    const before = provider.received.length;
    await converse("chat", service.service.url, run, true, 4, async (turn) => {
      if (turn !== 3) return;
      await service.cleanup();
      await start(); // same port, an empty data folder and engine
    });
    const received = provider.received.slice(before);
    expect(received.map((item) => item.body)).toEqual(run.sdk.map((body) => JSON.parse(body)));
    expect(received.map((item) => item.raw)).toEqual(run.sdk);
    const resent = run.exchanges.map((info) => info.resent);
    expect(resent).toEqual([false, false, false, false, true, false, false, false]);
    expect(run.exchanges[4]!.continued).toBeNull(); // resent with every segment inline
    expect(run.exchanges[5]!.continued).toBe(run.exchanges[4]!.historyRef); // saving again right after
    expect(run.exchanges[7]!.wireBytes * 3).toBeLessThan(run.exchanges[7]!.rawBytes);
  });

  it("an edit's streamed answer reaches the SDK as the provider streams it, not once it ended", async () => {
    forgetSharedState();
    const run = new Run();
    await converse("chat", service.service.url, run, true, 1); // the offer answered: edits from now on
    pacing.gapMs = 150;
    try {
      const openai = new OpenAI({ baseURL: `${service.service.url}/llm/fake/v1`, apiKey: "k", maxRetries: 0, fetch: run.fetch });
      const messages = [{ role: "user" as const, content: "read module 9 and say what it does, line by line" }];
      const stream = await openai.chat.completions.create({ model: "m", messages, stream: true });
      let first = 0;
      for await (const chunk of stream) {
        void chunk;
        if (first === 0) first = performance.now();
      }
      expect(run.exchanges.at(-1)!.edit).toBe(true);
      expect(first).toBeGreaterThan(0);
      expect(first).toBeLessThan(pacing.lastWritten - 200); // the first chunk came two gaps before the last was written
    } finally {
      pacing.gapMs = 0;
    }
  });
});
