/**
 * The LLM endpoints whose requests `toolrefFetch` rewrites for the official `openai` and
 * `@anthropic-ai/sdk` clients: the table of client_sdk/toolref/wire/endpoints.py (matched
 * by the end of the path, so a base URL with its own prefix, such as a toolref gateway's
 * `/llm/{name}`, matches too), Gemini's `:generateContent` and `:streamGenerateContent`
 * (`contents`; the query, `?alt=sse`, is no part of the path) among them. Pure: matching only.
 */

import type { FormatName } from "./formats/index.js";

/** An LLM API: its message format (`gemini`: no format of formats/, edits need none; its
 * answers are read, edits/answerItems.ts), and where its messages sit in a request body. */
export interface Endpoint {
  readonly format: FormatName | "gemini";
  readonly messagesKey: string;
}

/** Path suffix -> endpoint, the longer suffix of two first. */
export const ENDPOINTS: readonly (readonly [string, Endpoint])[] = [
  ["/messages/count_tokens", { format: "anthropic", messagesKey: "messages" }],
  ["/messages", { format: "anthropic", messagesKey: "messages" }],
  ["/chat/completions", { format: "openai-chat", messagesKey: "messages" }],
  ["/responses", { format: "openai-responses", messagesKey: "input" }],
  [":generateContent", { format: "gemini", messagesKey: "contents" }],
  [":streamGenerateContent", { format: "gemini", messagesKey: "contents" }],
];

/** The LLM endpoint a request calls (a POST whose path ends as one of {@link ENDPOINTS},
 * a trailing slash ignored); null for anything else. */
export function endpoint(method: string, path: string): Endpoint | null {
  if (method.toUpperCase() !== "POST") return null;
  const trimmed = path.replace(/\/+$/, "");
  for (const [suffix, found] of ENDPOINTS) if (trimmed.endsWith(suffix)) return found;
  return null;
}
