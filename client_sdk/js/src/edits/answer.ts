/**
 * The answer a turn streamed, as the next turn's dictionary (client_sdk/toolref/edits/answer.py,
 * the same bytes).
 *
 * The agent writes the model's answer back into its next request as an assistant message; the
 * receiver streamed that very answer one turn before. Both read the stream as it passes
 * ({@link AnswerTap}) and assemble the same bytes from it, with nothing exchanged: the answer
 * as one assistant message in its API's own JSON (`{"role":"assistant","content":[...]}` for
 * Anthropic Messages, with `tool_calls` for OpenAI Chat), every string as the model wrote it,
 * tool inputs compact, then each tool input as the model streamed it, joined by newlines. A
 * version-3 edit compresses the assistant segments it carries against those bytes (isolated.ts,
 * record kind 3) and names them by {@link answerId}; a receiver that holds other bytes, or none,
 * refuses the edit (400 `dictionary-mismatch`) and the sender sends it again without.
 *
 * Only a whole answer is one: a stream with a 200, `text/event-stream` and no `Content-Encoding`,
 * of an API read here, seen to its end event (`message_stop`, `data: [DONE]`) within
 * {@link MAX_STREAM} bytes and making at most {@link MAX_ANSWER} bytes. A stream cut short, an
 * error event, anything else: no answer. Incremental: linear in the stream, one JSON parse per
 * event.
 *
 * The bytes are Python's `json.dumps(message, ensure_ascii=False, separators=(",", ":"))`, so
 * JSON is read and written here as Python's `json` does, not with `JSON.parse`/`JSON.stringify`
 * (which would move integer-like keys first, write `1.0` as `1` and `1e16` as `10000000000000000`,
 * round integers past 2^53, refuse `NaN`, escape lone surrogates): objects keep their keys in the
 * order written (a key written twice keeps its first place and its last value), integers keep
 * all their digits (more than 4300: unreadable, as in Python), a number written with a fraction
 * or an exponent is a float written as Python's `repr` writes it (`1.0`, `1e+16`, `1e-05`),
 * `NaN` and `Infinity` are read and written, event data is read as `json.loads` reads bytes
 * (UTF-8 with `surrogatepass`, a leading BOM dropped), and a lone surrogate is written as it is,
 * encoded as `surrogatepass` does. What still differs from Python (each gives other bytes, or an
 * answer on one side only: at worst the next edit is refused once and sent again without):
 *
 * - two halves of a surrogate pair that meet only when strings are joined (text deltas, tool
 *   input pieces), or that come as two three-byte sequences, are one character here (four
 *   bytes), two in Python (six);
 * - event data that Python's `json.loads` reads as UTF-16 or UTF-32 (it detects them by their
 *   zero bytes): no answer here;
 * - a delta whose text, thinking, signature or `partial_json` is not a string (Python takes its
 *   `str()`), or a block whose such field was neither a string nor empty: no answer here;
 * - JSON nested deeper than Python's recursion limit (about 1000 levels, less the stack in
 *   use) is no answer in Python; here it is read up to the depth the JS stack allows (a few
 *   thousand levels), and only past that is no answer (`answer` null).
 *
 * `choices` or `tool_calls` that is a number or `true`: no answer here and in Python alike
 * (neither raises into the stream).
 */

import { sha256Async, toHex } from "../digest.js";
import { join } from "./isolated.js";
import { endpoint } from "../endpoints.js";
import type { FormatName } from "../formats/index.js";
import { PY_BLANK, Reader, dumps, indexOf, isFalsy, isZero, items, pyStrip, sortedKeys, type Json, type JsonObject } from "./pyjson.js";

export const MAX_ANSWER = 256 << 10; // bytes of an answer's dictionary; a longer one is none
export const MAX_STREAM = 8 << 20; // bytes of stream read for one; a longer stream gives none
export const ID_LENGTH = 16; // hex digits of SHA-256 naming an answer (`answerId`)
/** The formats whose answers are read: Anthropic Messages and OpenAI Chat Completions. */
export const ANSWER_FORMATS: ReadonlySet<FormatName> = new Set<FormatName>(["anthropic", "openai-chat"]);
const EVENT_STREAM = "text/event-stream";

/** The name of an answer's bytes in an edit (`"a"`): hex of their SHA-256, cut. */
export async function answerId(answer: Uint8Array): Promise<string> {
  return toHex(await sha256Async(answer)).slice(0, ID_LENGTH);
}

