// toolrefFetch used concurrently, as a Node server or a page sending many requests at once
// uses it (docs/js.md, "State shared per endpoint"): the interleavings are forced with
// controllable stubs (a fetch that holds edits until released, an Editor.prepare held open),
// never by timing. Many conversations interleaved, the same request twice at once and
// requests aborted mid-send or mid-answer each reach the receiver exactly as written, with
// the memory bounds held; a receiver refusing edits while several are in flight is one
// outage (one pause), not one per edit; an edit still being prepared when its endpoint was
// paused or forgotten goes as it is, not as an edit already known to be refused.
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, ToolReferenceManager, forgetSharedState, toolrefFetch, type ExchangeInfo } from "../src/index.js";
import { Receiver } from "./receiver.js";

afterEach(() => {
  vi.restoreAllMocks();
  forgetSharedState();
});

const decoder = new TextDecoder();
const URL_ = "http://app.test/api/chat";
const HEADERS = { "content-type": "application/json" };

/** Conversation `id` after `turns` turns: its own messages, each of several hundred bytes. */
function body(id: number, turns: number): string {
  const messages: unknown[] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: "user", content: `conversation ${id}, question ${turn}: ${"why ".repeat(40)}` });
    messages.push({ role: "assistant", content: `conversation ${id}, answer ${turn}: ${"because ".repeat(300 + turn)}` });
  }
  return JSON.stringify({ messages });
}

function post(send: typeof fetch, text: string, signal?: AbortSignal): Promise<Response> {
  return send(URL_, { method: "POST", headers: HEADERS, body: text, signal });
}

/** A fetch to `receiver` that holds every edit until `release()` (then in the order given)
 * unless `state.open`, and answers it with `refusal()` when that is set. */
function holding(receiver: Receiver) {
  const held: { go: () => void; edit: boolean }[] = [];
  const state = { refusal: null as null | (() => Response), kinds: [] as string[], open: false };
  const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const edit = new Headers(init?.headers).get("content-type") === MEDIA_TYPE;
    state.kinds.push(edit ? "edit" : "as it is");
    if (edit && !state.open) await new Promise<void>((go) => held.push({ go, edit }));
    init?.signal?.throwIfAborted();
    if (edit && state.refusal !== null) return state.refusal();
    return receiver.fetch(input, init);
  }) as typeof globalThis.fetch;
  /** Let the held edits go, `order` giving their indices (default: as they came). */
  const release = (order?: number[]): void => {
    const going = held.splice(0);
    for (const index of order ?? going.map((_, n) => n)) going[index]!.go();
  };
  /** Wait until `count` edits are held. */
  const waitFor = async (count: number): Promise<void> => {
    while (held.length < count) await new Promise((done) => setImmediate(done));
  };
  return { fetch, release, waitFor, state, held };
}

const REGISTRY_DOWN = () =>
  new Response(JSON.stringify({ type: "urn:toolref:problem:unsupported-media-type", status: 415 }), {
    status: 415,
    headers: { "content-type": "application/problem+json", "Toolref-Edits": "5" },
  });

