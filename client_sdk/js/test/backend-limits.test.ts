// withToolRef's own bounds (issue 28, finding 9), each against a registry stand-in on a real
// local socket (node:http) that misbehaves as the test says: a registry that never answers,
// a client that leaves, a redirect to another origin, an answer without end, call ids no
// header can carry as they are, a header past 8 KiB, and misused options; an edit meets the
// same bounds (the registry unavailable: a 415, on which the client sends the request as it
// is). Every test here failed on the helper before the fix (most by waiting forever: the 10 s
// bound below).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { MEDIA_TYPE, refOf, VERSION, withToolRef } from "../src/index.js";

const BOUND = 10_000; // a test that waits longer than this waits forever (the code before)

/** A registry stand-in: each request goes to `serve`; what it saw is kept. */
interface StandIn {
  url: string;
  requests: string[];
  /** Resolves when a request arrives. */
  arrived: Promise<void>;
  /** Resolves when the connection of the first request has closed. */
  closed: Promise<void>;
  /** Bytes of answer written before the connection closed. */
  written: number;
  server: Server;
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((done) => {
          server.closeAllConnections();
          server.close(() => done());
        }),
    ),
  );
});

async function standIn(serve: (request: IncomingMessage, response: ServerResponse, self: StandIn) => void): Promise<StandIn> {
  let arrive = (): void => undefined;
  let close = (): void => undefined;
  const self = {
    requests: [] as string[],
    arrived: new Promise<void>((done) => (arrive = done)),
    closed: new Promise<void>((done) => (close = done)),
    written: 0,
  } as StandIn;
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString()));
    request.on("end", () => {
      self.requests.push(body);
      arrive();
      serve(request, response, self);
    });
    response.on("close", close);
  });
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  self.server = server;
  self.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return self;
}

/** An answer of `size` bytes written 64 KiB at a time until the client stops reading. */
function flood(response: ServerResponse, self: StandIn, size = Infinity): void {
  const chunk = Buffer.alloc(64 << 10, "x");
  let stopped = false;
  response.on("close", () => (stopped = true));
  const write = (): void => {
    while (!stopped && self.written < size) {
      self.written += chunk.length;
      if (!response.write(chunk)) {
        response.once("drain", write);
        return;
      }
    }
    if (!stopped) response.end();
  };
  write();
}

const HEADERS = { "Toolref-Protocol": "2", "Content-Type": "application/json" };
const FULL = '{"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}';
const REF = refOf({ name: "t", args: 1, result: 2 });
const MARKED = JSON.stringify({
  messages: [{ role: "assistant", parts: [{ type: "tool-t", toolCallId: "c", state: "output-available", toolRef: REF }] }],
});

function post(body: string, signal?: AbortSignal): Request {
  return new Request("http://app.test/api/chat", { method: "POST", headers: HEADERS, body, ...(signal ? { signal } : {}) });
}

function echoing(): { handle: (request: Request) => Promise<Response>; calls: number } {
  const state = {
    calls: 0,
    handle: async (request: Request) => {
      state.calls += 1;
      return new Response(await request.text(), { headers: { "content-type": "application/json" } });
    },
  };
  return state;
}

const EDIT = '{"v":2,"b":null,"o":[0],"n":0}\n\u0000';

/** Full payloads fall back to the handler as protocol 1; refs get a 409 naming `reason`; an
 * edit a 415 naming it (the client then sends the request as it is). */
async function expectFallback(handle: (request: Request) => Promise<Response>, reason: RegExp): Promise<void> {
  const edit = await handle(new Request("http://app.test/api/chat", { method: "POST", headers: { "Content-Type": MEDIA_TYPE }, body: EDIT }));
  expect(edit.status).toBe(415);
  expect(((await edit.json()) as { detail: string }).detail).toMatch(reason);
  const passed = await handle(post(FULL));
  expect(passed.status).toBe(200);
  expect(passed.headers.get("Toolref-Protocol")).toBe("1");
  expect(await passed.text()).toBe(FULL);
  const refused = await handle(post(MARKED));
  expect(refused.status).toBe(409);
  const problem = (await refused.json()) as { missingRefs: string[]; detail: string };
  expect(problem.missingRefs).toEqual([REF]);
  expect(problem.detail).toMatch(reason);
}

