/**
 * gzip through the platform's CompressionStream (browsers, Node 18+, Deno, workers): the
 * records of edits where there is no zstd, and protocol-2 bodies a backend reads; and reading
 * a stream within a limit.
 */

export async function gzip(data: Uint8Array): Promise<Uint8Array> {
  return transform(data, new CompressionStream("gzip"));
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
