// The TypeScript SDK against the vectors the Python SDK computed (tests/js_vectors.py).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  CanonicalizationError,
  canonicalJson,
  detect,
  endpoint,
  fill,
  refOf,
  rewrite,
  sha256,
  toHex,
  scan,
  type Format,
  type Invocation,
} from "../src/index.js";
import { invocationOf } from "../src/conversation.js";

interface Vectors {
  canonical: { name: string; value: unknown; canonical: string; sha256: string }[];
  errors: { name: string; value: unknown }[];
  bigIntegers: { name: string; value: unknown; bigint: unknown; canonical: string; jsCanonical: string; exact: boolean }[];
  invocations: { invocation: Invocation; canonical: string; ref: string }[];
  conversations: {
    name: string;
    format: string;
    messages: unknown[];
    optimized: unknown[];
    toolReferences: Record<string, string>;
  }[];
  endpoints: { method: string; path: string; endpoint: { format: string; messagesKey: string } | null }[];
}

const vectors = JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as Vectors;
const encoder = new TextEncoder();

function withBigints(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withBigints);
  if (typeof value === "object" && value !== null) {
    const digits = (value as { $bigint?: unknown }).$bigint;
    if (typeof digits === "string") return BigInt(digits);
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, withBigints(item)]));
  }
  return value;
}

describe("vectors from the Python SDK", () => {
  it("has them all", () => {
    expect(vectors.canonical.length).toBeGreaterThan(20);
    expect(vectors.conversations.length).toBeGreaterThanOrEqual(4);
  });

  for (const item of vectors.canonical) {
    it(`canonical: ${item.name}`, () => {
      const text = canonicalJson(item.value);
      expect(text).toBe(item.canonical);
      expect(toHex(sha256(encoder.encode(text)))).toBe(item.sha256);
    });
  }

  for (const item of vectors.errors) {
    it(`refused as Python refuses it: ${item.name}`, () => {
      expect(() => canonicalJson(item.value)).toThrow(CanonicalizationError);
    });
  }

  for (const item of vectors.bigIntegers) {
    it(`integer beyond 2^53 (documented behaviour): ${item.name}`, () => {
      // JSON.parse holds them as doubles: the canonical text is that of the double, which
      // is what a JS client sends and so what the server digests too.
      expect(canonicalJson(item.value)).toBe(item.jsCanonical);
      expect(canonicalJson(item.value) === item.canonical).toBe(item.exact);
      // As bigints they are exact, as Python writes them.
      expect(canonicalJson(withBigints(item.bigint))).toBe(item.canonical);
    });
  }

  for (const item of vectors.invocations) {
    it(`invocation ref: ${item.invocation.name}/${String(item.invocation.isError ?? false)}`, () => {
      expect(canonicalJson({ ...item.invocation, isError: item.invocation.isError ?? false })).toBe(item.canonical);
      expect(refOf(item.invocation)).toBe(item.ref);
    });
  }

  it("endpoints: the LLM endpoint of each request is Python's (Gemini's among them)", () => {
    expect(vectors.endpoints.some((item) => item.endpoint?.format === "gemini")).toBe(true);
    const found = vectors.endpoints.map((item) => {
      const api = endpoint(item.method, item.path);
      return { ...item, endpoint: api === null ? null : { format: api.format, messagesKey: api.messagesKey } };
    });
    expect(found).toEqual(vectors.endpoints);
  });

  for (const item of vectors.conversations) {
    it(`conversation: ${item.name}`, () => {
      const format = detect(item.messages);
      expect(format?.name).toBe(item.format);
      const out = rewrite(item.messages, format!);
      expect(JSON.stringify(out.messages)).toBe(JSON.stringify(item.optimized));
      expect(out.refs).toEqual(item.toolReferences);
      // The markers fill back to the very bytes.
      expect(JSON.stringify(fill(out.messages, format!, payloads(item.messages, format!)))).toBe(JSON.stringify(item.messages));
    });
  }
});

/** ref -> invocation of every complete invocation in `messages`. */
function payloads(messages: unknown[], format: Format): Record<string, Invocation> {
  const out: Record<string, Invocation> = {};
  for (const found of scan(messages, format)) {
    if (found.complete) out[refOf(invocationOf(found))] = invocationOf(found);
  }
  return out;
}
