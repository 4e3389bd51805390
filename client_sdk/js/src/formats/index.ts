/**
 * Message formats the JS SDK reads: the LLM APIs' (`openai-chat`, `anthropic`,
 * `openai-responses`: a call in one message, its result in a later one) and the AI SDK's
 * (`ai-sdk-v5`: UIMessage parts, AI SDK 5, 6 and 7 alike; `ai-sdk-v4`: toolInvocations).
 * `detect` picks one as client_sdk/toolref/formats does, in its order (gemini aside: a
 * conversation no format here fits is sent as it is).
 */

import { UsageError } from "../errors.js";
import * as v4 from "./aiSdkV4.js";
import * as v5 from "./aiSdkV5.js";
import * as anthropic from "./anthropic.js";
import * as openaiChat from "./openaiChat.js";
import * as openaiResponses from "./openaiResponses.js";
import { DISTINCTIVE, FOREIGN } from "./evidence.js";
import type { Site } from "./site.js";

export type FormatName = "openai-chat" | "anthropic" | "openai-responses" | "ai-sdk-v5" | "ai-sdk-v4";

export interface Format {
  readonly name: FormatName;
  claim(message: unknown): number;
  /** The invocation sides of one message, paths from the message. */
  sites(message: unknown): Site[];
  /** A result may come in a later message than its call (paired by id). */
  readonly across: boolean;
}

/** In the order that breaks ties (the Python SDK's). */
export const FORMATS: readonly Format[] = [
  { name: openaiChat.NAME, claim: openaiChat.claim, sites: openaiChat.sites, across: true },
  { name: anthropic.NAME, claim: anthropic.claim, sites: anthropic.sites, across: true },
  { name: openaiResponses.NAME, claim: openaiResponses.claim, sites: openaiResponses.sites, across: true },
  { name: v5.NAME, claim: v5.claim, sites: v5.sites, across: false },
  { name: v4.NAME, claim: v4.claim, sites: v4.sites, across: false },
];

export function getFormat(name: string): Format {
  const found = FORMATS.find((format) => format.name === name);
  if (found === undefined) {
    throw new UsageError(
      `unknown format ${JSON.stringify(name)}; use one of ${FORMATS.map((f) => f.name).join(", ")}, or omit it to have it detected`,
    );
  }
  return found;
}

/** Where detection stands after some messages: the formats they all fit, with scores. */
export interface Detection {
  readonly scores: ReadonlyMap<FormatName, number>;
}

export function startDetection(name?: FormatName | null): Detection {
  const candidates = name ? [getFormat(name)] : FORMATS;
  return { scores: new Map(candidates.map((format) => [format.name, 0])) };
}

/** Detection after one more message (a fold, so a transcript can keep it per message). */
export function detectNext(before: Detection, message: unknown): Detection {
  const scores = new Map<FormatName, number>();
  for (const [name, score] of before.scores) {
    const claim = getFormat(name).claim(message);
    if (claim !== FOREIGN) scores.set(name, score + (claim === DISTINCTIVE ? 1 : 0));
  }
  return { scores };
}

/** The best format of a detection; null when the messages fit none. */
export function bestFormat(detection: Detection): Format | null {
  let best: Format | null = null;
  let bestScore = -1;
  for (const format of FORMATS) {
    const score = detection.scores.get(format.name);
    if (score !== undefined && score > bestScore) {
      best = format;
      bestScore = score;
    }
  }
  return best;
}

/** The format of `messages` (`name` when given and they fit it); null when none fits. */
export function detect(messages: readonly unknown[], name?: FormatName | null): Format | null {
  let state = startDetection(name);
  for (const message of messages) state = detectNext(state, message);
  return bestFormat(state);
}

export { FOREIGN, NEUTRAL, DISTINCTIVE } from "./evidence.js";
export { MARKER, ORDER, fromMarker, payloadKeys, toMarker, type Path, type Site } from "./site.js";
