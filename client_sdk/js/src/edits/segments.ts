/**
 * Cutting a request into segments whose concatenation is the request, byte for byte
 * (client_sdk/toolref/edits/segments.py, byte for byte: the vectors of tests/js_vectors.py).
 *
 * The headers come first, as one segment (`headerSegment`): every end-to-end header but the
 * credentials, as `name: value\r\n` lines; a credential keeps its place as a line with its
 * name alone, its value travelling as a real header on every request (never stored). Then
 * the body (`cutBody`): a JSON object cut at the boundaries of its members and, under its
 * messages key, of each message; a member's value of `LARGE` characters or more (`tools`,
 * `system`) is a segment of its own, and so is each message, less its closing brackets, its
 * own `id` members and its cache marks (`cache_control`, at any depth); what lies between is
 * glue. Nothing is parsed to be written again: every segment is a slice of the body's own
 * bytes, so whitespace, number spellings, escapes (lone surrogates included) and repeated
 * keys stay as they came.
 *
 * The body is scanned as bytes (JSON's structure is ASCII), accepting what Python's `json`
 * scanner accepts (`NaN`, `Infinity`, numbers of any length; control characters in strings
 * refused), and lengths that Python counts in characters (`LARGE`, a message's largest
 * span) are counted in code points here too. Linear in the request; any nesting depth (Python
 * gives up near 1,000 levels and sends such a body as it is).
 */

import { BLOCK_KEYS, blocks, splitsOf } from "./blocks.js";
import { characters, windowed } from "./window.js";

/** A member value at least this many characters long is a segment of its own. */
export const LARGE = 256;
/** Roles of the model's own messages: what an answer dictionary may compress. */
export const ANSWER_ROLES: ReadonlySet<string> = new Set(["assistant", "model"]);
/** The types of the OpenAI Responses items the model makes that have no role (scanner.py's
 * `MODEL_ITEMS`): the model's too, as a `message` item of an `ANSWER_ROLES` role is; the run
 * of them renders a Responses answer (editor.ts's `renderingOf`). No tool output is one, nor a
 * hosted tool's item holding its output (`mcp_call`, ...); a web search's and a tool search's are. */
export const MODEL_ITEMS: ReadonlySet<string> = new Set(["reasoning", "function_call", "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call", "computer_call", "web_search_call", "tool_search_call"]);
/** Header names whose values are credentials: they travel on every request, never in a segment. */
export const SECRET_HEADERS: ReadonlySet<string> = new Set(["authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"]);
const SECRET_WORDS = ["key", "token", "secret", "auth", "cookie", "password"];
/** Headers that describe the bytes on one hop, not the request: never in a segment. */
const NOT_KEPT: ReadonlySet<string> = new Set([
  "host",
  "content-length",
  "content-encoding",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "expect",
]);
/** A member that marks a prompt-cache breakpoint, cut out of a message's piece. */
export const MARK_KEY = "cache_control";
/** A message's own member that names it, not what it says: cut out of its piece too. */
export const ID_KEY = "id";

const MARK = new TextEncoder().encode(`"${MARK_KEY}"`);
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A header whose value is a credential (by name, or by a word in it). */
export function isSecret(name: string): boolean {
  const low = name.toLowerCase();
  return SECRET_HEADERS.has(low) || SECRET_WORDS.some((word) => low.includes(word));
}

/** The headers' segment, and the credentials that travel apart (name, value), in order.
 * `pairs`: the request's end-to-end headers (toolref's own left out by the caller); those
 * describing the hop are dropped here. Names and values are latin-1 (what HTTP carries). */
/** A header that describes the bytes on one hop (`Host`, framing, `Connection`, a proxy's
 * own), never the request: no segment holds one (lowercase `name`). */
export function describesHop(name: string): boolean {
  return NOT_KEPT.has(name) || (name.startsWith("proxy-") && name !== "proxy-authorization");
}

