/**
 * Where each member of a JSON object (or element of an array) sits in its text, so a body
 * can be spliced without being parsed and written again (a number written `1.0` by another
 * client stays `1.0`).
 * The text must be valid JSON (the caller parses it first); linear in its length.
 */

export interface MemberSpan {
  readonly key: string;
  /** Where the member's key starts (its opening quote). */
  readonly start: number;
  /** Where its value starts and ends. */
  readonly valueStart: number;
  readonly end: number;
}

const WHITESPACE = new Set([" ", "\t", "\n", "\r"]);

/** The members of the object `text` holds, in order; null when it holds no object. */
export function memberSpans(text: string): MemberSpan[] | null {
  let at = skip(text, 0);
  if (text[at] !== "{") return null;
  at = skip(text, at + 1);
  const members: MemberSpan[] = [];
  if (text[at] === "}") return members;
  for (;;) {
    const start = at;
    const keyEnd = stringEnd(text, at);
    const key = JSON.parse(text.slice(start, keyEnd)) as string;
    at = skip(text, keyEnd);
    at = skip(text, at + 1); // the colon
    const valueStart = at;
    const end = valueEnd(text, at);
    members.push({ key, start, valueStart, end });
    at = skip(text, end);
    if (text[at] === "}") return members;
    at = skip(text, at + 1); // the comma
  }
}

/** Where an element of a JSON array sits in its text: from its first character to the index after its last. */
export interface ElementSpan {
  readonly start: number;
  readonly end: number;
}

/** The elements of the array whose `[` is at `at`, in order (the whitespace around each is
 * not in its span: it is the text's between them). */
export function elementSpans(text: string, at: number): ElementSpan[] {
  const elements: ElementSpan[] = [];
  let index = skip(text, at + 1);
  if (text[index] === "]") return elements;
  for (;;) {
    const end = valueEnd(text, index);
    elements.push({ start: index, end });
    index = skip(text, end);
    if (text[index] !== ",") return elements; // the `]`
    index = skip(text, index + 1);
  }
}

function skip(text: string, at: number): number {
  while (at < text.length && WHITESPACE.has(text[at]!)) at++;
  return at;
}

/** The index after the string starting at `at`. */
function stringEnd(text: string, at: number): number {
  for (let index = at + 1; index < text.length; index++) {
    const char = text[index];
    if (char === "\\") index++;
    else if (char === '"') return index + 1;
  }
  return text.length;
}

/** The index after the value starting at `at`. */
function valueEnd(text: string, at: number): number {
  const first = text[at];
  if (first === '"') return stringEnd(text, at);
  if (first !== "{" && first !== "[") {
    let index = at;
    while (index < text.length && !WHITESPACE.has(text[index]!) && text[index] !== "," && text[index] !== "}" && text[index] !== "]") index++;
    return index;
  }
  let depth = 0;
  for (let index = at; index < text.length; index++) {
    const char = text[index];
    if (char === '"') index = stringEnd(text, index) - 1;
    else if (char === "{" || char === "[") depth++;
    else if (char === "}" || char === "]") {
      depth--;
      if (depth === 0) return index + 1;
    }
  }
  return text.length;
}
