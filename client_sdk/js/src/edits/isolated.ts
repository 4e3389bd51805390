/**
 * The inline segments of a size-guarded edit (version 2), each in a compression context of
 * its own (client_sdk/toolref/edits/isolated.py): a record per segment, the smallest of
 *
 *     0x00 + the segment's bytes
 *     0x01 + varint(frame size) + a zstd frame alone (level 3, size and checksum declared)
 *     0x02 + varint(member size) + a gzip member alone (where there is no zstd: browsers, older Node)
 *     0x03 + varint(frame size) + a zstd frame against the answer (version 3: the model's segments)
 *     0x04 + varint(n) + varint(frame size) + one zstd frame of the next n segments joined
 *            (version 3: the pieces of one long message, the long window)
 *
 * so that no segment's size depends on any other bytes of the conversation (docs/reliability.md,
 * "Sizes"). With zstd the records are Python's, byte for byte.
 */

import { gzip } from "../compression.js";
import { platformZstd } from "../zstd.js";

export const RAW = 0x00;
export const ALONE = 0x01;
export const GZIP = 0x02;
export const ANSWER = 0x03;
export const JOINED = 0x04;
/** A shorter segment travels as it is (a frame costs about 15 bytes). */
export const MIN_COMPRESSED = 24;

/** How inline segments are compressed: a record kind and its compressor; none: as they are. */
export interface Codec {
  readonly kind: typeof ALONE | typeof GZIP;
  readonly compress: (data: Uint8Array) => Promise<Uint8Array>;
}

/** zstd where the platform's zlib has it (Node 22.15+, 24, 26), else gzip (CompressionStream). */
export function platformCodec(): Codec {
  const zstd = platformZstd();
  return zstd !== null ? { kind: ALONE, compress: zstd } : { kind: GZIP, compress: gzip };
}

/** What a version-3 pack may use: `answer`, the dictionary of the segments at the indices of
 * `answered` (kind 3), and `runs`, (first, count) of segments of one message that go as one
 * frame (kind 4) when that is smaller. zstd only. */
export interface Version3 {
  readonly answer?: Uint8Array;
  readonly answered?: ReadonlySet<number>;
  readonly runs?: readonly (readonly [number, number])[];
}

/** The records of `segments`, each the smaller of its bytes as they are and its frame alone;
 * with `v3` (and zstd), those of `answered` also against the answer, and runs joined, when
 * smaller still (isolated.py's `pack`, byte for byte). */
export async function pack(segments: readonly Uint8Array[], codec: Codec | null, v3: Version3 = {}): Promise<Uint8Array> {
  const zstd = codec?.kind === ALONE ? platformZstd() : null;
  const answer = zstd?.withDictionary && v3.answer?.length && v3.answered?.size ? v3.answer : null;
  const records = await Promise.all(
    segments.map(async (data, index) => {
      const best = await record(data, codec);
      if (answer === null || zstd === null || !v3.answered?.has(index) || data.length < MIN_COMPRESSED) return best;
      const frame = await zstd(data, answer);
      const against = join([Uint8Array.of(ANSWER), varint(frame.length), frame]);
      return against.length < best.length ? against : best;
    }),
  );
  const joined = new Map<number, number>();
  if (zstd !== null) for (const [first, count] of v3.runs ?? []) if (count > 1) joined.set(first, count);
  if (!joined.size) return join(records);
  const out: Uint8Array[] = [];
  for (let index = 0; index < records.length; ) {
    const count = joined.get(index) ?? 1;
    if (count > 1 && zstd !== null) {
      const whole = join(segments.slice(index, index + count));
      if (whole.length >= MIN_COMPRESSED) {
        const frame = await zstd(whole);
        const one = join([Uint8Array.of(JOINED), varint(count), varint(frame.length), frame]);
        let apart = 0;
        for (const each of records.slice(index, index + count)) apart += each.length;
        if (one.length < apart) {
          out.push(one);
          index += count;
          continue;
        }
      }
    }
    out.push(records[index]!);
    index += 1;
  }
  return join(out);
}

async function record(data: Uint8Array, codec: Codec | null): Promise<Uint8Array> {
  const raw = join([Uint8Array.of(RAW), data]);
  if (codec === null || data.length < MIN_COMPRESSED) return raw;
  const frame = await codec.compress(data);
  const packed = join([Uint8Array.of(codec.kind), varint(frame.length), frame]);
  return packed.length < raw.length ? packed : raw;
}

export function varint(value: number): Uint8Array {
  const out: number[] = [];
  for (;;) {
    const low = value % 128;
    value = Math.floor(value / 128);
    out.push(low | (value ? 0x80 : 0));
    if (!value) return Uint8Array.from(out);
  }
}

export function join(parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const part of parts) size += part.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
