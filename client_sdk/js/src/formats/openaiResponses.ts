/**
 * `openai-responses`: Responses API input items (client_sdk/toolref/formats/
 * openai_responses.py).
 *
 * Calls are `function_call` items (`arguments`, a JSON string), `custom_tool_call` items
 * (`input`), `local_shell_call` items (`action`, tool `local_shell`), `shell_call` items
 * (`action`, tool `shell`), `apply_patch_call` items (`operation`, tool `apply_patch`) and
 * `computer_call` items (`actions`, or `action` beside an `actions` member, tool
 * `computer`; `action` alone: no call); results are their `*_output` items (`output`; a
 * failed `apply_patch_call_output` is an error, one without `output` answers its call with
 * nothing to replace), paired by `call_id` (a `local_shell_call_output` without one: by its
 * `id`). The marker replaces the payload member in place.
 */

import { DISTINCTIVE, FOREIGN, NEUTRAL, partTypes } from "./evidence.js";
import { MARKER, has, isObject, type JsonObject, type Site } from "./site.js";

export const NAME = "openai-responses";
const ARGS: Record<string, string> = {
  function_call: "arguments",
  custom_tool_call: "input",
  local_shell_call: "action",
  shell_call: "action",
  apply_patch_call: "operation",
};
// the tool of a call item naming none
const TOOLS: Record<string, string> = {
  local_shell_call: "local_shell",
  shell_call: "shell",
  apply_patch_call: "apply_patch",
  computer_call: "computer",
};
const RESULTS = new Set([
  "function_call_output",
  "custom_tool_call_output",
  "local_shell_call_output",
  "shell_call_output",
  "apply_patch_call_output",
  "computer_call_output",
]);
const BARE = new Set(["apply_patch_call_output"]); // `output` optional: answers without it
const BY_ID = new Set(["local_shell_call_output"]); // may name its call by `id`
const OWN_PARTS = new Set(["input_text", "output_text", "input_image", "input_file", "summary_text", "reasoning_text"]);
const FOREIGN_PARTS = new Set(["tool_use", "server_tool_use", "mcp_tool_use", "tool_result", "image_url", "image", "thinking"]);

export function claim(message: unknown): number {
  if (!isObject(message) || has(message, "parts") || has(message, "tool_calls")) return FOREIGN;
  if (has(message, "toolInvocations")) return FOREIGN;
  const kind = message["type"];
  if (typeof kind === "string") return DISTINCTIVE;
  if ((kind !== undefined && kind !== null) || message["role"] === "tool" || message["role"] === "model") return FOREIGN;
  const types = [...partTypes(message["content"])];
  if (types.some((t) => FOREIGN_PARTS.has(t) || t.endsWith("tool_result"))) return FOREIGN;
  return types.some((t) => OWN_PARTS.has(t)) ? DISTINCTIVE : NEUTRAL;
}

export function sites(item: unknown): Site[] {
  if (!isObject(item)) return [];
  const kind = item["type"];
  if (typeof kind !== "string") return [];
  const absent = item["call_id"] === undefined || item["call_id"] === null;
  const named = absent && BY_ID.has(kind) ? item["id"] : item["call_id"];
  const callId = typeof named === "string" ? named : null;
  const listed = Object.prototype.hasOwnProperty.call(ARGS, kind);
  if (listed || kind === "computer_call") {
    const argsKey = listed ? ARGS[kind] : computerKey(item);
    if (argsKey === undefined || argsKey === null) return [];
    if (!(has(item, argsKey) || has(item, MARKER))) return [];
    const given = has(item, "name") ? item["name"] : Object.prototype.hasOwnProperty.call(TOOLS, kind) ? TOOLS[kind] : null;
    const name = typeof given === "string" ? given : null;
    return [{ path: [], callId, name, argsKey, resultKey: null, isError: false }];
  }
  if (RESULTS.has(kind)) {
    const full = has(item, "output") || has(item, MARKER);
    if (!full && !BARE.has(kind)) return [];
    const isError = BARE.has(kind) && item["status"] === "failed";
    return [{ path: [], callId, name: null, argsKey: null, resultKey: full ? "output" : null, isError, bare: !full }];
  }
  return [];
}

/** The member holding a `computer_call`'s arguments (openai_responses.py `_computer_key`). */
function computerKey(item: JsonObject): string | null {
  if (has(item, MARKER)) return has(item, "actions") && !has(item, "action") ? "action" : "actions";
  const actions = item["actions"];
  if (actions !== undefined && actions !== null) return "actions";
  if (has(item, "actions")) return has(item, "action") ? "action" : "actions";
  return null;
}
