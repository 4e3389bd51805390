/**
 * `Editor`: a sender's LLM requests as edits of the recipes its receiver confirmed
 * (client_sdk/toolref/sending/editor.py, size-guarded: the same choices and, with zstd, the
 * same bytes).
 *
 * Sans-I/O: `prepare` turns a request (headers, body) into an `Edit`; the caller sends it and
 * hands the answer back: `confirm` when it names the recipe (`Toolref-History`), `onMiss` for
 * a problem the editor resends on (409 missing-history, 409 missing-pieces, 400
 * dictionary-mismatch), which gives the next attempt. At most `MAX_RESENDS` resends, the last
 * with every segment inline and no base: every miss recovers by itself.
 *
 * The base is the confirmed recipe sharing the most bytes with the request among those
 * sharing one of its messages (`Recipes.bestBase`: a conversation is only ever sent against
 * its own past); the ops are `diff` against it, every piece of a confirmed recipe named; each
 * inline segment travels as it is or compressed alone (version 2, `isolated.ts`). Once
 * confirmed, a recipe is kept and its base dropped when its edit kept at least half of the
 * base's bytes, each entry once, and it holds the base's last message (the conversation moved
 * on).
 *
 * Version 3, with zstd, against a receiver that reads it: the answer a confirmed recipe's
 * request streamed (`answered`, from the caller's `AnswerTap`) is the dictionary of the
 * segments of the model's message that renders it (the one just after the base's messages;
 * for OpenAI Responses the run of the model's items from there, reasoning and calls too, up
 * to the first tool output or user message; `renderingOf`: never an older model message the
 * base lacks, nor a tool output, editor.py's `_rendering`) in the
 * next edit of it, and the pieces of one long message cut by the
 * long window (`segments.windowed`) travel as one frame. The answers of the last
 * `maxRecipes` recipes still kept are held, counted with the recipes in `maxBytes` (past
 * it the least recently used recipes go, as for a recipe kept), as editor.py holds them.
 *
 * A request whose recipe would hold more entries than a receiver takes by default
 * (`MAX_ENTRIES`, about 25,000 messages), or than the limit its receiver said in a 413
 * (`prepare`'s `most`: entries.ts), is not made an edit: it goes as it came.
 *
 * A first attempt with no base whose edit would put more bytes on the wire than the request
 * as it came, and that no later turn could be sent as an edit of (no message of `RELATED_MIN`
 * bytes), is not worth an edit (`notWorthAnEdit`, editor.py's `not_worth_an_edit`): every
 * sender sends it as it came, Python's and JS's alike, so both send the same bytes.
 */

import { diff, type Op } from "./edit.js";
import { ALONE, platformCodec, type Codec } from "./isolated.js";
import { parsePieceRef, pieceEntry } from "./recipe.js";
import { DEFAULT_MAX_BYTES, DEFAULT_MAX_RECIPES, RELATED_MIN, Recipes, type Recipe } from "./recipes.js";
import { cut, type Cut } from "./request.js";
import type { BodyCut } from "./segments.js";
import { MEDIA_TYPE, VERSION, encodeIsolated, encodeV1 } from "./wire.js";

export const MAX_RESENDS = 3;
/** Entries of a recipe a receiver takes by default (TOOLREF_MAX_EDIT_ENTRIES; past it, 413
 * `too-many-items`): a request of more (about 25,000 messages) goes as it is (editor.py's
 * `MAX_ENTRIES`). A receiver set lower says so in its 413, which every sender resends as it
 * is (entries.ts). */
export const MAX_ENTRIES = 50_000;
const PROBLEM = "urn:toolref:problem:";
export const MISSING_HISTORY = PROBLEM + "missing-history";
export const MISSING_PIECES = PROBLEM + "missing-pieces";
export const DICTIONARY_MISMATCH = PROBLEM + "dictionary-mismatch";

/** One attempt of a request as an edit: `body` and `headers` to send (the media type and the
 * request's credentials), the recipe it makes (`ref`), its base, and how it was built. */
export interface Edit {
  readonly cut: Cut;
  readonly body: Uint8Array;
  readonly headers: readonly [string, string][];
  readonly ref: string;
  readonly base: string | null;
  /** The base's bytes its keep ops keep, each entry once (`Recipes.continues`), the same in
   * Python, whichever way its base was found. */
  readonly kept: number;
  /** Inline bytes, before compression. */
  readonly inline: number;
  readonly ops: readonly Op[];
  readonly resends: number;
  /** Pieces (keys) the receiver said it lacks. */
  readonly unheld: ReadonlySet<string>;
  /** No dictionary (after a mismatch). */
  readonly plain: boolean;
  /** No base, nothing named: every segment inline. */
  readonly whole: boolean;
}