export function headerSegment(pairs: Iterable<readonly [string, string]>): { segment: Uint8Array; secrets: [string, string][] } {
  let text = "";
  const secrets: [string, string][] = [];
  for (const [name, value] of pairs) {
    const low = name.toLowerCase();
    if (describesHop(low)) continue;
    if (isSecret(low)) {
      secrets.push([name, value]);
      text += `${name}:\r\n`;
    } else {
      text += `${name}: ${value}\r\n`;
    }
  }
  const segment = new Uint8Array(text.length);
  for (let index = 0; index < text.length; index++) segment[index] = text.charCodeAt(index) & 0xff;
  return { segment, secrets };
}

/** The lines of a headers segment, in order: [name, value], a credential's value null (it
 * travels apart); null when `segment` is not a headers segment. */
export function headerLines(segment: Uint8Array): [string, string | null][] | null {
  const found: [string, string | null][] = [];
  let at = 0;
  while (at < segment.length) {
    const line = headerLine(segment, at);
    if (line === null) return null;
    found.push(line.pair);
    at = line.end;
  }
  return found;
}

/** The header line at `at` (`name: value\r\n`, or `name:\r\n` for a credential), or null. */
export function headerLine(data: Uint8Array, at: number): { pair: [string, string | null]; end: number } | null {
  let colon = at;
  while (colon < data.length && data[colon] !== 0x3a && data[colon] !== 0x0d && data[colon] !== 0x0a) colon++;
  if (colon === at || data[colon] !== 0x3a) return null;
  const name = latin1Text(data, at, colon);
  if (data[colon + 1] === 0x0d && data[colon + 2] === 0x0a) return { pair: [name, null], end: colon + 3 };
  if (data[colon + 1] !== 0x20) return null;
  let end = colon + 2;
  while (end < data.length && data[end] !== 0x0d && data[end] !== 0x0a) end++;
  if (data[end] !== 0x0d || data[end + 1] !== 0x0a) return null;
  return { pair: [name, latin1Text(data, colon + 2, end)], end: end + 2 };
}

function latin1Text(data: Uint8Array, start: number, end: number): string {
  let text = "";
  for (let index = start; index < end; index++) text += String.fromCharCode(data[index]!);
  return text;
}

/** A body cut: its segments (slices of it), the index in them of each message's largest
 * span (what it says), and whether the messages key held a list. */
export interface BodyCut {
  readonly segments: Uint8Array[];
  readonly messages: number[];
  readonly listed: boolean;
  /** The index in `segments` of every span of a message of `ANSWER_ROLES` (or in `items`). */
  readonly answered: number[];
  /** The numbers of the messages that are Responses items of the model's (`isItem`). */
  readonly items: number[];
  /** With the long window: each segment's message number (-1: none); else empty. */
  readonly owners: number[];
  /** [index in `segments`, offsets in it] of each segment of a message holding two or more
   * tool results that holds where one starts or the last ends (request.py's `Cut.splits`). */
  readonly splits: [number, number[]][];
}

/** The body's segments; null when it is not one JSON object in UTF-8 (sent as it is). */
export function cutBody(body: Uint8Array, messagesKey: string | null, window = false): BodyCut | null {
  try {
    utf8.decode(body);
  } catch {
    return null;
  }
  const scanner = new Scanner(body, messagesKey, window);
  try {
    scanner.object();
  } catch (error) {
    if (error === NOT_JSON) return null;
    throw error;
  }
  const segments: Uint8Array[] = [];
  const marks: number[] = [];
  const answered: number[] = [];
  const owners: number[] = [];
  const splits: [number, number[]][] = [];
  const message = new Set(scanner.messages);
  const model = new Set(scanner.models);
  let at = 0;
  scanner.cuts.forEach(([start, end], index) => {
    if (start > at) {
      segments.push(body.subarray(at, start));
      if (window) owners.push(-1);
    }
    if (message.has(index)) marks.push(segments.length);
    if (model.has(index)) answered.push(segments.length);
    const offsets = scanner.splits.get(index);
    if (offsets !== undefined) splits.push([segments.length, offsets]);
    segments.push(body.subarray(start, end));
    if (window) owners.push(scanner.owners[index]!);
    at = end;
  });
  if (at < body.length) {
    segments.push(body.subarray(at));
    if (window) owners.push(-1);
  }
  return { segments, messages: marks, listed: scanner.listed, answered, owners, splits, items: scanner.items };
}

