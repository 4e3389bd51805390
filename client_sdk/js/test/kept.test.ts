// The pure parts of compressing a continuation as Python does (src/kept.ts, and
// src/history.ts's primed, reach and opening): what the parity test
// (tests/integration/test_js_parity.py) relies on, on a Node with zstd, against the server.
import { describe, expect, it } from "vitest";
import { DICTIONARY_LIMIT, H0, checkpointOf, heads, historyRef, opening, primed, reach } from "../src/history.js";
import { KeptBodies } from "../src/kept.js";
import { ToolReferenceManager } from "../src/manager.js";
import { declaresSizeAndChecksum } from "../src/zstd.js";

const bytes = (text: string) => new TextEncoder().encode(text);

describe("kept bodies", () => {
  it("keep one body per conversation, the newest, and only for that conversation", () => {
    const kept = new KeptBodies(8);
    kept.keep(["th_a"], "first-1", bytes("one"));
    kept.keep(["th_b"], "first-1", bytes("two")); // the same conversation, a newer history
    kept.keep(["th_c"], "first-2", bytes("other"));
    expect(kept.get("th_a", "first-1")).toBeUndefined();
    expect(kept.get("th_b", "first-1")).toEqual(bytes("two"));
    expect(kept.get("th_b", "first-2")).toBeUndefined(); // never another conversation's
    expect(kept.size).toBe(2);
  });

  it("drop the least recently kept past the count and the bytes", () => {
    const byCount = new KeptBodies(2);
    for (const name of ["a", "b", "c"]) byCount.keep([`th_${name}`], name, bytes(name));
    expect(byCount.get("th_a", "a")).toBeUndefined();
    expect(byCount.size).toBe(2);
    const byBytes = new KeptBodies(8, 10);
    byBytes.keep(["th_a"], "a", bytes("123456"));
    byBytes.keep(["th_b"], "b", bytes("7890123"));
    expect(byBytes.get("th_a", "a")).toBeUndefined();
    expect(byBytes.get("th_b", "b")).toEqual(bytes("7890123"));
    byBytes.keep(["th_c"], "c", bytes("x".repeat(11))); // larger than all may hold: not kept
    expect(byBytes.get("th_c", "c")).toBeUndefined();
  });

  it("name none for 2**n - 1 turns after the n-th refusal in a row", () => {
    const kept = new KeptBodies(8);
    kept.keep(["th_a"], "a", bytes("body"));
    const pattern = (turns: number) => Array.from({ length: turns }, () => kept.turn());
    expect(pattern(2)).toEqual([true, true]);
    kept.refused("th_a");
    expect(kept.get("th_a", "a")).toBeUndefined();
    expect(pattern(2)).toEqual([false, true]);
    kept.refused("th_b");
    expect(pattern(4)).toEqual([false, false, false, true]);
    kept.accepted();
    kept.refused("th_c");
    expect(pattern(2)).toEqual([false, true]); // counted afresh after an accepted one
  });
});

describe("the dictionary of a continuation", () => {
  it("primes a history's dictionary with the kept body, at most DICTIONARY_LIMIT from the end", () => {
    expect(primed(bytes("history"), bytes("+body"))).toEqual(bytes("history+body"));
    const long = primed(new Uint8Array(DICTIONARY_LIMIT).fill(1), bytes("tail"));
    expect(long.length).toBe(DICTIONARY_LIMIT);
    expect(long.slice(-4)).toEqual(bytes("tail"));
  });

  it("reaches 32 KiB at least, 32 bytes a byte of the body beyond", () => {
    expect(reach(10)).toBe(32 << 10);
    expect(reach(4096)).toBe(32 * 4096);
  });

  it("names a conversation by its leading system messages and the message after them", () => {
    const messages = [
      { role: "system", content: "s" },
      { role: "developer", content: "d" },
      { role: "user", content: "u" },
      { role: "assistant", content: "a" },
    ];
    const chain = heads(messages, H0);
    expect(opening(messages, chain)).toBe(historyRef(chain[2]!));
    expect(opening(messages.slice(2), heads(messages.slice(2), H0))).toBe(historyRef(heads(messages.slice(2), H0)[0]!));
  });
});

