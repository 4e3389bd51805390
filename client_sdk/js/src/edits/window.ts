/**
 * The long window (client_sdk/toolref/edits/window.py's `windowed`, the same cuts): a
 * message span of `WINDOW_LONG` characters or more is cut again at content-defined places, so
 * that content repeated anywhere in the conversation (a file read twice, in two messages) is
 * the same segments again, which an edit keeps.
 */

/** The long window (window.py's `windowed`): a message span of this many characters or more
 * is cut again after an escaped line end (`\n` in the JSON text) whose line's CRC-32 has its
 * low 3 bits clear, pieces at least `WINDOW_MIN` and, where a line end allows, at most
 * `WINDOW_MAX` characters, so that content repeated anywhere in the conversation is the same
 * segments again. */
export const WINDOW_LONG = 4096;
export const WINDOW_MIN = 512;
export const WINDOW_MAX = 8192;

/** Characters (code points) of `data[start:end]`, as Python counts a `str`'s length. */
export function characters(data: Uint8Array, start: number, end: number): number {
  let count = 0;
  for (let index = start; index < end; index++) if ((data[index]! & 0xc0) !== 0x80) count++;
  return count;
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 (zlib's) of `data[start:end]`. */
export function crc32(data: Uint8Array, start = 0, end = data.length): number {
  let crc = 0xffffffff;
  for (let index = start; index < end; index++) crc = CRC_TABLE[(crc ^ data[index]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** The span `data[start:end]` cut at content-defined places (see `WINDOW_LONG`), as
 * window.py's `windowed`: character counts as Python's, a CRC-32 of each line's UTF-8
 * bytes. Linear in the span. */
export function windowed(data: Uint8Array, start: number, end: number): [number, number][] {
  if (end - start < WINDOW_LONG) return [[start, end]];
  const length = characters(data, start, end);
  if (length < WINDOW_LONG) return [[start, end]];
  const limit = length - WINDOW_MIN;
  const found: [number, number][] = [];
  let from = start; // where the current piece starts (bytes)
  let line = start; // where the current line starts (bytes)
  let chars = 0; // characters from `start` to `counted`
  let counted = start;
  let last = 0; // characters from `start` to the last cut
  for (let index = start; index + 1 < end; index++) {
    if (data[index] !== 0x5c || data[index + 1] !== 0x6e) continue;
    const cut = index + 2;
    chars += characters(data, counted, cut);
    counted = cut;
    if (chars > limit) break;
    const crc = crc32(data, line, cut);
    line = cut;
    if (chars - last >= WINDOW_MIN && ((crc & 7) === 0 || chars - last >= WINDOW_MAX)) {
      found.push([from, cut]);
      from = cut;
      last = chars;
    }
    index = cut - 1;
  }
  found.push([from, end]);
  return found;
}
