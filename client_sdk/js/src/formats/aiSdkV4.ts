/**
 * `ai-sdk-v4`: AI SDK 4 UI messages with `toolInvocations` (formats/ai_sdk_v4.py), and the
 * `tool-invocation` parts of AI SDK 4.2+. An invocation is `{state, toolCallId, toolName,
 * args, result}`, complete once `state` is "result". The marker replaces `args` and
 * `result` with one `toolRef` where `args` was.
 */

import { DISTINCTIVE, FOREIGN, NEUTRAL, partTypes } from "./evidence.js";
import { MARKER, has, isObject, type Path, type Site } from "./site.js";

export const NAME = "ai-sdk-v4";
const ROLES = ["system", "user", "assistant", "data"];

export function claim(message: unknown): number {
  if (!isObject(message) || has(message, "type") || has(message, "tool_calls")) return FOREIGN;
  if (!ROLES.includes(message["role"] as string)) return FOREIGN;
  const parts = message["parts"];
  if (parts !== undefined && parts !== null && !Array.isArray(parts)) return FOREIGN;
  const list: unknown[] = Array.isArray(parts) ? parts : [];
  if (list.some((part) => isObject(part) && !has(part, "type"))) return FOREIGN;
  const types = partTypes(list);
  for (const kind of types) {
    if ((kind.startsWith("tool-") && kind !== "tool-invocation") || kind === "dynamic-tool") return FOREIGN;
  }
  if (partTypes(message["content"]).size > 0) return FOREIGN; // v4 UI message content is a string
  if (has(message, "toolInvocations") || types.has("tool-invocation")) return DISTINCTIVE;
  return NEUTRAL;
}

export function sites(message: unknown): Site[] {
  const found: Site[] = [];
  if (!isObject(message)) return found;
  const invocations = message["toolInvocations"];
  if (Array.isArray(invocations)) {
    invocations.forEach((invocation: unknown, index: number) => site(found, ["toolInvocations", index], invocation));
  }
  const parts = message["parts"];
  if (Array.isArray(parts)) {
    parts.forEach((part: unknown, index: number) => {
      if (isObject(part) && part["type"] === "tool-invocation") {
        site(found, ["parts", index, "toolInvocation"], part["toolInvocation"]);
      }
    });
  }
  return found;
}

function site(found: Site[], path: Path, obj: unknown): void {
  if (!isObject(obj) || !(has(obj, "args") || has(obj, MARKER))) return;
  const callId = obj["toolCallId"];
  const name = obj["toolName"];
  const complete = obj["state"] === "result" && (has(obj, "result") || has(obj, MARKER));
  found.push({
    path,
    callId: typeof callId === "string" ? callId : null,
    name: typeof name === "string" ? name : null,
    argsKey: "args",
    resultKey: complete ? "result" : null,
    isError: false,
  });
}