/** A tap for the answer to `POST path` with this status and these headers, or null when it
 * cannot be one (see the module comment). */
export function tapFor(path: string, status: number, headers: Iterable<readonly [string, string]>): AnswerTap | null {
  const found = endpoint("POST", path);
  if (status !== 200 || found === null || !ANSWER_FORMATS.has(found.format)) return null;
  const named = new Map<string, string>();
  for (const [name, value] of headers) named.set(name.toLowerCase(), value);
  const media = pyStrip((named.get("content-type") ?? "").split(";")[0] ?? "").toLowerCase();
  const encoding = pyStrip(named.get("content-encoding") ?? "identity").toLowerCase();
  if (media !== EVENT_STREAM || encoding !== "identity") return null;
  return new AnswerTap(found.format);
}

/** An Anthropic delta's type -> the field of its block it adds to. */
const DELTA_FIELDS = new Map<Json | undefined, string>([
  ["text_delta", "text"],
  ["thinking_delta", "thinking"],
  ["signature_delta", "signature"],
]);

/** A tool call of OpenAI Chat as it streams in. */
interface Call {
  id?: string;
  name?: string;
  readonly arguments: string[];
}

/** Fed a stream's bytes as they come (`feed`); `answer` once its end event was seen. */
export class AnswerTap {
  private readonly anthropic: boolean;
  private begun = false; // a first byte that is no BOM's read (or a BOM dropped)
  private head: Uint8Array = EMPTY; // the first bytes while they may yet be a BOM
  private cr = false; // the last piece ended with CR: an LF first in the next ends nothing
  private line: Uint8Array[] = []; // the pieces of a line not ended yet
  private data: Uint8Array[] = []; // the data lines of the event not dispatched yet
  private read = 0;
  private readonly blocks = new Map<bigint, JsonObject>();
  private readonly inputs = new Map<bigint, string[]>(); // tool_use block -> its input's pieces
  private readonly content: string[] = [];
  private readonly calls = new Map<bigint, Call>();
  private ended = false; // its end event seen
  private broken = false; // never an answer: cut, an error event, too long, unreadable
  private odd = false; // a value Python would take the str() of: no answer here
  private made: Uint8Array | null | undefined;

  /** For `format`, a {@link FormatName}: `anthropic`, else OpenAI Chat's. */
  constructor(format: string) {
    this.anthropic = format === "anthropic";
  }

  /** Its end event seen. */
  get done(): boolean {
    return this.ended;
  }

  /** Never an answer: cut, an error event, too long, unreadable, bytes after the end. */
  get failed(): boolean {
    return this.broken;
  }

  /** Read `data`; whether the answer ended within it (once, at its end event). Lines end at CRLF,
   * LF or CR (the SSE spec's three); one UTF-8 BOM before the first is dropped; only the bytes up
   * to the line that ends the answer count against {@link MAX_STREAM}, and what follows that line
   * in the same piece is not read (the answer is taken when `feed` says it ended, so bytes after the
   * end never change it, whichever piece they come in, and the answer is the same however the stream
   * is cut). O(data.length). */
  feed(data: Uint8Array): boolean {
    if (this.ended || this.broken) {
      if (this.ended && !isBlank(data)) this.broken = true; // bytes after the end: not the stream this reads
      return false;
    }
    if (!this.begun) {
      // the stream's first bytes: up to 2 held, as they may be a BOM
      if (this.head.length) data = join([this.head, data]);
      if (data.length < BOM.length && startsWith(BOM, 0, BOM.length, data)) {
        this.head = data.slice();
        return false;
      }
      this.begun = true;
      this.head = EMPTY;
      if (startsWith(data, 0, data.length, BOM)) {
        this.read += BOM.length;
        data = data.subarray(BOM.length);
      }
    }
    const room = MAX_STREAM - this.read;
    const view = data.subarray(0, room); // past it, only the end of the answer's last line would do
    this.read += view.length;
    const start = this.cr && view[0] === LF ? 1 : 0; // a CRLF cut between pieces
    this.cr &&= !view.length;
    const last = Math.max(view.lastIndexOf(LF), view.lastIndexOf(CR));
    if (last < start) {
      // within a line: kept, so that a long line costs its length once
      if (view.length > start) this.line.push(view.slice(start));
    } else {
      const pending = this.line;
      this.line = last + 1 < view.length ? [view.slice(last + 1)] : [];
      this.cr = view[view.length - 1] === CR;
      let nextLf = view.indexOf(LF, start); // the next LF and CR from `at` on, each found once: O(view)
      let nextCr = view.indexOf(CR, start);
      for (let at = start; at <= last; ) {
        if (nextLf >= 0 && nextLf < at) nextLf = view.indexOf(LF, at);
        if (nextCr >= 0 && nextCr < at) nextCr = view.indexOf(CR, at);
        const end = nextLf < 0 ? nextCr : nextCr < 0 ? nextLf : Math.min(nextLf, nextCr);
        if (at > start || !pending.length) {
          this.lineRead(view, at, end);
        } else {
          const line = join([...pending, view.subarray(at, end)]);
          this.lineRead(line, 0, line.length);
        }
        if (this.ended || this.broken) break;
        at = end === nextCr && nextLf === end + 1 ? end + 2 : end + 1;
      }
    }
    if (data.length > room && !this.ended) this.broken = true; // the answer's end not within MAX_STREAM bytes
    return this.ended && !this.broken;
  }

