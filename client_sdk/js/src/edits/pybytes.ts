/**
 * Python's ways with bytes and text that edits/answer.ts reads a stream by (client_sdk/toolref/
 * edits/answer.py does the same with Python's own): `bytes.strip()`, `b"\n".join`, UTF-8 with
 * `surrogatepass` both ways, and `size`, the bytes a text makes in an answer at least.
 */

import { join } from "./isolated.js";

export const DATA = new TextEncoder().encode("data:");
export const BOM = Uint8Array.of(0xef, 0xbb, 0xbf);
export const EMPTY = new Uint8Array();
export const LF = 0x0a;
export const CR = 0x0d; // SSE's line ends: CRLF, LF and CR
export const DONE = new TextEncoder().encode("[DONE]");
const DECODER = new TextDecoder("utf-8", { fatal: true }); // a leading BOM dropped, as utf-8-sig does
const WITHIN = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const ENCODER = new TextEncoder();
const SURROGATE = /[\ud800-\udfff]/;

/** Bytes `text` makes in the answer at least, as answer.py's `_size`: its UTF-8, a surrogate (one
 * UTF-16 unit) counted as 2 (a pair: 4; a lone one is 3 in Python's surrogatepass). Escapes add to
 * it (a quote, a line end, a control character): not counted. O(text.length). */
export function size(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0x80) bytes += code < 0x800 || (code >= 0xd800 && code < 0xe000) ? 1 : 2;
  }
  return bytes;
}

/** Python's `bytes.isspace()` (ASCII whitespace), or no bytes. */
function isSpace(byte: number): boolean {
  return byte === 0x20 || (byte >= 0x09 && byte <= 0x0d);
}

export function isBlank(data: Uint8Array): boolean {
  for (const byte of data) if (!isSpace(byte)) return false;
  return true;
}

/** Python's `bytes.strip()`. */
export function stripBytes(data: Uint8Array): Uint8Array {
  let start = 0;
  let end = data.length;
  while (start < end && isSpace(data[start] as number)) start++;
  while (end > start && isSpace(data[end - 1] as number)) end--;
  return data.subarray(start, end);
}

/** Whether `data[start:end]` starts with `prefix`. */
export function startsWith(data: Uint8Array, start: number, end: number, prefix: Uint8Array): boolean {
  if (end - start < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[start + i] !== prefix[i]) return false;
  return true;
}

export function equals(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** `b"\n".join(lines)`. */
export function joinLines(lines: readonly Uint8Array[]): Uint8Array {
  if (lines.length === 1) return lines[0] as Uint8Array;
  const parts: Uint8Array[] = [];
  for (const line of lines) parts.push(line, NEWLINE);
  parts.pop();
  return join(parts);
}

const NEWLINE = Uint8Array.of(0x0a);

/** `data.decode("utf-8", "surrogatepass")`, as Python's `json.loads` reads bytes: UTF-8, where a
 * surrogate's three bytes (ED A0..BF 80..BF) are that surrogate. Throws on anything else. */
export function decode(data: Uint8Array): string {
  try {
    return DECODER.decode(data);
  } catch (error) {
    let out = "";
    let start = 0;
    for (let at = 0; at + 2 < data.length; ) {
      const [lead, second = 0, third = 0] = data.subarray(at, at + 3);
      if (lead !== 0xed || second < 0xa0 || second > 0xbf || (third & 0xc0) !== 0x80) {
        at++;
        continue;
      }
      out += (start ? WITHIN : DECODER).decode(data.subarray(start, at));
      out += String.fromCharCode(0xd000 | ((second & 0x3f) << 6) | (third & 0x3f));
      start = at += 3;
    }
    if (!start) throw error;
    return out + WITHIN.decode(data.subarray(start));
  }
}

/** `text.encode("utf-8", "surrogatepass")`: a lone surrogate as its three bytes. */
export function utf8(text: string): Uint8Array {
  if (!SURROGATE.test(text)) return ENCODER.encode(text);
  const out = new Uint8Array(text.length * 3);
  let at = 0;
  for (let i = 0; i < text.length; i++) {
    let code = text.charCodeAt(i);
    if (code >= 0xd800 && code < 0xdc00 && i + 1 < text.length) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low < 0xe000) {
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        i++;
      }
    }
    if (code < 0x80) {
      out[at++] = code;
    } else if (code < 0x800) {
      out[at++] = 0xc0 | (code >> 6);
      out[at++] = 0x80 | (code & 0x3f);
    } else if (code < 0x10000) {
      out[at++] = 0xe0 | (code >> 12);
      out[at++] = 0x80 | ((code >> 6) & 0x3f);
      out[at++] = 0x80 | (code & 0x3f);
    } else {
      out[at++] = 0xf0 | (code >> 18);
      out[at++] = 0x80 | ((code >> 12) & 0x3f);
      out[at++] = 0x80 | ((code >> 6) & 0x3f);
      out[at++] = 0x80 | (code & 0x3f);
    }
  }
  return out.slice(0, at);
}
