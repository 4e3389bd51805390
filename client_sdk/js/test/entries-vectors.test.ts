// JS's `Entries` against the vectors the Python rule computed (tests/js_entries_vectors.py):
// the same 413 `too-many-items` refusals, the same entries limit learnt (and said) after each.
// Python's clock readings are seconds; JS's `Entries` takes milliseconds (`performance.now()`):
// each reading is multiplied by 1000 (the vectors' readings are multiples of 1/4 s, exact in both).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Entries, KEPT_MS, tooManyItems } from "../src/index.js";
import { MAX_ENTRIES } from "../src/edits/editor.js";

interface Step {
  sent: number;
  limit: unknown;
  at: number;
  returned: number | null;
  most: [number, number][];
}

interface EntriesVectors {
  keptSeconds: number;
  defaultMost: number;
  cases: { name: string; steps: Step[] }[];
  refusals: { status: number; problem: Record<string, unknown> | null; tooMany: boolean }[];
}

const entries = (JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { entries: EntriesVectors }).entries;
const MS = 1000;

describe("entries vectors: the limit a sender learns from a receiver's 413 too-many-items", () => {
  it("has them all, and KEPT and the default are Python's", () => {
    expect(entries.cases.length).toBeGreaterThan(10);
    expect(KEPT_MS).toBe(entries.keptSeconds * MS);
    expect(MAX_ENTRIES).toBe(entries.defaultMost);
    const steps = entries.cases.flatMap((item) => item.steps);
    expect(steps.some((step) => step.returned === null)).toBe(true);
    expect(steps.some((step) => step.returned !== null && step.returned !== step.sent - 1)).toBe(true);
    expect(steps.some((step) => step.most.some(([, most]) => most < MAX_ENTRIES))).toBe(true);
  });

  for (const item of entries.cases) {
    it(item.name, () => {
      const rule = new Entries();
      for (const [index, step] of item.steps.entries()) {
        const where = `step ${index}: refused(${step.sent}, ${JSON.stringify(step.limit)}, ${step.at})`;
        expect(rule.refused(step.sent, step.limit, step.at * MS), where).toBe(step.returned);
        const found = step.most.map(([now]) => [now, rule.most(now * MS)]);
        expect(found, where).toEqual(step.most);
      }
    });
  }
});

describe("entries vectors: which answers to an edit are a receiver's too-many-items", () => {
  it("a gateway's 413 and a middleware's 415 naming it, as Python tells them", () => {
    expect(entries.refusals.filter((item) => item.tooMany).map((item) => item.status)).toEqual([413, 413, 415, 415]);
    for (const item of entries.refusals) {
      expect(tooManyItems(item.status, item.problem), JSON.stringify(item)).toBe(item.tooMany);
    }
  });
});
