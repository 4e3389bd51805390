/**
 * Text as the SDK shows it in a console message or an error message: the one home for every
 * message that quotes text a peer chose (a receiver's `x-request-id`, a registry's redirect
 * `Location`) or names an endpoint. Python's SDK shows the same through
 * `toolref.wire.redaction`.
 *
 * `printable`: a peer's text with each character a terminal acts on as its escape (`\x1b`,
 * `\x0d\x0a`, `\x9b`, `\u202e`; tab as it is), so no escape sequence runs (clearing the
 * screen, moving the cursor, retitling the window) and no CR LF forges a line, and at most
 * `MOST_SHOWN` characters of it kept, the rest counted, so a peer writes no megabytes into
 * an app's log. The rules and outputs are Python's `printable`'s, held so by shared vectors
 * (tests/js_printable_vectors.py). Characters are code points, as Python's: an astral one
 * counts one, a lone surrogate one.
 *
 * `endpointShown`: a URL's origin and path, no query nor fragment (which may hold an API key:
 * `?key=...`), as Python's `Sender` names an endpoint (`target_of`).
 *
 * Pure, linear in the text, never throwing.
 */

/** The most characters of one peer's value shown: what Python's SDK passes for each. */
export const MOST_SHOWN = 200;

/** What a terminal acts on rather than shows (Python's `redaction.UNPRINTABLE`): C0 controls
 * but tab, DEL, C1 controls (U+009B is a CSI of its own), the line and paragraph separators,
 * and the bidirectional controls that reorder what follows them. */
const UNPRINTABLE = /[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` as a console or a log may show it (see above): at most `most` characters of it
 * (a whole number, at least 0) kept, then escaped, and the rest counted
 * (`... (N more characters)`). Linear in `text`: one pass over it. */
export function printable(text: string, most: number = MOST_SHOWN): string {
  let at = 0; // code units kept
  for (let kept = 0; at < text.length && kept < most; kept++) at += pairAt(text, at) ? 2 : 1;
  let more = 0;
  for (let rest = at; rest < text.length; more++) rest += pairAt(text, rest) ? 2 : 1;
  const shown = text.slice(0, at).replace(UNPRINTABLE, escaped);
  return more ? `${shown}... (${more} more characters)` : shown;
}

/** Whether a surrogate pair (one astral character) starts at `at`. */
function pairAt(text: string, at: number): boolean {
  const high = text.charCodeAt(at);
  if (high < 0xd800 || high > 0xdbff) return false;
  const low = text.charCodeAt(at + 1);
  return low >= 0xdc00 && low <= 0xdfff;
}

function escaped(found: string): string {
  const code = found.charCodeAt(0);
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** The endpoint `url` names, as a message shows it: origin and path (see above); `url` as
 * it is when it is no absolute URL (a path). */
export function endpointShown(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.origin + parsed.pathname;
  } catch {
    return url;
  }
}
