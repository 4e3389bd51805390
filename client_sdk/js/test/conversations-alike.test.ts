// Conversations opening alike (Python's tests/unit/edits/test_editor.py::
// test_conversations_opening_alike_keep_each_its_own_base): a first turn sent against another
// conversation's recipe (a long system prompt in common) leaves that recipe kept, and each
// conversation's next turn is sent against its own last one.
import { describe, expect, it } from "vitest";
import { Editor } from "../src/index.js";

const encoder = new TextEncoder();
const HEADERS: [string, string][] = [["content-type", "application/json"]];

function words(count: number, seed: number): string {
  let state = seed;
  const out: string[] = [];
  for (let n = 0; n < count; n++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out.push(`w${state % 5000}`);
  }
  return out.join(" ");
}

describe("conversations opening alike", () => {
  it("keep each its own base, turns interleaved", async () => {
    const system = words(1500, 1);
    const editor = new Editor();
    const conversations = [0, 1, 2].map((seed) => [
      { role: "system", content: system },
      { role: "user", content: `task ${seed}: ${words(40, 100 + seed)}` },
    ]);
    const last: (string | null)[] = [null, null, null];
    for (let turn = 0; turn < 6; turn++) {
      for (const [which, messages] of conversations.entries()) {
        const body = encoder.encode(JSON.stringify({ model: "m", messages }));
        const edit = (await editor.prepare(HEADERS, body, "messages"))!;
        if (last[which] !== null) expect(edit.base).toBe(last[which]);
        expect(editor.confirm(edit, edit.ref)).toBe(true);
        last[which] = edit.ref;
        messages.push({ role: "assistant", content: words(30, turn * 10 + which) });
        messages.push({ role: "user", content: "result: " + words(300, turn * 10 + which + 5) });
      }
      for (const ref of last) expect(editor.recipes.get(ref!)).toBeDefined();
    }
  });
});
