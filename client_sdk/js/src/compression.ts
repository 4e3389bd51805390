/**
 * gzip: the records of edits where there is no zstd (browsers, Node 20), and protocol-2
 * bodies a backend reads; and reading a stream within a limit.
 *
 * In Node, `node:zlib`'s `gzipSync` (its `gzip` in the thread pool from `SYNC_BELOW` bytes):
 * the same zlib, options and bytes as Node's CompressionStream("gzip") (its `createGzip()`),
 * at about 10 us a small segment where a CompressionStream costs a web stream pair, a Blob,
 * a Response and a zlib state each (0.5 ms and more, and an edit of 8,000 new segments took
 * seconds). Elsewhere (browsers, Deno, workers) the platform's CompressionStream.
 */

import { SYNC_BELOW, nodeZlib } from "./zstd.js";

type Done = (error: Error | null, result: Uint8Array) => void;

interface GzipZlib {
  gzipSync?: (data: Uint8Array) => Uint8Array;
  gzip?: (data: Uint8Array, done: Done) => void;
}

let nodeGzip: ((data: Uint8Array) => Promise<Uint8Array>) | null | undefined;

/** A gzip member of `data`: what CompressionStream("gzip") writes (level 6, no name, no time). */
export async function gzip(data: Uint8Array): Promise<Uint8Array> {
  if (nodeGzip === undefined) nodeGzip = detectGzip();
  if (nodeGzip !== null) return nodeGzip(data);
  return transform(data, new CompressionStream("gzip"));
}

function detectGzip(): ((data: Uint8Array) => Promise<Uint8Array>) | null {
  const zlib = nodeZlib<GzipZlib>();
  const compressSync = zlib?.gzipSync;
  const compress = zlib?.gzip;
  if (typeof compressSync !== "function" || typeof compress !== "function") return null;
  return async (data: Uint8Array) => {
    if (data.length < SYNC_BELOW) return new Uint8Array(compressSync.call(zlib, data));
    return new Promise((done, fail) => compress.call(zlib, data, (error, result) => (error ? fail(error) : done(new Uint8Array(result)))));
  };
}

/** Thrown by {@link gunzip} and {@link readAll} past their limit. */
export class TooLargeError extends Error {
  override name = "TooLargeError";
  constructor(readonly limit: number) {
    super(`more than ${limit} bytes`);
  }
}

/** A gzip body inflated, at most `limit` bytes (a bomb stops one chunk past it). */
export async function gunzip(data: Uint8Array, limit = Infinity): Promise<Uint8Array> {
  return readAll(new Blob([data as BlobPart]).stream().pipeThrough(new DecompressionStream("gzip")), limit);
}

/** Every byte of `stream`, at most `limit` (then it is cancelled and TooLargeError thrown).
 * `signal` cancels it too, whatever its source does with signals (then its reason is thrown). */
export async function readAll(stream: ReadableStream<Uint8Array>, limit = Infinity, signal?: AbortSignal): Promise<Uint8Array> {
  const reader = stream.getReader();
  const stop = (): void => void reader.cancel().catch(() => undefined); // a pending read ends
  signal?.addEventListener("abort", stop, { once: true });
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { value, done } = await reader.read();
      signal?.throwIfAborted(); // cancelled: what was read is not the whole
      if (done) break;
      size += value.length;
      if (size > limit) {
        await reader.cancel();
        throw new TooLargeError(limit);
      }
      chunks.push(value);
    }
  } finally {
    signal?.removeEventListener("abort", stop);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

async function transform(data: Uint8Array, stream: CompressionStream | DecompressionStream): Promise<Uint8Array> {
  const source = new Blob([data as BlobPart]).stream().pipeThrough(stream);
  return new Uint8Array(await new Response(source).arrayBuffer());
}
