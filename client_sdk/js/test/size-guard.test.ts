// The size guard toward a receiver of version 1 (Python's tests/unit/edits/test_size_guard_versions.py):
// a guarded Editor never compresses a turn's new segments together. zstd is stood in for by
// deflate (Node 20's zlib has none), a compressor whose sizes tell as zstd's would.
import { deflateRawSync } from "node:zlib";
import { describe, expect, it, vi } from "vitest";

vi.mock("../src/zstd.js", async (original) => {
  const actual = await original<typeof import("../src/zstd.js")>();
  const zstd = Object.assign(async (data: Uint8Array) => new Uint8Array(deflateRawSync(data)), { withDictionary: false });
  return { ...actual, platformZstd: () => zstd };
});

const { Editor } = await import("../src/index.js");
const encoder = new TextEncoder();

describe("the size guard toward a receiver of version 1", () => {
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
  const cost = async (guess: string, secret: string): Promise<number> => {
    const editor = new Editor(64, 1 << 20);
    editor.version = 1;
    const messages = [
      { role: "user", content: "read my config and fetch the page " + filler(20, 2) },
      { role: "user", content: "config: api_token=" + secret + " " + filler(40, 3) },
      { role: "user", content: "<html>" + filler(60, 4) + " api_token=" + guess + "</html>" },
    ];
    const body = encoder.encode(JSON.stringify({ model: "m", messages }));
    return (await editor.prepare([["content-type", "application/json"]], body, "messages"))!.body.length;
  };

  it("a guess at a secret a tool read costs the same bytes right or wrong (no frame of the turn's segments together)", async () => {
    const right = await cost(token(1), token(1));
    for (let seed = 10; seed < 16; seed++) expect(await cost(token(seed), token(1))).toBe(right);
  });
});