  /** The answer's bytes (module comment), the same array each time; null unless the stream ended
   * whole. */
  get answer(): Uint8Array | null {
    if (!this.ended || this.broken || this.odd) return null;
    if (this.made === undefined) {
      try {
        const made = this.assembled();
        this.made = made.length <= MAX_ANSWER ? made : null;
      } catch {
        this.made = null; // a stream shaped like no answer
      }
    }
    return this.made;
  }

  /** The line `data[start:end]`, without its line end. */
  private lineRead(data: Uint8Array, start: number, end: number): void {
    if (startsWith(data, start, end, DATA)) {
      const from = start + DATA.length;
      this.data.push(data.slice(from < end && data[from] === 0x20 ? from + 1 : from, end));
    } else if (end === start && this.data.length) {
      const joined = joinLines(this.data);
      this.data = [];
      this.event(joined);
    }
  }

  private event(data: Uint8Array): void {
    if (!this.anthropic && equals(stripBytes(data), DONE)) {
      this.ended = true;
      return;
    }
    let event: Json;
    try {
      event = new Reader(decode(data)).document();
    } catch {
      this.broken = true;
      return;
    }
    if (!(event instanceof Map)) this.broken = true;
    else if (this.anthropic) this.anthropicEvent(event);
    else this.chatEvent(event);
  }

  private anthropicEvent(event: JsonObject): void {
    const kind = event.get("type");
    if (kind === "message_stop") {
      this.ended = true;
    } else if (kind === "error") {
      this.broken = true;
    } else if (kind === "content_block_start") {
      const block = event.get("content_block");
      if (block instanceof Map) this.blocks.set(indexOf(event), new Map(block));
    } else if (kind === "content_block_delta") {
      const delta = event.get("delta");
      const index = indexOf(event);
      const block = this.blocks.get(index);
      if (delta instanceof Map && block !== undefined) this.delta(index, block, delta);
    }
  }

  private delta(index: bigint, block: JsonObject, delta: JsonObject): void {
    const kind = delta.get("type");
    if (kind === "input_json_delta") {
      const piece = delta.has("partial_json") ? delta.get("partial_json") : "";
      const pieces = this.inputs.get(index);
      if (typeof piece !== "string") this.odd = true;
      else if (pieces === undefined) this.inputs.set(index, [piece]);
      else pieces.push(piece);
      return;
    }
    const field = DELTA_FIELDS.get(kind);
    if (field === undefined) return;
    const had = block.get(field);
    const before = had === undefined || isFalsy(had) ? "" : had;
    const added = delta.has(field) ? delta.get(field) : "";
    if (typeof before !== "string" || typeof added !== "string") this.odd = true;
    else block.set(field, before + added); // in its place when the block has it, else last
  }

  private chatEvent(event: JsonObject): void {
    if (event.has("error")) {
      this.broken = true;
      return;
    }
    const choices = items(event.get("choices"));
    if (choices === null) {
      this.broken = true;
      return;
    }
    for (const choice of choices) {
      if (!(choice instanceof Map) || (choice.has("index") && !isZero(choice.get("index")))) continue;
      const delta = choice.get("delta");
      if (!(delta instanceof Map)) continue;
      const content = delta.get("content");
      if (typeof content === "string") this.content.push(content);
      const calls = items(delta.get("tool_calls"));
      if (calls === null) {
        this.broken = true;
        return;
      }
      for (const call of calls) if (call instanceof Map) this.call(call);
    }
  }