/** Whether no later turn could be sent as an edit of `edit`'s request: a first attempt with
 * no base, none of whose messages has `RELATED_MIN` bytes (editor.py's `stands_alone`). */
export function standsAlone(edit: Edit): boolean {
  if (edit.base !== null || edit.resends) return false;
  return edit.cut.messages.every((index) => edit.cut.segments[index]!.length < RELATED_MIN);
}

/** The bytes of header lines on the wire (HTTP/1.1: `name: value` and CRLF, each), each
 * character one byte (latin-1), as editor.py's `header_bytes` counts them. */
export function headerBytes(pairs: Iterable<readonly [string, string]>): number {
  let size = 0;
  for (const [name, value] of pairs) size += name.length + value.length + 4;
  return size;
}

/** The bytes `edit` puts on the wire: its headers (the media type, the credentials) and its
 * body (editor.py's `edit_bytes`). */
export function editBytes(edit: Edit): number {
  return headerBytes(edit.headers) + edit.body.length;
}

/** The bytes the request `edit` stands for puts on the wire as it came: its header lines
 * (segment 0, each credential with its value), its body, and `beside`, headers it carries that
 * the edit does not (the offer); those both carry are counted on neither side (editor.py's
 * `as_it_came_bytes`). */
export function asItCameBytes(edit: Edit, beside: Iterable<readonly [string, string]> = []): number {
  let size = headerBytes(beside);
  for (const segment of edit.cut.segments) size += segment.length;
  for (const [, value] of edit.cut.secrets) size += value.length + 1; // `name:` -> `name: value`
  return size;
}

/** Whether `edit` goes as its request came: it `standsAlone` and puts more bytes on the wire
 * than the request as it came, `plain` of them (counted as `sent` is: by default
 * `asItCameBytes` against `editBytes`). Every sender's rule (editor.py's `not_worth_an_edit`). */
export function notWorthAnEdit(edit: Edit, plain: number, sent?: number): boolean {
  return standsAlone(edit) && (sent ?? editBytes(edit)) > plain;
}

interface Built {
  readonly resends?: number;
  readonly unheld?: ReadonlySet<string>;
  readonly plain?: boolean;
  readonly whole?: boolean;
}

export class Editor {
  readonly recipes: Recipes;
  /** The highest edit version the receiver reads (its `Toolref-Edits`), at most `VERSION`. */
  version: number = VERSION;
  /** Recipe ref -> the answer its request streamed (oldest first): kept recipes' only, the
   * last `maxAnswers`, counted with the recipes in their `maxBytes` (`trimAnswers`). */
  readonly answers = new Map<string, Uint8Array>();
  /** A kept recipe's ref -> how many messages its request held (the next renders its answer). */
  readonly rendered = new Map<string, number>();
  private readonly maxAnswers: number;

  constructor(
    maxRecipes = DEFAULT_MAX_RECIPES,
    maxBytes = DEFAULT_MAX_BYTES,
    /** How inline segments are compressed (default: zstd where the platform has it, else
     * gzip); null: every record as it is. */
    readonly codec: Codec | null = platformCodec(),
    /** Long messages cut again at content-defined places (`segments.windowed`). */
    readonly longWindow = true,
  ) {
    this.recipes = new Recipes(maxRecipes, maxBytes);
    this.maxAnswers = Math.max(1, maxRecipes);
  }

  /** The answer the request of recipe `ref` streamed (null: none whole); the next edit of it
   * compresses the model's segments against it. */
  answered(ref: string, answer: Uint8Array | null): void {
    this.answers.delete(ref);
    if (answer === null) return;
    this.answers.set(ref, answer);
    this.trimAnswers();
  }

  /** The answers of kept recipes only, counted with them in `maxBytes`: past it, the least
   * recently used recipes go (their answers with them), as for a recipe kept, then the
   * oldest answers; and no more than `maxAnswers` (editor.py's `_trim_answers`). */
  private trimAnswers(): void {
    let held = 0;
    for (;;) {
      for (const ref of [...this.answers.keys()]) if (this.recipes.get(ref) === undefined) this.answers.delete(ref);
      for (const ref of [...this.rendered.keys()]) if (this.recipes.get(ref) === undefined) this.rendered.delete(ref);
      held = 0;
      for (const answer of this.answers.values()) held += answer.length;
      if (this.recipes.heldBytes + held <= this.recipes.maxBytes || this.recipes.size < 2) break;
      this.recipes.drop(this.recipes.refs()[0]!); // the least recently used
    }
    while (this.answers.size && (this.answers.size > this.maxAnswers || this.recipes.heldBytes + held > this.recipes.maxBytes)) {
      const oldest = this.answers.keys().next().value!;
      held -= this.answers.get(oldest)!.length;
      this.answers.delete(oldest);
    }
  }

