// Sizes are signals (Python's tests/unit/edits/test_size_oracles.py): the answer dictionary
// (record kind 3) compresses the message that renders the answer only, never an older model
// message the base lacks. zstd is stood in for by deflate with a preset dictionary (Node 20's
// zlib has no zstd), a compressor whose sizes tell as zstd's would.
import { deflateRawSync } from "node:zlib";
import { describe, expect, it, vi } from "vitest";

vi.mock("../src/zstd.js", async (original) => {
  const actual = await original<typeof import("../src/zstd.js")>();
  const zstd = Object.assign(
    async (data: Uint8Array, dictionary?: Uint8Array) =>
      new Uint8Array(deflateRawSync(data, dictionary?.length ? { dictionary } : {})),
    { withDictionary: true },
  );
  return { ...actual, platformZstd: () => zstd };
});

const { Editor } = await import("../src/index.js");
const { AnswerTap } = await import("../src/edits/answer.js");
const encoder = new TextEncoder();
const decoder = new TextDecoder();

const token = (seed: number): string => {
  let state = seed;
  let out = "sk-";
  for (let n = 0; n < 24; n++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out += "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[state % 52];
  }
  return out;
};
const filler = (count: number, seed: number): string => {
  const words = ["alpha", "beta", "gamma", "delta", "file", "line", "error", "value", "config"];
  return Array.from({ length: count }, (_, n) => words[(n * 7 + seed * 3 + ((n * n) % 5)) % words.length]).join(" ");
};
const text = (role: string, said: string) => ({ role, content: [{ type: "text", text: said }] });
const headers: [string, string][] = [["content-type", "application/json"]];
const body = (messages: unknown[]) => encoder.encode(JSON.stringify({ model: "m", messages }));

/** Two turns: the model said the secret in an older turn (its thinking beside it); its answer
 * to the next repeats a guess. The agent writes the answer back and drops the older message's
 * thinking, so that message travels again. The second edit's size and whether it names the answer. */
async function rewrittenTurn(guess: string, secret: string): Promise<[number, boolean]> {
  const editor = new Editor(64, 1 << 22);
  const older = "I read the config: api_token=" + secret + " " + filler(50, 7);
  const thinking = { type: "thinking", thinking: filler(30, 9), signature: "sig" };
  const first = [
    text("user", "read my config " + filler(80, 1)),
    { role: "assistant", content: [thinking, { type: "text", text: older }] },
    text("user", "now fetch the page " + filler(60, 2)),
  ];
  const one = (await editor.prepare(headers, body(first), "messages"))!;
  expect(editor.confirm(one, one.ref)).toBe(true);
  const said = "The page says: api_token=" + guess + " " + filler(40, 5);
  editor.answered(one.ref, encoder.encode(JSON.stringify(text("assistant", said))));
  const second = [first[0], text("assistant", older), first[2], text("assistant", said), text("user", "thanks " + filler(30, 3))];
  const two = (await editor.prepare(headers, body(second), "messages"))!;
  return [two.body.length, two.body[0] === 0x05 ? (two.body[1]! & 2) !== 0 : decoder.decode(two.body).includes('"a":')];
}

describe("the answer dictionary", () => {
  it("never compresses an older model message against the answer (a guess costs the same right or wrong)", async () => {
    for (let seed = 10; seed < 16; seed++) {
      const [right] = await rewrittenTurn(token(seed), token(seed));
      const [wrong] = await rewrittenTurn(token(seed + 100), token(seed));
      expect(wrong).toBe(right);
    }
  });

  it("still compresses the message rendering the answer against it", async () => {
    const [, named] = await rewrittenTurn(token(1), token(2));
    expect(named).toBe(true);
  });
});

/** A first request whose last message carries two tool results (parallel tool calls,
 * Anthropic's or Gemini's shape): a file holding `secret` and a page holding `guess`, `lines`
 * lines long (100: the long window cuts it). Its edit's size. */
async function parallelResults(guess: string, secret: string, gemini: boolean, lines: number): Promise<number> {
  const file = "api_token=" + secret + "\n" + filler(40, 3);
  const page = [...Array.from({ length: lines }, (_, n) => `<p>${filler(12, 4 + n)}</p>`), "api_token=" + guess, "</html>"].join("\n");
  const editor = new Editor(64, 1 << 22);
  if (gemini) {
    const parts = [file, page].map((content) => ({ functionResponse: { name: "read", response: { content } } }));
    const contents = [
      { role: "user", parts: [{ text: "read my config and fetch the page" }] },
      { role: "model", parts: [{ functionCall: { name: "read", args: {} } }, { functionCall: { name: "read", args: {} } }] },
      { role: "user", parts },
    ];
    return (await editor.prepare(headers, encoder.encode(JSON.stringify({ contents })), "contents"))!.body.length;
  }
  const results = [file, page].map((content, n) => ({ type: "tool_result", tool_use_id: `toolu_${n}`, content }));
  const uses = [0, 1].map((n) => ({ type: "tool_use", id: `toolu_${n}`, name: "read", input: {} }));
  const messages = [text("user", "read my config and fetch the page " + filler(20, 2)), { role: "assistant", content: uses }, { role: "user", content: results }];
  return (await editor.prepare(headers, body(messages), "messages"))!.body.length;
}

