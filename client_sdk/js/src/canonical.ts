/**
 * Canonical JSON: RFC 8785 (JCS), bit-identical to client_sdk/toolref/wire/canonical.py.
 *
 * JCS writes numbers as ECMAScript does and sorts keys by UTF-16 code units, which is what
 * `String(number)` and the default string order already are here. The one extension of the
 * Python side, exact integers beyond 2^53, is reachable from JavaScript only as a `bigint`
 * (a JSON number parsed by `JSON.parse` is a double: see docs/js.md, "Numbers").
 *
 * Values are read as `JSON.stringify` reads them (toJSON, undefined members dropped,
 * undefined in arrays as null), so a ref is computed over exactly what the server receives.
 */

import { CanonicalizationError } from "./errors.js";

const encoder = new TextEncoder();
/** Arrays and objects nested deeper are refused, as client_sdk/toolref/wire/canonical.py refuses
 * them (its MAX_DEPTH): a value has a ref on both sides or on neither. */
export const MAX_DEPTH = 1000;
/** The longest integer (in digits) the Python SDK writes, and the service reads. */
const MAX_DIGITS = 4300;

/** The canonical JSON text of `value` (check with {@link canonicalBytes} for the bytes). */
export function canonicalJson(value: unknown): string {
  const out: string[] = [];
  let written: boolean;
  try {
    written = write(value, out, 0, new Set());
  } catch (error) {
    // MAX_DEPTH levels fit the stack; a caller already deep in its own might not.
    if (error instanceof RangeError && /call stack/i.test(error.message)) {
      throw new CanonicalizationError("value is nested too deeply to canonicalize here; flatten it");
    }
    throw error;
  }
  if (!written) {
    throw new CanonicalizationError(
      `a ${describeType(value)} has no JSON form; pass a string, number, boolean, null, array or object`,
    );
  }
  return out.join("");
}

/** The canonical UTF-8 bytes of `value`: what refs and history heads digest. */
export function canonicalBytes(value: unknown): Uint8Array {
  return encoder.encode(canonicalJson(value));
}

/** ECMAScript Number::toString of a finite number, as RFC 8785 3.2.2.3 requires. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) {
    throw new CanonicalizationError(
      `${String(value)} has no JSON form; send a finite number, or a string such as "${String(value)}" if the value must be kept`,
    );
  }
  return Object.is(value, -0) ? "0" : String(value);
}

/** JSON string literal as JCS writes it; lone surrogates are refused, as Python does. */
export function quote(text: string): string {
  if (!isWellFormed(text)) {
    const bad = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.exec(text);
    const code = bad ? bad[0].charCodeAt(0).toString(16) : "?";
    throw new CanonicalizationError(
      `string contains a lone UTF-16 surrogate (\\u${code}), which is not valid Unicode; pair it or replace it with U+FFFD`,
    );
  }
  // JSON.stringify of a well-formed string is exactly the JCS escaping.
  return JSON.stringify(text);
}

function isWellFormed(text: string): boolean {
  const native = (text as { isWellFormed?: () => boolean }).isWellFormed;
  if (typeof native === "function") return native.call(text);
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text);
}

function describeType(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "object") return value.constructor?.name ?? "object";
  return typeof value;
}

/** Appends `value`; false when JSON.stringify would drop it (undefined, a function). */
function write(value: unknown, out: string[], depth: number, path: Set<object>): boolean {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON: () => unknown }).toJSON();
  }
  switch (typeof value) {
    case "string":
      out.push(quote(value));
      return true;
    case "number":
      out.push(formatNumber(value));
      return true;
    case "bigint": {
      const digits = value.toString();
      if (digits.length - (value < 0n ? 1 : 0) > MAX_DIGITS) {
        throw new CanonicalizationError(
          `an integer of more than ${MAX_DIGITS} digits has no canonical form here (the service reads no longer number); send it as a string`,
        );
      }
      out.push(digits);
      return true;
    }
    case "boolean":
      out.push(value ? "true" : "false");
      return true;
    case "undefined":
    case "function":
    case "symbol":
      return false;
  }
  if (value === null) {
    out.push("null");
    return true;
  }
  const obj = value as object;
  if (obj instanceof Number || obj instanceof String || obj instanceof Boolean) {
    return write(obj.valueOf(), out, depth, path);
  }
  if (depth >= MAX_DEPTH) {
    throw new CanonicalizationError(
      `value is nested too deeply to canonicalize (over ${MAX_DEPTH} levels of arrays and objects); flatten it`,
    );
  }
  if (path.has(obj)) {
    throw new CanonicalizationError("value contains a cycle, which has no JSON form; remove the back reference");
  }
  path.add(obj);
  if (Array.isArray(obj)) {
    // By index, not forEach, which skips the holes of a sparse array: JSON.stringify writes
    // each as null (`[1, , 3]` is `[1,null,3]`).
    out.push("[");
    const items = obj as unknown[];
    for (let index = 0; index < items.length; index++) {
      if (index) out.push(",");
      if (!write(items[index], out, depth + 1, path)) out.push("null");
    }
    out.push("]");
  } else {
    const record = obj as Record<string, unknown>;
    // The default sort compares UTF-16 code units: RFC 8785's key order.
    const keys = Object.keys(record).sort();
    out.push("{");
    let first = true;
    for (const key of keys) {
      const mark = out.length;
      out.push(first ? "" : ",", quote(key), ":");
      if (write(record[key], out, depth + 1, path)) first = false;
      else out.length = mark; // dropped, as JSON.stringify drops it
    }
    out.push("}");
  }
  path.delete(obj);
  return true;
}
