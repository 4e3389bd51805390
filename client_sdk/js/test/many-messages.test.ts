// A request whose recipe would hold more entries than a receiver takes by default
// (TOOLREF_MAX_EDIT_ENTRIES, 50,000: about 25,000 messages, each two entries) is no edit: the
// receiver would refuse it 413 `too-many-items`, which no sender resent on then, so the app got a
// 413 every turn for a request the provider takes as it is. `Editor.prepare` (as Python's)
// gives null for it, and the sender sends it as the app wrote it.
import { describe, expect, it } from "vitest";
import { Editor } from "../src/index.js";

const encoder = new TextEncoder();
const MAX_EDIT_ENTRIES = 50_000; // TOOLREF_MAX_EDIT_ENTRIES's default
const HEADERS: [string, string][] = [["content-type", "application/json"]];

function body(count: number): Uint8Array {
  const first = { role: "user", content: "read the repository, then summarise it. ".repeat(40) };
  const messages = [first, ...Array.from({ length: count }, (_, n) => ({ role: n % 2 ? "user" : "assistant", content: `m${n}` }))];
  return encoder.encode(JSON.stringify({ model: "m", messages }));
}

describe("a request past the receiver's entries bound", () => {
  it("is an edit up to the bound and goes as it is past it", async () => {
    const editor = new Editor();
    const under = await editor.prepare(HEADERS, body(1000), "messages");
    expect(under).not.toBeNull();
    const over = await editor.prepare(HEADERS, body(MAX_EDIT_ENTRIES / 2 + 1000), "messages");
    expect(over).toBeNull();
  });
});
