/**
 * Recipes: a request as its list of entries, and the refs that name pieces and recipes
 * (client_sdk/toolref/edits/recipe.py, the same bytes and refs).
 *
 * An entry is a segment as the registry keeps it: a piece (0x00 then its 16-byte id, the
 * first 16 bytes of the segment's SHA-256) for a segment of `PIECE_MIN` bytes or more, else
 * the segment itself (0x01 then its bytes). A recipe's ref (`tb_`, 26 base32 characters)
 * digests its entries in order, each `framed`: its length, then itself, or for an entry
 * longer than a piece's, 0x01 and the first 16 bytes of its SHA-256.
 */

import { base32, fromBase32 } from "../base32.js";
import { sha256Async } from "../digest.js";

export const PIECE_MIN = 16 << 10; // a shorter segment is kept in the recipe itself
export const RUN_MIN = 16; // an entry longer than this can start a kept range (`diff`)
export const ID_BYTES = 16;
export const PIECE = 0x00;
export const LITERAL = 0x01;
export const PIECE_PREFIX = "tp_";
export const RECIPE_PREFIX = "tb_";
const REF_BODY = /^[a-z2-7]{25}[aeimquy4]$/;

/** An entry: its bytes (as recipe.py's), and `key`, its framed form as text: two entries are
 * the same exactly when their keys are (entries longer than a piece's, by their digest). */
export interface Entry {
  readonly bytes: Uint8Array;
  readonly framed: Uint8Array;
  readonly key: string;
}

const START = sha256Async(new TextEncoder().encode("toolref recipe v1"));

/** The entry a recipe keeps for `segment`. */
export async function entryOf(segment: Uint8Array): Promise<Entry> {
  if (segment.length >= PIECE_MIN) {
    const bytes = new Uint8Array(1 + ID_BYTES);
    bytes.set((await sha256Async(segment)).subarray(0, ID_BYTES), 1);
    return made(bytes, bytes);
  }
  const bytes = new Uint8Array(1 + segment.length);
  bytes[0] = LITERAL;
  bytes.set(segment, 1);
  if (bytes.length <= 1 + ID_BYTES) return made(bytes, bytes);
  const digest = new Uint8Array(1 + ID_BYTES);
  digest[0] = LITERAL;
  digest.set((await sha256Async(bytes)).subarray(0, ID_BYTES), 1);
  return made(bytes, digest);
}

/** The entry of a piece the registry holds, by its id. */
export function pieceEntry(piece: Uint8Array): Entry {
  const bytes = new Uint8Array(1 + ID_BYTES);
  bytes.set(piece, 1);
  return made(bytes, bytes);
}

function made(bytes: Uint8Array, tail: Uint8Array): Entry {
  const framed = new Uint8Array(4 + tail.length);
  new DataView(framed.buffer).setUint32(0, bytes.length);
  framed.set(tail, 4);
  return { bytes, framed, key: String.fromCharCode(...framed) };
}

export function isPiece(entry: Entry): boolean {
  return entry.bytes[0] === PIECE;
}

/** The id of a piece entry, or the bytes of a literal one. */
export function contentOf(entry: Entry): Uint8Array {
  return entry.bytes.subarray(1);
}

export function pieceRef(piece: Uint8Array): string {
  return PIECE_PREFIX + base32(piece);
}

/** The id a `tp_` ref names; null when `text` is not one. */
export function parsePieceRef(text: unknown): Uint8Array | null {
  return parse(text, PIECE_PREFIX);
}

/** The id a `tb_` ref names; null when `text` is not one. */
export function parseRecipeRef(text: unknown): Uint8Array | null {
  return parse(text, RECIPE_PREFIX);
}

export function isRecipeRef(text: unknown): text is string {
  return parse(text, RECIPE_PREFIX) !== null;
}

/** The ref of the recipe of `entries`: one SHA-256 over their framed forms. */
export async function recipeRef(entries: readonly Entry[]): Promise<string> {
  const start = await START;
  let size = start.length;
  for (const entry of entries) size += entry.framed.length;
  const joined = new Uint8Array(size);
  joined.set(start, 0);
  let at = start.length;
  for (const entry of entries) {
    joined.set(entry.framed, at);
    at += entry.framed.length;
  }
  return RECIPE_PREFIX + base32((await sha256Async(joined)).subarray(0, ID_BYTES));
}

function parse(text: unknown, prefix: string): Uint8Array | null {
  if (typeof text !== "string" || !text.startsWith(prefix) || !REF_BODY.test(text.slice(prefix.length))) return null;
  return fromBase32(text.slice(prefix.length)).subarray(0, ID_BYTES);
}
