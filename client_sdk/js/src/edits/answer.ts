/**
 * The answer a turn streamed, as the next turn's dictionary (client_sdk/toolref/edits/answer.py,
 * the same bytes).
 *
 * The agent writes the model's answer back into its next request as an assistant message; the
 * receiver streamed that very answer one turn before. Both read the stream as it passes
 * ({@link AnswerTap}) and assemble the same bytes from it, with nothing exchanged: the answer
 * as one assistant message in its API's own JSON (`{"role":"assistant","content":[...]}` for
 * Anthropic Messages; for OpenAI Chat its `content`, its `refusal` when it streamed one, and
 * `tool_calls`, each a function call or a freeform one, `{"type":"custom","custom":{"name":..,
 * "input":..}}`), every string as the model wrote it, tool inputs compact, then each tool input (a
 * call's arguments or input) as the model streamed it, joined by newlines. A shape no answer is
 * made of (a piece of text that is no string, a call both a function and a custom one, event
 * data not UTF-8): no answer, as in Python. A
 * version-3 edit compresses the assistant segments it carries against those bytes (isolated.ts,
 * record kind 3) and names them by {@link answerId}; a receiver that holds other bytes, or none,
 * refuses the edit (400 `dictionary-mismatch`) and the sender sends it again without.
 * OpenAI Responses and Gemini answers (their output items, the model's parts, as Codex CLI and
 * Gemini CLI write them back) are read by answerItems.ts.
 *
 * Only a whole answer is one: a stream with a 200, `text/event-stream` and no `Content-Encoding`,
 * of an API read here, seen to its end event (`message_stop`, `data: [DONE]`) within
 * {@link MAX_STREAM} bytes and making at most {@link MAX_ANSWER} bytes. A stream cut short, an
 * error event, anything else: no answer. Incremental: linear in the stream, one JSON parse per
 * event.
 *
 * What a tap holds is bounded by {@link MAX_ANSWER}, not {@link MAX_STREAM}: it counts the bytes it
 * holds that are certain to be in the answer (`size` of each text, thinking, signature, refusal and
 * content piece and each tool input piece, a tool call's arguments twice, as the answer holds them
 * twice; each block's bytes as it started, its input left out, and a comma; 59 for each tool
 * call), and once they pass MAX_ANSWER the answer can only be longer: the tap gives up then
 * (`failed`, all it held dropped), at the same event as answer.py (which counts the same). The
 * count is a lower bound: escapes only add bytes, a block or a call only grows (but a block started
 * again smaller at its index, which no API streams), and a surrogate (a UTF-16 unit) counts 2. A block's deltas are kept apart and joined
 * once the answer is made, as Python joins them (across a block started again at its index, fields
 * in Python's order: text, thinking, signature). With no event pending, the lines before the next
 * data line (blank lines, comments, `event:` lines) are stepped over by `indexOf`, not read.
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
 * encoded as `surrogatepass` does; two halves of a surrogate pair, however they came (joined
 * from two deltas, or two three-byte sequences), are one character of four bytes here and in
 * Python alike. What still differs from Python (it gives an answer on one side only: at worst
 * the next edit is refused once and sent again without):
 *
 * - JSON nested deeper than Python's recursion limit (about 1000 levels, less the stack in
 *   use) is no answer in Python; here it is read up to the depth the JS stack allows (a few
 *   thousand levels), and only past that is no answer (`answer` null).
 *
 * `choices` or `tool_calls` that is a number or `true`: no answer here and in Python alike
 * (neither raises into the stream).
 */

import { sha256Async, toHex } from "../digest.js";
import { join } from "./isolated.js";
import { BOM, CR, DATA, DONE, EMPTY, LF } from "./pybytes.js";
import { decode, equals, isBlank, joinLines, size, startsWith, stripBytes, utf8 } from "./pybytes.js";
import { endpoint, type Endpoint } from "../endpoints.js";
import { GeminiAnswer, ResponsesAnswer, type ItemReader } from "./answerItems.js";
import { PY_BLANK, Reader, dumps, indexOf, isFalsy, isZero, items, pyStrip, sortedKeys, type Json, type JsonObject } from "./pyjson.js";

export const MAX_ANSWER = 256 << 10; // bytes of an answer's dictionary; a longer one is none
export const MAX_STREAM = 8 << 20; // bytes of stream read for one; a longer stream gives none
export const ID_LENGTH = 16; // hex digits of SHA-256 naming an answer (`answerId`)
/** The formats whose answers are read (Python's `FORMATS`): Anthropic Messages, OpenAI Chat
 * Completions, OpenAI Responses and Gemini (answerItems.ts). */
export const ANSWER_FORMATS: ReadonlySet<Endpoint["format"]> = new Set<Endpoint["format"]>(["anthropic", "openai-chat", "openai-responses", "gemini"]);
/** The edits version from which a receiver keeps a format's answers (Python's `SINCE`): below
 * it a sender taps none of them (its dictionary would be bytes the receiver does not hold: a
 * `dictionary-mismatch` and a resend every turn). */
