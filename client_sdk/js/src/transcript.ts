/**
 * Transcripts: what the manager keeps of each conversation it prepared, so a turn costs
 * work in proportion to its new messages (client_sdk/toolref/sending/transcript.py).
 *
 * Each turn every message is written again with JSON.stringify, only to be compared with the
 * kept text: the longest unchanged prefix is reused and the rest computed, so an edited,
 * truncated or mutated-in-place history is seen, never trusted. One exception: a call still
 * waiting for its result. In the formats whose results come in a later message (openai-chat,
 * anthropic, openai-responses), a result changes its call's chain form, so the prefix reused
 * ends before any call answered after it (`reach`) and before any call still waiting.
 */

import { invocationOf, marked, scan, type Mark } from "./conversation.js";
import { bestFormat, detectNext, startDetection, type Detection, type Format, type FormatName } from "./formats/index.js";
import { H0, nextHead } from "./history.js";
import { refOf } from "./ref.js";

export type { Mark } from "./conversation.js";

/** What a kept message costs beyond its text (heads, marks, array slots), roughly. */
export const MESSAGE_OVERHEAD = 256;

/** One conversation as prepared: an entry per message. */
export interface Transcript {
  readonly requested: FormatName | null;
  readonly format: FormatName | null;
  readonly texts: readonly string[]; // JSON.stringify of each message
  readonly detections: readonly Detection[]; // after each message
  readonly heads: readonly Uint8Array[]; // h_1 .. h_n (empty when format is null)
  readonly marks: readonly (readonly Mark[])[]; // sides of complete invocations in each message
  readonly reach: readonly number[]; // the last message answering a call made up to each message; -1
  readonly waiting: number; // the first message with a call still waiting for its result (length: none)
  readonly size: number; // approximate bytes held (UTF-16 text + overhead)
}

/** The longest prefix of at most `limit` messages that a later message cannot change: its
 * calls all answered inside it, none of them waiting (formats pairing across messages). */
function cut(kept: Transcript, limit: number, across: boolean): number {
  let at = across ? Math.min(limit, kept.waiting) : limit;
  while (at > 0 && kept.reach[at - 1]! >= at) at--;
  return at;
}

export function commonPrefix(kept: readonly string[], texts: readonly string[]): number {
  const limit = Math.min(kept.length, texts.length);
  let index = 0;
  while (index < limit && kept[index] === texts[index]) index++;
  return index;
}

/** The transcript of `messages` (whose texts are `texts`), reusing `kept` where it agrees. */
export function transcribe(
  messages: readonly unknown[],
  texts: readonly string[],
  requested: FormatName | null,
  kept: Transcript | null,
): Transcript {
  const common = kept === null ? 0 : commonPrefix(kept.texts, texts);
  const detections = kept === null ? [] : kept.detections.slice(0, common);
  let state = detections.at(-1) ?? startDetection(requested);
  for (let index = common; index < messages.length; index++) {
    state = detectNext(state, messages[index]);
    detections.push(state);
  }
  const format: Format | null = messages.length ? bestFormat(state) : null;
  const same = kept !== null && format !== null && kept.format === format.name;
  const reuse = same ? cut(kept, common, format.across) : 0;
  const heads = kept === null ? [] : kept.heads.slice(0, reuse);
  const marks: Mark[][] = kept === null ? [] : kept.marks.slice(0, reuse).map((list) => [...list]);
  const reach = kept === null ? [] : kept.reach.slice(0, reuse);
  let waiting = messages.length;
  if (format !== null) {
    const tail = messages.slice(reuse);
    const found = tail.map((): Mark[] => []);
    const answers = tail.map(() => -1);
    for (const item of scan(tail, format, reuse)) {
      const call = item.call;
      if (call === null) continue; // a result no call here answers: it stays as it is
      if (item.result === null) {
        waiting = Math.min(waiting, reuse + call.message);
        continue;
      }
      answers[call.message] = Math.max(answers[call.message]!, reuse + item.result.message);
      if (!item.complete) continue;
      const ref = refOf(invocationOf(item));
      for (const side of item.sides) found[side.message]!.push({ site: side.site, ref });
    }
    let head = heads.at(-1) ?? H0;
    let last = reach.at(-1) ?? -1;
    tail.forEach((message, index) => {
      head = nextHead(head, marked(message, found[index]!));
      heads.push(head);
      marks.push(found[index]!);
      last = Math.max(last, answers[index]!);
      reach.push(last);
    });
  }
  let size = 0;
  for (const text of texts) size += text.length * 2 + MESSAGE_OVERHEAD;
  return { requested, format: format?.name ?? null, texts, detections, heads, marks, reach, waiting, size };
}

/**
 * The transcripts of the conversations last prepared, told apart by content (the same first
 * message, the same format asked for): at most `conversations`, holding at most `bytes`
 * (roughly; one larger is not kept), least recently used dropped first.
 */
export class Transcripts {
  private kept: Transcript[] = []; // least recently used first
  private held = 0;

  constructor(
    readonly conversations: number,
    readonly bytes: number,
  ) {}

  get size(): number {
    return this.held;
  }

  get count(): number {
    return this.kept.length;
  }

  /** The transcript sharing the most first messages with `texts`, if any shares one. */
  find(requested: FormatName | null, texts: readonly string[]): Transcript | null {
    let best: Transcript | null = null;
    let bestCommon = 0;
    for (const transcript of this.kept) {
      if (transcript.requested !== requested || transcript.texts[0] !== texts[0]) continue;
      const common = commonPrefix(transcript.texts, texts);
      if (common > bestCommon) {
        best = transcript;
        bestCommon = common;
      }
    }
    return best;
  }

  /** Remember `transcript`, made from `continued`: it replaces `continued` when it continues
   * it (or differs only in the last message), else it is kept beside it (a fork). */
  keep(transcript: Transcript, continued: Transcript | null): void {
    if (transcript.size > this.bytes) return; // never kept: the others stay
    if (continued !== null) {
      const at = this.kept.indexOf(continued);
      if (at >= 0 && commonPrefix(continued.texts, transcript.texts) >= continued.texts.length - 1) {
        this.kept.splice(at, 1);
        this.held -= continued.size;
      }
    }
    this.kept.push(transcript);
    this.held += transcript.size;
    while (this.kept.length && (this.kept.length > this.conversations || this.held > this.bytes)) {
      this.held -= this.kept.shift()!.size;
    }
  }
}
