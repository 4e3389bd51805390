/** SHA-256 (sync, pure JS: the same in browsers and Node) and the 16-byte key of refs. */

import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";
import { base32 } from "./base32.js";

export const DIGEST_KEY_BYTES = 16;

export function sha256(data: Uint8Array): Uint8Array {
  return nobleSha256(data);
}

/** SHA-256 of `head || data`, the step of a history chain. */
export function sha256Pair(head: Uint8Array, data: Uint8Array): Uint8Array {
  const joined = new Uint8Array(head.length + data.length);
  joined.set(head, 0);
  joined.set(data, head.length);
  return nobleSha256(joined);
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
