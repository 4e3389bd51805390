// The edits core against the vectors the Python SDK computed (tests/js_edit_vectors.py): the
// same cut (segments, entries, refs, credentials), the same diffs and the same edit bytes, and
// the same Editor choices turn by turn (bases, resends, bounds), records as they are.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Editor, cut, diff, encodeIsolated, parsePieceRef, pieceRef, toHex, type Edit, type Op } from "../src/index.js";
import { sha256 } from "../src/digest.js";

type Spec = [string, number][];
interface Bytes {
  header: Record<string, unknown>;
  length: number;
  sha256: string;
  hex?: string;
}
interface Attempt {
  ref: string;
  base: string | null;
  kept: number;
  inline: number;
  resends: number;
  headers: [string, string][];
  bytes: Bytes;
}
interface Edits {
  cuts: {
    name: string;
    headers: [string, string][];
    messagesKey: string | null;
    body?: Spec;
    bodyHex?: string;
    cut: { header: string; segments: [number, number][]; entries: string[]; ref: string; messages: number[]; secrets: [string, string][]; splits: [number, number[]][] } | null;
  }[];
  windowed: {
    name: string;
    body: Spec;
    cut: { header: string; segments: [number, number][]; entries: string[]; ref: string; messages: number[]; secrets: [string, string][]; owners: number[]; answered: number[]; splits: [number, number[]][]; items: number[] };
  }[];
  diffs: { name: string; base: Spec; new: Spec; held: string[]; baseRef: string; ops: unknown[]; edit: Bytes }[];
  editors: {
    name: string;
    maxRecipes: number;
    maxBytes: number;
    bodies: Spec[];
    steps: { send?: number; miss?: [number, Record<string, unknown>]; confirm?: boolean | string; confirmed?: boolean; attempt: Attempt | null }[];
    recipes: string[];
  }[];
}

const edits = (JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { edits: Edits }).edits;
const encoder = new TextEncoder();
const HEADERS: [string, string][] = [
  ["Content-Type", "application/json"],
  ["Authorization", "Bearer sk-1"],
];

function body(spec: Spec): Uint8Array {
  return encoder.encode(spec.map(([unit, times]) => unit.repeat(times)).join(""));
}

function fromHex(hex: string): Uint8Array {
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

function latin1(data: Uint8Array): string {
  return String.fromCharCode(...data);
}

function listed(ops: readonly Op[]): unknown[] {
  return ops.map((op) => (op.op === "keep" ? [op.start, op.end] : op.op === "named" ? pieceRef(op.piece) : op.data.length));
}

function expectBytes(data: Uint8Array, expected: Bytes): void {
  if (data[0] === 0x7b) expect(JSON.parse(new TextDecoder().decode(data.subarray(0, data.indexOf(0x0a))))).toEqual(expected.header);
  else expect(data[0]).toBe(expected.header["v"]); // a compact header (version 4): its bytes below
  expect(data.length).toBe(expected.length);
  if (expected.hex !== undefined) expect(toHex(data)).toBe(expected.hex);
  expect(toHex(sha256(data))).toBe(expected.sha256);
}

function expectAttempt(edit: Edit | null, expected: Attempt | null): void {
  if (expected === null) return void expect(edit).toBeNull();
  expect(edit).not.toBeNull();
  const { ref, base, kept, inline, resends, headers } = edit!;
  const { bytes, ...rest } = expected;
  expect({ ref, base, kept, inline, resends, headers }).toEqual(rest);
  expectBytes(edit!.body, bytes);
}

describe("edits vectors: the cut", () => {
  for (const item of edits.cuts) {
    it(`${item.name}`, async () => {
      const data = item.bodyHex !== undefined ? fromHex(item.bodyHex) : body(item.body!);
      const made = await cut(item.headers, data, item.messagesKey);
      if (item.cut === null) return void expect(made).toBeNull();
      expect(made).not.toBeNull();
      const { segments, entries, ref, messages, secrets, splits } = made!;
      expect(latin1(segments[0]!)).toBe(item.cut.header);
      expect(segments.slice(1).map((segment) => latin1(segment))).toEqual(item.cut.segments.map(([start, end]) => latin1(data.subarray(start, end))));
      expect(entries.map((entry) => toHex(entry.framed))).toEqual(item.cut.entries);
      expect(ref).toBe(item.cut.ref);
      expect(messages).toEqual(item.cut.messages);
      expect(secrets).toEqual(item.cut.secrets);
      expect([...splits]).toEqual(item.cut.splits); // where a message's tool results start
    });
  }
});

describe("edits vectors: the long window's cut", () => {
  for (const item of edits.windowed) {
    it(`${item.name}`, async () => {
      const data = body(item.body);
      const made = await cut(HEADERS, data, "messages", undefined, true);
      expect(made).not.toBeNull();
      const { segments, entries, ref, messages, owners, answered, splits, items } = made!;
      expect(segments.slice(1).map((segment) => latin1(segment))).toEqual(item.cut.segments.map(([start, end]) => latin1(data.subarray(start, end))));
      expect(entries.map((entry) => toHex(entry.framed))).toEqual(item.cut.entries);
      expect(ref).toBe(item.cut.ref);
      expect(messages).toEqual(item.cut.messages);
      expect(owners).toEqual(item.cut.owners);
      expect([...answered].sort((a, b) => a - b)).toEqual(item.cut.answered);
      expect([...items].sort((a, b) => a - b)).toEqual(item.cut.items); // Responses items of the model's
      expect([...splits]).toEqual(item.cut.splits);
    });
  }
});

describe("edits vectors: diffs and their bytes", () => {
  for (const item of edits.diffs) {
    it(`${item.name}`, async () => {
      const base = (await cut(HEADERS, body(item.base), "messages"))!;
      const next = (await cut(HEADERS, body(item.new), "messages"))!;
      expect(base.ref).toBe(item.baseRef);
      const held = new Set(item.held.map((ref) => toHex(parsePieceRef(ref)!)));
      const ops = diff(base.entries, next.entries, next.segments, (piece) => held.has(toHex(piece)));
      expect(listed(ops)).toEqual(item.ops);
      expectBytes(await encodeIsolated(base.ref, ops, null), item.edit);
    });
  }
});

describe("edits vectors: the Editor, turn by turn", () => {
  for (const item of edits.editors) {
    it(`${item.name}`, async () => {
      const editor = new Editor(item.maxRecipes, item.maxBytes, null, false);
      let last: Edit | null = null;
      for (const step of item.steps) {
        if (step.send !== undefined) {
          last = await editor.prepare(HEADERS, body(item.bodies[step.send]!), "messages");
        } else {
          const [status, problem] = step.miss!;
          const following = await editor.onMiss(last!, status, problem);
          expectAttempt(following, step.attempt);
          if (following !== null) last = following;
          if (step.confirm === true) expect(editor.confirm(last!, last!.ref)).toBe(step.confirmed);
          continue;
        }
        expectAttempt(last, step.attempt);
        if (step.confirm !== undefined) expect(editor.confirm(last!, step.confirm === true ? last!.ref : String(step.confirm))).toBe(step.confirmed);
      }
      expect(editor.recipes.refs()).toEqual(item.recipes);
    });
  }
});
