/**
 * An edit: the new request as ranges of a base recipe kept, pieces named, segments inline
 * (client_sdk/toolref/edits/edit.py's `diff`, the same ops).
 *
 * Every run of entries the base holds in the same order is kept as a range, wherever it
 * sits (an edit, a deletion or an insertion in the middle costs what changed, not what
 * follows); a piece the registry holds elsewhere is named; anything else travels inline.
 */

import { RUN_MIN, contentOf, isPiece, type Entry } from "./recipe.js";

/** Base entries `start` to `end` (excluded). */
export interface Keep {
  readonly op: "keep";
  readonly start: number;
  readonly end: number;
}

/** A piece the registry holds (by id). */
export interface Named {
  readonly op: "named";
  readonly piece: Uint8Array;
}

/** A new segment, its bytes. */
export interface Inline {
  readonly op: "inline";
  readonly data: Uint8Array;
}

export type Op = Keep | Named | Inline;

/**
 * The edit from `base` to `next` (entries; `segments` the bytes of each of `next`). `held`:
 * whether the registry is known to hold a piece beyond the base (by id). Greedy and linear: a
 * run of kept entries starts at an entry longer than `RUN_MIN` bytes the base holds (a piece,
 * or a message too short to be one) and goes on while the next entries follow it there too.
 */
export function diff(base: readonly Entry[], next: readonly Entry[], segments: readonly Uint8Array[], held: (piece: Uint8Array) => boolean): Op[] {
  const first = new Map<string, number>();
  base.forEach((entry, index) => {
    if (entry.bytes.length > RUN_MIN && !first.has(entry.key)) first.set(entry.key, index);
  });
  const ops: Op[] = [];
  let run: number | null = null; // the base entry the current run would keep next
  next.forEach((entry, at) => {
    if (run !== null && run < base.length && base[run]!.key === entry.key) {
      const last = ops[ops.length - 1] as Keep;
      ops[ops.length - 1] = { op: "keep", start: last.start, end: run + 1 };
      run += 1;
      return;
    }
    const start = first.get(entry.key);
    if (start !== undefined) {
      ops.push({ op: "keep", start, end: start + 1 });
      run = start + 1;
      return;
    }
    run = null;
    if (isPiece(entry) && held(contentOf(entry))) ops.push({ op: "named", piece: contentOf(entry) });
    else ops.push({ op: "inline", data: segments[at]! });
  });
  return ops;
}
