/**
 * `anthropic`: Messages API `messages` (client_sdk/toolref/formats/anthropic.py).
 *
 * Calls are `tool_use` blocks (also `server_tool_use` and `mcp_tool_use`); results are
 * blocks whose type ends in `tool_result`, paired by `tool_use_id`, with `is_error`. Content
 * may be a string or a block list. The marker replaces `input` and `content` in place. A
 * `tool_result` without `content` carries no payload and stays as it is.
 */

import { DISTINCTIVE, FOREIGN, NEUTRAL, partTypes } from "./evidence.js";
import { MARKER, has, isObject, type Site } from "./site.js";

export const NAME = "anthropic";
const CALLS = new Set(["tool_use", "server_tool_use", "mcp_tool_use"]);
const OWN_BLOCKS = new Set([
  "tool_use",
  "tool_result",
  "image",
  "document",
  "thinking",
  "redacted_thinking",
  "server_tool_use",
  "mcp_tool_use",
  "mcp_tool_result",
  "web_search_tool_result",
  "search_result",
  "container_upload",
]);
const FOREIGN_BLOCKS = new Set([
  "image_url",
  "input_audio",
  "input_text",
  "output_text",
  "input_image",
  "input_file",
  "refusal",
  "tool-invocation",
  "reasoning",
]);

export function claim(message: unknown): number {
  if (!isObject(message) || has(message, "type") || has(message, "parts")) return FOREIGN;
  if (message["role"] !== "user" && message["role"] !== "assistant") return FOREIGN;
  if (has(message, "tool_calls") || has(message, "toolInvocations")) return FOREIGN;
  const types = [...partTypes(message["content"])];
  if (types.some((t) => FOREIGN_BLOCKS.has(t))) return FOREIGN;
  if (types.some((t) => OWN_BLOCKS.has(t) || t.endsWith("_tool_result"))) return DISTINCTIVE;
  return NEUTRAL;
}

export function sites(message: unknown): Site[] {
  const found: Site[] = [];
  const content = isObject(message) ? message["content"] : undefined;
  if (!Array.isArray(content)) return found;
  content.forEach((block: unknown, index: number) => {
    if (!isObject(block)) return;
    const kind = block["type"];
    if (typeof kind === "string" && CALLS.has(kind) && (has(block, "input") || has(block, MARKER))) {
      found.push({ path: ["content", index], callId: text(block["id"]), name: text(block["name"]), argsKey: "input", resultKey: null, isError: false });
    } else if (typeof kind === "string" && kind.endsWith("tool_result")) {
      const full = has(block, "content") || has(block, MARKER);
      found.push({
        path: ["content", index],
        callId: text(block["tool_use_id"]),
        name: null,
        argsKey: null,
        resultKey: full ? "content" : null,
        isError: block["is_error"] === true,
        bare: !full,
      });
    }
  });
  return found;
}

function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}