describe("many requests at once through one endpoint's shared state", () => {
  it("conversations interleaved, some sent twice at once, answers released out of order: each restored exactly, within the bounds", async () => {
    const receiver = new Receiver();
    const gate = holding(receiver);
    const manager = new ToolReferenceManager({ maxRecipes: 6, maxRecipeBytes: 64 << 10 });
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: gate.fetch, manager, onExchange: (info) => exchanges.push(info) });
    await (await post(send, body(99, 1))).text(); // the offer answered: edits from now on
    const sent: string[] = [];
    const conversations = 10;
    for (let turn = 1; turn <= 4; turn++) {
      const round: Promise<void>[] = [];
      for (let id = 0; id < conversations; id++) {
        const text = body(id, turn);
        const twice = id % 3 === 0 ? 2 : 1; // a double click: the same request twice at once
        for (let n = 0; n < twice; n++) {
          sent.push(text);
          round.push(post(send, text).then(async (answer) => void expect([answer.status, await answer.text()]).toEqual([200, "data: {}\n\n"])));
        }
      }
      await gate.waitFor(round.length);
      // The later ones answered first (a regenerate whose answer comes before the first's).
      gate.release([...Array(round.length).keys()].reverse());
      await Promise.all(round);
      expect(manager.editor.recipes.size).toBeLessThanOrEqual(6);
      expect(manager.editor.recipes.heldBytes).toBeLessThanOrEqual(64 << 10);
    }
    const restored = receiver.arrived.slice(1).map((item) => decoder.decode(item.restored.body));
    expect(restored.sort()).toEqual([...sent].sort());
    expect(manager.savings.requests).toBe(sent.length + 1);
    expect(manager.savings.rawBytes).toBe(exchanges.reduce((sum, info) => sum + info.rawBytes, 0));
    expect(manager.savings.wireBytes).toBe(exchanges.reduce((sum, info) => sum + info.wireBytes, 0));
  });

  it("requests aborted before their answer or in the middle of it leave nothing behind: the next turns are edits of one attempt", async () => {
    const receiver = new Receiver(
      () => new Response(new ReadableStream({ start: (controller) => controller.enqueue(new TextEncoder().encode("data: {}\n\n")) }), { headers: { "content-type": "text/event-stream" } }),
    );
    const gate = holding(receiver);
    const manager = new ToolReferenceManager();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: gate.fetch, manager, onExchange: (info) => exchanges.push(info) });
    gate.state.open = true;
    await (await post(send, body(99, 1))).body!.cancel(); // the offer answered
    for (const id of [0, 1]) await (await post(send, body(id, 1))).body!.cancel(); // no base: every segment inline
    gate.state.open = false;
    // Conversation 0's next turn aborted while its edit is held (mid-send); conversation 1's
    // aborted once its answer began (mid-answer).
    const before = new AbortController();
    const during = new AbortController();
    const aborted = post(send, body(0, 2), before.signal);
    const answered = post(send, body(1, 2), during.signal);
    await gate.waitFor(2);
    before.abort();
    gate.release();
    await expect(aborted).rejects.toThrow(/abort/i);
    const streaming = await answered;
    const reader = streaming.body!.getReader();
    await reader.read();
    during.abort();
    await reader.cancel().catch(() => undefined);
    // The following turns: each an edit of the conversation's last confirmed recipe, at once.
    const next = exchanges.length;
    const following = [post(send, body(0, 3)), post(send, body(1, 3))];
    await gate.waitFor(2);
    gate.release();
    for (const answer of await Promise.all(following)) await answer.body!.cancel();
    expect(exchanges.slice(next).map((info) => [info.attempts, info.edit, info.continued !== null])).toEqual([
      [1, true, true],
      [1, true, true],
    ]);
  });
});

