/**
 * The request bodies a server keeps with the histories it confirmed (`Toolref-Dictionary:
 * ?1` in its answer), kept here too, to compress the next turn against (Python's
 * `ToolReferenceManager.priors`): the members around the messages (`tools`, a system
 * prompt) then cost a few bytes a turn. One per conversation, only for that conversation.
 */

import { DICTIONARY_LIMIT } from "./history.js";

/** The most the kept bodies hold together (Python's `max_prior_bytes`). */
export const MAX_KEPT_BYTES = 16 << 20;

interface Kept {
  readonly first: string; // the conversation's opening (`history.opening`)
  readonly body: Uint8Array;
}

export class KeptBodies {
  private readonly kept = new Map<string, Kept>(); // history ref -> its body, oldest first
  private refusals = 0;
  private pause = 0;

  /** `limit`: bodies at most (one per live conversation is enough); `maxBytes`: together. */
  constructor(
    readonly limit: number,
    readonly maxBytes = MAX_KEPT_BYTES,
  ) {}

  /** Whether this turn may name a kept body: not for the 2**n - 1 turns after the n-th
   * refusal in a row (a server of several replicas holds each body in one). */
  turn(): boolean {
    const may = this.pause === 0;
    this.pause = Math.max(this.pause - 1, 0);
    return may;
  }

  /** The body kept for history `ref`, if it is conversation `first`'s. */
  get(ref: string, first: string): Uint8Array | undefined {
    const found = this.kept.get(ref);
    return found !== undefined && found.first === first ? found.body : undefined;
  }

  /** The most recent body kept for conversation `first` and the history it was kept for:
   * what a conversation resent whole (its last message changed) is compressed against. */
  newest(first: string): [string, Uint8Array] | undefined {
    let found: [string, Uint8Array] | undefined;
    for (const [ref, kept] of this.kept) if (kept.first === first) found = [ref, kept.body];
    return found;
  }

  /** Keep `body` for histories `refs` of conversation `first` (a head and its checkpoint
   * share one), in place of the conversation's older one; the least recently kept go first
   * past the limits. */
  keep(refs: readonly string[], first: string, body: Uint8Array): void {
    if (body.length > this.maxBytes || refs.length === 0) return;
    for (const [older, found] of this.kept) if (found.first === first) this.kept.delete(older);
    const kept = { first, body: body.length > DICTIONARY_LIMIT ? body.slice(body.length - DICTIONARY_LIMIT) : body };
    for (const ref of refs) this.kept.set(ref, kept);
    let size = 0;
    for (const found of new Set(this.kept.values())) size += found.body.length; // each body once
    for (const [older, found] of this.kept) {
      if (size <= this.maxBytes && this.kept.size <= this.limit) break;
      this.kept.delete(older);
      if (![...this.kept.values()].includes(found)) size -= found.body.length; // its last ref
    }
  }

  /** The server did not hold the body kept for `ref`. */
  refused(ref: string): void {
    this.kept.delete(ref);
    this.refusals += 1;
    this.pause = 2 ** this.refusals - 1;
  }

  /** The server inflated a body compressed against a kept one. */
  accepted(): void {
    this.refusals = 0;
  }

  get size(): number {
    return this.kept.size;
  }
}