  /** The first attempt of a request; null when its body is not one JSON object in UTF-8
   * (send it as it is), or its recipe would hold more than `most` entries (by default
   * `MAX_ENTRIES`, a receiver's; lower where one said less, entries.ts). `headers`: the
   * request's end-to-end headers, toolref's own left out; `body`: its cut, when the caller
   * made it already. */
  async prepare(headers: Iterable<readonly [string, string]>, data: Uint8Array, messagesKey: string | null, body?: BodyCut | null, most = MAX_ENTRIES): Promise<Edit | null> {
    // The long window pays only where its pieces travel together (version 3's runs, zstd).
    const window = this.longWindow && this.version >= 3 && this.codec?.kind === ALONE;
    if (body != null && body.owners.length > 0 !== window) body = undefined; // cut again
    const made = await cut(headers, data, messagesKey, body, window);
    if (made === null || made.entries.length > Math.min(most, MAX_ENTRIES)) return null; // as it is
    const base = this.recipes.bestBase(made.entries, made.segments, made.messages);
    if (base === null) return this.build(made, null);
    this.recipes.touch(base.ref);
    return this.build(made, base);
  }

  /** Keep the recipe `edit` made when the answer names it (`Toolref-History`); whether it did. */
  confirm(edit: Edit, history: string | null): boolean {
    if (history === null || history.trim() !== edit.ref) return false;
    const made = edit.cut;
    const last = made.messages[made.messages.length - 1];
    const kept = this.recipes.keep(made.ref, made.entries, made.segments, last === undefined ? undefined : made.entries[last]);
    if (kept) this.rendered.set(made.ref, made.messages.length);
    const base = edit.base !== null ? this.recipes.get(edit.base) : undefined;
    if (kept && base !== undefined && base.ref !== made.ref && this.recipes.continues(made.ref, base, edit.kept)) this.recipes.drop(base.ref);
    this.trimAnswers();
    return kept;
  }

  /** The next attempt after a problem the editor resends on; null for any other answer (it is
   * the app's), or once `MAX_RESENDS` were made. */
  async onMiss(edit: Edit, status: number, problem: Record<string, unknown> | null): Promise<Edit | null> {
    const kind = problem?.["type"];
    if (edit.resends >= MAX_RESENDS || kind === undefined || kind === null) return null;
    let base = edit.base !== null ? this.recipes.get(edit.base) : undefined;
    let { unheld, plain } = edit;
    if (status === 409 && kind === MISSING_HISTORY) {
      if (base !== undefined) this.recipes.drop(base.ref);
      base = undefined;
    } else if (status === 409 && kind === MISSING_PIECES) {
      const listed = problem?.["missingPieces"];
      const found = (Array.isArray(listed) ? listed.map(parsePieceRef) : []).filter((piece): piece is Uint8Array => piece !== null);
      this.recipes.dropHolding(found);
      unheld = new Set([...unheld, ...found.map((piece) => pieceEntry(piece).key)]);
      base = base !== undefined ? this.recipes.get(base.ref) : undefined;
    } else if (status === 400 && kind === DICTIONARY_MISMATCH) {
      plain = true;
    } else {
      return null;
    }
    const resends = edit.resends + 1;
    if (resends === MAX_RESENDS) return this.build(edit.cut, null, { resends, whole: true });
    return this.build(edit.cut, base ?? null, { resends, unheld, plain });
  }

  /** The bytes of `base` the keep ops keep, each of its entries once however often the
   * request repeats it (so at most `base.size`): what `Recipes.continues` weighs. Python's
   * `edit.kept_bytes`, alike. O(the entries kept). */
  private keptBytes(base: Recipe, ops: readonly Op[]): number {
    const kept = new Uint8Array(base.entries.length);
    let bytes = 0;
    for (const op of ops) {
      if (op.op !== "keep") continue;
      for (let at = Math.max(op.start, 0); at < Math.min(op.end, kept.length); at++) {
        if (kept[at] === 1) continue;
        kept[at] = 1;
        bytes += this.recipes.segment(base, at).length;
      }
    }
    return bytes;
  }

