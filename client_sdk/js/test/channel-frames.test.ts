// The channel's frames against the vectors Python's sender and receiver wrote
// (tests/js_channel_vectors.py): the same turn frames byte for byte (only what changed in the
// meta, header text escaped as json.dumps escapes it), the same cancel and credit frames, the
// same reading of answer frames, the same windows.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { BASES_HEADER, BASES_OFFER, SenderBases, basesKept } from "../src/channel/bases.js";
import { FrameError, FrameSender, HEAD, answered, headOf, pythonJson, readVarint, varint, windowGranted, windowKept } from "../src/channel/frames.js";

interface Vectors {
  turns: { stream: number; target: string; headers: [string, string][]; body: string; frame: string }[];
  cancel: [number, string][];
  credit: [number, number, string][];
  answers: { frame: string; stream: number; kind: number; data: string; head: { status: number; headers: [string, string][] } | null }[];
  notAnswers: string[];
  windowGranted: [string, number | null][];
  windowKept: [string, number | null][];
  drained: [number, string];
  bases: ({ head: [number, number, [string, string][]] } | { turn: [number, [string, string][], string]; frame: string })[];
  basesHeader: [string, string];
}

const vectors = JSON.parse(readFileSync(new URL("./channel-vectors.json", import.meta.url), "utf8")) as Vectors;
const bytes = (hex: string): Uint8Array => Uint8Array.from(Buffer.from(hex, "hex"));
const hex = (data: Uint8Array): string => Buffer.from(data).toString("hex");

describe("channel frames (Python's vectors)", () => {
  it("writes each turn's frame as Python's Sender does, the meta only when it changed", () => {
    const sender = new FrameSender();
    for (const turn of vectors.turns) {
      expect(hex(sender.turn(turn.stream, turn.target, turn.headers, bytes(turn.body)))).toBe(turn.frame);
    }
  });

  it("names an edit's base by the stream that made it where Python's sender does", () => {
    const sender = new FrameSender(new SenderBases());
    let named = 0;
    for (const event of vectors.bases) {
      if ("head" in event) {
        sender.made(...event.head);
        continue;
      }
      const [stream, headers, body] = event.turn;
      const frame = hex(sender.turn(stream, "/v1/messages", headers, bytes(body)));
      expect(frame).toBe(event.frame);
      if (!frame.endsWith(body)) named += 1;
    }
    expect(named).toBeGreaterThanOrEqual(3); // not every turn as it is
    expect([BASES_HEADER, BASES_OFFER]).toEqual(vectors.basesHeader);
    expect(basesKept([["toolref-channel-bases", "1"]])).toBe(true);
    expect(basesKept([["toolref-channel-window", "65536"]])).toBe(false);
  });

  it("writes cancel and credit frames as Python does", () => {
    for (const [stream, frame] of vectors.cancel) expect(hex(FrameSender.cancel(stream))).toBe(frame);
    for (const [stream, size, frame] of vectors.credit) expect(hex(FrameSender.credit(stream, size))).toBe(frame);
  });

  it("reads answer frames as Python does, heads included", () => {
    for (const answer of vectors.answers) {
      const found = answered(bytes(answer.frame));
      expect([found.stream, found.kind, hex(found.data)]).toEqual([answer.stream, answer.kind, answer.data]);
      if (answer.head !== null) expect(headOf(found)).toEqual(answer.head);
      else expect(() => headOf(found)).toThrow(FrameError);
    }
    for (const frame of vectors.notAnswers) expect(() => answered(bytes(frame))).toThrow(FrameError);
  });

  it("grants and keeps the windows Python does", () => {
    for (const [asked, granted] of vectors.windowGranted) expect(windowGranted(asked)).toBe(granted);
    for (const [said, kept] of vectors.windowKept) expect(windowKept(said)).toBe(kept);
  });

  it("refuses a head that does not read", () => {
    const head = (text: string) => ({ stream: 0, kind: HEAD, data: new TextEncoder().encode(text) });
    for (const text of ["{", '{"s":99,"h":[]}', '{"s":200}', '{"s":200.5,"h":[]}', '{"s":200,"h":[["a"]]}', "[]", "null"]) {
      expect(() => headOf(head(text))).toThrow(FrameError);
    }
  });

  it("writes varints Python's way and reads them back, a cut one as none", () => {
    for (const value of [0, 1, 127, 128, 300, 16384, 2 ** 31, 2 ** 40]) {
      const data = varint(value);
      expect(readVarint(data, 0)).toEqual([value, data.length]);
      expect(readVarint(data.subarray(0, data.length - 1), 0)).toBeNull();
    }
    expect(hex(varint(300))).toBe("ac02");
  });

  it("escapes what json.dumps escapes", () => {
    expect(pythonJson(["é\u007f\u0001\n😀", "\ud800"])).toBe('["\\u00e9\\u007f\\u0001\\n\\ud83d\\ude00","\\ud800"]');
  });
});