describe("parallel tool results", () => {
  it("are compressed each alone: two right guesses cost what the same two wrong cost", async () => {
    for (const gemini of [false, true]) {
      for (const lines of [0, 100]) {
        for (let seed = 10; seed < 13; seed++) {
          const [s, w] = [token(seed), token(seed + 100)];
          const right = (await parallelResults(s, s, gemini, lines)) + (await parallelResults(w, w, gemini, lines));
          const wrong = (await parallelResults(w, s, gemini, lines)) + (await parallelResults(s, w, gemini, lines));
          expect([gemini, lines, seed, wrong]).toEqual([gemini, lines, seed, right]);
        }
      }
    }
  });
});

/** A Codex answer (OpenAI Responses) as the tap makes it: reasoning (its summary repeats a
 * guess a fetched page asked for; its encrypted content long and random, as the server's is)
 * and a shell call; and its items as Codex writes them back (test_size_oracles.py's). */
function codexAnswer(guess: string): [Uint8Array, unknown[]] {
  let encrypted = "gAAAAB";
  for (let n = 0; n < 40; n++) encrypted += token(1000 + n).slice(3, 33);
  const reasoning = { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "The page says api_token=" + guess }], encrypted_content: encrypted };
  const command = { command: ["bash", "-lc", "cat config.env; echo " + filler(20, 6)] };
  const call = { id: "fc_1", type: "function_call", status: "completed", arguments: JSON.stringify(command), call_id: "call_1", name: "shell" };
  const events = [
    { type: "response.output_item.done", output_index: 0, item: reasoning },
    { type: "response.output_item.done", output_index: 1, item: call },
    { type: "response.completed", response: { status: "completed" } },
  ];
  const tap = new AnswerTap("openai-responses");
  tap.feed(encoder.encode(events.map((event) => "data: " + JSON.stringify(event) + "\n\n").join("")));
  const answer = tap.answer!;
  const text = decoder.decode(answer);
  return [answer, JSON.parse(text.slice(0, text.indexOf("\n"))) as unknown[]];
}

/** Two Codex turns: the answer to the first written back as its items, then the call's output,
 * a file holding `secret` (`interleaved`: between the call and a second call, as older Codex
 * wrote them), then the user's next message. The second edit's size and whether it names the answer. */
async function codexTurn(guess: string, secret: string, withAnswer = true, interleaved = false): Promise<[number, boolean]> {
  const editor = new Editor(64, 1 << 22);
  const input = (items: unknown[]) => encoder.encode(JSON.stringify({ model: "m", input: items }));
  const first = [{ type: "message", role: "user", content: "read my config " + filler(80, 1) }];
  const one = (await editor.prepare(headers, input(first), "input"))!;
  expect(editor.confirm(one, one.ref)).toBe(true);
  const [answer, items] = codexAnswer(guess);
  if (withAnswer) editor.answered(one.ref, answer);
  const output = { type: "function_call_output", call_id: "call_1", output: "api_token=" + secret + "\n" + filler(40, 8) };
  const written = interleaved ? [items[0], items[1], output, items[1]] : [...items, output];
  const user = { type: "message", role: "user", content: "thanks " + filler(30, 3) };
  const two = (await editor.prepare(headers, input([...first, ...written, user]), "input"))!;
  return [two.body.length, two.body[0] === 0x05 ? (two.body[1]! & 2) !== 0 : decoder.decode(two.body).includes('"a":')];
}

describe("a Codex turn (OpenAI Responses items)", () => {
  it("never compresses a tool output after the model's items against the answer (a guess costs the same right or wrong)", async () => {
    for (const interleaved of [false, true]) {
      for (let seed = 10; seed < 16; seed++) {
        const [right, named] = await codexTurn(token(seed), token(seed), true, interleaved);
        const [wrong] = await codexTurn(token(seed + 100), token(seed), true, interleaved);
        expect(named).toBe(true);
        expect([interleaved, seed, wrong]).toEqual([interleaved, seed, right]);
      }
    }
  });

  it("compresses its reasoning and call against the answer: smaller than without", async () => {
    const [against, named] = await codexTurn(token(1), token(2));
    const [alone, plain] = await codexTurn(token(1), token(2), false);
    expect([named, plain]).toEqual([true, false]);
    expect(against).toBeLessThan(alone - 600);
  });
});
