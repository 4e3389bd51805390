/**
 * History refs (docs/history.md): a digest chain over a conversation in chain form, so a
 * client can name the part of it the server already holds. Pure functions, as history.py.
 */

import { canonicalBytes } from "./canonical.js";
import { digestKey, sha256, sha256Pair } from "./digest.js";

export const HISTORY_HEADER = "Toolref-History";
export const KEEP_HISTORY = "?1";
export const HISTORY_PREFIX = "th_";
/** A zstd dictionary is at most this tail of the history's text. */
export const DICTIONARY_LIMIT = 1 << 20;
/** Names the kept body a zstd body was compressed against too (request); says the body was
 * kept with its history (answer, `?1`). */
export const DICTIONARY_HEADER = "Toolref-Dictionary";
/** Asks the server to keep the conversation's checkpoint too (request, `?1`); names the
 * checkpoint it kept (answer, a history ref a few messages before the end). */
export const CHECKPOINT_HEADER = "Toolref-Checkpoint";
/** A continuation is compressed against at most this tail of its history's dictionary. */
export const COMPRESS_WINDOW = 128 << 10;
const REACH_PER_BYTE = 32;
const MIN_REACH = 32 << 10;
const HISTORY_RE = /^th_[a-z2-7]{25}[aeimquy4]$/;
const encoder = new TextEncoder();

/** h_0 = SHA-256("toolref history v1"). */
export const H0: Uint8Array = sha256(encoder.encode("toolref history v1"));

/** h_1 .. h_n of messages already in chain form, continuing from `start`. */
export function heads(form: readonly unknown[], start: Uint8Array = H0): Uint8Array[] {
  const found: Uint8Array[] = [];
  let head = start;
  for (const message of form) {
    head = nextHead(head, message);
    found.push(head);
  }
  return found;
}

/** h_k from h_{k-1} and message k in chain form. */
export function nextHead(head: Uint8Array, message: unknown): Uint8Array {
  return sha256Pair(head, canonicalBytes(message));
}

export function historyRef(head: Uint8Array): string {
  return HISTORY_PREFIX + digestKey(head);
}

export function isHistoryRef(text: unknown): text is string {
  return typeof text === "string" && HISTORY_RE.test(text);
}

/**
 * Index into `confirmed` of the longest (ref, length) still a prefix of the conversation
 * whose heads are `chain`; -1 when none is.
 */
export function longestConfirmed(
  chain: readonly Uint8Array[],
  confirmed: readonly (readonly [string, number])[],
): number {
  const order = confirmed.map((_, index) => index).sort((a, b) => confirmed[b]![1] - confirmed[a]![1]);
  for (const index of order) {
    const [ref, length] = confirmed[index]!;
    if (length > 0 && length <= chain.length && historyRef(chain[length - 1]!) === ref) return index;
  }
  return -1;
}

/**
 * The zstd raw-content dictionary a history stands for: its messages in full, as this client
 * writes them (JSON.stringify), concatenated, at most the last `limit` bytes (the server's
 * is DICTIONARY_LIMIT; a client compressing against a tail of it reads only that much).
 */
export function dictionary(texts: readonly string[], limit = DICTIONARY_LIMIT): Uint8Array {
  const parts: Uint8Array[] = [];
  let size = 0;
  for (let index = texts.length - 1; index >= 0 && size < limit; index--) {
    const bytes = encoder.encode(texts[index]!);
    parts.push(bytes);
    size += bytes.length;
  }
  parts.reverse();
  const joined = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return size > limit ? joined.slice(size - limit) : joined;
}

/** The dictionary `Toolref-Dictionary` names: a history's `dictionary` followed by the body
 * (as sent, inflated) of the request its head was confirmed for, at most DICTIONARY_LIMIT
 * bytes from the end (Python's `history.primed`): the members around the messages (`tools`,
 * a system prompt), sent again every turn, then cost a few bytes. */
export function primed(dictionary: Uint8Array, prior: Uint8Array): Uint8Array {
  const joined = new Uint8Array(dictionary.length + prior.length);
  joined.set(dictionary, 0);
  joined.set(prior, dictionary.length);
  return joined.length > DICTIONARY_LIMIT ? joined.slice(joined.length - DICTIONARY_LIMIT) : joined;
}

/** How much of a dictionary's end a body of `size` bytes is compressed against (loading a
 * dictionary costs time in its size; a small body finds its matches near the end). The
 * server inflates with the whole dictionary, of which this is the tail. */
export function reach(size: number): number {
  return Math.max(MIN_REACH, REACH_PER_BYTE * size);
}

const LEADING_ROLES = new Set(["system", "developer"]);
const CACHE_MARK = "cache_control";

function blocks(message: unknown): unknown[] {
  const content = (message as { content?: unknown } | null)?.content;
  return Array.isArray(content) ? content : [];
}

function isMarked(message: unknown): boolean {
  return blocks(message).some((block) => typeof block === "object" && block !== null && CACHE_MARK in block);
}

/** `message` without the cache marks on its blocks (a copy when it had any). */
function unmarked(message: unknown): unknown {
  if (!isMarked(message)) return message;
  const content = blocks(message).map((block) => {
    if (typeof block !== "object" || block === null || !(CACHE_MARK in block)) return block;
    const { [CACHE_MARK]: _, ...rest } = block as Record<string, unknown>;
    return rest;
  });
  return { ...(message as Record<string, unknown>), content };
}

/** Which conversation messages with chain heads `heads` are: the head of their opening (the
 * leading system or developer messages and the message after them), as if no block in it
 * carried a cache mark (Claude Code's first turn marks its first message, its second does
 * not), as Python's `history.opening`. `form(index, message)`: message `index` in chain
 * form (hashed again only when a mark is there). A body kept for one conversation is used
 * for that conversation only: compressed against another's, a body's size would tell how
 * much of it that conversation holds (CRIME). */
export function opening(
  messages: readonly unknown[],
  heads: readonly Uint8Array[],
  form: (index: number, message: unknown) => unknown = (_, message) => message,
): string {
  let count = 1;
  while (count < messages.length && LEADING_ROLES.has(String((messages[count - 1] as { role?: unknown } | null)?.role))) count++;
  const head = messages.slice(0, count);
  if (!head.some(isMarked)) return historyRef(heads[count - 1]!);
  let chained = H0;
  head.forEach((message, index) => (chained = nextHead(chained, form(index, unmarked(message)))));
  return historyRef(chained);
}

/** [ref, length] of the checkpoint an answer names (`Toolref-Checkpoint`), when it is a
 * prefix of `chain` this client computed itself, at most 64 messages before its end. */
export function checkpointOf(header: string | null, chain: readonly Uint8Array[] | undefined): [string, number] | null {
  if (header === null || chain === undefined || chain.length === 0) return null;
  const ref = header.trim();
  for (let length = chain.length - 1; length > Math.max(chain.length - 65, 0); length--) {
    if (historyRef(chain[length - 1]!) === ref) return [ref, length];
  }
  return null;
}