  private call(call: JsonObject): void {
    const index = indexOf(call);
    let made = this.calls.get(index);
    if (made === undefined) this.calls.set(index, (made = { arguments: [] }));
    const id = call.get("id");
    if (typeof id === "string") made.id = id;
    const called = call.get("function");
    if (called instanceof Map) {
      const name = called.get("name");
      if (typeof name === "string") made.name = (made.name ?? "") + name;
      const piece = called.get("arguments");
      if (typeof piece === "string") made.arguments.push(piece);
    }
  }

  private assembled(): Uint8Array {
    const streamed: string[] = [];
    let message: JsonObject;
    if (this.anthropic) {
      const blocks: Json[] = [];
      for (const index of sortedKeys(this.blocks)) {
        const block = this.blocks.get(index) as JsonObject;
        const pieces = this.inputs.get(index);
        if (pieces !== undefined) {
          const text = pieces.join("");
          streamed.push(text);
          block.set("input", PY_BLANK.test(text) ? new Map() : new Reader(text).document());
        }
        blocks.push(block);
      }
      message = new Map<string, Json>([
        ["role", "assistant"],
        ["content", blocks],
      ]);
    } else {
      const calls: Json[] = [];
      for (const index of sortedKeys(this.calls)) {
        const made = this.calls.get(index) as Call;
        const args = made.arguments.join("");
        streamed.push(args);
        const called = new Map<string, Json>([
          ["name", made.name ?? ""],
          ["arguments", args],
        ]);
        calls.push(
          new Map<string, Json>([
            ["id", made.id ?? ""],
            ["type", "function"],
            ["function", called],
          ]),
        );
      }
      const content = this.content.length || !calls.length ? this.content.join("") : null;
      message = new Map<string, Json>([
        ["role", "assistant"],
        ["content", content],
      ]);
      if (calls.length) message.set("tool_calls", calls);
    }
    return utf8([dumps(message), ...streamed].join("\n"));
  }
}

// --- bytes ----------------------------------------------------------------------------------

const DATA = new TextEncoder().encode("data:");
const BOM = Uint8Array.of(0xef, 0xbb, 0xbf);
const EMPTY = new Uint8Array();
const LF = 0x0a;
const CR = 0x0d; // SSE's line ends: CRLF, LF and CR
const DONE = new TextEncoder().encode("[DONE]");
const DECODER = new TextDecoder("utf-8", { fatal: true }); // a leading BOM dropped, as utf-8-sig does
const WITHIN = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const ENCODER = new TextEncoder();
const SURROGATE = /[\ud800-\udfff]/;

/** Python's `bytes.isspace()` (ASCII whitespace), or no bytes. */
function isSpace(byte: number): boolean {
  return byte === 0x20 || (byte >= 0x09 && byte <= 0x0d);
}

function isBlank(data: Uint8Array): boolean {
  for (const byte of data) if (!isSpace(byte)) return false;
  return true;
}

/** Python's `bytes.strip()`. */
function stripBytes(data: Uint8Array): Uint8Array {
  let start = 0;
  let end = data.length;
  while (start < end && isSpace(data[start] as number)) start++;
  while (end > start && isSpace(data[end - 1] as number)) end--;
  return data.subarray(start, end);
}

/** Whether `data[start:end]` starts with `prefix`. */
function startsWith(data: Uint8Array, start: number, end: number, prefix: Uint8Array): boolean {
  if (end - start < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[start + i] !== prefix[i]) return false;
  return true;
}

function equals(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** `b"\n".join(lines)`. */
function joinLines(lines: readonly Uint8Array[]): Uint8Array {
  if (lines.length === 1) return lines[0] as Uint8Array;
  const parts: Uint8Array[] = [];
  for (const line of lines) parts.push(line, NEWLINE);
  parts.pop();
  return join(parts);
}

const NEWLINE = Uint8Array.of(0x0a);

/** `data.decode("utf-8", "surrogatepass")`, as Python's `json.loads` reads bytes: UTF-8, where a
 * surrogate's three bytes (ED A0..BF 80..BF) are that surrogate. Throws on anything else. */
function decode(data: Uint8Array): string {
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
function utf8(text: string): Uint8Array {
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
