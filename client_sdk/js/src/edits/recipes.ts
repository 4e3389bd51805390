/**
 * `Recipes`: the recipes a receiver confirmed to one sender, bounded, each piece's bytes kept
 * once however many recipes hold it; and the base a new request is best sent against
 * (client_sdk/toolref/sending/recipes.py: the same choices).
 *
 * At most `maxRecipes` recipes and `maxBytes` as counted here: every distinct piece's bytes
 * once, plus per recipe its entries' bytes and `ENTRY_COST` per entry. Least recently used
 * recipes are dropped first; a piece goes with the last recipe naming it. A request past
 * `maxBytes` on its own is not kept.
 */

import { UsageError } from "../errors.js";
import { RUN_MIN, contentOf, isPiece, pieceEntry, type Entry } from "./recipe.js";

export const ENTRY_COST = 96;
export const DEFAULT_MAX_RECIPES = 64;
export const DEFAULT_MAX_BYTES = 64 << 20;
/** A message shared byte for byte makes two requests one conversation from this many bytes. */
export const RELATED_MIN = 64;

/** A confirmed recipe: its ref, entries, and the bytes it stands for. */
export interface Recipe {
  readonly ref: string;
  readonly entries: readonly Entry[];
  readonly size: number;
  readonly cost: number;
  /** Its last message's largest segment (`continues`). */
  readonly tail?: Entry | undefined;
}

/** What identifies an entry across recipes: a piece, or a literal longer than `RUN_MIN` bytes. */
function sharedKey(entry: Entry): string | null {
  return isPiece(entry) || entry.bytes.length > RUN_MIN ? entry.key : null;
}

export class Recipes {
  /** Least recently used first (a Map keeps insertion order: using one moves it to the end). */
  private readonly recipes = new Map<string, Recipe>();
  private readonly pieces = new Map<string, Uint8Array>(); // piece entry key -> its bytes, once
  private readonly holders = new Map<string, Set<string>>(); // shared key -> refs holding it
  private held = 0;

  constructor(
    readonly maxRecipes = DEFAULT_MAX_RECIPES,
    readonly maxBytes = DEFAULT_MAX_BYTES,
  ) {
    for (const [name, value] of [["maxRecipes", maxRecipes], ["maxRecipeBytes", maxBytes]] as const) {
      if (!Number.isSafeInteger(value) || value < 1) throw new UsageError(`${name} is ${String(value)}; use a whole number of at least 1`);
    }
  }

  get size(): number {
    return this.recipes.size;
  }

  /** What the recipes hold, as the module docstring counts it. */
  get heldBytes(): number {
    return this.held;
  }

  refs(): string[] {
    return [...this.recipes.keys()];
  }

  /** A piece of some confirmed recipe (so the receiver held it then), by id. */
  holds(piece: Uint8Array): boolean {
    return this.pieces.has(pieceEntry(piece).key);
  }

  get(ref: string): Recipe | undefined {
    return this.recipes.get(ref);
  }

  touch(ref: string): void {
    const found = this.recipes.get(ref);
    if (found === undefined) return;
    this.recipes.delete(ref);
    this.recipes.set(ref, found);
  }

  /** Keep a confirmed recipe as the most recently used; false when it alone is past `maxBytes`.
   * `tail`: its last message's largest segment (`continues`). */
  keep(ref: string, entries: readonly Entry[], segments: readonly Uint8Array[], tail?: Entry): boolean {
    if (this.recipes.has(ref)) {
      this.touch(ref);
      return true;
    }
    let size = 0;
    let cost = 0;
    const fresh = new Map<string, Uint8Array>();
    entries.forEach((entry, index) => {
      const segment = segments[index]!;
      size += segment.length;
      cost += entry.bytes.length + ENTRY_COST;
      if (isPiece(entry) && !this.pieces.has(entry.key) && !fresh.has(entry.key)) fresh.set(entry.key, segment);
    });
    let freshBytes = 0;
    for (const segment of fresh.values()) freshBytes += segment.length;
    if (cost + freshBytes > this.maxBytes) return false;
    // A copy, a plain Uint8Array: never the request's buffer (a Node Buffer's `slice` is a
    // view, which would keep the whole request for one piece of it).
    for (const [key, segment] of fresh) this.pieces.set(key, new Uint8Array(segment));
    this.held += freshBytes + cost;
    for (const entry of entries) {
      const key = sharedKey(entry);
      if (key === null) continue;
      let holders = this.holders.get(key);
      if (holders === undefined) this.holders.set(key, (holders = new Set()));
      holders.add(ref);
    }
    this.recipes.set(ref, { ref, entries, size, cost, tail });
    while (this.recipes.size > this.maxRecipes) this.drop(this.recipes.keys().next().value as string);
    while (this.held > this.maxBytes && this.recipes.size > 1) this.drop(this.recipes.keys().next().value as string);
    return true;
  }