describe("a receiver refusing edits while several are in flight (docs/js.md, the pause)", () => {
  it("one outage seen by four edits at once pauses 1 s, as one refusal does, not 8 s", async () => {
    const receiver = new Receiver();
    const gate = holding(receiver);
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: gate.fetch, manager });
    let now = 1_000_000;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    await (await post(send, body(99, 1))).text();
    const answers = [0, 1, 2, 3].map((id) => post(send, body(id, 1)));
    await gate.waitFor(4);
    gate.state.refusal = REGISTRY_DOWN; // the registry goes down with four edits in flight
    gate.release();
    for (const answer of await Promise.all(answers)) expect(answer.status).toBe(200);
    expect(gate.state.kinds.filter((kind) => kind === "as it is").length).toBe(5); // each sent again as it is
    expect(manager.pausedUntil - now).toBe(1000);
    // Once over, an edit tried and refused again: a further refusal, paused twice as long.
    now += 1000;
    const probe = post(send, body(5, 1));
    await gate.waitFor(1);
    gate.release();
    expect((await probe).status).toBe(200);
    expect(manager.pausedUntil - now).toBe(2000);
  });

  it("a pause ends on the monotonic clock: a wall clock set back an hour meanwhile does not stretch it", async () => {
    const receiver = new Receiver();
    const gate = holding(receiver);
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: gate.fetch, manager });
    let wall = 1_700_000_000_000;
    let now = 1_000_000;
    vi.spyOn(Date, "now").mockImplementation(() => wall);
    vi.spyOn(performance, "now").mockImplementation(() => now);
    await (await post(send, body(99, 1))).text();
    gate.state.refusal = REGISTRY_DOWN;
    gate.state.open = true;
    expect((await post(send, body(0, 1))).status).toBe(200); // refused, sent as it is: paused 1 s
    expect(gate.state.kinds.slice(-2)).toEqual(["edit", "as it is"]);
    now += 500; // within the pause: as it is
    expect((await post(send, body(0, 2))).status).toBe(200);
    expect(gate.state.kinds.at(-1)).toBe("as it is");
    // The system clock is set back an hour (NTP, a user); a second passes on the monotonic one.
    wall -= 3_600_000;
    now += 600;
    gate.state.refusal = null;
    expect((await post(send, body(0, 3))).status).toBe(200);
    expect(gate.state.kinds.at(-1)).toBe("edit"); // before: paused for an hour more
  });

  it("an edit still being prepared when its endpoint was paused goes as it is, not as an edit refused again", async () => {
    const receiver = new Receiver();
    const gate = holding(receiver);
    const manager = new ToolReferenceManager();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: gate.fetch, manager, onExchange: (info) => exchanges.push(info) });
    const now = 1_000_000;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    await (await post(send, body(99, 1))).text();
    // The second request's edit is held in the making (a long conversation's hashing).
    const prepare = manager.editor.prepare.bind(manager.editor);
    let finish: () => void = () => undefined;
    const preparing = new Promise<void>((done) => (finish = done));
    let calls = 0;
    vi.spyOn(manager.editor, "prepare").mockImplementation(async (...args) => {
      const made = await prepare(...args);
      if (++calls === 2) await preparing;
      return made;
    });
    const refused = post(send, body(0, 1));
    await gate.waitFor(1);
    const late = post(send, body(1, 1));
    while (calls < 2) await new Promise((done) => setImmediate(done));
    gate.state.refusal = REGISTRY_DOWN;
    gate.release();
    expect((await refused).status).toBe(200); // refused, sent as it is: paused 1 s
    gate.state.open = true; // an edit sent now is answered (refused) at once
    finish();
    expect((await late).status).toBe(200);
    expect(gate.state.kinds).toEqual(["as it is", "edit", "as it is", "as it is"]);
    expect(exchanges.at(-1)).toMatchObject({ attempts: 1, edit: false });
    expect(manager.pausedUntil - now).toBe(1000);
  });

  it("an edit still being prepared when its endpoint was forgotten (a backend rolled back) goes as it is: the backend never gets it", async () => {
    const receiver = new Receiver();
    const gate = holding(receiver);
    const manager = new ToolReferenceManager();
    const send = toolrefFetch({ fetch: gate.fetch, manager });
    await (await post(send, body(99, 1))).text();
    const prepare = manager.editor.prepare.bind(manager.editor);
    let finish: () => void = () => undefined;
    const preparing = new Promise<void>((done) => (finish = done));
    let calls = 0;
    vi.spyOn(manager.editor, "prepare").mockImplementation(async (...args) => {
      const made = await prepare(...args);
      if (++calls === 2) await preparing;
      return made;
    });
    const first = post(send, body(0, 1));
    await gate.waitFor(1);
    const late = post(send, body(1, 1));
    while (calls < 2) await new Promise((done) => setImmediate(done));
    // The backend rolled back: a framework's own 400 to the edit, no toolref header.
    gate.state.refusal = () => new Response("Bad Request", { status: 400, headers: { "content-type": "text/plain" } });
    receiver.speaks = false;
    gate.release();
    expect((await first).status).toBe(200);
    expect(manager.edits).toBe(0);
    gate.state.open = true; // an edit sent now is answered (refused) at once
    finish();
    expect((await late).status).toBe(200);
    expect(gate.state.kinds).toEqual(["as it is", "edit", "as it is", "as it is"]);
  });
});
