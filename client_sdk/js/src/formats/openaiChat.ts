/**
 * `openai-chat`: Chat Completions messages (client_sdk/toolref/formats/openai_chat.py).
 *
 * Calls are the assistant's `tool_calls`: `function.arguments` (a JSON string, kept as a
 * string) or, for custom tools, `custom.input`; results are `role: "tool"` messages, paired
 * by `tool_call_id`. The marker replaces `arguments` inside `function` (`input` inside
 * `custom`), and `content` in the tool message, in place.
 */

import { DISTINCTIVE, FOREIGN, NEUTRAL, partTypes } from "./evidence.js";
import { MARKER, has, isObject, type Site } from "./site.js";

export const NAME = "openai-chat";
const CALL_KINDS: readonly (readonly [string, string])[] = [
  ["function", "arguments"],
  ["custom", "input"],
];
const OWN_PARTS = new Set(["image_url", "input_audio"]);
const FOREIGN_PARTS = new Set([
  "tool_use",
  "server_tool_use",
  "mcp_tool_use",
  "tool_result",
  "image",
  "document",
  "thinking",
  "redacted_thinking",
  "input_text",
  "output_text",
  "input_image",
  "input_file",
]);

export function claim(message: unknown): number {
  if (!isObject(message) || has(message, "type") || has(message, "parts")) return FOREIGN;
  if (has(message, "toolInvocations") || message["role"] === "model") return FOREIGN;
  const types = [...partTypes(message["content"])];
  if (types.some((t) => FOREIGN_PARTS.has(t) || t.endsWith("tool_result"))) return FOREIGN;
  if (message["role"] === "tool" || has(message, "tool_calls") || types.some((t) => OWN_PARTS.has(t))) return DISTINCTIVE;
  return NEUTRAL;
}

export function sites(message: unknown): Site[] {
  const found: Site[] = [];
  if (!isObject(message)) return found;
  const calls = message["tool_calls"];
  if (Array.isArray(calls)) {
    calls.forEach((call: unknown, index: number) => {
      if (!isObject(call)) return;
      for (const [kind, argsKey] of CALL_KINDS) {
        const spec = call[kind];
        if (isObject(spec) && (has(spec, argsKey) || has(spec, MARKER))) {
          found.push({ path: ["tool_calls", index, kind], callId: text(call["id"]), name: text(spec["name"]), argsKey, resultKey: null, isError: false });
        }
      }
    });
  }
  if (message["role"] === "tool" && (has(message, "content") || has(message, MARKER))) {
    found.push({ path: [], callId: text(message["tool_call_id"]), name: text(message["name"]), argsKey: null, resultKey: "content", isError: false });
  }
  return found;
}

function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}
