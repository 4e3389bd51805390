// A registry rolled back behind withToolRef while it runs (review: version negotiation behind
// a middleware), against the REAL Python registry (`toolref-server serve`), as
// tests/integration/test_backend_registry_rollback.py tests ToolRefMiddleware. `older` makes
// it one of an older edits version on the way between withToolRef and it: its capabilities
// say that version, and an edit written in a newer version's bytes is refused 400
// `malformed-body` (as a registry of 4 refuses version 5's compact header).
// Before, withToolRef asked the registry's version once: rolled back from 6 to 4, it went on
// telling 6, each edit (version 5's bytes) was refused and answered 415 (`cause`
// malformed-body), the manager paused its edits (1 s, doubled to 30 s) and, told 6 again,
// wrote version 5's bytes after each pause, refused again, for ever. Now withToolRef asks
// again when the registry refuses an edit as unreadable (at most once per RECHECK_MS, one
// question in flight) and tells the lower version from then on, and asks again RAISE_MS after
// its last question while it tells less than its own (a registry rolled forward); the
// manager takes a 415 naming malformed-body as the refusal it stands for (the version below
// the edit's bytes said, no pause), as it takes a gateway's 400.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { RAISE_MS, RECHECK_MS } from "../src/backend.js";
import { MEDIA_TYPE, RECENT_MS, forgetSharedState, toolrefFetch, withToolRef } from "../src/index.js";
import { missingPython, registry } from "./services.js";

const missing = missingPython();
if (missing !== null && process.env["CI"] === "true") {
  throw new Error(`integration tests need the Python service under CI=true: ${missing}`);
}
if (missing !== null) console.warn(`SKIPPING the backend rollback tests: ${missing}`);

const HEADERS = { "content-type": "application/json" };
const URL_ = "http://backend.test/api/chat";

afterEach(() => {
  forgetSharedState();
  vi.restoreAllMocks();
});

/** The version an edit's bytes are written in: a compact header's first byte, else the JSON
 * header line's `v`. */
function written(wire: Uint8Array): number {
  if (wire[0] !== 0x7b) return wire[0]!;
  const line = new TextDecoder().decode(wire.subarray(0, wire.indexOf(0x0a)));
  return (JSON.parse(line) as { v: number }).v;
}

/** The way to the registry, as one of edits `version` (changed while it runs); `asked`
 * counts its capabilities asked. */
function older(version: number) {
  const replica = {
    version,
    asked: 0,
    fetch: (async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const request = new Request(input, init);
      const path = new URL(request.url).pathname;
      if (path === "/v1/capabilities") {
        replica.asked += 1;
        const answer = await fetch(request);
        const document = { ...((await answer.json()) as Record<string, unknown>), edits: replica.version };
        return new Response(JSON.stringify(document), { status: answer.status, headers: { "content-type": "application/json" } });
      }
      if (path === "/v1/edits:apply") {
        const wire = new Uint8Array(await request.arrayBuffer());
        if (written(wire) > replica.version) {
          const problem = { type: "urn:toolref:problem:malformed-body", title: "malformed body", status: 400, detail: "the header line is not JSON" };
          return new Response(JSON.stringify(problem), { status: 400, headers: { "content-type": "application/problem+json" } });
        }
        return fetch(request.url, { method: "POST", headers: request.headers, body: wire });
      }
      return fetch(request);
    }) as typeof fetch,
  };
  return replica;
}

interface Attempt {
  media: string;
  status: number;
  told: string | null;
  written: number | null;
}

function conversation(turns: number): string {
  const messages: unknown[] = [{ role: "user", content: `read a.py ${"x = 1\n".repeat(300)}` }];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: "assistant", content: `reading file ${turn}` });
    messages.push({ role: "user", content: `file ${turn}: ${`y = ${turn}\n`.repeat(200)}` });
  }
  return JSON.stringify({ messages });
}

