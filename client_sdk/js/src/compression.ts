/**
 * Request compression: gzip through the platform's CompressionStream (browsers, Node 18+,
 * Deno, workers), no library and no dictionary. docs/js.md ("Compression") says why not zstd.
 */

/** Bodies smaller than this gain too little to be worth compressing. */
export const COMPRESS_FROM = 1024;

export async function gzip(data: Uint8Array): Promise<Uint8Array> {
  return transform(data, new CompressionStream("gzip"));
}

export async function gunzip(data: Uint8Array): Promise<Uint8Array> {
  return transform(data, new DecompressionStream("gzip"));
}

async function transform(data: Uint8Array, stream: CompressionStream | DecompressionStream): Promise<Uint8Array> {
  const source = new Blob([data as BlobPart]).stream().pipeThrough(stream);
  return new Uint8Array(await new Response(source).arrayBuffer());
}
