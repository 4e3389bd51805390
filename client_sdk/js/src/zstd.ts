/**
 * zstd against a raw-content dictionary, where the platform has it: Node's zlib
 * (`zstdCompressSync` with its `dictionary` option), reached through
 * `process.getBuiltinModule` so that a browser bundle never imports `node:zlib`. Elsewhere
 * (browsers, a Node whose zstd takes no dictionary) `platformZstd()` is null and the SDK
 * gzips (docs/js.md, "Compression"). Frames carry their content size and checksum, which
 * the server requires of a frame compressed against a dictionary.
 */

/** The level of Python's `history.DICTIONARY_LEVEL`: new messages are small. */
export const ZSTD_LEVEL = 6;

/** One zstd frame of `data` against `dictionary` (raw content), compressed in libuv's
 * thread pool: a large new tool result never holds the app's event loop. */
export type Zstd = (data: Uint8Array, dictionary: Uint8Array) => Promise<Uint8Array>;

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

/** The platform's zstd with a dictionary, or null; detected once. */
export function platformZstd(): Zstd | null {
  if (detected === undefined) detected = detect();
  return detected;
}

function detect(): Zstd | null {
  const proc = (globalThis as { process?: NodeProcess }).process;
  if (typeof proc?.getBuiltinModule !== "function") return null;
  let zlib: Zlib | undefined;
  try {
    zlib = proc.getBuiltinModule("node:zlib") as Zlib | undefined;
  } catch {
    return null;
  }
  const compressSync = zlib?.zstdCompressSync;
  const compress = zlib?.zstdCompress;
  const level = zlib?.constants?.["ZSTD_c_compressionLevel"];
  const checksum = zlib?.constants?.["ZSTD_c_checksumFlag"];
  if (typeof compressSync !== "function" || typeof compress !== "function" || level === undefined || checksum === undefined) {
    return null;
  }
  const options = (data: Uint8Array, dictionary: Uint8Array) => ({
    dictionary,
    pledgedSrcSize: data.length, // the frame declares its size, which the server requires
    params: { [level]: ZSTD_LEVEL, [checksum]: 1 },
  });
  const zstd: Zstd = (data, dictionary) =>
    new Promise((done, fail) =>
      compress.call(zlib, data, options(data, dictionary), (error, result) => (error ? fail(error) : done(new Uint8Array(result)))),
    );
  // A zstd that ignores `dictionary` (Node's before it took one) gains nothing over gzip: a
  // probe of 1 KiB that does not repeat itself shrinks to a few bytes only against itself
  // (once, synchronously: it is tiny).
  const probe = new Uint8Array(1024);
  let seed = 0x2545f491;
  for (let index = 0; index < probe.length; index++) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    probe[index] = 97 + ((seed >>> 16) % 26);
  }
  try {
    const frame = compressSync.call(zlib, probe, options(probe, probe));
    return frame.length < 64 && declaresSizeAndChecksum(frame) ? zstd : null;
  } catch {
    return null;
  }
}

/** Whether a zstd frame's header (RFC 8878, 3.1.1.1.1) declares its content size and
 * carries a checksum, as the server requires: a runtime whose zlib ignores the parameters
 * gzips instead of being refused. */
export function declaresSizeAndChecksum(frame: Uint8Array): boolean {
  if (frame.length < 5 || frame[0] !== 0x28 || frame[1] !== 0xb5 || frame[2] !== 0x2f || frame[3] !== 0xfd) return false;
  const descriptor = frame[4]!;
  const checksum = (descriptor & 0x04) !== 0;
  const size = descriptor >> 6 !== 0 || (descriptor & 0x20) !== 0; // a size field, or a single segment
  return checksum && size;
}

/** zstd of one segment alone (level 3, size and checksum declared), or null: edits' records. */
export function platformZstdAlone(): ((data: Uint8Array) => Promise<Uint8Array>) | null {
  const zstd = platformZstd();
  return zstd === null ? null : (data) => zstdAlone(data);
}

function zstdAlone(data: Uint8Array): Promise<Uint8Array> {
  const zlib = (globalThis as { process?: NodeProcess }).process!.getBuiltinModule!("node:zlib") as Zlib;
  const c = zlib.constants!;
  return new Promise((done, fail) =>
    zlib.zstdCompress!.call(zlib, data, { pledgedSrcSize: data.length, params: { [c["ZSTD_c_compressionLevel"]!]: 3, [c["ZSTD_c_checksumFlag"]!]: 1 } }, (error, result) =>
      error ? fail(error) : done(new Uint8Array(result)),
    ),
  );
}