describe("withToolRef's bounds on the registry call", () => {
  it("tells clients the edits its registry applies: the lower of its own and the registry's, asked once", async () => {
    for (const [theirs, told] of [[3, "3"], [0, null], [99, String(VERSION)]] as const) {
      const registry = await standIn((request, response) => {
        response.setHeader("content-type", "application/json");
        response.end(request.url === "/v1/capabilities" ? JSON.stringify({ edits: theirs }) : "{}");
      });
      const handle = withToolRef(echoing().handle, { registry: registry.url });
      for (let n = 0; n < 2; n += 1) {
        const offered = new Request("http://app.test/api/chat", { method: "POST", headers: { "Content-Type": "application/json", "Toolref-Edits": String(VERSION) }, body: FULL });
        const answer = await handle(offered);
        expect(answer.status).toBe(200);
        expect(answer.headers.get("Toolref-Edits")).toBe(told);
        expect(await answer.text()).toBe(FULL);
      }
      expect(registry.requests).toHaveLength(1); // the capabilities, once
    }
  });

  it(
    "a registry that never answers: the call ends at timeoutMs and the request falls back",
    async () => {
      const registry = await standIn(() => undefined); // reads the request, never answers
      const app = echoing();
      const handle = withToolRef(app.handle, { registry: registry.url, timeoutMs: 300 });
      await expectFallback(handle, /did not answer within 300 ms \(options\.timeoutMs\)/);
      await registry.closed; // the call was abandoned: its connection closed
      expect(registry.requests).toHaveLength(4); // its capabilities (asked once), 3 calls
    },
    BOUND,
  );

  it(
    "the deadline holds through an options.fetch that ignores signals, answer or body",
    async () => {
      const never = (() => new Promise<Response>(() => undefined)) as typeof fetch;
      await expectFallback(withToolRef(echoing().handle, { registry: "http://registry.test", fetch: never, timeoutMs: 100 }), /within 100 ms/);
      let cancelled = 0;
      const stalled = (async () =>
        new Response(new ReadableStream<Uint8Array>({ cancel: () => void (cancelled += 1) }), {
          headers: { "content-type": "application/json" },
        })) as typeof fetch;
      await expectFallback(withToolRef(echoing().handle, { registry: "http://registry.test", fetch: stalled, timeoutMs: 100 }), /within 100 ms/);
      expect(cancelled).toBe(4); // each stalled answer's body was cancelled, not left open (the capabilities too)
    },
    BOUND,
  );

  it(
    "the client leaving aborts the registry call, and the handler is never called",
    async () => {
      const registry = await standIn(() => undefined);
      const app = echoing();
      const handle = withToolRef(app.handle, { registry: registry.url, timeoutMs: 600_000 });
      const client = new AbortController();
      const pending = handle(post(FULL, client.signal));
      await registry.arrived;
      client.abort();
      const answer = await pending;
      await registry.closed;
      expect(answer.status).toBe(499);
      expect(((await answer.json()) as { type: string }).type).toBe("urn:toolref:problem:client-closed-request");
      expect(app.calls).toBe(0);
      // A client gone before the registry is asked: nothing is sent to it.
      const before = registry.requests.length;
      const gone = await handle(post(FULL, AbortSignal.abort()));
      expect(gone.status).toBe(499);
      expect(registry.requests).toHaveLength(before);
      expect(app.calls).toBe(0);
    },
    BOUND,
  );

  it(
    "a redirect is not followed: the conversation never reaches another origin",
    async () => {
      const elsewhere = await standIn((_, response) => {
        response.setHeader("content-type", "application/json");
        response.end('{"messages":[],"toolReferences":{}}');
      });
      for (const status of [301, 302, 303, 307, 308]) {
        const registry = await standIn((_, response) => {
          response.writeHead(status, { location: elsewhere.url + "/v1/messages:hydrate" });
          response.end();
        });
        const handle = withToolRef(echoing().handle, { registry: registry.url });
        await expectFallback(handle, new RegExp(`redirect \\(${status} to ${elsewhere.url}`));
        expect(registry.requests).toHaveLength(4); // its capabilities (asked once), 3 calls
      }
      expect(elsewhere.requests).toHaveLength(0);
    },
    BOUND,
  );

  it(
    "an answer past maxAnswerBytes is read no further (streamed, or declared) and the request falls back",
    async () => {
      const cap = 1 << 20;
      const endless = await standIn((_, response, self) => {
        response.writeHead(200, { "content-type": "application/json" });
        flood(response, self);
      });
      const handle = withToolRef(echoing().handle, { registry: endless.url, maxAnswerBytes: cap });
      await expectFallback(handle, /answer is over 1048576 bytes \(options\.maxAnswerBytes\)/);
      await endless.closed;
      // Read a chunk at a time and stopped past the cap: what was written beyond it sat in
      // socket buffers (a few MiB on loopback), never the endless rest.
      expect(endless.written).toBeLessThan(cap + (32 << 20));
      console.log(`an endless answer: ${endless.written} bytes written before the helper stopped reading (cap ${cap})`);

      const declared = await standIn((_, response, self) => {
        response.writeHead(200, { "content-type": "application/json", "content-length": String(400 << 20) });
        flood(response, self, 400 << 20);
      });
      const early = withToolRef(echoing().handle, { registry: declared.url, maxAnswerBytes: cap });
      await expectFallback(early, /answer is over 1048576 bytes/);
      await declared.closed;
      expect(declared.written).toBeLessThan(400 << 20);
      console.log(`a declared 400 MiB answer: ${declared.written} bytes written before the helper hung up`);
    },
    BOUND,
  );
});

