// toolrefFetch against a slow or hostile receiver, on a real local socket (node:http): an
// answer to an edit that the SDK itself reads to decide what to do next (a 409, 400, 415 or
// 503 refusal's problem, a refusal it drops before sending the request as it is) whose head
// comes and whose body trickles or never ends. The SDK reads it within `PROBLEM_READ_MS`
// (manager.ts; Python reads it within the request's read timeout), then hands on what it has
// or drops it, so the caller's request never waits on it for ever; the caller's AbortSignal
// ends the SDK's own reads too, and every body it drops is cancelled (the socket closed).
// Time here is vitest's fake setTimeout: nothing asserts a duration; a test whose request
// is not answered once the fake clock ran far past every deadline fails (the code before).
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, forgetSharedState, toolrefFetch, type ExchangeInfo } from "../src/index.js";
import { PROBLEM_READ_MS, discard, readProblem } from "../src/refusals.js";

const realTimeout = globalThis.setTimeout;
const servers: Server[] = [];

afterEach(async () => {
  vi.useRealTimers();
  forgetSharedState();
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

/** A receiver: a request as it is answered 200 with `Toolref-Edits: 5`; an edit handed to
 * `edit` (which answers it as the test says). `closed` resolves when an edit's connection
 * has closed (the client cancelled its body, or the server ended it). */
interface Stand {
  url: string;
  kinds: string[];
  plain: string[];
  closed: Promise<void>;
}

async function receiver(edit: (response: ServerResponse) => void): Promise<Stand> {
  let close = (): void => undefined;
  const stand: Stand = { url: "", kinds: [], plain: [], closed: new Promise<void>((done) => (close = done)) };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      if (request.headers["content-type"] === MEDIA_TYPE) {
        stand.kinds.push("edit");
        response.on("close", close);
        edit(response);
        return;
      }
      stand.kinds.push("as it is");
      stand.plain.push(Buffer.concat(chunks).toString());
      response.writeHead(200, { "content-type": "application/json", "toolref-edits": "5" });
      response.end('{"answered":true}');
    });
  });
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  stand.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/chat`;
  return stand;
}

function body(turns: number): string {
  const messages: unknown[] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: "user", content: `question ${turn}: ${"why is the sky blue ".repeat(30)}` });
    messages.push({ role: "assistant", content: `answer ${turn}: ${"because of scattering ".repeat(40)}` });
  }
  return JSON.stringify({ messages });
}

const HEADERS = { "content-type": "application/json" };

/** `promise` settled while the fake clock runs on (a real pause between steps lets the
 * sockets work); fails when it has not once the clock ran far past every deadline. */
async function settled<T>(promise: Promise<T>): Promise<T> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  for (let step = 0; step < 2000 && !done; step++) {
    await new Promise((wake) => realTimeout(wake, 5));
    await vi.advanceTimersByTimeAsync(PROBLEM_READ_MS / 10);
  }
  expect(done, "still waiting after 200 deadlines of fake time").toBe(true);
  return promise;
}

/** A toolrefFetch that has learnt the receiver reads edits (one request as it is). */
async function learnt(stand: Stand, exchanges: ExchangeInfo[]): Promise<typeof globalThis.fetch> {
  const send = toolrefFetch({ onExchange: (info) => exchanges.push(info) });
  const first = await send(stand.url, { method: "POST", headers: HEADERS, body: body(1) });
  expect(await first.text()).toBe('{"answered":true}');
  return send;
}

/** Head, then `start` of the body, then nothing more (the connection kept open). */
function stalled(status: number, headers: Record<string, string>, start: string) {
  return (response: ServerResponse): void => {
    response.writeHead(status, headers);
    response.write(start);
  };
}

const PROBLEM = "application/problem+json";

describe("a refusal whose body never ends", () => {
  it("a 409 problem from a receiver of edits: handed on within the deadline, the bytes that came first", async () => {
    const stand = await receiver(stalled(409, { "content-type": PROBLEM, "toolref-edits": "5" }, '{"type":"urn:toolref:problem:missing-'));
    const exchanges: ExchangeInfo[] = [];
    const send = await learnt(stand, exchanges);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const answer = await settled(send(stand.url, { method: "POST", headers: HEADERS, body: body(2) }));
    expect(answer.status).toBe(409);
    const reader = answer.body!.getReader();
    const { value } = await reader.read();
    expect(new TextDecoder().decode(value)).toBe('{"type":"urn:toolref:problem:missing-');
    await reader.cancel(); // the caller's to read or drop: dropped, the connection closes
    await settled(stand.closed);
    expect(stand.kinds).toEqual(["as it is", "edit"]);
  });

  for (const [what, status, headers] of [
    ["a 415 problem", 415, { "content-type": PROBLEM }],
    ["a 400 page from no receiver of edits", 400, { "content-type": "text/html" }],
    ["a 409 problem from no receiver of edits", 409, { "content-type": PROBLEM }],
  ] as const) {
    it(`${what}: dropped within the deadline (its connection closed), the request sent as it is`, async () => {
      const stand = await receiver(stalled(status, headers, "{"));
      const exchanges: ExchangeInfo[] = [];
      const send = await learnt(stand, exchanges);
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      const answer = await settled(send(stand.url, { method: "POST", headers: HEADERS, body: body(2) }));
      expect([answer.status, await answer.text()]).toEqual([200, '{"answered":true}']);
      expect(stand.plain.at(-1)).toBe(body(2));
      expect(stand.kinds).toEqual(["as it is", "edit", "as it is"]);
      expect(exchanges.at(-1)?.attempts).toBe(2);
      await settled(stand.closed);
    });
  }

  // A 400 from no receiver of edits is a refusal of the edit unread, sent again as it is; a 503
  // from one would be the app's, as it came (src/stranger.ts).
  for (const [what, told, status] of [
    ["503 problem trickled a byte at a time, never ending, from a receiver of edits: handed on within the deadline", true, 503],
    ["400 problem trickled a byte at a time, never ending, from no receiver of edits: dropped within the deadline, the request sent as it is", false, 400],
  ] as const) {
    it(`a ${what}`, async () => {
      let response: ServerResponse | null = null;
      const stand = await receiver((answer) => {
        response = answer;
        answer.writeHead(status, { "content-type": PROBLEM, ...(told ? { "toolref-edits": "5" } : {}) });
        answer.write("{");
      });
      const send = await learnt(stand, []);
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      const sending = send(stand.url, { method: "POST", headers: HEADERS, body: body(2) });
      let done = false;
      let trickled = 0;
      void sending.finally(() => (done = true)).catch(() => undefined);
      // A byte per tenth of the deadline: every read well within any per-read bound.
      for (let step = 0; step < 2000 && !done; step++) {
        await new Promise((wake) => realTimeout(wake, 5));
        if ((response as ServerResponse | null)?.write(" ")) trickled += 1;
        await vi.advanceTimersByTimeAsync(PROBLEM_READ_MS / 10);
      }
      expect(done, "still waiting after 200 deadlines of fake time").toBe(true);
      expect(trickled).toBeGreaterThan(2); // the body kept coming while the SDK read
      const answer = await sending;
      if (told) {
        expect(answer.status).toBe(503);
        // Every byte the SDK read first is in the answer, then the rest as they come.
        const reader = answer.body!.getReader();
        let text = "";
        while (text.length < 3) text += new TextDecoder().decode((await reader.read()).value);
        expect(text).toBe("{  ");
        await reader.cancel();
      } else {
        expect([answer.status, await answer.text()]).toEqual([200, '{"answered":true}']);
        expect(stand.kinds).toEqual(["as it is", "edit", "as it is"]);
      }
      await settled(stand.closed);
    });
  }
});

describe("the caller's AbortSignal during the SDK's own read", () => {
  it("aborting while a refusal's body trickles ends the request with the caller's reason and closes the connection", async () => {
    const stand = await receiver(stalled(409, { "content-type": PROBLEM, "toolref-edits": "5" }, "{"));
    const send = await learnt(stand, []);
    const controller = new AbortController();
    const arrived = new Promise<void>((done) => {
      const watch = (): void => void (stand.kinds.length === 2 ? done() : realTimeout(watch, 5));
      watch();
    });
    const sending = send(stand.url, { method: "POST", headers: HEADERS, body: body(2), signal: controller.signal });
    await arrived;
    const reason = new Error("the user left");
    controller.abort(reason);
    await expect(sending).rejects.toBe(reason);
    await stand.closed;
  });

  it("a fetch of the caller's that ignores signals: the SDK's read still ends at the abort", async () => {
    const stand = await receiver(stalled(409, { "content-type": PROBLEM, "toolref-edits": "5" }, "{"));
    // A fetch that never passes the signal on (a wrapper that drops it).
    const deaf = ((input: RequestInfo | URL, init?: RequestInit) => globalThis.fetch(input, { ...init, signal: null })) as typeof globalThis.fetch;
    const send = toolrefFetch({ fetch: deaf });
    await (await send(stand.url, { method: "POST", headers: HEADERS, body: body(1) })).text();
    const controller = new AbortController();
    const arrived = new Promise<void>((done) => {
      const watch = (): void => void (stand.kinds.length === 2 ? done() : realTimeout(watch, 5));
      watch();
    });
    const sending = send(stand.url, { method: "POST", headers: HEADERS, body: body(2), signal: controller.signal });
    await arrived;
    const reason = new Error("the user left");
    controller.abort(reason);
    await expect(sending).rejects.toBe(reason);
    await stand.closed; // the body it was reading cancelled: the socket closed
  });
});

describe("the SDK's reads leave nothing behind", () => {
  it("a problem read whole, or a refusal dropped, leaves no timer armed and no abort listener", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const controller = new AbortController();
    const added = vi.spyOn(controller.signal, "addEventListener");
    const removed = vi.spyOn(controller.signal, "removeEventListener");
    const problem = () => new Response('{"type":"urn:toolref:problem:missing-history"}', { status: 409 });
    const read = await readProblem(problem(), controller.signal);
    expect(new TextDecoder().decode(read.whole!)).toContain("missing-history");
    await discard(problem(), controller.signal);
    expect(vi.getTimerCount()).toBe(0);
    expect(added).toHaveBeenCalledTimes(2);
    expect(removed.mock.calls.map((call) => call[1])).toEqual(added.mock.calls.map((call) => call[1]));
  });
});

describe("a body that inflates past the bound (a compression bomb)", () => {
  // fetch undoes Content-Encoding itself, a chunk at a time as the reader pulls (16 KiB each
  // in Node's): the SDK's reads count decoded bytes, so 64 KiB of gzip that inflates to
  // 64 MiB is over `MAX_PROBLEM_BYTES` (and a registry's `maxAnswerBytes`) after a few
  // chunks, not held whole. `counted` measures what a read pulled of the decoded body: a read
  // by `arrayBuffer()` or `text()` (all 64 MiB, then its size checked) would fail this.
  async function bomb(): Promise<string> {
    const { gzipSync } = await import("node:zlib");
    const body = gzipSync(Buffer.alloc(64 << 20));
    expect(body.length).toBeLessThan(64 << 10); // within the bound as it comes
    const server = createServer((_, response) => {
      const head = { "content-type": "application/problem+json", "content-encoding": "gzip" };
      response.writeHead(409, { ...head, "content-length": String(body.length) });
      response.end(body);
    });
    servers.push(server);
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  }

  /** `response` whose decoded body is pulled only as its reader asks (`pulled`: bytes so far). */
  function counted(response: Response): { response: Response; pulled: () => number } {
    const reader = response.body!.getReader();
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          const { done, value } = await reader.read();
          if (done) return controller.close();
          pulled += value.length;
          controller.enqueue(value);
        },
        cancel: (reason) => reader.cancel(reason),
      },
      { highWaterMark: 0 },
    );
    const headers = response.headers;
    return { response: new Response(body, { status: response.status, headers }), pulled: () => pulled };
  }

  it("a refusal's problem is handed on unread, and a registry's answer is over its bound", async () => {
    const url = await bomb();
    const problem = counted(await fetch(url));
    const { whole, response } = await readProblem(problem.response);
    expect(whole).toBeNull();
    await response.body?.cancel();
    // `MAX_PROBLEM_BYTES` (64 KiB) and one chunk past it, not the 64 MiB it inflates to
    expect(problem.pulled()).toBeGreaterThan(64 << 10);
    expect(problem.pulled()).toBeLessThan(1 << 20);
    const { readAll, TooLargeError } = await import("../src/compression.js");
    const answer = counted(await fetch(url));
    await expect(readAll(answer.response.body!, 1 << 20)).rejects.toBeInstanceOf(TooLargeError);
    expect(answer.pulled()).toBeGreaterThan(1 << 20);
    expect(answer.pulled()).toBeLessThan(2 << 20);
  });
});