export const ANSWER_SINCE: ReadonlyMap<Endpoint["format"], number> = new Map<Endpoint["format"], number>([
  ["openai-responses", 6],
  ["gemini", 6],
]);
const EVENT_STREAM = "text/event-stream";

/** The name of an answer's bytes in an edit (`"a"`): hex of their SHA-256, cut. */
export async function answerId(answer: Uint8Array): Promise<string> {
  return toHex(await sha256Async(answer)).slice(0, ID_LENGTH);
}

/** A tap for the answer to `POST path` with this status and these headers, or null when it
 * cannot be one (see the module comment). `version`: a sender's, the edits version its receiver
 * reads, below which that receiver keeps no answer of the format (`ANSWER_SINCE`); absent: a
 * receiver's, every format. */
export function tapFor(path: string, status: number, headers: Iterable<readonly [string, string]>, version?: number): AnswerTap | null {
  const found = endpoint("POST", path);
  if (status !== 200 || found === null || !ANSWER_FORMATS.has(found.format)) return null;
  if (version !== undefined && version < (ANSWER_SINCE.get(found.format) ?? 0)) return null;
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

/** A Chat tool call's kind -> the field of its object that its text streams in. */
const CALL_TEXT = new Map<string, string>([
  ["function", "arguments"],
  ["custom", "input"],
]);

/** A tool call of OpenAI Chat as it streams in: a function call, or a freeform one (`custom`). */
interface Call {
  id?: string;
  kind?: string;
  readonly name: string[];
  readonly arguments: string[]; // its arguments (a custom call's input)
}

/** Fed a stream's bytes as they come (`feed`); `answer` once its end event was seen. */
export class AnswerTap {
  private readonly anthropic: boolean;
  private readonly items: ItemReader | null = null; // OpenAI Responses' and Gemini's (answerItems.ts)
  private begun = false; // a first byte that is no BOM's read (or a BOM dropped)
  private head: Uint8Array = EMPTY; // the first bytes while they may yet be a BOM
  private cr = false; // the last piece ended with CR: an LF first in the next ends nothing
  private line: Uint8Array[] = []; // the pieces of a line not ended yet
  private data: Uint8Array[] = []; // the data lines of the event not dispatched yet
  private read = 0;
  private readonly blocks = new Map<bigint, JsonObject>();
  private readonly started = new Map<bigint, number>(); // block -> the bytes held for it as it started
  private readonly inputs = new Map<bigint, string[]>(); // tool_use block -> its input's pieces
  // block -> field (text, thinking, signature) -> its deltas' pieces, joined in `assembled` as
  // answer.py joins them: a block started again at its index keeps them, as in Python
  private readonly texts = new Map<bigint, Map<string, string[]>>();
  private held = 0; // bytes held that are certain to be in the answer (module comment)
  private readonly content: string[] = [];
  private readonly refusal: string[] = [];
  private readonly calls = new Map<bigint, Call>();
  private ended = false; // its end event seen
  private broken = false; // never an answer: cut, an error event, too long, unreadable
  private odd = false; // a value no answer is made of (as in Python): the stream read on, no answer
  private made: Uint8Array | null | undefined;

  /** For `format`: `anthropic`, `openai-responses`, `gemini`, else OpenAI Chat's. */
  constructor(format: string) {
    this.anthropic = format === "anthropic";
    const hold = (bytes: number): void => this.hold(bytes);
    if (format === "openai-responses") this.items = new ResponsesAnswer(hold);
    else if (format === "gemini") this.items = new GeminiAnswer(hold);
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
      if (this.ended && !isBlank(data)) {
        this.broken = true; // bytes after the end: not the stream this reads
        this.drop();
      }
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
        if (!this.data.length && (at > start || !pending.length)) {
          // no event pending: only a data line reads as something; the blank, comment and other
          // lines before the next one are stepped over by indexOf, unread (each byte looked at once)
          let next = view.indexOf(D, at);
          while (next >= 0 && next <= last && !(lineStart(view, at, next) && startsWith(view, next, last + 1, DATA)))
            next = view.indexOf(D, next + 1);
          if (next < 0 || next > last) break;
          at = next;
        }
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
    if (this.broken) this.drop();
    return this.ended && !this.broken;
  }

  /** Counts `bytes` more certain to be in the answer: past MAX_ANSWER, none (module comment). */
  private hold(bytes: number): void {
    this.held += bytes;
    if (this.held > MAX_ANSWER) this.broken = true;
  }

  /** All a tap that failed held (it never makes an answer). */
  private drop(): void {
    this.line = [];
    this.data = [];
    this.head = EMPTY;
    this.blocks.clear();
    this.started.clear();
    this.inputs.clear();
    this.texts.clear();
    this.content.length = 0;
    this.refusal.length = 0;
    this.calls.clear();
    this.items?.drop();
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
    if (!this.anthropic && this.items === null && equals(stripBytes(data), DONE)) {
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
    else if (this.items !== null) {
      this.items.event(event);
      this.ended = this.items.done;
      this.broken ||= this.items.failed;
    } else this.chatEvent(event);
  }

  private anthropicEvent(event: JsonObject): void {
    const kind = event.get("type");
    if (kind === "message_stop") {
      this.ended = true;
    } else if (kind === "error") {
      this.broken = true;
    } else if (kind === "content_block_start") {
      const block = event.get("content_block");
      if (block instanceof Map) {
        const index = indexOf(event);
        // its bytes as it started, but its input (the streamed one replaces it), and a comma (or
        // the message's `]`); started again at its index, only what it adds
        const size_ = size(dumps(new Map([...block].filter(([key]) => key !== "input")))) + 1;
        const counted = this.started.get(index) ?? 0;
        if (size_ > counted) {
          this.started.set(index, size_);
          this.hold(size_ - counted);
        }
        this.blocks.set(index, new Map(block));
      }
    } else if (kind === "content_block_delta") {
      const delta = event.get("delta");
      const index = indexOf(event);
      if (delta instanceof Map && this.blocks.has(index)) this.delta(index, delta);
    }
  }

  private delta(index: bigint, delta: JsonObject): void {
    const kind = delta.get("type");
    if (kind === "input_json_delta") {
      const piece = delta.has("partial_json") ? delta.get("partial_json") : "";
      const pieces = this.inputs.get(index);
      if (typeof piece !== "string") this.odd = true;
      else if (pieces === undefined) this.inputs.set(index, [piece]);
      else pieces.push(piece);
      if (typeof piece === "string") this.hold(size(piece)); // as streamed, after the message
      return;
    }
    const field = DELTA_FIELDS.get(kind);
    if (field === undefined) return;
    const added = delta.has(field) ? delta.get(field) : "";
    if (typeof added !== "string") {
      this.odd = true;
      return;
    }
    let fields = this.texts.get(index);
    if (fields === undefined) this.texts.set(index, (fields = new Map()));
    const pieces = fields.get(field);
    if (pieces === undefined) fields.set(field, [added]);
    else pieces.push(added);
    this.hold(size(added));
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
      if (typeof content === "string") {
        this.content.push(content);
        this.hold(size(content));
      }
      const refusal = delta.get("refusal");
      if (typeof refusal === "string") {
        this.refusal.push(refusal); // written back as the message's refusal
        this.hold(size(refusal));
      }
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
    if (made === undefined) {
      this.hold(CALL);
      this.calls.set(index, (made = { name: [], arguments: [] }));
    }
    const id = call.get("id");
    if (typeof id === "string") made.id = id;
    const typed = call.get("type"); // another type, or none: a function call
    for (const [kind, field] of CALL_TEXT) {
      const spec = call.get(kind);
      if (!(spec instanceof Map || typed === kind)) continue;
      made.kind ??= kind;
      if (made.kind !== kind) this.odd = true; // both: not a call the agent writes back
      if (!(spec instanceof Map)) continue;
      const name = spec.get("name");
      if (typeof name === "string") {
        made.name.push(name);
        this.hold(size(name));
      }
      const piece = spec.get(field);
      if (typeof piece === "string") {
        made.arguments.push(piece);
        this.hold(2 * size(piece)); // in the message, then as streamed
      }
    }
  }

  private assembled(): Uint8Array {
    if (this.items !== null) return utf8(this.items.made());
    const streamed: string[] = [];
    let message: JsonObject;
    if (this.anthropic) {
      const blocks: Json[] = [];
      for (const index of sortedKeys(this.blocks)) {
        const block = this.blocks.get(index) as JsonObject;
        const fields = this.texts.get(index);
        for (const field of DELTA_FIELDS.values()) {
          const added = fields?.get(field);
          if (added === undefined) continue;
          const had = block.get(field);
          const before = had === undefined || isFalsy(had) ? "" : had;
          if (typeof before !== "string") throw new TypeError("a block field that is no string: no answer (answer.py alike)");
          block.set(field, before + added.join("")); // in its place when the block has it, else last
        }
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
        const kind = made.kind ?? "function";
        const called = new Map<string, Json>([
          ["name", made.name.join("")],
          [CALL_TEXT.get(kind) as string, args],
        ]);
        calls.push(
          new Map<string, Json>([
            ["id", made.id ?? ""],
            ["type", kind],
            [kind, called],
          ]),
        );
      }
      const plain = !calls.length && !this.refusal.length;
      const content = this.content.length || plain ? this.content.join("") : null;
      message = new Map<string, Json>([
        ["role", "assistant"],
        ["content", content],
      ]);
      if (this.refusal.length) message.set("refusal", this.refusal.join(""));
      if (calls.length) message.set("tool_calls", calls);
    }
    return utf8([dumps(message), ...streamed].join("\n"));
  }
}

// bytes a tool call makes at least: the lesser of a function call's `{"id":"","type":"function",
// "function":{"name":"","arguments":""}}` (65) and a custom one's `{"id":"","type":"custom",
// "custom":{"name":"","input":""}}` (57), a comma (or the message's `]`) and the line end before
// its arguments
const CALL = 59;
const D = 0x64; // a data line's first byte

/** Whether `view[at]`, at or after the line start `from`, starts a line. */
function lineStart(view: Uint8Array, from: number, at: number): boolean {
  return at === from || view[at - 1] === LF || view[at - 1] === CR;
}