  /** Recipe `ref` continues `base`'s conversation, so the base is past (dropped): its edit kept
   * at least half the base's bytes (`kept`: `Edit.kept`, each base entry once, Python's alike)
   * and holds the base's last message (its largest segment; where
   * that is too short to be looked up, the bytes alone decide). Another conversation opening
   * with the base's first messages (a long system prompt) shares their bytes, not the base's
   * last message: dropping the base left that one's next turn no base of its own. O(1). */
  continues(ref: string, base: Recipe, kept: number): boolean {
    if (!this.recipes.has(ref) || 2 * kept < base.size) return false;
    const tail = base.tail;
    if (tail === undefined || tail.bytes.length <= RUN_MIN) return true;
    return this.holders.get(tail.key)?.has(ref) === true;
  }

  /** Forget a recipe (superseded, or the receiver no longer holds it). */
  drop(ref: string): void {
    const found = this.recipes.get(ref);
    if (found === undefined) return;
    this.recipes.delete(ref);
    this.held -= found.cost;
    for (const entry of found.entries) {
      const key = sharedKey(entry);
      const holders = key === null ? undefined : this.holders.get(key);
      if (key === null || holders === undefined) continue;
      holders.delete(ref);
      if (holders.size) continue;
      this.holders.delete(key);
      if (isPiece(entry)) {
        this.held -= this.pieces.get(key)?.length ?? 0;
        this.pieces.delete(key);
      }
    }
  }

  /** Forget every recipe naming one of `pieces` (ids: the receiver lost them). */
  dropHolding(pieces: readonly Uint8Array[]): void {
    const refs = new Set<string>();
    for (const piece of pieces) for (const ref of this.holders.get(pieceEntry(piece).key) ?? []) refs.add(ref);
    for (const ref of refs) this.drop(ref);
  }

  /** The bytes of `recipe`'s entry `index`. */
  segment(recipe: Recipe, index: number): Uint8Array {
    const entry = recipe.entries[index]!;
    return isPiece(entry) ? this.pieces.get(entry.key)! : contentOf(entry);
  }

  /** The confirmed recipe sharing the most bytes (pieces, long literals) with a request (ties:
   * the most recently used), among those sharing one of its messages of `RELATED_MIN` bytes or
   * more (the same conversation: an unrelated one is never a base); null when none does. */
  bestBase(entries: readonly Entry[], segments: readonly Uint8Array[], messages: readonly number[]): Recipe | null {
    const shared = new Map<string, number>();
    const related = new Set<string>();
    const isMessage = new Set(messages);
    const seen = new Set<string>();
    entries.forEach((entry, index) => {
      const key = sharedKey(entry);
      if (key === null || seen.has(key)) return;
      const holders = this.holders.get(key);
      if (holders === undefined || holders.size === 0) return;
      seen.add(key);
      const size = segments[index]!.length;
      for (const ref of holders) shared.set(ref, (shared.get(ref) ?? 0) + size);
      if (isMessage.has(index) && size >= RELATED_MIN) for (const ref of holders) related.add(ref);
    });
    if (related.size === 0) return null;
    let best: string | null = null;
    for (const ref of this.recipes.keys()) {
      // least recently used first: on a tie, the later (more recently used) one wins
      if (related.has(ref) && (best === null || shared.get(ref)! >= shared.get(best)!)) best = ref;
    }
    return best === null ? null : this.recipes.get(best)!;
  }
}