describe("a conversation whose last message changed", () => {
  it("finds the newest body kept for the conversation, whichever history it was kept for", () => {
    const kept = new KeptBodies(8);
    kept.keep(["th_head", "th_checkpoint"], "a", bytes("body"));
    kept.keep(["th_other"], "b", bytes("other"));
    expect(kept.newest("a")).toEqual(["th_checkpoint", bytes("body")]);
    expect(kept.get("th_head", "a")).toEqual(bytes("body")); // one body, both refs
    expect(kept.newest("c")).toBeUndefined();
  });

  it("reads the checkpoint an answer names only when it is a prefix this client computed", () => {
    const messages = Array.from({ length: 5 }, (_, index) => ({ role: index % 2 ? "assistant" : "user", content: String(index) }));
    const chain = heads(messages, H0);
    expect(checkpointOf(historyRef(chain[2]!), chain)).toEqual([historyRef(chain[2]!), 3]);
    expect(checkpointOf(` ${historyRef(chain[0]!)} `, chain)).toEqual([historyRef(chain[0]!), 1]);
    expect(checkpointOf(historyRef(chain[4]!), chain)).toBeNull(); // the head is no checkpoint
    expect(checkpointOf("th_" + "a".repeat(26), chain)).toBeNull();
    expect(checkpointOf(null, chain)).toBeNull();
  });
});

describe("the opening of a conversation", () => {
  it("is the same whether or not its first message carries a cache mark", () => {
    const plain = [{ role: "user", content: [{ type: "text", text: "hello" }] }, { role: "assistant", content: "hi" }];
    const marked = [{ role: "user", content: [{ type: "text", text: "hello", cache_control: { type: "ephemeral" } }] }, plain[1]!];
    const first = opening(plain, heads(plain, H0));
    expect(opening(marked, heads(marked, H0))).toBe(first);
    expect(heads(marked, H0)[0]).not.toEqual(heads(plain, H0)[0]); // the chain itself differs
    const other = [{ role: "user", content: [{ type: "text", text: "hello!", cache_control: { type: "ephemeral" } }] }];
    expect(opening(other, heads(other, H0))).not.toBe(first);
  });
});

describe("a zstd frame the server takes", () => {
  it("declares its content size and carries a checksum", () => {
    // Frame headers (RFC 8878): magic, then the descriptor byte.
    const frame = (descriptor: number) => new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, descriptor, 0, 0, 0]);
    expect(declaresSizeAndChecksum(frame(0b00100100))).toBe(true); // single segment + checksum
    expect(declaresSizeAndChecksum(frame(0b01000100))).toBe(true); // a 2-byte size + checksum
    expect(declaresSizeAndChecksum(frame(0b00100000))).toBe(false); // no checksum
    expect(declaresSizeAndChecksum(frame(0b00000100))).toBe(false); // no size
    expect(declaresSizeAndChecksum(new Uint8Array([1, 2, 3, 4, 0x24]))).toBe(false); // no zstd magic
  });
});

describe("the bound on kept bodies", () => {
  it("is the manager's maxPriorBytes: 0 keeps none, and a misused value names the fix", () => {
    const none = new KeptBodies(8, 0);
    none.keep(["th_a"], "a", bytes("body"));
    expect(none.size).toBe(0);
    expect(() => new ToolReferenceManager({ maxPriorBytes: -1 })).toThrow(/maxPriorBytes is -1; use a whole number of at least 0/);
    expect(() => new ToolReferenceManager({ maxPriorByte: 1 } as never)).toThrow(/maxPriorBytes/);
    expect(() => new ToolReferenceManager({ maxPriorBytes: 0 })).not.toThrow();
  });
});