describe("withToolRef's Toolref-References header", () => {
  /** A hydrate answer: the messages as sent, and `references` as the registry confirms them. */
  async function confirming(references: Record<string, string>): Promise<StandIn> {
    return standIn((_, response, self) => {
      const sent = JSON.parse(self.requests.at(-1)!) as { messages: unknown };
      response.setHeader("content-type", "application/json");
      response.end(JSON.stringify({ messages: sent.messages, toolReferences: references }));
    });
  }

  it(
    "Toolref-References: any call id, in ASCII (as the Python SDK writes and reads it)",
    async () => {
      const references = {
        "call_€": "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa",
        "call_😀": "tr_bbbbbbbbbbbbbbbbbbbbbbbbbb",
        'q"uote\u007f': "tr_cccccccccccccccccccccccccc",
        "tab\tnew\nline": "tr_dddddddddddddddddddddddddd",
      };
      const registry = await confirming(references);
      const handle = withToolRef(echoing().handle, { registry: registry.url });
      const answer = await handle(post(FULL));
      expect(answer.status).toBe(200);
      const header = answer.headers.get("Toolref-References")!;
      expect(header).toMatch(/^[\x20-\x7e]+$/);
      expect(JSON.parse(header)).toEqual(references);
      // Byte for byte what tests/unit/test_references_header.py pins for the Python side.
      const euro = await confirming({ "call_€": "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa" });
      const one = await withToolRef(echoing().handle, { registry: euro.url })(post(FULL));
      expect(one.headers.get("Toolref-References")).toBe('{"call_\\u20ac":"tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"}');
    },
    BOUND,
  );

  it(
    "a Toolref-References header past 8 KiB is left out, as ToolRefMiddleware leaves it",
    async () => {
      const entries = (count: number) =>
        Object.fromEntries(Array.from({ length: count }, (_, n) => [`call_${String(n).padStart(40, "0")}`, `tr_${"a".repeat(26)}`]));
      const size = (count: number) => JSON.stringify(entries(count)).length;
      let fits = 1;
      while (size(fits + 1) <= 8192) fits += 1;
      const under = await withToolRef(echoing().handle, { registry: (await confirming(entries(fits))).url })(post(FULL));
      expect(under.headers.get("Toolref-References")?.length).toBe(size(fits));
      const over = await withToolRef(echoing().handle, { registry: (await confirming(entries(fits + 1))).url })(post(FULL));
      expect(over.status).toBe(200);
      expect(over.headers.get("Toolref-Protocol")).toBe("2");
      expect(over.headers.get("Toolref-References")).toBeNull();
      // The 889 KB header of the attack round.
      const huge = await withToolRef(echoing().handle, { registry: (await confirming(entries(15_000))).url })(post(FULL));
      expect(huge.headers.get("Toolref-References")).toBeNull();
    },
    BOUND,
  );
});

