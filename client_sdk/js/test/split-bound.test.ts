// An edit's split segments (a message's tool results, a frame each) hold at most
// MAX_SPLIT_FRAMES frames beyond one a record, as the receiver reads them
// (isolated.py's `unpack` refuses more): past it a split segment goes as it is.
import { describe, expect, it } from "vitest";
import { MAX_SPLIT_FRAMES, RAW, pack, platformCodec } from "../src/edits/isolated.js";

const text = new TextEncoder();

function results(count: number): { data: Uint8Array; offsets: number[] } {
  const parts = Array.from({ length: count }, (_, n) => `result ${n}: ` + "output of the tool\n".repeat(20));
  const offsets: number[] = [];
  let at = 0;
  for (const part of parts.slice(0, -1)) offsets.push((at += text.encode(part).length));
  return { data: text.encode(parts.join("")), offsets };
}

describe("split records", () => {
  it("split no more pieces than the receiver's bound, the rest as they are", async () => {
    const { data, offsets } = results(700); // two segments of 699 extra pieces: past 1024
    expect(2 * 699).toBeGreaterThan(MAX_SPLIT_FRAMES);
    const codec = platformCodec(); // zstd where the platform has it, else gzip (kind 2)
    const blob = await pack([data, data], codec, {}, null, new Map([[0, offsets], [1, offsets]]));
    expect(blob[0]).toBe(codec.kind);
    const tail = blob.subarray(blob.length - data.length - 1);
    expect(tail[0]).toBe(RAW);
    expect(Buffer.from(tail.subarray(1)).equals(Buffer.from(data))).toBe(true);
  });
});