  private async build(made: Cut, base: Recipe | null, how: Built = {}): Promise<Edit> {
    const { resends = 0, unheld = new Set<string>(), plain = false, whole = false } = how;
    const held = whole ? () => false : (piece: Uint8Array) => this.recipes.holds(piece) && !unheld.has(pieceEntry(piece).key);
    const ops = diff(base?.entries ?? [], made.entries, made.segments, held);
    let inline = 0;
    for (const op of ops) if (op.op === "inline") inline += op.data.length;
    const kept = base === null ? 0 : this.keptBytes(base, ops);
    const ref = base?.ref ?? null;
    // Version 2 (size-guarded), or 1 for a receiver that reads no more: as they are (one frame
    // of them all would put the turn's new segments, a fetched page and a secret, in one
    // compression context: sizes are signals).
    const body = this.version >= 2 ? await this.isolated(made, ref, ops, plain) : await encodeV1(ref, ops, null);
    const headers: [string, string][] = [["Content-Type", MEDIA_TYPE], ...made.secrets];
    return { cut: made, body, headers, ref: made.ref, base: ref, kept, inline, ops, resends, unheld, plain, whole };
  }

  /** Version 2, or 3 where the receiver reads it and the answer or the long window's runs
   * make it smaller (editor.py's `_encoded`). */
  private async isolated(made: Cut, ref: string | null, ops: readonly Op[], plain: boolean): Promise<Uint8Array> {
    const answer = ref !== null && !plain ? (this.answers.get(ref) ?? null) : null;
    const runs = made.owners.length && !plain ? runsOf(ops, made.owners) : [];
    const splits = made.splits.size ? splitsOf(ops, made.splits) : new Map<number, readonly number[]>();
    if ((answer === null && !runs.length) || this.version < 3) return encodeIsolated(ref, ops, this.codec, null, new Set(), [], this.version, splits);
    const rendering = answer !== null && ref !== null ? renderingOf(made, this.rendered.get(ref)) : new Set<number>();
    const models = rendering.size ? inlinePositions(ops, rendering) : new Set<number>();
    return encodeIsolated(ref, ops, this.codec, answer, models, runs, this.version, splits);
  }
}

/** The index in the request's segments of each inline op, in order. O(ops). */
function placed(ops: readonly Op[]): number[] {
  const found: number[] = [];
  let at = 0;
  for (const op of ops) {
    if (op.op === "inline") found.push(at);
    at += op.op === "keep" ? op.end - op.start : 1;
  }
  return found;
}

/** `Cut.splits` for the inline ops, counted from 0 (editor.py's `_inline_splits`). O(ops). */
function splitsOf(ops: readonly Op[], splits: ReadonlyMap<number, readonly number[]>): Map<number, readonly number[]> {
  const found = new Map<number, readonly number[]>();
  placed(ops).forEach((at, n) => {
    const offsets = splits.get(at);
    if (offsets !== undefined) found.set(n, offsets);
  });
  return found;
}

/** Which inline ops, counted from 0, carry one of `segments`. O(ops). */
function inlinePositions(ops: readonly Op[], segments: ReadonlySet<number>): Set<number> {
  const found = new Set<number>();
  placed(ops).forEach((at, n) => {
    if (segments.has(at)) found.add(n);
  });
  return found;
}

/** The segments of the model's messages that render the answer of a base whose request held
 * `count` messages: the request's message `count` (from 0), when it is the model's, and when
 * it is a Responses item of the model's (`Cut.items`), the items after it up to the first
 * that is none (a tool's output, a user's message); with the long window those they own,
 * without it the model's segments between the run's neighbours' when neither is the model's
 * (editor.py's `_rendering`). O(model segments and the run). */
function renderingOf(made: Cut, count: number | undefined): Set<number> {
  const found = new Set<number>();
  const { messages, answered, owners, items } = made;
  if (count === undefined || count >= messages.length || !answered.has(messages[count]!)) return found;
  let end = count + 1; // the run's end: one message, or the items of the answer
  if (items.has(count)) while (end < messages.length && items.has(end)) end++;
  if (owners.length) {
    for (const at of answered) if (owners[at]! >= count && owners[at]! < end) found.add(at);
    return found;
  }
  const before = count > 0 ? messages[count - 1]! : 0;
  const after = end < messages.length ? messages[end]! : made.segments.length;
  if (answered.has(before) || answered.has(after)) return found;
  for (const at of answered) if (before < at && at < after) found.add(at);
  return found;
}

/** (first, count) of each run of inline ops, counted from 0, that carry adjacent segments of
 * one message (the long window's pieces of it). O(ops). */
function runsOf(ops: readonly Op[], owners: readonly number[]): [number, number][] {
  const found: [number, number][] = [];
  let last = -1;
  let owner = -1;
  placed(ops).forEach((at, n) => {
    const mine = at < owners.length ? owners[at]! : -1;
    if (mine >= 0 && mine === owner && at === last + 1) found[found.length - 1]![1] += 1;
    else found.push([n, 1]);
    last = at;
    owner = mine;
  });
  return found.filter(([, count]) => count > 1);
}
