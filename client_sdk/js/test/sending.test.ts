// The sending path under review (docs/js.md, "What is sent"): what the Editor keeps of the
// answers it compresses against stays within the manager's bounds, as Python's Editor keeps
// it; and a backend that stops reading edits is recovered from whatever its framework
// answers an edit it cannot read (a problem document of its own included).
import { afterEach, describe, expect, it, vi } from "vitest";
import { Editor, MEDIA_TYPE, ToolReferenceManager, UsageError, forgetSharedState, toolrefFetch, type ExchangeInfo } from "../src/index.js";
import { Receiver } from "./receiver.js";

afterEach(() => forgetSharedState());

const encoder = new TextEncoder();

/** A request of a conversation of its own, prepared and confirmed by `editor` as the answer
 * naming its recipe confirms it; its recipe's ref. */
async function kept(editor: Editor, text: string): Promise<string> {
  const body = encoder.encode(JSON.stringify({ messages: [{ role: "user", content: text }] }));
  const edit = (await editor.prepare([["content-type", "application/json"]], body, "messages"))!;
  expect(editor.confirm(edit, edit.ref)).toBe(true);
  return edit.ref;
}

function answerBytes(editor: Editor): number {
  let size = 0;
  for (const answer of editor.answers.values()) size += answer.length;
  return size;
}

describe("the answers an Editor keeps (Python's Editor._trim_answers)", () => {
  it("an answer whose recipe is not kept (dropped before its stream ended) is not held", async () => {
    const editor = new Editor(64, 1 << 20);
    for (let n = 0; n < 8; n++) editor.answered(`tb_${"a".repeat(25)}${"aeimquy4"[n]}`, new Uint8Array(200 << 10));
    expect(editor.answers.size).toBe(0);
  });

  it("answers count with the recipes in maxRecipeBytes: past it, the least recently used recipes go, then the oldest answers", async () => {
    const max = 600 << 10;
    const editor = new Editor(64, max);
    const refs: string[] = [];
    for (let n = 0; n < 4; n++) refs.push(await kept(editor, `conversation ${n} `.repeat(40)));
    for (const ref of refs) {
      editor.answered(ref, new Uint8Array(250 << 10).fill(refs.indexOf(ref)));
      expect(editor.recipes.heldBytes + answerBytes(editor)).toBeLessThanOrEqual(max);
      for (const held of editor.answers.keys()) expect(editor.recipes.get(held)).toBeDefined();
    }
    // The newest recipe and its answer are kept; the oldest went, its answer with it.
    expect(editor.answers.has(refs[3]!)).toBe(true);
    expect(editor.recipes.get(refs[0]!)).toBeUndefined();
  });

  it("a recipe dropped later (maxRecipes) takes its answer with it", async () => {
    const editor = new Editor(2, 64 << 20);
    const refs: string[] = [];
    for (let n = 0; n < 2; n++) {
      refs.push(await kept(editor, `chat ${n} `.repeat(30)));
      editor.answered(refs[n]!, new Uint8Array(100 << 10));
    }
    expect(editor.answers.size).toBe(2);
    // A third recipe confirmed: maxRecipes 2 drops the first, and its answer goes too.
    await kept(editor, "chat 2 ".repeat(30));
    expect(editor.recipes.get(refs[0]!)).toBeUndefined();
    expect([...editor.answers.keys()]).toEqual([refs[1]!]);
  });
});

describe("a backend that stops reading edits and answers them with a problem document of its own", () => {
  const URL_ = "http://app.test/api/chat";
  const HEADERS = { "content-type": "application/json", authorization: "Bearer sk-secret" };

  function conversation(turns: number): unknown[] {
    const messages: unknown[] = [];
    for (let turn = 0; turn < turns; turn++) {
      messages.push({ role: "user", content: `question ${turn}: ${"why ".repeat(40)}` });
      messages.push({ role: "assistant", content: `answer ${turn}: ${"because ".repeat(60)}` });
    }
    return messages;
  }

  // Spring Boot 3 and ASP.NET Core answer a body they cannot read with a problem+json of
  // their own (`about:blank` or an RFC 9110 link): no toolref problem, no Toolref-Edits.
  for (const [what, type] of [
    ["Spring's about:blank", "about:blank"],
    ["ASP.NET's RFC 9110 link", "https://tools.ietf.org/html/rfc9110#section-15.5.1"],
  ] as const) {
    it(`a 400 problem+json (${what}): the request goes again as it is, unseen, and the next ones as they are`, async () => {
      const receiver = new Receiver();
      const state = { rolledBack: false, plain: [] as string[] };
      const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
        if (!state.rolledBack) return receiver.fetch(input, init);
        const request = new Request(input, init);
        const body = await request.text();
        if (request.headers.get("content-type") === MEDIA_TYPE) {
          const problem = { type, title: "Bad Request", status: 400, detail: "Failed to read request" };
          return new Response(JSON.stringify(problem), { status: 400, headers: { "content-type": "application/problem+json" } });
        }
        state.plain.push(body);
        return new Response("answered", { headers: { "content-type": "text/plain" } });
      }) as typeof globalThis.fetch;
      const exchanges: ExchangeInfo[] = [];
      const send = toolrefFetch({ fetch, onExchange: (info) => exchanges.push(info) });
      for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: JSON.stringify({ messages: conversation(turns) }) })).text();
      state.rolledBack = true;
      for (const turns of [3, 4, 5]) {
        const body = JSON.stringify({ messages: conversation(turns) });
        const answer = await send(URL_, { method: "POST", headers: HEADERS, body });
        expect(answer.status).toBe(200);
        expect(await answer.text()).toBe("answered");
        expect(state.plain.at(-1)).toBe(body);
      }
      expect(exchanges.map((info) => [info.edit, info.attempts])).toEqual([
        [false, 1],
        [true, 1],
        [false, 2], // the edit refused, then as it is
        [false, 1], // forgotten: as it is, with the offer
        [false, 1],
      ]);
    });
  }
});

