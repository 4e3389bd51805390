/**
 * JSON as Python's `json` reads and writes it, for edits/answer.ts (whose bytes must be
 * Python's `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` of what
 * `json.loads` read): objects keep their keys in the order written, integers all their
 * digits, floats apart from integers written as Python's `repr`, NaN and Infinity read and
 * written, lone surrogates written as they are. Linear in the text.
 */

/** A JSON value as Python's `json.loads` makes it: objects in their keys' order, integers
 * exact, floats apart from integers. */
export type Json = null | boolean | string | PyInt | PyFloat | Json[] | JsonObject;
export type JsonObject = Map<string, Json>;

export class PyInt {
  constructor(readonly value: bigint) {}
}

export class PyFloat {
  constructor(readonly value: number) {}
}

export const MAX_INT_DIGITS = 4300; // Python's sys.get_int_max_str_digits(): a longer integer is an error
export const SPACE = /[ \t\n\r]*/y;
export const RUN = /[^"\\\u0000-\u001f]*/y;
export const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;
export const HEX4 = /[0-9a-fA-F]{4}/y;
export const ESCAPES: Readonly<Record<string, string>> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** Python's `json.loads` of a str: its grammar (NaN, Infinity and -Infinity too; no control
 * character within a string), its values. Throws on anything else. */
export class Reader {
  private at = 0;

  constructor(private readonly text: string) {}

  document(): Json {
    this.space();
    const value = this.value();
    this.space();
    if (this.at !== this.text.length) throw new SyntaxError("extra data");
    return value;
  }

  private space(): void {
    SPACE.lastIndex = this.at;
    SPACE.test(this.text);
    this.at = SPACE.lastIndex;
  }

  private value(): Json {
    switch (this.text.charCodeAt(this.at)) {
      case 0x22: // "
        this.at++;
        return this.string();
      case 0x7b: // {
        return this.object();
      case 0x5b: // [
        return this.array();
      case 0x6e:
        return this.word("null", null);
      case 0x74:
        return this.word("true", true);
      case 0x66:
        return this.word("false", false);
      case 0x4e:
        return this.word("NaN", new PyFloat(NaN));
      case 0x49:
        return this.word("Infinity", new PyFloat(Infinity));
      default:
        if (this.text.startsWith("-Infinity", this.at)) return this.word("-Infinity", new PyFloat(-Infinity));
        return this.number();
    }
  }

  private word<T extends Json>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.at)) throw new SyntaxError("expecting value");
    this.at += word.length;
    return value;
  }

  private number(): PyInt | PyFloat {
    NUMBER.lastIndex = this.at;
    const found = NUMBER.exec(this.text);
    if (found === null) throw new SyntaxError("expecting value");
    this.at = NUMBER.lastIndex;
    const [text, fraction, exponent] = found;
    if (fraction !== undefined || exponent !== undefined) return new PyFloat(Number(text));
    if (text.length - (text[0] === "-" ? 1 : 0) > MAX_INT_DIGITS) throw new RangeError("integer too long");
    return new PyInt(BigInt(text));
  }

  /** The string whose opening quote was read. */
  private string(): string {
    let out = "";
    for (;;) {
      RUN.lastIndex = this.at;
      RUN.test(this.text);
      out += this.text.slice(this.at, RUN.lastIndex);
      this.at = RUN.lastIndex;
      const stop = this.text.charCodeAt(this.at++);
      if (stop === 0x22) return out;
      if (stop !== 0x5c) throw new SyntaxError("unterminated string or control character");
      const escape = this.text.charAt(this.at++);
      if (escape === "u") {
        HEX4.lastIndex = this.at;
        if (!HEX4.test(this.text)) throw new SyntaxError("invalid \\u escape");
        out += String.fromCharCode(parseInt(this.text.slice(this.at, this.at + 4), 16));
        this.at += 4;
      } else {
        const made = ESCAPES[escape];
        if (made === undefined) throw new SyntaxError("invalid escape");
        out += made;
      }
    }
  }

  private object(): JsonObject {
    const made: JsonObject = new Map();
    this.at++;
    this.space();
    if (this.text.charCodeAt(this.at) === 0x7d) {
      this.at++;
      return made;
    }
    for (;;) {
      if (this.text.charCodeAt(this.at++) !== 0x22) throw new SyntaxError("expecting property name");
      const key = this.string();
      this.space();
      if (this.text.charCodeAt(this.at++) !== 0x3a) throw new SyntaxError("expecting ':'");
      this.space();
      made.set(key, this.value()); // a key written again: its first place, its last value
      this.space();
      const next = this.text.charCodeAt(this.at++);
      if (next === 0x7d) return made;
      if (next !== 0x2c) throw new SyntaxError("expecting ',' or '}'");
      this.space();
    }
  }

  private array(): Json[] {
    const made: Json[] = [];
    this.at++;
    this.space();
    if (this.text.charCodeAt(this.at) === 0x5d) {
      this.at++;
      return made;
    }
    for (;;) {
      made.push(this.value());
      this.space();
      const next = this.text.charCodeAt(this.at++);
      if (next === 0x5d) return made;
      if (next !== 0x2c) throw new SyntaxError("expecting ',' or ']'");
      this.space();
    }
  }
}

