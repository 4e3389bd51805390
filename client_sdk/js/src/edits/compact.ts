/**
 * The compact header of an edit of version 4 or 5 (client_sdk/toolref/edits/compact.py, the
 * same bytes): what the JSON header line of versions 1-3 says, in bytes.
 *
 *     0x04 or 0x05 (5: records may be brotli streams, isolated.ts), flags (bit 0: a base follows; bit 1: an answer id follows)
 *     [16 bytes: the base recipe's id] [8 bytes: the answer's id]
 *     varint(ops), then each op: varint(length << 2) an inline segment,
 *       varint(start << 2 | 1) varint(n) keep n base entries from start, varint(2) + 16 bytes a piece
 *
 * then the records, as versions 2 and 3 carry them (isolated.ts).
 */

import type { Op } from "./edit.js";
import { varint } from "./isolated.js";
import { parseRecipeRef } from "./recipe.js";

export const COMPACT_VERSION = 4;

/** The compact header of an edit of `base` with `ops` whose model's segments went against the
 * answer of id `answer` (16 hex digits), or none. */
export function compactHeader(base: string | null, ops: readonly Op[], answer: string | null, version = COMPACT_VERSION): Uint8Array {
  if (version !== 4 && version !== 5) throw new Error(`a compact header of version ${version}: there are 4 and 5`);
  const out: number[] = [version, (base !== null ? 1 : 0) | (answer !== null ? 2 : 0)];
  if (base !== null) {
    const id = parseRecipeRef(base);
    if (id === null) throw new Error(`${base} is no recipe ref`);
    out.push(...id);
  }
  if (answer !== null) for (let at = 0; at < answer.length; at += 2) out.push(parseInt(answer.slice(at, at + 2), 16));
  out.push(...varint(ops.length));
  for (const op of ops) {
    if (op.op === "keep") out.push(...varint(op.start * 4 + 1), ...varint(op.end - op.start));
    else if (op.op === "named") out.push(...varint(2), ...op.piece);
    else out.push(...varint(op.data.length * 4));
  }
  return Uint8Array.from(out);
}
