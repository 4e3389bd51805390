/**
 * An edit on the wire (`application/vnd.toolref.edit`, client_sdk/toolref/edits/wire.py): a
 * JSON header line, then the inline segments' bytes.
 *
 *     {"v":2,"b":"tb_..."|null,"o":[[0,57],"tp_...",312,...],"n":<inline bytes>}\n
 *     <a record per inline segment (isolated.ts)>
 *
 * Ops in `"o"`, in order: `[start, end]` keeps base entries start to end (excluded), a `tp_`
 * ref names a piece the registry holds, an integer is the length of the next inline segment.
 * The header line is written as Python's `json.dumps(header, separators=(",", ":"))`.
 * Version 1 (a receiver that reads no more) carries the inline segments as one: as they are,
 * or one plain zstd frame (`"z":0`) where the platform has zstd and it is smaller.
 */

import { answerId, ID_LENGTH } from "./answer.js";
import { compactHeader } from "./compact.js";
import { ALONE, join, pack, packBoth, platformBrotli, type Codec } from "./isolated.js";
import { pieceRef } from "./recipe.js";
import type { Op } from "./edit.js";
import { platformZstd } from "../zstd.js";

export const MEDIA_TYPE = "application/vnd.toolref.edit";
/** What this SDK writes by default, and the highest it writes (6: the receiver keeps the
 * answers of OpenAI Responses and Gemini too, so the sender taps them, answer.ts `ANSWER_SINCE`, its edits
 * written as version 5's; 5: records may be brotli streams where the platform has brotli,
 * isolated.ts; 4: a compact header, compact.ts; 3: the answer as dictionary and the long
 * window's runs, with zstd; a receiver of 2 gets version 2). */
export const VERSION = 6;
/** The highest version whose bytes an edit is written in (6 writes 5's). Python writes
 * version 7 too, whose records may be zstd frames against the shipped dictionary (kind 7,
 * client_sdk/toolref/edits/shipped.py); Node's zlib loads a dictionary afresh for every
 * frame (about 5 ms at its level 19, against microseconds with the tables computed once),
 * so this SDK writes 6 until it can keep one (docs/js.md). */
export const WRITTEN = 5;

/** The version whose bytes an edit for a receiver of `version` is written in: its own, but
 * 6, which writes 5's, and none above `WRITTEN` (Python's `wire.written_as`, for this SDK's
 * versions). */
export function writtenAs(version: number): number {
  return version === 6 ? 5 : Math.min(version, WRITTEN);
}

const encoder = new TextEncoder();

function line(version: number, base: string | null, ops: readonly Op[], extra = ""): { head: Uint8Array; blobs: Uint8Array[] } {
  const listed: string[] = [];
  const blobs: Uint8Array[] = [];
  let inline = 0;
  for (const op of ops) {
    if (op.op === "keep") listed.push(`[${op.start},${op.end}]`);
    else if (op.op === "named") listed.push(`"${pieceRef(op.piece)}"`);
    else {
      listed.push(String(op.data.length));
      blobs.push(op.data);
      inline += op.data.length;
    }
  }
  const b = base === null ? "null" : JSON.stringify(base);
  return { head: encoder.encode(`{"v":${version},"b":${b},"o":[${listed.join(",")}],"n":${inline}${extra}}\n`), blobs };
}

/** A version-2 edit's bytes: each inline segment as it is or compressed alone by `codec`
 * (null: every record as it is), whichever is smaller. With `answer` (the answer the base's
 * request streamed) and `answered` (which inline segments, counted from 0, are the model's),
 * or `runs` ((first, count) of inline segments of one message), a version-3 edit when that
 * makes it smaller (wire.py's `encode_isolated`, byte for byte). `splits`: inline segment ->
 * the offsets of a message's tool results in it, each piece compressed alone (isolated.ts). */
export async function encodeIsolated(
  base: string | null,
  ops: readonly Op[],
  codec: Codec | null,
  answer: Uint8Array | null = null,
  answered: ReadonlySet<number> = new Set(),
  runs: readonly (readonly [number, number])[] = [],
  version = 3,
  splits: ReadonlyMap<number, readonly number[]> = new Map(),
): Promise<Uint8Array> {
  const { head, blobs } = line(2, base, ops);
  const brotli = version >= 5 && codec !== null ? platformBrotli() : null;
  const dictionaries = platformZstd()?.withDictionary === true; // else no record of kind 3
  const usable = dictionaries && answer !== null && answer.length && base !== null && answered.size ? answer : null;
  let named: string | null = null;
  let written = version >= 4 ? writtenAs(version) : 2;
  const weighed = codec?.kind === ALONE && (usable !== null || runs.length > 0);
  // Each segment compressed alone once for both (packBoth), not once per pack.
  const v3 = { answer: usable ?? undefined, answered, runs };
  let records: Uint8Array;
  let made: Uint8Array | null = null;
  if (weighed) [records, made] = await packBoth(blobs, codec, v3, brotli, splits);
  else records = await pack(blobs, codec, {}, brotli, splits);
  if (made !== null) {
    const cost = usable === null ? 0 : version >= 4 ? ANSWER_BYTES : ',"a":""'.length + ID_LENGTH;
    if (made.length + cost < records.length) {
      records = made;
      named = usable !== null ? await answerId(usable) : null;
      written = Math.max(written, 3);
    }
  }
  if (written >= 4) return join([compactHeader(base, ops, named, written), records]);
  if (written === 2) return join([head, records]);
  return join([line(3, base, ops, named !== null ? `,"a":"${named}"` : "").head, records]);
}

const ANSWER_BYTES = 8;

/** A version-1 edit's bytes: the inline segments as they are, or one plain zstd frame of them
 * when `zstd` is given and that is smaller. */
export async function encodeV1(base: string | null, ops: readonly Op[], zstd: ((data: Uint8Array) => Promise<Uint8Array>) | null): Promise<Uint8Array> {
  const plain = line(1, base, ops);
  const blob = join(plain.blobs);
  const body = join([plain.head, blob]);
  if (zstd === null || blob.length === 0) return body;
  const packed = join([line(1, base, ops, ',"z":0').head, await zstd(blob)]);
  return packed.length < body.length ? packed : body;
}