const NOT_JSON = new Error("not one JSON object");

/** Whether a message whose own `role` and `type` are these is a Responses item of the
 * model's (scanner.py's `_is_item`): a `MODEL_ITEMS` type with no role of another's, or a
 * `message` of an `ANSWER_ROLES` role. */
function isItem(role: unknown, type: unknown): boolean {
  if (typeof type !== "string") return false;
  if (typeof role === "string") return ANSWER_ROLES.has(role) && (MODEL_ITEMS.has(type) || type === "message");
  return MODEL_ITEMS.has(type);
}

function isWhite(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

function isDigit(byte: number | undefined): boolean {
  return byte !== undefined && byte >= 0x30 && byte <= 0x39;
}

function isHex(byte: number | undefined): boolean {
  return byte !== undefined && ((byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x66));
}

const CONSTANTS: readonly Uint8Array[] = ["null", "true", "false", "NaN", "Infinity", "-Infinity"].map((word) => new TextEncoder().encode(word));

/** One scan of a JSON object, as scanner.py's `_fresh` (no memo: JS scans every body whole). */
class Scanner {
  readonly cuts: [number, number][] = [];
  readonly messages: number[] = [];
  /** Indices in `cuts` of the spans of the model's messages (`ANSWER_ROLES`, `MODEL_ITEMS`). */
  readonly models: number[] = [];
  /** The numbers of the messages that are Responses items of the model's (`isItem`). */
  readonly items: number[] = [];
  /** With the long window: each cut's message number (-1: none). */
  readonly owners: number[] = [];
  /** Cut index -> the offsets in it where a message's tool results start and the last ends. */
  readonly splits = new Map<number, number[]>();

  listed = false;

  constructor(
    readonly data: Uint8Array,
    private readonly messagesKey: string | null,
    private readonly window = false,
  ) {}

  object(): void {
    const data = this.data;
    let at = this.skip(0);
    at = this.skip(this.expect(at, 0x7b));
    if (data[at] === 0x7d) return this.end(at + 1);
    for (;;) {
      const keyAt = at;
      at = this.string(this.expect(at, 0x22) - 1);
      const key = this.key(keyAt, at);
      at = this.skip(this.expect(this.skip(at), 0x3a));
      const start = at;
      if (key === this.messagesKey && data[at] === 0x5b) {
        this.listed = true;
        at = this.list(at);
      } else {
        at = this.value(at);
        if (at - start >= LARGE && characters(data, start, at) >= LARGE) {
          this.cuts.push([start, at]);
          if (this.window) this.owners.push(-1);
        }
      }
      at = this.skip(at);
      if (data[at] === 0x7d) return this.end(at + 1);
      at = this.skip(this.expect(at, 0x2c));
    }
  }

  private end(at: number): void {
    if (this.skip(at) !== this.data.length) throw NOT_JSON;
  }

  skip(at: number): number {
    while (isWhite(this.data[at])) at++;
    return at;
  }

  expect(at: number, byte: number): number {
    if (this.data[at] !== byte) throw NOT_JSON;
    return at + 1;
  }

  /** The key whose string spans `start` to `end` (quotes included), as Python reads it. */
  key(start: number, end: number): string {
    const raw = this.data.subarray(start + 1, end - 1);
    const text = utf8.decode(raw);
    return raw.includes(0x5c) ? (JSON.parse(`"${text}"`) as string) : text;
  }

  /** The end of the string opening at `at` (a quote), refused as Python's strict scanner refuses. */
  string(at: number): number {
    const data = this.data;
    at++;
    for (;;) {
      const byte = data[at];
      if (byte === undefined || byte < 0x20) throw NOT_JSON;
      if (byte === 0x22) return at + 1;
      if (byte === 0x5c) {
        const escape = data[at + 1];
        if (escape === 0x75) {
          for (let index = 2; index < 6; index++) if (!isHex(data[at + index])) throw NOT_JSON;
          at += 6;
        } else if (escape !== undefined && '"\\/bfnrt'.includes(String.fromCharCode(escape))) {
          at += 2;
        } else {
          throw NOT_JSON;
        }
        continue;
      }
      at++;
    }
  }

  /** The end of a number or constant at `at` (Python's scanner: any length, NaN and Infinity). */
  private scalar(at: number): number {
    const data = this.data;
    for (const word of CONSTANTS) {
      if (data[at] === word[0] && (word[0] !== 0x2d || data[at + 1] === 0x49) && this.startsWith(at, word)) return at + word.length;
    }
    let index = at;
    if (data[index] === 0x2d) index++;
    if (data[index] === 0x30) index++;
    else if (isDigit(data[index]) && data[index] !== 0x30) while (isDigit(data[index])) index++;
    else throw NOT_JSON;
    if (data[index] === 0x2e && isDigit(data[index + 1])) {
      index += 2;
      while (isDigit(data[index])) index++;
    }
    if (data[index] === 0x65 || data[index] === 0x45) {
      let exponent = index + 1;
      if (data[exponent] === 0x2b || data[exponent] === 0x2d) exponent++;
      if (isDigit(data[exponent])) {
        while (isDigit(data[exponent])) exponent++;
        index = exponent;
      }
    }
    return index;
  }

  private startsWith(at: number, word: Uint8Array): boolean {
    for (let index = 0; index < word.length; index++) if (this.data[at + index] !== word[index]) return false;
    return true;
  }

  /** The end of the value at `at` (no whitespace before it), containers walked without recursion. */
  value(at: number): number {
    const data = this.data;
    const open: number[] = []; // 0x7d or 0x5d: what closes each container walked into
    for (;;) {
      const byte = data[at];
      if (byte === 0x7b || byte === 0x5b) {
        const close = byte + 2;
        at = this.skip(at + 1);
        if (data[at] === close) {
          at += 1;
        } else {
          open.push(close);
          if (close === 0x7d) at = this.member(at);
          continue;
        }
      } else {
        at = byte === 0x22 ? this.string(at) : this.scalar(at);
      }
      for (;;) {
        if (open.length === 0) return at;
        at = this.skip(at);
        const close = open[open.length - 1]!;
        if (data[at] === close) {
          open.pop();
          at += 1;
          continue;
        }
        at = this.skip(this.expect(at, 0x2c));
        if (close === 0x7d) at = this.member(at);
        break;
      }
    }
  }

  /** Past a member's key and colon: where its value starts. */
  private member(at: number): number {
    if (this.data[at] !== 0x22) throw NOT_JSON;
    return this.skip(this.expect(this.skip(this.string(at)), 0x3a));
  }

  private list(at: number): number {
    const data = this.data;
    at = this.skip(at + 1);
    if (data[at] === 0x5d) return at + 1;
    for (;;) {
      const start = at;
      const own: [number, number][] = [];
      const said: { role?: unknown; type?: unknown } = {};
      const bounds: number[] = [];
      at = this.message(at, own, said, bounds);
      let spans = this.spans(start, at, own);
      if (this.window) {
        spans = spans.flatMap(([from, to]) => windowed(data, from, to));
        for (let n = 0; n < spans.length; n++) this.owners.push(this.messages.length);
      }
      splitsOf(spans, bounds, this.cuts.length, this.splits);
      let largest = 0;
      let most = -1;
      spans.forEach(([from, to], index) => {
        const size = characters(data, from, to);
        if (size > most) [largest, most] = [index, size];
      });
      const item = isItem(said.role, said.type);
      if (item) this.items.push(this.messages.length);
      this.messages.push(this.cuts.length + largest);
      if (item || (typeof said.role === "string" && ANSWER_ROLES.has(said.role))) {
        for (let n = 0; n < spans.length; n++) this.models.push(this.cuts.length + n);
      }
      this.cuts.push(...spans);
      at = this.skip(at);
      if (data[at] === 0x5d) return at + 1;
      at = this.skip(this.expect(at, 0x2c));
    }
  }

  /** A message's end, the spans of its own `id` members (each with the comma joining it to
   * its neighbours: a first one's reaches over the marks after it, to the next member) in
   * `own`, and its own `role` and `type` members' values in `said` (a string read as Python
   * reads it; another value as a non-string); its `BLOCK_KEYS` lists walked block by block
   * (`blocks` adds to `bounds`). */
  private message(at: number, own: [number, number][], said: { role?: unknown; type?: unknown }, bounds: number[]): number {
    const data = this.data;
    if (data[at] !== 0x7b) return this.value(at);
    at = this.skip(at + 1);
    if (data[at] === 0x7d) return at + 1;
    let before: number | null = null; // the end of the member before (null: this is the first)
    let first: number | null = null; // where a first id starts, its cut waiting for a next member
    for (;;) {
      const keyAt = this.expect(at, 0x22) - 1;
      at = this.string(keyAt);
      const key = this.key(keyAt, at);
      const valueAt = this.skip(this.expect(this.skip(at), 0x3a));
      at = BLOCK_KEYS.has(key) && data[valueAt] === 0x5b ? blocks(this, valueAt, bounds) : this.value(valueAt);
      if (key === "role") said.role = data[valueAt] === 0x22 ? this.key(valueAt, at) : null;
      else if (key === "type") said.type = data[valueAt] === 0x22 ? this.key(valueAt, at) : null;
      const end = at;
      at = this.skip(at);
      if (first !== null && key !== MARK_KEY) {
        own.push([first, keyAt]);
        first = null;
      }
      if (key === ID_KEY) {
        if (before !== null) own.push([before, end]);
        else first = keyAt;
      }
      if (data[at] === 0x7d) return at + 1;
      before = end;
      at = this.skip(this.expect(at, 0x2c));
    }
  }

  /** A message's spans: the message without its closing run (through the cuts at its end),
   * its own ids and its cache marks (`,` "cache_control" `:` value, whitespace around, at any
   * depth), which are left to the glue (scanner.py's `_message_spans`). */
  private spans(start: number, end: number, own: [number, number][]): [number, number][] {
    const data = this.data;
    const cuts: [number, number][] = [...own];
    let from = start; // where the next mark may start (Python's finditer)
    for (let comma = data.indexOf(0x2c, start); comma >= 0 && comma < end; comma = data.indexOf(0x2c, comma + 1)) {
      if (comma < from) continue;
      let quote = comma + 1;
      while (quote < end && isWhite(data[quote])) quote++;
      if (!this.startsWithWithin(quote, MARK, end)) continue;
      let colon = quote + MARK.length;
      while (colon < end && isWhite(data[colon])) colon++;
      if (colon >= end || data[colon] !== 0x3a) continue;
      let first = comma;
      while (first > from && isWhite(data[first - 1])) first--;
      cuts.push([first, this.value(this.skip(colon + 1))]);
      from = colon + 1;
      comma = colon;
    }
    cuts.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const spans: [number, number][] = [];
    let at = start;
    for (const [cutStart, cutEnd] of cuts) {
      if (cutStart >= at) {
        // one inside a cut before (marks after a first id) is in it
        spans.push([at, cutStart]);
        at = cutEnd;
      }
    }
    spans.push([at, end]);
    while (spans.length) {
      // the closing run, through the cuts at the end
      const [a] = spans[spans.length - 1]!;
      let close = spans[spans.length - 1]![1];
      while (close > a && (isWhite(data[close - 1]) || data[close - 1] === 0x7d || data[close - 1] === 0x5d)) close--;
      if (close > a) {
        spans[spans.length - 1] = [a, close];
        break;
      }
      spans.pop();
    }
    const kept = spans.filter(([a, b]) => b > a);
    return kept.length ? kept : [[start, end]];
  }

  private startsWithWithin(at: number, word: Uint8Array, end: number): boolean {
    return at + word.length <= end && this.startsWith(at, word);
  }
}
