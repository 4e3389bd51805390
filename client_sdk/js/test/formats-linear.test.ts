// Found in review (linear and bounded, formats): paths of the JS formats whose cost grew
// with the square of what a peer sends. Each test counts the work through a seam (the
// elements an Array method walks, moves or copies), never the time.
import { describe, expect, it } from "vitest";
import { fill, fromMarker, getFormat, rewrite, scan, toMarker } from "../src/index.js";

/** The elements `Array.prototype[method]` walks (its array's length, per call) while `run`
 * runs: `Symbol.iterator` counts what spreads (`[...list]`) and `for...of` loops read. */
function walked(method: "includes" | "shift" | typeof Symbol.iterator, run: () => void): number {
  const proto = Array.prototype as unknown as Record<typeof method, (...args: unknown[]) => unknown>;
  const original = proto[method];
  let total = 0;
  proto[method] = function (this: unknown[], ...args: unknown[]) {
    total += this.length;
    return original.apply(this, args);
  };
  try {
    run();
  } finally {
    proto[method] = original;
  }
  return total;
}

describe("formats: linear in what a peer sends", () => {
  const anthropic = getFormat("anthropic");
  const n = 400;
  const conversation = (count: number) => [
    { role: "assistant", content: Array.from({ length: count }, (_, i) => ({ type: "tool_use", id: `t${i}`, name: "read", input: { i } })) },
    { role: "user", content: Array.from({ length: count }, (_, i) => ({ type: "tool_result", tool_use_id: `t${i}`, content: `r${i}` })) },
  ];
  /** The array elements rewrite, then fill, walk for `count` invocations in two messages. */
  function copies(count: number): [number, number] {
    const messages = conversation(count);
    let out: ReturnType<typeof rewrite> = { messages: [], used: {}, refs: {} };
    const marking = walked(Symbol.iterator, () => (out = rewrite(messages, anthropic)));
    expect(Object.keys(out.used)).toHaveLength(count);
    const invocations = Object.fromEntries(
      Object.values(out.refs).map((ref, i) => [ref, { name: "read", args: { i }, result: `r${i}`, isError: false }]),
    );
    let filled: unknown[] = [];
    const filling = walked(Symbol.iterator, () => (filled = fill(out.messages, anthropic, invocations)));
    expect(JSON.stringify(filled)).toBe(JSON.stringify(messages));
    return [marking, filling];
  }

  it("rewrite and fill copy a message once, however many markers it holds", () => {
    // Each marker copied the message's whole block list again: blocks x markers elements
    // copied. A marker costs its own members now, whatever the message's length: twice the
    // markers, twice the elements walked.
    const [marking, filling] = copies(n);
    const [marking2, filling2] = copies(2 * n);
    expect(marking2).toBeLessThan(2.2 * marking);
    expect(filling2).toBeLessThan(2.2 * filling);
  });

  it("scan takes pending calls from the front without moving the rest", () => {
    // `shift` on a queue of n calls moved the n - 1 behind it, each time: quadratic once
    // an id-less result made scan walk a tool name's queue of answered calls.
    const chat = getFormat("openai-chat");
    const messages = [
      { role: "assistant", tool_calls: Array.from({ length: n }, (_, i) => ({ id: `c${i}`, type: "function", function: { name: "f", arguments: "{}" } })) },
      ...Array.from({ length: n }, (_, i) => ({ role: "tool", tool_call_id: `c${i}`, content: "x" })),
      { role: "tool", name: "f", content: "y" },
    ];
    let found: ReturnType<typeof scan> = [];
    expect(walked("shift", () => (found = scan(messages, chat)))).toBeLessThan(10 * n);
    expect(found).toHaveLength(n + 1); // every call answered by id; the id-less result an orphan
    expect(found[n]!.call).toBeNull();
  });

  it("fromMarker reads a long toolRefOrder once", () => {
    // Each member was looked up in the order list with `includes`: members x names.
    const names = Array.from({ length: 2000 }, (_, i) => `m${i}`);
    const obj = Object.fromEntries([...names.map((name) => [name, 1]), ["args", 2]]);
    const marker = { ...toMarker(obj, ["args"], "tr_x"), toolRefOrder: [...names].reverse() };
    let restored: object = {};
    expect(walked("includes", () => (restored = fromMarker(marker, { args: 2 })))).toBeLessThan(10 * names.length);
    expect(Object.keys(restored)).toEqual([...[...names].reverse(), "args"]);
  });
});

describe("formats: markers in JS as in Python", () => {
  it("fromMarker brings back a member named like an Object.prototype method", () => {
    // Found in the same review: `key in values` took `toString` for a payload key, and
    // the member came back as Object.prototype's function (dropped from the JSON).
    const part = { type: "tool-x", toolCallId: "c", input: 1, output: 2, toString: "kept", constructor: 3 };
    const marker = toMarker(part, ["input", "output"], "tr_x");
    expect(JSON.stringify(fromMarker(marker, { input: 1, output: 2 }))).toBe(JSON.stringify(part));
    const listed = { ...marker, toolRefOrder: ["valueOf", ...Object.keys(part)] };
    expect(Object.keys(fromMarker(listed, { input: 1, output: 2 }))).toEqual(Object.keys(part));
  });

  it("a member named __proto__ stays a member through toMarker and fromMarker", () => {
    // `JSON.parse` makes `__proto__` an own member; assigning it set the prototype instead,
    // and the member was gone from the JSON (Python keeps it: the SDKs' bytes differed).
    const text = '{"type":"tool-x","toolCallId":"c","__proto__":{"a":1},"input":1,"output":2}';
    const part = JSON.parse(text) as Record<string, unknown>;
    const marker = toMarker(part as never, ["input", "output"], "tr_x");
    expect(JSON.stringify(marker)).toContain('"__proto__":{"a":1}');
    expect(JSON.stringify(fromMarker(marker, { input: 1, output: 2 }))).toBe(text);
  });
});