/** Python's `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`. */
export function dumps(value: Json): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "string") return quote(value);
  if (value instanceof PyInt) return value.value.toString();
  if (value instanceof PyFloat) return floatRepr(value.value);
  if (Array.isArray(value)) return `[${value.map(dumps).join(",")}]`;
  const members: string[] = [];
  for (const [key, member] of value) members.push(`${quote(key)}:${dumps(member)}`);
  return `{${members.join(",")}}`;
}

export const QUOTED = /[\u0000-\u001f"\\]/g;
export const QUOTES: Readonly<Record<string, string>> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/** A string as Python's encoder writes it with ensure_ascii=False: lone surrogates as they are. */
export function quote(text: string): string {
  const escaped = text.replace(QUOTED, (char) => QUOTES[char] ?? `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
  return `"${escaped}"`;
}

/** Python's `float.__repr__` (its shortest digits, as JS's), as `json.dumps` writes a float. */
export function floatRepr(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "Infinity";
  if (value === -Infinity) return "-Infinity";
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const sign = value < 0 ? "-" : "";
  const [mantissa = "", power = "0"] = Math.abs(value).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(power); // value = d.ddd × 10^exponent
  if (exponent < -4 || exponent >= 16) {
    const written = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${written}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  const whole = exponent + 1;
  if (digits.length <= whole) return `${sign}${digits}${"0".repeat(whole - digits.length)}.0`;
  return `${sign}${digits.slice(0, whole)}.${digits.slice(whole)}`;
}

/** Python's truth of a value: false for null, false, zero, and an empty string, list or dict. */
export function isFalsy(value: Json): boolean {
  if (value === null || value === false || value === "") return true;
  if (value instanceof PyInt) return value.value === 0n;
  if (value instanceof PyFloat) return value.value === 0;
  if (Array.isArray(value)) return !value.length;
  return value instanceof Map && !value.size;
}

/** Python's `value == 0`. */
export function isZero(value: Json | undefined): boolean {
  if (value instanceof PyInt) return value.value === 0n;
  return value === false || (value instanceof PyFloat && value.value === 0);
}

/** Python's `index if isinstance(index, int) else 0` of `value.get("index", 0)` (a bool is an int). */
export function indexOf(value: JsonObject): bigint {
  const index = value.get("index");
  if (index instanceof PyInt) return index.value;
  return typeof index === "boolean" ? BigInt(index) : 0n;
}

/** What Python's `for item in value or ()` goes through: a list's items, and no dict (none in a
 * dict's keys or a string's characters); null where Python cannot iterate (it raises). */
export function items(value: Json | undefined): readonly Json[] | null {
  if (value === undefined || isFalsy(value) || typeof value === "string" || value instanceof Map) return [];
  return Array.isArray(value) ? value : null;
}

export function sortedKeys<V>(map: ReadonlyMap<bigint, V>): bigint[] {
  return [...map.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** The characters of Python's `str.isspace()`, what its `str.strip()` removes. */
export const PY_SPACE = "[\\t-\\r\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
export const PY_BLANK = new RegExp(`^${PY_SPACE}*$`);
export const PY_EDGES = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, "g");

/** Python's `str.strip()`. */
export function pyStrip(text: string): string {
  return text.replace(PY_EDGES, "");
}
