/**
 * The tool results of one message (scanner.py's `_blocks`, byte for byte: the vectors of
 * tests/js_edit_vectors.py): where each block of a message holding two or more tool results
 * starts and the last ends, so that a sender compresses each alone (`BodyCut.splits`,
 * isolated.ts's split records; docs/reliability.md, "Sizes"). Linear in the message: each
 * block walked once, its members' values skipped by the scanner.
 */

/** A message's members listing its blocks (Anthropic's `content`, Gemini's `parts`), and the
 * members that make a block a tool's result beside `"type": "tool_result"` (scanner.py's
 * BLOCK_KEYS, RESULT_KEYS). */
export const BLOCK_KEYS: ReadonlySet<string> = new Set(["content", "parts"]);
export const RESULT_KEYS: ReadonlySet<string> = new Set(["functionResponse", "function_response"]);

/** What of segments.ts's scanner the walk uses (it throws on what Python's scanner refuses). */
export interface Walker {
  readonly data: Uint8Array;
  skip(at: number): number;
  expect(at: number, byte: number): number;
  string(at: number): number;
  key(start: number, end: number): string;
  value(at: number): number;
}

/** The end of the list at `at` (a message's blocks); where each block starts and the last
 * ends added to `bounds` when two or more are a tool's result. */
export function blocks(walker: Walker, at: number, bounds: number[]): number {
  const data = walker.data;
  const starts: number[] = [];
  let results = 0;
  let end = at;
  at = walker.skip(at + 1);
  while (data[at] !== 0x5d) {
    if (starts.length) at = walker.skip(walker.expect(at, 0x2c));
    starts.push(at);
    const [after, result] = block(walker, at);
    if (result) results++;
    end = after;
    at = walker.skip(after);
  }
  if (results > 1) {
    for (const start of starts) bounds.push(start);
    bounds.push(end);
  }
  return at + 1;
}

/** A block's end, and whether it is a tool's result: an object whose last `type` member is
 * the string "tool_result" (as Python's dict keeps it), or with a `RESULT_KEYS` member. */
function block(walker: Walker, at: number): [number, boolean] {
  const data = walker.data;
  if (data[at] !== 0x7b) return [walker.value(at), false];
  at = walker.skip(at + 1);
  if (data[at] === 0x7d) return [at + 1, false];
  let type: string | null = null;
  let named = false;
  for (;;) {
    const keyAt = walker.expect(at, 0x22) - 1;
    at = walker.string(keyAt);
    const key = walker.key(keyAt, at);
    const valueAt = walker.skip(walker.expect(walker.skip(at), 0x3a));
    at = walker.value(valueAt);
    if (key === "type") type = data[valueAt] === 0x22 ? walker.key(valueAt, at) : null;
    if (RESULT_KEYS.has(key)) named = true;
    at = walker.skip(at);
    if (data[at] === 0x7d) return [at + 1, named || type === "tool_result"];
    at = walker.skip(walker.expect(at, 0x2c));
  }
}

/** The offsets of `bounds` (in order) in each of a message's `spans` (a start included),
 * set in `into` by cut index (`first` the message's first): one walk beside the spans. */
export function splitsOf(spans: readonly (readonly [number, number])[], bounds: readonly number[], first: number, into: Map<number, number[]>): void {
  let bound = 0;
  spans.forEach(([from, to], n) => {
    const offsets: number[] = [];
    for (; bound < bounds.length && bounds[bound]! < to; bound++) if (bounds[bound]! >= from) offsets.push(bounds[bound]! - from);
    if (offsets.length) into.set(first + n, offsets);
  });
}