describe.skipIf(missing !== null)("a registry rolled back behind withToolRef (the real registry)", () => {
  let reg: Awaited<ReturnType<typeof registry>>;

  beforeAll(async () => {
    reg = await registry();
  });

  afterAll(async () => {
    await reg?.cleanup();
  });

  /** withToolRef over `way`, its handler noting each body; `attempts` each request sent to it. */
  function stack(way: ReturnType<typeof older>) {
    const got: string[] = [];
    const attempts: Attempt[] = [];
    const backend = withToolRef(
      async (request) => {
        got.push(await request.text());
        return new Response(JSON.stringify({ choices: [{ message: { role: "assistant", content: "ok" } }] }), { headers: HEADERS });
      },
      { registry: reg.service.url, fetch: way.fetch },
    );
    const inProcess = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const request = new Request(input, init);
      const media = request.headers.get("content-type") ?? "";
      const wire = new Uint8Array(await request.clone().arrayBuffer());
      const response = await backend(request);
      attempts.push({ media, status: response.status, told: response.headers.get("toolref-edits"), written: media === MEDIA_TYPE ? written(wire) : null });
      return response;
    };
    return { got, attempts, backend, inProcess };
  }

  it("rolled back from 6 to 4 then forward: one resend, every later turn an edit of 4, 5's bytes again after", async () => {
    let now = 1_000_000;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const way = older(6);
    const { got, attempts, inProcess } = stack(way);
    const send = toolrefFetch({ fetch: inProcess });
    vi.spyOn(console, "warn").mockImplementation(() => undefined);
    let turns = 0;
    const turn = async (): Promise<Attempt[]> => {
      now += 500; // two turns a second: within the pause a 415 begins (1 s)
      turns += 1;
      const text = conversation(turns);
      const before = attempts.length;
      const answer = await send(URL_, { method: "POST", headers: HEADERS, body: text });
      expect(answer.status, await answer.clone().text()).toBe(200); // the app never sees the refusal
      await answer.text();
      expect(got.at(-1)).toBe(text); // byte for byte
      return attempts.slice(before);
    };
    await turn();
    await turn();
    expect(attempts.at(-1)).toMatchObject({ media: MEDIA_TYPE, written: 5 });
    way.version = 4;
    const refused = await turn();
    expect(refused.map((a) => [a.media, a.status])).toEqual([
      [MEDIA_TYPE, 415],
      ["application/json", 200],
    ]);
    expect(refused[1]!.told).toBe("4"); // the request as it is is told what the registry reads
    for (let n = 0; n < 4; n++) {
      if (n === 2) now += RECENT_MS + 1; // what the refusal said is old: the answers say 4
      const sent = await turn();
      expect(sent, `turn ${n}`).toEqual([{ media: MEDIA_TYPE, status: 200, told: "4", written: 4 }]);
    }
    // rolled forward: asked again RAISE_MS after the last question, in the background
    way.version = 6;
    now += RAISE_MS;
    expect((await turn())[0]!.told).toBe("4");
    let sent = await turn();
    for (let tries = 0; tries < 200 && sent[0]!.told !== "6"; tries++) {
      await new Promise((done) => setTimeout(done, 5)); // a net: the question is a local round trip
      sent = await turn();
    }
    expect(sent).toEqual([{ media: MEDIA_TYPE, status: 200, told: "6", written: 4 }]); // 4 said within RECENT_MS
    now += RECENT_MS;
    expect(await turn()).toEqual([{ media: MEDIA_TYPE, status: 200, told: "6", written: 5 }]);
  });

  it("refusals as unreadable ask the registry once more, not once each: one in flight, at most once per RECHECK_MS", async () => {
    let now = 1_000_000;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const way = older(6);
    const { backend } = stack(way);
    const offered = async (): Promise<string | null> => {
      const answer = await backend(new Request(URL_, { method: "POST", headers: { ...HEADERS, "toolref-edits": "6" }, body: "{}" }));
      expect(answer.status).toBe(200);
      return answer.headers.get("toolref-edits");
    };
    const refused = async (): Promise<Record<string, unknown>> => {
      const answer = await backend(new Request(URL_, { method: "POST", headers: { "content-type": MEDIA_TYPE }, body: new Uint8Array([5, 0, 0]) }));
      expect(answer.status).toBe(415);
      return (await answer.json()) as Record<string, unknown>;
    };
    expect(await offered()).toBe("6");
    const atStart = way.asked;
    way.version = 4;
    const problems = await Promise.all([refused(), refused(), refused(), refused()]);
    expect(new Set(problems.map((p) => p["cause"]))).toEqual(new Set(["urn:toolref:problem:malformed-body"]));
    expect(way.asked).toBe(atStart + 1); // one question for all four
    expect(await offered()).toBe("4");
    now += RECHECK_MS - 1;
    await refused();
    expect(way.asked).toBe(atStart + 1); // not again within RECHECK_MS
    now += 1;
    await refused();
    expect(way.asked).toBe(atStart + 2);
  });
});
