/**
 * `ai-sdk-v5`: AI SDK 5, 6 and 7 UIMessage `parts` (client_sdk/toolref/formats/ai_sdk_v5.py):
 * the three majors write tool parts alike (6 and 7 add states that hold no result yet:
 * `approval-requested`, `approval-responded`, `output-denied`).
 *
 * Tool parts are `{type: "tool-<name>", toolCallId, state, input, output | errorText}` and
 * `{type: "dynamic-tool", toolName, ...}`. A part holds a complete invocation when its state
 * is `output-available` (result: `output`) or `output-error` (result: `errorText`, an
 * error). The marker replaces `input` and the result with one `toolRef` where `input` was.
 */

import { DISTINCTIVE, FOREIGN, NEUTRAL, partTypes } from "./evidence.js";
import { MARKER, has, isObject, type Site } from "./site.js";

export const NAME = "ai-sdk-v5";
const ROLES = ["system", "user", "assistant"];
const RESULTS: Record<string, string> = { "output-available": "output", "output-error": "errorText" };

function isTool(kind: string): boolean {
  return kind.startsWith("tool-") || kind === "dynamic-tool";
}

export function claim(message: unknown): number {
  if (!isObject(message) || has(message, "type") || has(message, "toolInvocations")) return FOREIGN;
  const parts = message["parts"];
  if (!Array.isArray(parts) || !ROLES.includes(message["role"] as string)) return FOREIGN;
  if (parts.some((part) => isObject(part) && !has(part, "type"))) return FOREIGN;
  const types = partTypes(parts);
  if (types.has("tool-invocation")) return FOREIGN;
  for (const kind of types) {
    if (isTool(kind) || kind === "step-start" || kind === "source-url" || kind === "source-document") {
      return DISTINCTIVE;
    }
  }
  return NEUTRAL;
}

export function sites(message: unknown): Site[] {
  const found: Site[] = [];
  const parts = isObject(message) ? message["parts"] : undefined;
  if (!Array.isArray(parts)) return found;
  parts.forEach((part: unknown, index: number) => {
    if (!isObject(part)) return;
    const kind = part["type"];
    if (typeof kind !== "string" || !isTool(kind)) return;
    if (!(has(part, "input") || has(part, MARKER))) return;
    const name = kind === "dynamic-tool" ? part["toolName"] : kind.slice("tool-".length);
    const callId = part["toolCallId"];
    const state = part["state"];
    let resultKey: string | null = typeof state === "string" ? (RESULTS[state] ?? null) : null;
    if (resultKey !== null && !has(part, resultKey) && !has(part, MARKER)) resultKey = null;
    found.push({
      path: ["parts", index],
      callId: typeof callId === "string" ? callId : null,
      name: typeof name === "string" ? name : null,
      argsKey: "input",
      resultKey,
      isError: state === "output-error",
    });
  });
  return found;
}
