/**
 * A request as a recipe: its segments (headers first), their entries and its ref
 * (client_sdk/toolref/edits/request.py's `cut`). Linear: one scan, one SHA-256 per segment
 * of more than 16 bytes (in parallel, through WebCrypto where there is one from 1 KiB:
 * digest.ts `SUBTLE_FROM`), one for the ref.
 */

import { entryOf, recipeRef, type Entry } from "./recipe.js";
import { cutBody, headerSegment, type BodyCut } from "./segments.js";

/** A request cut: `segments` (the headers' first), their `entries`, the recipe's `ref`, the
 * credentials that travel as real headers (`secrets`), and the index in `segments` of each
 * message's largest segment, what it says (`messages`). */
export interface Cut {
  readonly segments: readonly Uint8Array[];
  readonly entries: readonly Entry[];
  readonly ref: string;
  readonly secrets: readonly [string, string][];
  readonly messages: readonly number[];
  /** The segments of the model's own messages (`ANSWER_ROLES`): what an answer may compress. */
  readonly answered: ReadonlySet<number>;
  /** The long window: each segment's message number (-1: none); empty without it. */
  readonly owners: readonly number[];
  /** Segment -> the offsets in it where a message's tool results start and the last ends
   * (request.py's `Cut.splits`): a sender compresses the bytes between them each alone. */
  readonly splits: ReadonlyMap<number, readonly number[]>;
  /** The numbers of the messages that are OpenAI Responses items of the model's (request.py's
   * `Cut.items`): an answer's output items, written back in order (editor.ts's `renderingOf`). */
  readonly items: ReadonlySet<number>;
}

/** The recipe of a request whose body is one JSON object in UTF-8; null otherwise (such a
 * request is sent as it is). `body`: its cut, when the caller made it already; `window`:
 * long messages cut again at content-defined places (`segments.windowed`). */
export async function cut(
  headers: Iterable<readonly [string, string]>,
  data: Uint8Array,
  messagesKey: string | null,
  body?: BodyCut | null,
  window = false,
): Promise<Cut | null> {
  if (body === undefined) body = cutBody(data, messagesKey, window);
  if (body === null) return null;
  const { segment, secrets } = headerSegment(headers);
  const segments = [segment, ...body.segments];
  const entries = await Promise.all(segments.map(entryOf));
  const messages = body.messages.map((index) => index + 1); // after the headers' segment
  const answered = new Set(body.answered.map((index) => index + 1));
  const owners = body.owners.length ? [-1, ...body.owners] : []; // the headers': no message
  const splits = new Map(body.splits.map(([index, offsets]) => [index + 1, offsets] as const));
  const items = new Set(body.items);
  return { segments, entries, ref: await recipeRef(entries), secrets, messages, answered, owners, splits, items };
}
