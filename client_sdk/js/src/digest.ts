/** SHA-256 and the 16-byte key of refs: synchronous (pure JS, the same in browsers and Node:
 * tool refs) and asynchronous (WebCrypto where the platform has it: edits' pieces and recipes;
 * the pure-JS one elsewhere, such as a page served over plain HTTP, where `crypto.subtle` is
 * absent). */

import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";
import { base32 } from "./base32.js";

export const DIGEST_KEY_BYTES = 16;

export function sha256(data: Uint8Array): Uint8Array {
  return nobleSha256(data);
}

/** Shorter inputs are digested in JS: a WebCrypto call costs about 12 us whatever its size
 * (a promise, a job, a copy), the pure-JS digest of 1 KiB 7 us, of 100 bytes 3 (Node 20): a
 * request's segments are mostly short, one digest each (recipe.ts `entryOf`). */
export const SUBTLE_FROM = 1 << 10;

/** SHA-256 through WebCrypto (`crypto.subtle`) from `SUBTLE_FROM` bytes, or {@link sha256}
 * below it and where there is none. */
export async function sha256Async(data: Uint8Array): Promise<Uint8Array> {
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (subtle === undefined || data.length < SUBTLE_FROM) return nobleSha256(data);
  return new Uint8Array(await subtle.digest("SHA-256", data as BufferSource));
}

/** The first 16 bytes of a digest as lowercase unpadded base32 (26 characters). */
export function digestKey(digest: Uint8Array): string {
  return base32(digest.subarray(0, DIGEST_KEY_BYTES));
}

export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}
