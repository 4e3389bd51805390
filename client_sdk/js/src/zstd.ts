/**
 * zstd where the platform has it: Node's zlib (`zstdCompress`, Node 22.15+, 24, 26), reached
 * through `process.getBuiltinModule` so that a browser bundle never imports `node:zlib`.
 * Elsewhere (browsers, Node 20) `platformZstd()` is null and edits carry gzip records. A frame
 * is what Python's `zstandard.ZstdCompressor(level=3, write_checksum=True).compress` writes:
 * level 3, its content size and a checksum declared (the receiver requires both), no
 * dictionary: each inline segment alone (edits/isolated.ts).
 */

/** The level of Python's `isolated.LEVEL`: segments are small, the frame's own bytes do the work. */
export const ZSTD_LEVEL = 3;
/** Larger inputs are compressed in libuv's thread pool, so the app's event loop never waits long
 * (zstd here, gzip in compression.ts). */
export const SYNC_BELOW = 64 << 10;

/** A zstd frame of `data`; with `dictionary`, compressed against it as raw content (what
 * Python's `ZstdCompressionDict(..., dict_type=DICT_TYPE_RAWCONTENT)` does): `withDictionary`
 * says whether this runtime's zlib honours one. */
export type Zstd = ((data: Uint8Array, dictionary?: Uint8Array) => Promise<Uint8Array>) & { readonly withDictionary?: boolean };

type Done = (error: Error | null, result: Uint8Array) => void;

interface Zlib {
  zstdCompressSync?: (data: Uint8Array, options: Record<string, unknown>) => Uint8Array;
  zstdCompress?: (data: Uint8Array, options: Record<string, unknown>, done: Done) => void;
  constants?: Record<string, number | undefined>;
}

interface NodeProcess {
  getBuiltinModule?: (id: string) => unknown;
}

let detected: Zstd | null | undefined;

/** The platform's zstd, or null; detected once. */
export function platformZstd(): Zstd | null {
  if (detected === undefined) detected = detect();
  return detected;
}

/** Node's `node:zlib`, reached through `process.getBuiltinModule` (a browser bundle never
 * imports it), or undefined where there is none: the one way the SDK finds it. */
export function nodeZlib<T>(): T | undefined {
  const proc = (globalThis as { process?: NodeProcess }).process;
  if (typeof proc?.getBuiltinModule !== "function") return undefined;
  try {
    return proc.getBuiltinModule("node:zlib") as T | undefined;
  } catch {
    return undefined;
  }
}

function detect(): Zstd | null {
  const zlib = nodeZlib<Zlib>();
  if (zlib === undefined) return null;
  const compressSync = zlib?.zstdCompressSync;
  const compress = zlib?.zstdCompress;
  const level = zlib?.constants?.["ZSTD_c_compressionLevel"];
  const checksum = zlib?.constants?.["ZSTD_c_checksumFlag"];
  if (typeof compressSync !== "function" || typeof compress !== "function" || level === undefined || checksum === undefined) {
    return null;
  }
  const options = (data: Uint8Array, dictionary?: Uint8Array) => ({
    pledgedSrcSize: data.length, // the frame declares its size, which the receiver requires
    params: { [level]: ZSTD_LEVEL, [checksum]: 1 },
    ...(dictionary !== undefined && dictionary.length ? { dictionary } : {}),
  });
  const run = async (data: Uint8Array, dictionary?: Uint8Array): Promise<Uint8Array> => {
    if (data.length < SYNC_BELOW) return new Uint8Array(compressSync.call(zlib, data, options(data, dictionary)));
    return new Promise((done, fail) =>
      compress.call(zlib, data, options(data, dictionary), (error, result) => (error ? fail(error) : done(new Uint8Array(result)))),
    );
  };
  try {
    if (!declaresSizeAndChecksum(compressSync.call(zlib, new Uint8Array(64), options(new Uint8Array(64))))) return null;
  } catch {
    return null;
  }
  return Object.assign(run, { withDictionary: honoursDictionary(compressSync, zlib, options) });
}

/** Whether a dictionary makes a frame of its own bytes smaller (a zlib that ignores the
 * option writes the same frame as without). */
function honoursDictionary(
  compressSync: NonNullable<Zlib["zstdCompressSync"]>,
  zlib: Zlib | undefined,
  options: (data: Uint8Array, dictionary?: Uint8Array) => Record<string, unknown>,
): boolean {
  const sample = new TextEncoder().encode(Array.from({ length: 40 }, (_, n) => `line ${n * 7919} of the answer`).join("\n"));
  try {
    const against = compressSync.call(zlib, sample, options(sample, sample));
    return against.length * 2 < compressSync.call(zlib, sample, options(sample)).length;
  } catch {
    return false;
  }
}

/** Whether a zstd frame's header (RFC 8878, 3.1.1.1.1) declares its content size and carries
 * a checksum, as the receiver requires: a runtime whose zlib ignores the parameters gzips
 * instead of being refused. */
export function declaresSizeAndChecksum(frame: Uint8Array): boolean {
  if (frame.length < 5 || frame[0] !== 0x28 || frame[1] !== 0xb5 || frame[2] !== 0x2f || frame[3] !== 0xfd) return false;
  const descriptor = frame[4]!;
  const checksum = (descriptor & 0x04) !== 0;
  const size = descriptor >> 6 !== 0 || (descriptor & 0x20) !== 0; // a size field, or a single segment
  return checksum && size;
}
