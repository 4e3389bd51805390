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
 *     0x05 + varint(stream size) + a brotli stream alone (quality 5) + its CRC-32, big endian
 *            (version 5, where the platform has brotli: Node's zlib; segments, then runs, in order,
 *            while they fit in BROTLI_BUDGET bytes an edit)
 *     0x06 + varint(n) + varint(stream size) + a brotli stream of n segments joined + its CRC-32
 *
 * so that no segment's size depends on any other bytes of the conversation (docs/reliability.md,
 * "Sizes"; brotli's built-in dictionary is public, the same for everyone). A segment a
 * message's tool results share (`splits`: parallel tool calls' results in one message) is cut
 * where each starts and the last ends, and its record (kind 1, or 2) holds a frame (or gzip
 * member) per piece, back to back: never brotli, against the answer or in a run. With zstd and
 * brotli the records are Python's, byte for byte.
 */

import { gzip } from "../compression.js";
import { nodeZlib, platformZstd } from "../zstd.js";
import { crc32 } from "./window.js";

export const RAW = 0x00;
export const ALONE = 0x01;
export const GZIP = 0x02;
export const ANSWER = 0x03;
export const JOINED = 0x04;
export const BROTLI = 0x05;
export const BROTLI_JOINED = 0x06;
/** A shorter segment travels as it is (a frame costs about 15 bytes). */
export const MIN_COMPRESSED = 24;
/** isolated.py's BROTLI_QUALITY and BROTLI_BUDGET: bytes of an edit tried with brotli at most
 * (segments in order, then runs; brotli costs about four times zstd's CPU). */
export const BROTLI_QUALITY = 5;
export const BROTLI_BUDGET = 16 << 10;
/** isolated.py's BROTLI_WINDOW: the window's bits (64 KiB holds any stream the budget lets through). */
export const BROTLI_WINDOW = 16;
/** The most frames (gzip members) an edit's records hold beyond one a record (isolated.py's
 * `MAX_SPLIT_FRAMES`): the receiver refuses more, so split segments past it go as they are. */
export const MAX_SPLIT_FRAMES = 1024;

/** A brotli stream of `data` at BROTLI_QUALITY and BROTLI_WINDOW (what Python's
 * `brotli.compress(data, quality=5, lgwin=16)` writes). */
export type Brotli = (data: Uint8Array) => Uint8Array;

interface BrotliZlib {
  brotliCompressSync?: (data: Uint8Array, options: Record<string, unknown>) => Uint8Array;
  constants?: Record<string, number | undefined>;
}

let brotliFound: Brotli | null | undefined;

/** The platform's brotli (Node's zlib, reached through `process.getBuiltinModule` so that a
 * browser bundle never imports `node:zlib`), or null (browsers: CompressionStream has none). */
export function platformBrotli(): Brotli | null {
  if (brotliFound === undefined) brotliFound = detectBrotli();
  return brotliFound;
}

function detectBrotli(): Brotli | null {
  const zlib = nodeZlib<BrotliZlib>();
  const compressSync = zlib?.brotliCompressSync;
  const quality = zlib?.constants?.["BROTLI_PARAM_QUALITY"];
  const window = zlib?.constants?.["BROTLI_PARAM_LGWIN"];
  if (typeof compressSync !== "function" || quality === undefined || window === undefined) return null;
  const options = { params: { [quality]: BROTLI_QUALITY, [window]: BROTLI_WINDOW } };
  return (data: Uint8Array) => new Uint8Array(compressSync.call(zlib, data, options));
}

/** varint(stream size) + `data` as a brotli stream + its CRC-32, big endian (kinds 5 and 6). */
function brotliStream(data: Uint8Array, brotli: Brotli): Uint8Array {
  const stream = brotli(data);
  const crc = crc32(data);
  return join([varint(stream.length), stream, Uint8Array.of(crc >>> 24, (crc >>> 16) & 0xff, (crc >>> 8) & 0xff, crc & 0xff)]);
}

/** How inline segments are compressed: a record kind and its compressor; none: as they are. */
export interface Codec {
  readonly kind: typeof ALONE | typeof GZIP;
  readonly compress: (data: Uint8Array) => Promise<Uint8Array>;
}

/** zstd where the platform's zlib has it (Node 22.15+, 24, 26), else gzip (node:zlib in Node
 * 20, CompressionStream in browsers: the same bytes, compression.ts). */
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

/** At most this many segments are compressed at once. A CompressionStream (browsers) holds a
 * zlib state of about 256 KiB from its start to its end: an edit of 16,000 new segments (a
 * resumed or imported conversation's first turn) started all at once held gigabytes and took
 * seconds. In Node each call is synchronous below 64 KiB, so a bound costs nothing there. */
