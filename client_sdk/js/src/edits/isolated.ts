/**
 * The inline segments of a size-guarded edit (version 2), each in a compression context of
 * its own (client_sdk/toolref/edits/isolated.py): a record per segment, the smallest of
 *
 *     0x00 + the segment's bytes
 *     0x01 + varint(frame size) + a zstd frame alone (level 3, size and checksum declared)
 *     0x02 + varint(member size) + a gzip member alone (where there is no zstd: browsers, older Node)
 *
 * so that no segment's size depends on any other bytes of the conversation (docs/reliability.md,
 * "Sizes"). With zstd the records are Python's, byte for byte.
 */

import { gzip } from "../compression.js";
import { platformZstd } from "../zstd.js";

export const RAW = 0x00;
export const ALONE = 0x01;
export const GZIP = 0x02;
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

/** The records of `segments`, each the smaller of its bytes as they are and its frame alone. */
export async function pack(segments: readonly Uint8Array[], codec: Codec | null): Promise<Uint8Array> {
  const records = await Promise.all(segments.map((data) => record(data, codec)));
  return join(records);
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
