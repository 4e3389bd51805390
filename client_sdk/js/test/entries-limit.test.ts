// A gateway whose operator set TOOLREF_MAX_EDIT_ENTRIES below its default (50,000), against
// the REAL Python service (`toolref-server serve`, an upstream here recording the bodies it
// gets): it refuses an edit of more entries 413 `too-many-items`.
// Behind withToolRef (the second test) the registry's 413 is the backend's 415, which every
// sender resends on; it now names the refusal (`cause` too-many-items, its `limit`), and the
// manager applies the same rule to it. Before, that 415 paused the endpoint's edits (1 s,
// doubled to 30 s) and taught no limit: each long turn after a pause cost a refused edit, and
// a short conversation's turns during one went whole.
// Before, the manager made an edit of every request within the default, and no sender resent
// on a 413: every turn of a long conversation reached the app as a 413, though the request as
// it is would have been forwarded. Now the edit refused is sent again as it is, unseen by the
// app, and the limit the problem names is kept (edits/entries.ts): a later request of more
// entries goes as it is at once, and the manager says it once (console.warn), as Python's
// `Sender` (tests/integration/test_edits_entries_limit.py).
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, cut, toolrefFetch, withToolRef, type ExchangeInfo } from "../src/index.js";
import { missingPython, registry } from "./services.js";

const missing = missingPython();
if (missing !== null && process.env["CI"] === "true") {
  throw new Error(`integration tests need the Python service under CI=true: ${missing}`);
}
if (missing !== null) console.warn(`SKIPPING the entries-limit tests: ${missing}`);

const LIMIT = 200; // the operator's TOOLREF_MAX_EDIT_ENTRIES
const encoder = new TextEncoder();
const HEADERS = { "content-type": "application/json" };

/** A Messages body of one long first message and `count` short ones after it. */
function body(count: number, topic = "the repository"): string {
  const first = { role: "user", content: `read ${topic}, then summarise it. `.repeat(40) };
  const rest = Array.from({ length: count }, (_, n) => ({ role: n % 2 ? "user" : "assistant", content: `m${n}` }));
  return JSON.stringify({ model: "claude", max_tokens: 1024, messages: [first, ...rest] });
}

async function entries(text: string): Promise<number> {
  const made = await cut(Object.entries(HEADERS), encoder.encode(text), "messages");
  return made!.entries.length;
}

/** Each attempt on the wire: its media type and its answer's status. */
const wire: [string, number][] = [];
async function recorded(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const response = await fetch(input, init);
  wire.push([new Headers(init?.headers).get("content-type") ?? "", response.status]);
  return response;
}

/** The provider: the bodies it got, byte for byte; a small Messages answer to each. */
const seen: string[] = [];
function provider(): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      seen.push(Buffer.concat(chunks).toString("utf8"));
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ type: "message", content: [{ type: "text", text: "ok" }] }));
    });
  });
  return new Promise((done) => server.listen(0, "127.0.0.1", () => done({ server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` })));
}

describe.skipIf(missing !== null)("a gateway of a lowered entries limit (the real service)", () => {
  let reg: Awaited<ReturnType<typeof registry>>;
  let upstream: Server;

  beforeAll(async () => {
    const made = await provider();
    upstream = made.server;
    reg = await registry(undefined, false, { TOOLREF_MAX_EDIT_ENTRIES: String(LIMIT), TOOLREF_UPSTREAMS: `up=${made.url}` });
  });

  afterAll(async () => {
    await reg?.cleanup();
    await new Promise((done) => upstream?.close(done));
  });

  it("a turn past it goes again as it is, unseen; a longer one as it is at once; said once", async () => {
    const [long, longer, small] = [body(150), body(160), body(10, "a page")];
    expect(await entries(long)).toBeGreaterThan(LIMIT);
    expect(await entries(small)).toBeLessThan(LIMIT);
    const warned = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: recorded, onExchange: (info) => exchanges.push(info) });
    for (const text of [body(10), long, longer, small]) {
      const answer = await send(reg.service.url + "/llm/up/v1/messages", { method: "POST", headers: HEADERS, body: text });
      expect(answer.status, await answer.clone().text()).toBe(200); // no 413 reaches the app
      await answer.text();
    }
    expect(seen).toEqual([body(10), long, longer, small]); // byte for byte, each once
    expect(wire.slice(1)).toEqual([
      [MEDIA_TYPE, 413], // the long turn's edit, refused
      ["application/json", 200], // sent again as it is
      ["application/json", 200], // the longer turn: as it is at once
      [MEDIA_TYPE, 200], // within the limit: an edit
    ]);
    expect(exchanges.map((info) => info.edit)).toEqual([false, false, false, true]);
    const said = warned.mock.calls.map((call) => String(call[0])).filter((line) => line.includes("too-many-items"));
    warned.mockRestore();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`a limit of ${LIMIT} entries`);
    expect(said[0]).toContain("TOOLREF_MAX_EDIT_ENTRIES");
  });

  it("behind withToolRef: the backend's 415 naming too-many-items is learnt alike, no pause", async () => {
    const [long, longer, small] = [body(150), body(160), body(10, "a page")];
    const got: string[] = [];
    const backend = withToolRef(
      async (request) => {
        got.push(await request.text());
        return new Response(JSON.stringify({ type: "message", content: [] }), { headers: { "content-type": "application/json" } });
      },
      { registry: reg.service.url },
    );
    const sent: [string, number][] = [];
    const problems: Record<string, unknown>[] = [];
    const inProcess = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const response = await backend(new Request(input, init));
      sent.push([new Headers(init?.headers).get("content-type") ?? "", response.status]);
      if (response.status >= 400) problems.push((await response.clone().json()) as Record<string, unknown>);
      return response;
    };
    const warned = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const send = toolrefFetch({ fetch: inProcess });
    for (const text of [body(10), long, longer, small]) {
      const answer = await send("http://backend.test/v1/messages", { method: "POST", headers: HEADERS, body: text });
      expect(answer.status, await answer.clone().text()).toBe(200);
      await answer.text();
    }
    const said = warned.mock.calls.map((call) => String(call[0])).filter((line) => line.includes("too-many-items"));
    warned.mockRestore();
    expect(got).toEqual([body(10), long, longer, small]); // byte for byte, each once
    // the 415 every sender resends on, naming the registry's refusal
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ type: "urn:toolref:problem:unsupported-media-type", status: 415, cause: "urn:toolref:problem:too-many-items", limit: LIMIT });
    expect(sent.slice(1)).toEqual([
      [MEDIA_TYPE, 415], // the long turn's edit, refused by the registry behind it
      ["application/json", 200], // sent again as it is
      ["application/json", 200], // the longer turn: as it is at once
      [MEDIA_TYPE, 200], // within the limit: an edit, no pause in the way
    ]);
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`a limit of ${LIMIT} entries`);
  });
});