export const CONCURRENCY = 8;

/** The records of `segments`, each the smaller of its bytes as they are and its frame alone;
 * with `v3` (and zstd), those of `answered` also against the answer, and runs joined, when
 * smaller still (isolated.py's `pack`, byte for byte). Each segment is compressed once, at
 * most `CONCURRENCY` at a time: linear in the segments' bytes, bounded memory. */
export async function pack(
  segments: readonly Uint8Array[],
  codec: Codec | null,
  v3: Version3 = {},
  brotli: Brotli | null = null,
  splits: ReadonlyMap<number, readonly number[]> = new Map(),
): Promise<Uint8Array> {
  const alone = await aloneRecords(segments, codec, brotli, splits);
  return against(segments, alone, codec, v3, brotli, splits);
}

/** `pack(segments, codec, {})` and `pack(segments, codec, v3)` of the same arguments, each
 * segment compressed alone once for both (isolated.py's `pack_both`: what a sender weighs). */
export async function packBoth(
  segments: readonly Uint8Array[],
  codec: Codec | null,
  v3: Version3,
  brotli: Brotli | null = null,
  splits: ReadonlyMap<number, readonly number[]> = new Map(),
): Promise<[Uint8Array, Uint8Array]> {
  const alone = await aloneRecords(segments, codec, brotli, splits);
  return [join(alone.records), await against(segments, alone, codec, v3, brotli, splits)];
}

/** Each segment's record alone (isolated.py's `_alone`), and the brotli budget left. */
interface Alone {
  readonly records: readonly Uint8Array[];
  readonly left: number;
}

async function aloneRecords(
  segments: readonly Uint8Array[],
  codec: Codec | null,
  brotli: Brotli | null,
  splits: ReadonlyMap<number, readonly number[]>,
): Promise<Alone> {
  let left = brotli === null || codec === null ? 0 : BROTLI_BUDGET;
  const tried = segments.map((data, index) => {
    if (data.length < MIN_COMPRESSED || data.length > left || splits.has(index)) return false;
    left -= data.length;
    return true;
  });
  let extra = MAX_SPLIT_FRAMES; // reserved in order, whichever record is smaller (`_alone`)
  const split = segments.map((data, index) => {
    const offsets = splits.get(index);
    if (offsets === undefined || codec === null || data.length < MIN_COMPRESSED) return false;
    const ends = [0, ...offsets, data.length];
    let count = 0;
    for (let n = 1; n < ends.length; n++) if (ends[n]! > ends[n - 1]!) count++;
    if (count - 1 > extra) return false;
    extra -= count - 1;
    return true;
  });
  const records = await bounded(segments, (data, index) => {
    const offsets = splits.get(index);
    if (offsets === undefined) return record(data, codec, tried[index] ? brotli : null);
    return split[index] ? pieces(data, offsets, codec) : Promise.resolve(join([Uint8Array.of(RAW), data]));
  });
  return { records, left };
}

/** `alone`'s records joined, those of `v3.answered` against the answer where smaller (kind
 * 3), `v3.runs` as one frame each where smaller (kind 4, or 6 within the budget left). */
