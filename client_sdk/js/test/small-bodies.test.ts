// A tiny first body goes as it came (docs/edits.md, "Who sends, who applies"): once the
// receiver reads edits, a request with no base whose edit would put more on the wire than it,
// and that no later turn could be an edit of (no message of `RELATED_MIN` bytes), is sent as
// the app wrote it (`notWorthAnEdit`, Python's `not_worth_an_edit`: every sender's rule); the
// conversation's next turn, worth an edit, still goes as one. Through `toolrefFetch` and the
// `ToolReferenceManager` it uses, against the scripted receiver (test/receiver.ts).
import { afterEach, describe, expect, it } from "vitest";
import { Editor, MEDIA_TYPE, ToolReferenceManager, VERSION, asItCameBytes, editBytes, forgetSharedState, notWorthAnEdit, toolrefFetch, type ExchangeInfo } from "../src/index.js";
import { Receiver } from "./receiver.js";

afterEach(() => forgetSharedState());

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const URL_ = "http://app.test/v1/chat/completions";
const HEADERS = { "content-type": "application/json", authorization: "Bearer sk-secret" };

const WARM = { model: "m", messages: [{ role: "user", content: "Explain the parser. ".repeat(12) }] };
const TINY = { model: "m", messages: [{ role: "user", content: "hi" }] };
const FOLLOW = {
  model: "m",
  messages: [...TINY.messages, { role: "assistant", content: "You said: hi" }, { role: "user", content: "Now walk me through the parser, step by step. ".repeat(12) }],
};
// Another conversation first (the receiver then says it reads edits), the tiny body, its next turn.
const BODIES = [WARM, TINY, FOLLOW].map((value) => JSON.stringify(value));

function expectTinyAsItCame(receiver: Receiver): void {
  expect(receiver.arrived.map((item) => decoder.decode(item.restored.body))).toEqual(BODIES); // each exactly
  const [warm, tiny, follow] = receiver.arrived;
  expect(warm!.edit).toBeNull();
  expect(tiny!.edit).toBeNull();
  expect(tiny!.headers.get("content-type")).toBe("application/json");
  expect(tiny!.headers.get("Toolref-Edits")).toBe(String(VERSION)); // still offering edits
  expect(decoder.decode(tiny!.wire)).toBe(BODIES[1]); // the wire carried the body, and no more
  expect(follow!.edit).not.toBeNull();
  expect(follow!.headers.get("content-type")).toBe(MEDIA_TYPE);
  expect(follow!.wire.length).toBeLessThan(BODIES[2]!.length);
}

describe("a tiny first body goes as it came", () => {
  it("toolrefFetch: the tiny body as the app wrote it, its next turn an edit", async () => {
    const receiver = new Receiver();
    const exchanges: ExchangeInfo[] = [];
    const send = toolrefFetch({ fetch: receiver.fetch, onExchange: (info) => exchanges.push(info) });
    for (const body of BODIES) {
      const answer = await send(URL_, { method: "POST", headers: HEADERS, body });
      expect(answer.status).toBe(200);
      await answer.text();
    }
    expectTinyAsItCame(receiver);
    expect(exchanges.map((info) => info.edit)).toEqual([false, false, true]);
    expect(exchanges[1]).toMatchObject({ wireBytes: BODIES[1]!.length, rawBytes: BODIES[1]!.length, historyRef: null });
  });

  it("ToolReferenceManager.send: the same", async () => {
    const receiver = new Receiver();
    const manager = new ToolReferenceManager();
    const edits: boolean[] = [];
    for (const body of BODIES) {
      const sent = await manager.send(
        encoder.encode(body),
        (content, extra, edit) => {
          const headers = new Headers(edit ? { authorization: HEADERS.authorization } : HEADERS);
          for (const [name, value] of Object.entries(extra)) headers.set(name, value);
          return receiver.fetch(URL_, { method: "POST", headers, body: content as BodyInit });
        },
        HEADERS,
      );
      await sent.response.text();
      edits.push(sent.edit);
    }
    expectTinyAsItCame(receiver);
    expect(edits).toEqual([false, false, true]);
    expect(manager.savings).toMatchObject({ requests: 3, edits: 1 });
  });

  it("the rule: a tiny first attempt with no base is not worth its edit; one with a message of RELATED_MIN bytes always is", async () => {
    const editor = new Editor();
    const headers: [string, string][] = [["content-type", "application/json"]];
    const offer: [string, string][] = [["Toolref-Edits", String(VERSION)]];
    const tiny = (await editor.prepare(headers, encoder.encode(BODIES[1]!), "messages"))!;
    expect(editBytes(tiny)).toBeGreaterThan(asItCameBytes(tiny, offer));
    expect(notWorthAnEdit(tiny, asItCameBytes(tiny, offer))).toBe(true);
    const long = (await editor.prepare(headers, encoder.encode(BODIES[2]!), "messages"))!;
    expect(notWorthAnEdit(long, 0)).toBe(false); // a base for later turns, whatever it costs
  });
});