describe("withToolRef's hydrate answer", () => {
  it(
    "a registry answering another number of messages than sent is the registry unavailable, naming both counts",
    async () => {
      // Each hydrated message takes the place of the client's own, the client's whitespace
      // around it kept: an answer with a message more or fewer cannot be spliced.
      const extra = await standIn((_, response, self) => {
        const sent = JSON.parse(self.requests.at(-1)!) as { messages: unknown[] };
        response.setHeader("content-type", "application/json");
        response.end(JSON.stringify({ messages: [...sent.messages, ...sent.messages] }));
      });
      const app = echoing();
      const handle = withToolRef(app.handle, { registry: extra.url });
      const passed = await handle(post(FULL));
      expect(passed.status).toBe(200);
      expect(passed.headers.get("Toolref-Protocol")).toBe("1");
      expect(await passed.text()).toBe(FULL);
      const refused = await handle(post(MARKED));
      expect(refused.status).toBe(409);
      const problem = (await refused.json()) as { missingRefs: string[]; detail: string };
      expect(problem.missingRefs).toEqual([REF]);
      expect(problem.detail).toMatch(/answered hydrate with 2 messages hydrated for the 1 sent/);
      expect(app.calls).toBe(1);
    },
    BOUND,
  );
});

describe("withToolRef's options", () => {
  const echo = async (request: Request) => new Response(await request.text());

  it("misuse of a limit fails at once, naming the option, the value and the fix", () => {
    const registry = "http://registry.test";
    expect(() => withToolRef(echo, { registry, timeoutMs: 0 })).toThrow(
      "withToolRef({ timeoutMs }) is 0; use a whole number of milliseconds from 1 to 2147483647, or leave it out for 5000",
    );
    // Longer than setTimeout can wait: it would fire at once.
    expect(() => withToolRef(echo, { registry, timeoutMs: 2 ** 31 })).toThrow(/timeoutMs \}\) is 2147483648/);
    expect(() => withToolRef(echo, { registry, maxAnswerBytes: -1 })).toThrow(/maxAnswerBytes \}\) is -1; use a whole number of bytes of at least 1/);
    expect(() => withToolRef(echo, { registry, maxBodyBytes: 1.5 })).toThrow(/maxBodyBytes \}\) is 1.5/);
    expect(() => withToolRef(echo, { registry, maxInflatedBytes: "64" as unknown as number })).toThrow(/maxInflatedBytes \}\) is 64; use a whole number/);
    expect(() => withToolRef(echo, { registry, timeoutMs: Infinity })).toThrow(/timeoutMs \}\) is Infinity/);
    expect(() => withToolRef(echo, { registry, fetch: "fetch" as unknown as typeof fetch })).toThrow(/takes a function, not string/);
  });

  it("an unknown or mistyped option fails at once (it did nothing: `apiKey` sent no key, and every edit was a 415)", () => {
    const registry = "http://registry.test";
    const options = (extra: Record<string, unknown>) => ({ registry, ...extra }) as never;
    expect(() => withToolRef(echo, options({ apiKey: "k" }))).toThrow(
      "withToolRef({ apiKey }) is not an option. Known options: registry, key, fetch, messagesKey, format, maxBodyBytes, maxInflatedBytes, timeoutMs, maxAnswerBytes",
    );
    expect(() => withToolRef(echo, options({ timeoutMS: 100 }))).toThrow(/withToolRef\(\{ timeoutMS \}\) is not an option; did you mean timeoutMs\?/);
    expect(() => withToolRef(echo, options({ maxBodySize: 1 }))).toThrow(/maxBodySize \}\) is not an option/);
    expect(() => withToolRef(echo, options({ key: 42 }))).toThrow("withToolRef({ key }) takes a string, not number 42; pass one or leave it out");
    expect(() => withToolRef(echo, options({ messagesKey: ["messages"] }))).toThrow(/messagesKey \}\) takes a string, not an array/);
    expect(() => withToolRef(echo, options({ messagesKey: "" }))).toThrow(/messagesKey \}\) is empty/);
    expect(() => withToolRef(echo, options({ format: "openai" }))).toThrow(
      'withToolRef({ format }) is "openai"; use one of openai-chat, anthropic, openai-responses, ai-sdk-v5, ai-sdk-v4, or leave it out to have it detected',
    );
    expect(() => withToolRef(echo, "http://registry.test" as never)).toThrow(/takes an object of options such as \{ registry/);
    // What is right still is.
    expect(typeof withToolRef(echo, { registry, key: "k", messagesKey: "input", format: "anthropic", timeoutMs: 10 })).toBe("function");
  });
});