async function against(
  segments: readonly Uint8Array[],
  alone: Alone,
  codec: Codec | null,
  v3: Version3,
  brotli: Brotli | null,
  splits: ReadonlyMap<number, readonly number[]>,
): Promise<Uint8Array> {
  const zstd = codec?.kind === ALONE ? platformZstd() : null;
  const answer = zstd?.withDictionary && v3.answer?.length && v3.answered?.size ? v3.answer : null;
  let { left } = alone;
  const records = [...alone.records];
  if (answer !== null && zstd !== null) {
    const chosen = [...v3.answered!].filter((index) => index < segments.length && !splits.has(index) && segments[index]!.length >= MIN_COMPRESSED);
    const framed = await bounded(
      chosen,
      async (index) => {
        const frame = await zstd(segments[index]!, answer);
        return join([Uint8Array.of(ANSWER), varint(frame.length), frame]);
      },
      segments,
    );
    chosen.forEach((index, n) => {
      if (framed[n]!.length < records[index]!.length) records[index] = framed[n]!;
    });
  }
  const joined = new Map<number, number>();
  if (zstd !== null) for (const [first, count] of apart(v3.runs ?? [], splits)) if (count > 1) joined.set(first, count);
  if (!joined.size) return join(records);
  const out: Uint8Array[] = [];
  for (let index = 0; index < records.length; ) {
    const count = joined.get(index) ?? 1;
    if (count > 1 && zstd !== null) {
      const whole = join(segments.slice(index, index + count));
      if (whole.length >= MIN_COMPRESSED) {
        const frame = await zstd(whole);
        let one = join([Uint8Array.of(JOINED), varint(count), varint(frame.length), frame]);
        if (brotli !== null && whole.length <= left) {
          left -= whole.length;
          const other = join([Uint8Array.of(BROTLI_JOINED), varint(count), brotliStream(whole, brotli)]);
          if (other.length < one.length) one = other;
        }
        let apart = 0;
        for (let n = index; n < index + count; n++) apart += records[n]!.length;
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

/** Segments (and their bytes) compressed between two turns of the event loop: Node's
 * compressors are synchronous below 64 KiB, and an edit of 16,000 new segments would hold
 * the loop for its whole pack (about 200 ms, Node 20), stalling every other request. */
export const YIELD_EVERY = 256;
export const YIELD_BYTES = 256 << 10;

/** A turn of the event loop (a macrotask: timers and I/O run) where there is `setImmediate`
 * (Node, Deno, Bun); elsewhere none (a browser's CompressionStream turns it itself, and its
 * nested `setTimeout` waits 4 ms). */
function turn(): Promise<void> | null {
  const immediate = (globalThis as { setImmediate?: (done: () => void) => unknown }).setImmediate;
  return typeof immediate === "function" ? new Promise((done) => void immediate(done)) : null;
}

/** `work` of each of `items` (segments' bytes, or the indices of `segments`), in order, at
 * most `CONCURRENCY` at a time, the event loop turning every `YIELD_EVERY` items or
 * `YIELD_BYTES` bytes. */
async function bounded<T extends Uint8Array | number, R>(
  items: readonly T[],
  work: (item: T, index: number) => Promise<R>,
  segments?: readonly Uint8Array[],
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  let count = 0;
  let bytes = 0;
  let pause: Promise<void> | null = null; // every worker waits for the loop's turn
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      const item = items[index]!;
      count += 1;
      bytes += typeof item === "number" ? (segments?.[item]?.length ?? 0) : item.length;
      if (count >= YIELD_EVERY || bytes >= YIELD_BYTES) {
        count = 0;
        bytes = 0;
        pause = turn()?.then(() => void (pause = null)) ?? null;
      }
      if (pause !== null) await pause;
      out[index] = await work(item, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, items.length) }, worker));
  return out;
}

/** A split segment's record (isolated.py's `_frames`): as it is, or a frame per piece of
 * `data` cut at `offsets`, back to back, whichever is smaller. Linear in `data`. */
async function pieces(data: Uint8Array, offsets: readonly number[], codec: Codec | null): Promise<Uint8Array> {
  const raw = join([Uint8Array.of(RAW), data]);
  if (codec === null || data.length < MIN_COMPRESSED) return raw;
  const ends = [0, ...offsets, data.length];
  const frames: Uint8Array[] = [];
  for (let n = 1; n < ends.length; n++) if (ends[n]! > ends[n - 1]!) frames.push(await codec.compress(data.subarray(ends[n - 1]!, ends[n]!)));
  const all = join(frames);
  const packed = join([Uint8Array.of(codec.kind), varint(all.length), all]);
  return packed.length < raw.length ? packed : raw;
}

/** `runs` less the segments of `splits`: each run's stretches of two or more others
 * (isolated.py's `_apart`). O(runs' segments). */
function apart(runs: readonly (readonly [number, number])[], splits: ReadonlyMap<number, readonly number[]>): [number, number][] {
  if (!splits.size) return runs.map(([first, count]) => [first, count]);
  const found: [number, number][] = [];
  for (const [first, count] of runs) {
    let start = first;
    for (let index = first; index <= first + count; index++) {
      if (index === first + count || splits.has(index)) {
        if (index - start > 1) found.push([start, index - start]);
        start = index + 1;
      }
    }
  }
  return found;
}

async function record(data: Uint8Array, codec: Codec | null, brotli: Brotli | null): Promise<Uint8Array> {
  const raw = join([Uint8Array.of(RAW), data]);
  if (codec === null || data.length < MIN_COMPRESSED) return raw;
  const frame = await codec.compress(data);
  const packed = join([Uint8Array.of(codec.kind), varint(frame.length), frame]);
  const best = packed.length < raw.length ? packed : raw;
  if (brotli === null) return best;
  const other = join([Uint8Array.of(BROTLI), brotliStream(data, brotli)]);
  return other.length < best.length ? other : best;
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
