// Making an edit of many new segments (a resumed or imported conversation's first turn, an
// app that sends many small messages) costs linear time and bounded memory. `isolated.ts`'s
// `pack` started one CompressionStream per segment, all at once (`Promise.all`): under Node
// 20 (no zstd, so gzip records) 8,000 messages took 4-7 s and 16,000 14-20 s, each stream
// holding a zlib state until the last ended. It now compresses at most `CONCURRENCY`
// segments at once, through node:zlib where there is one (the same bytes), and each segment
// once for both packs a sender weighs. These count constructions and compressor calls, never
// the clock.
import { afterEach, describe, expect, it, vi } from "vitest";
import { gzip } from "../src/compression.js";
import { SUBTLE_FROM, sha256, sha256Async } from "../src/digest.js";
import { Editor } from "../src/edits/editor.js";
import { ALONE, CONCURRENCY, GZIP, MIN_COMPRESSED, YIELD_EVERY, pack, type Codec } from "../src/edits/isolated.js";
import { encodeIsolated } from "../src/edits/wire.js";

const encoder = new TextEncoder();
const HEADERS: [string, string][] = [["content-type", "application/json"]];

function body(count: number): Uint8Array {
  const messages = Array.from({ length: count }, (_, n) => ({
    role: n % 2 ? "user" : "assistant",
    content: `message ${n}: look at src/mod${n % 97}.py and say what it does`,
  }));
  return encoder.encode(JSON.stringify({ model: "m", messages }));
}

/** A codec of `kind` that counts its calls and the most of them pending at once; each call
 * waits a macrotask, as a CompressionStream's does. */
function counting(kind: typeof ALONE | typeof GZIP): Codec & { calls: number; most: number } {
  let pending = 0;
  const codec = {
    kind,
    calls: 0,
    most: 0,
    compress: async (data: Uint8Array): Promise<Uint8Array> => {
      codec.calls += 1;
      codec.most = Math.max(codec.most, ++pending);
      await new Promise((done) => setTimeout(done, 0));
      pending -= 1;
      return gzip(data);
    },
  };
  return codec;
}

async function viaStream(data: Uint8Array): Promise<Uint8Array> {
  const source = new Blob([data as BlobPart]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(source).arrayBuffer());
}

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("an edit of many new segments", () => {
  it("starts no CompressionStream in Node (node:zlib's gzip, the same bytes)", async () => {
    const Real = globalThis.CompressionStream;
    let made = 0;
    vi.stubGlobal(
      "CompressionStream",
      class extends Real {
        constructor(format: CompressionFormat) {
          super(format);
          made += 1;
        }
      },
    );
    const editor = new Editor(undefined, undefined, { kind: GZIP, compress: gzip });
    const edit = await editor.prepare(HEADERS, body(2000), "messages");
    expect(edit).not.toBeNull();
    expect(edit!.ops.length).toBeGreaterThan(2000);
    expect(made).toBe(0);
  });

  it("compresses at most CONCURRENCY segments at once, each once", async () => {
    const segments = Array.from({ length: 500 }, (_, n) => encoder.encode(`segment ${n} `.repeat(4)));
    const codec = counting(GZIP);
    const packed = await pack(segments, codec);
    expect(codec.calls).toBe(segments.length);
    expect(codec.most).toBeLessThanOrEqual(CONCURRENCY);
    expect(packed).toEqual(await pack(segments, { kind: GZIP, compress: gzip })); // in order
  });

  it("lets the event loop turn while it compresses (node:zlib is synchronous)", async () => {
    const segments = Array.from({ length: 4 * YIELD_EVERY }, (_, n) => encoder.encode(`segment ${n} `.repeat(4)));
    let turned = false;
    setImmediate(() => (turned = true));
    const seen: boolean[] = [];
    const codec: Codec = { kind: GZIP, compress: (data) => (seen.push(turned), gzip(data)) };
    await pack(segments, codec);
    expect(seen.length).toBe(segments.length);
    expect(seen.indexOf(true)).toBeGreaterThan(0);
    expect(seen.indexOf(true)).toBeLessThanOrEqual(YIELD_EVERY); // not held for the whole edit
  });

  it("compresses each segment alone once for both packs a sender weighs (runs, the answer)", async () => {
    const segments = Array.from({ length: 6 }, (_, n) => encoder.encode(`piece ${n} of one long message `.repeat(3)));
    expect(segments.every((data) => data.length >= MIN_COMPRESSED)).toBe(true);
    const ops = segments.map((data) => ({ op: "inline" as const, data }));
    const codec = counting(ALONE);
    await encodeIsolated(null, ops, codec, null, new Set(), [[0, 6]], 5);
    expect(codec.calls).toBe(segments.length);
  });
});

describe("what the faster paths write", () => {
  it("gzip is Node's CompressionStream's bytes, on the event loop and in the thread pool", async () => {
    let seed = 7;
    const random = (): number => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (const size of [0, 1, MIN_COMPRESSED, 1000, (64 << 10) - 1, 64 << 10, 300_000]) {
      const words = Array.from({ length: size }, () => "abcdefgh \n{}"[Math.floor(random() * 12)]).join("");
      const data = encoder.encode(words);
      expect(await gzip(data)).toEqual(await viaStream(data));
    }
  });

  it("sha256Async is SHA-256 on both sides of SUBTLE_FROM", async () => {
    for (const size of [0, 17, SUBTLE_FROM - 1, SUBTLE_FROM, 5000]) {
      const data = new Uint8Array(size).map((_, n) => (n * 31) & 0xff);
      expect(await sha256Async(data)).toEqual(sha256(data));
    }
  });
});
