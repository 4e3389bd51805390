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

/** The format of `messages` (`name` when given and they fit it); null when none fits: of the
 * formats every message fits, the one with the most distinctive messages (ties: the first). */
export function detect(messages: readonly unknown[], name?: FormatName | null): Format | null {
  let best: Format | null = null;
  let bestScore = -1;
  for (const format of name ? [getFormat(name)] : FORMATS) {
    let score = 0;
    for (const message of messages) {
      const claim = format.claim(message);
      if (claim === FOREIGN) {
        score = -1;
        break;
      }
      if (claim === DISTINCTIVE) score += 1;
    }
    if (score > bestScore) [best, bestScore] = [format, score];
  }
  return best;
}

export { FOREIGN, NEUTRAL, DISTINCTIVE } from "./evidence.js";
export { MARKER, ORDER, fromMarker, payloadKeys, toMarker, type Path, type Site } from "./site.js";
