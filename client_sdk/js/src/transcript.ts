/**
 * Transcripts: what the manager keeps of each conversation it prepared, so a turn costs
 * work in proportion to its new messages (client_sdk/toolref/sending/transcript.py, simplified for
 * formats that keep a call and its result in one message: a message's chain form depends on
 * that message alone).
 *
 * Each turn every message is written again with JSON.stringify, only to be compared with the
 * kept text: the longest unchanged prefix is reused and the rest computed, so an edited,
 * truncated or mutated-in-place history is seen, never trusted.
 */

import { invocationOf, marked, scan } from "./conversation.js";
import { bestFormat, detectNext, startDetection, type Detection, type Format, type FormatName } from "./formats/index.js";
import type { Site } from "./formats/site.js";
import { H0, nextHead } from "./history.js";
import { refOf } from "./ref.js";

/** What a kept message costs beyond its text (heads, marks, array slots), roughly. */
export const MESSAGE_OVERHEAD = 256;

export interface Mark {
  readonly site: Site;
  readonly ref: string;
}

/** One conversation as prepared: an entry per message. */
export interface Transcript {
  readonly requested: FormatName | null;
  readonly format: FormatName | null;
  readonly texts: readonly string[]; // JSON.stringify of each message
  readonly detections: readonly Detection[]; // after each message
  readonly heads: readonly Uint8Array[]; // h_1 .. h_n (empty when format is null)
  readonly marks: readonly (readonly Mark[])[]; // complete invocations of each message
  readonly size: number; // approximate bytes held (UTF-16 text + overhead)
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
  const reuse = kept !== null && format !== null && kept.format === format.name ? common : 0;
  const heads = kept === null ? [] : kept.heads.slice(0, reuse);
  const marks = kept === null ? [] : kept.marks.slice(0, reuse);
  if (format !== null) {
    let head = heads.at(-1) ?? H0;
    for (let index = reuse; index < messages.length; index++) {
      const message = messages[index];
      const found: Mark[] = [];
      for (const item of scan([message], format)) {
        if (item.complete) found.push({ site: item.site, ref: refOf(invocationOf(item)) });
      }
      head = nextHead(head, marked(message, found));
      heads.push(head);
      marks.push(found);
    }
  }
  let size = 0;
  for (const text of texts) size += text.length * 2 + MESSAGE_OVERHEAD;
  return { requested, format: format?.name ?? null, texts, detections, heads, marks, size };
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