describe("toolrefFetch({ manager }) with the manager's options beside it", () => {
  it("fails loudly, naming the option and where it goes, instead of ignoring it", () => {
    const manager = new ToolReferenceManager();
    for (const [name, value] of [
      ["messagesKey", "input"],
      ["maxRecipes", 4],
      ["maxRecipeBytes", 1 << 20],
    ] as const) {
      const call = () => toolrefFetch({ manager, [name]: value });
      expect(call).toThrow(UsageError);
      expect(call).toThrow(new RegExp(`${name}.*new ToolReferenceManager\\(\\{ ${name} \\}\\)`));
    }
    expect(() => toolrefFetch({ manager })).not.toThrow();
  });
});

describe("parity with Python's Sender (the review of SDK sending parity)", () => {
  const URL_ = "http://app.test/api/chat";
  const HEADERS = { "content-type": "application/json" };
  const PROBLEM = { "content-type": "application/problem+json" };

  function body(turns: number): string {
    const messages: unknown[] = [];
    for (let turn = 0; turn < turns; turn++) messages.push({ role: "user", content: `question ${turn}: ${"why ".repeat(40)}` });
    return JSON.stringify({ messages });
  }

  /** A receiver of edits until `refusal` is set; then a backend without toolref answering an
   * edit with it and a request as it is with "answered" (no Toolref-Edits). */
  function rollingBack() {
    const receiver = new Receiver();
    const state = { refusal: null as null | (() => Response), kinds: [] as string[], plain: [] as string[] };
    const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init);
      const edit = request.headers.get("content-type") === MEDIA_TYPE;
      state.kinds.push(edit ? "edit" : "as it is");
      if (state.refusal === null) return receiver.fetch(input, init);
      if (edit) return state.refusal();
      state.plain.push(await request.text());
      return new Response("answered", { headers: { "content-type": "text/plain" } });
    }) as typeof globalThis.fetch;
    return { state, fetch };
  }

  /** Two turns to a receiver of edits, then three to the backend rolled back, the last an
   * hour on (any pause long over): each gets the answer to its request as made. */
  async function run(refusal: () => Response, manager: ToolReferenceManager): Promise<string[]> {
    const { state, fetch } = rollingBack();
    let now = 1_000_000;
    const clock = vi.spyOn(performance, "now").mockImplementation(() => now);
    try {
      const send = toolrefFetch({ fetch, manager });
      for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) })).text();
      state.refusal = refusal;
      for (const turns of [3, 4, 5]) {
        if (turns === 5) now += 3_600_000;
        const answer = await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) });
        expect([answer.status, await answer.text()]).toEqual([200, "answered"]);
        expect(state.plain.at(-1)).toBe(body(turns));
      }
    } finally {
      clock.mockRestore();
    }
    return state.kinds;
  }

  const problem = (status: number, type: string) => () =>
    new Response(JSON.stringify({ type, title: "Unsupported Media Type", status }), { status, headers: PROBLEM });

  for (const [what, refusal] of [
    ["Spring's about:blank", problem(415, "about:blank")],
    ["ASP.NET's RFC 9110 link", problem(415, "https://tools.ietf.org/html/rfc9110#section-15.5.14")],
    ["a plain text one", () => new Response("Unsupported Media Type", { status: 415, headers: { "content-type": "text/plain" } })],
  ] as const) {
    it(`a 415 from no receiver of edits (${what}): as it is, and the endpoint forgotten (no edit every 30 s)`, async () => {
      const manager = new ToolReferenceManager();
      const kinds = await run(refusal, manager);
      expect(kinds).toEqual(["as it is", "edit", "edit", "as it is", "as it is", "as it is"]);
      expect(manager.edits).toBe(0);
    });
  }

  it("toolref's own 415 (its registry down): as it is, paused, the endpoint kept: an edit once the pause is over", async () => {
    const manager = new ToolReferenceManager();
    const kinds = await run(problem(415, "urn:toolref:problem:unsupported-media-type"), manager);
    expect(kinds).toEqual(["as it is", "edit", "edit", "as it is", "as it is", "edit", "as it is"]);
    expect(manager.edits).toBe(2); // the test receiver's Toolref-Edits
  });

  it("toolref's own 503 store-unavailable (its store down): as it is, paused, as a 415 (Python's parity test)", async () => {
    const manager = new ToolReferenceManager();
    const kinds = await run(problem(503, "urn:toolref:problem:store-unavailable"), manager);
    expect(kinds).toEqual(["as it is", "edit", "edit", "as it is", "as it is", "edit", "as it is"]);
    expect(manager.edits).toBe(2);
  });

  it("another 503 to an edit (overloaded) is the app's to see, not sent again", async () => {
    const { state, fetch } = rollingBack();
    const send = toolrefFetch({ fetch, manager: new ToolReferenceManager() });
    for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) })).text();
    state.refusal = problem(503, "urn:toolref:problem:overloaded");
    const answer = await send(URL_, { method: "POST", headers: HEADERS, body: body(3) });
    expect(answer.status).toBe(503);
    expect(state.kinds.at(-1)).toBe("edit");
    expect(await answer.text()).toContain("overloaded");
  });

  /** A body of `size` bytes in 16 KiB pieces, pulled one at a time; `pulled` counts them. */
  function counted(content: Uint8Array) {
    const seen = { pulled: 0, cancelled: false };
    let at = 0;
    const stream = new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          if (at >= content.length) return controller.close();
          const piece = content.slice(at, at + (16 << 10));
          at += piece.length;
          seen.pulled += piece.length;
          controller.enqueue(piece);
        },
        cancel() {
          seen.cancelled = true;
        },
      },
      { highWaterMark: 0 },
    );
    return { stream, seen };
  }

  it("a long 409 problem+json to an edit is read at most 64 KiB to tell, and handed back byte for byte", async () => {
    // Python's read_problem stops at MAX_PROBLEM_BYTES (a toolref problem is < 2 KiB): this
    // is none, from a receiver of edits (it says Toolref-Edits), so the app gets it.
    const content = new TextEncoder().encode(JSON.stringify({ type: "about:blank", detail: "x".repeat(1 << 20) }));
    const long = counted(content);
    const { state, fetch } = rollingBack();
    const send = toolrefFetch({ fetch });
    for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) })).text();
    state.refusal = () => new Response(long.stream, { status: 409, headers: { ...PROBLEM, "toolref-edits": "4" } });
    const answer = await send(URL_, { method: "POST", headers: HEADERS, body: body(3) });
    expect(answer.status).toBe(409);
    expect(long.seen.pulled).toBeLessThanOrEqual((64 << 10) + (32 << 10));
    expect(new Uint8Array(await answer.arrayBuffer())).toEqual(content);
    expect(state.kinds).toEqual(["as it is", "edit", "edit"]);
  });

  it("a long 400 problem+json from no receiver of edits: at most 64 KiB read, then as it is", async () => {
    const content = new TextEncoder().encode(JSON.stringify({ type: "about:blank", detail: "x".repeat(1 << 20) }));
    const long = counted(content);
    const { state, fetch } = rollingBack();
    const send = toolrefFetch({ fetch });
    for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) })).text();
    state.refusal = () => new Response(long.stream, { status: 400, headers: PROBLEM });
    const answer = await send(URL_, { method: "POST", headers: HEADERS, body: body(3) });
    expect([answer.status, await answer.text()]).toEqual([200, "answered"]);
    expect(long.seen.pulled).toBeLessThanOrEqual((64 << 10) + (32 << 10));
    expect(long.seen.cancelled).toBe(true);
    expect(state.kinds).toEqual(["as it is", "edit", "edit", "as it is"]);
  });

  /** What the endpoint is sent after its first answer said `Toolref-Edits: said`. */
  async function after(said: string): Promise<string[]> {
    const kinds: string[] = [];
    const fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      kinds.push(new Request(input, init).headers.get("content-type") === MEDIA_TYPE ? "edit" : "as it is");
      return new Response("{}", { headers: { "content-type": "application/json", "toolref-edits": said } });
    }) as typeof globalThis.fetch;
    const send = toolrefFetch({ fetch });
    for (const turns of [1, 2]) await (await send(URL_, { method: "POST", headers: HEADERS, body: body(turns) })).text();
    return kinds;
  }

  for (const said of ["4.0", "0x4", "+4", "1e0", "4e0", "0004", "0", "-1", "", "\u00b2"]) {
    it(`Toolref-Edits: ${JSON.stringify(said)} is not 1-3 digits: read as nothing, as Python reads it`, async () => {
      expect(await after(said)).toEqual(["as it is", "as it is"]);
    });
  }

  for (const said of ["4", " 3 ", "04", "999"]) {
    it(`Toolref-Edits: ${JSON.stringify(said)} is read`, async () => {
      expect(await after(said)).toEqual(["as it is", "edit"]);
    });
  }
});
