/**
 * The answers of OpenAI Responses and Gemini streams, for answer.ts's {@link AnswerTap}
 * (client_sdk/toolref/edits/answer_items.py, the same bytes; its docstring says what each
 * answer is made of).
 *
 * Each reads one JSON event at a time (`event`), holds what the answer is made of, counts the
 * bytes certain to be in it through the tap's `hold` (given up past MAX_ANSWER, at the same event
 * as Python), and says when the answer ended (`done`) or can be none (`failed`).
 *
 * - OpenAI Responses: each `response.output_item.done` item, as Codex writes it back (its `id`
 *   dropped, the members of a message, reasoning, function or custom call kept in Codex's order),
 *   in `output_index` order as one compact JSON list, then each call's arguments (a custom call's
 *   input) as the model wrote them, joined by newlines; `response.completed` ends it; `error`,
 *   `response.failed`, `response.incomplete` make none.
 * - Gemini: the parts of `candidates[0].content` of every event as Gemini CLI writes them back (a
 *   thought left out, a plain text part added to a plain one before it whose text is not empty),
 *   as `{"role":"model","parts":[..]}`; a `finishReason` ends it; an `error` makes none. Truth is
 *   Python's ({@link isFalsy}) on both sides.
 */

import { size } from "./pybytes.js";
import { dumps, isFalsy, PyInt, sortedKeys, type Json, type JsonObject } from "./pyjson.js";

export type Hold = (bytes: number) => void;

/** What reads the events of one API's answer. */
export interface ItemReader {
  readonly done: boolean;
  readonly failed: boolean;
  event(event: JsonObject): void;
  drop(): void;
  made(): string;
}

/** A Responses output item's type -> the members it is written back with, in this order. */
const KEEP = new Map<string, readonly string[]>([
  ["message", ["type", "role", "content"]],
  ["reasoning", ["type", "summary", "content", "encrypted_content"]],
  ["function_call", ["type", "name", "arguments", "call_id"]],
  ["custom_tool_call", ["type", "status", "call_id", "name", "input"]],
]);
const ENTRY = ["type", "text", "refusal"]; // a message's content entry, written back
const STREAMED = new Map<string, string>([
  ["function_call", "arguments"],
  ["custom_tool_call", "input"],
]);
const ENDS = new Set<Json | undefined>(["error", "response.failed", "response.incomplete"]);
/** A Gemini part with any of these true is no plain text part (Gemini CLI's `isValidNonThoughtTextPart`). */
const NOT_PLAIN = ["thought", "thoughtSignature", "functionCall", "functionResponse", "inlineData", "fileData"];

/** The output items of an OpenAI Responses stream. */
export class ResponsesAnswer implements ItemReader {
  done = false;
  failed = false;
  private readonly items = new Map<bigint, [string, string | null]>(); // index -> compact item, its text
  private readonly counted = new Map<bigint, number>(); // index -> bytes held for it

  constructor(private readonly hold: Hold) {}

  event(event: JsonObject): void {
    const kind = event.get("type");
    if (kind === "response.completed") {
      this.done = true;
    } else if (ENDS.has(kind)) {
      this.failed = true;
    } else if (kind === "response.output_item.done") {
      const item = event.get("item");
      if (!(item instanceof Map)) {
        this.failed = true;
        return;
      }
      const at = event.get("output_index");
      const index = at instanceof PyInt ? at.value : typeof at === "boolean" ? BigInt(at) : 0n;
      const found = item.get("type");
      const typed = typeof found === "string" ? found : "";
      const written = dumps(writtenOf(typed, item));
      const streamed = item.get(STREAMED.get(typed) ?? "");
      const text = typeof streamed === "string" ? streamed : null;
      // the item, a comma (or the list's bracket), and its text after a line end
      const made = size(written) + 1 + (text !== null ? size(text) + 1 : 0);
      const counted = this.counted.get(index) ?? 0;
      if (made > counted) {
        this.counted.set(index, made); // again at its index: only its growth
        this.hold(made - counted);
      }
      this.items.set(index, [written, text]);
    }
  }

  drop(): void {
    this.items.clear();
    this.counted.clear();
  }

  made(): string {
    const ordered = sortedKeys(this.items).map((index) => this.items.get(index) as [string, string | null]);
    const items = `[${ordered.map(([written]) => written).join(",")}]`;
    return [items, ...ordered.flatMap(([, text]) => (text === null ? [] : [text]))].join("\n");
  }
}

/** `item` as the agent writes it back. */
function writtenOf(typed: string, item: JsonObject): JsonObject {
  const keep = KEEP.get(typed);
  if (keep === undefined) return new Map([...item].filter(([key]) => key !== "id"));
  const written: JsonObject = new Map();
  for (const key of keep) if (item.has(key)) written.set(key, item.get(key) as Json);
  const content = written.get("content");
  if (typed === "message" && Array.isArray(content)) {
    written.set(
      "content",
      content.map((entry) => {
        if (!(entry instanceof Map)) return entry;
        const kept: JsonObject = new Map();
        for (const key of ENTRY) if (entry.has(key)) kept.set(key, entry.get(key) as Json);
        return kept;
      }),
    );
  }
  return written;
}

/** The model's parts of a Gemini stream. */
export class GeminiAnswer implements ItemReader {
  done = false;
  failed = false;
  private parts: JsonObject[] = [];
  private added: string[][] = []; // each part's plain texts added to it
  private open = false; // the last part is plain text, its text not empty

  constructor(private readonly hold: Hold) {}

  event(event: JsonObject): void {
    if (event.has("error")) {
      this.failed = true;
      return;
    }
    const candidates = event.get("candidates");
    if (candidates === undefined || candidates === null) return;
    if (!Array.isArray(candidates)) {
      this.failed = true;
      return;
    }
    if (!candidates.length) return;
    const candidate = candidates[0];
    if (!(candidate instanceof Map)) {
      this.failed = true;
      return;
    }
    const content = candidate.get("content");
    const parts = content instanceof Map ? content.get("parts") : undefined;
    const hasContent = content !== undefined && content !== null;
    const hasParts = parts !== undefined && parts !== null;
    if ((hasContent && !(content instanceof Map)) || (hasParts && !Array.isArray(parts))) {
      this.failed = true;
      return;
    }
    for (const part of Array.isArray(parts) ? parts : []) {
      if (!(part instanceof Map)) {
        this.failed = true;
        return;
      }
      this.part(part);
    }
    const reason = candidate.get("finishReason");
    if (typeof reason === "string" && reason) this.done = true;
  }

  private part(part: JsonObject): void {
    if (isTrue(part.get("thought"))) return;
    const text = part.get("text");
    const plain = typeof text === "string" && !NOT_PLAIN.some((key) => isTrue(part.get(key)));
    if (plain && this.open) {
      (this.added[this.added.length - 1] as string[]).push(text);
      this.hold(size(text));
      return;
    }
    this.parts.push(part);
    this.added.push([]);
    this.hold(size(dumps(part)) + 1); // and a comma (or the list's bracket)
    this.open = plain && text !== "";
  }

  drop(): void {
    this.parts = [];
    this.added = [];
  }

  made(): string {
    const parts = this.parts.map((part, n) => {
      const added = this.added[n] as string[];
      if (!added.length) return part;
      const merged = new Map(part);
      merged.set("text", (part.get("text") as string) + added.join(""));
      return merged;
    });
    return dumps(
      new Map<string, Json>([
        ["role", "model"],
        ["parts", parts],
      ]),
    );
  }
}

/** Python's truth of a JSON value. */
function isTrue(value: Json | undefined): boolean {
  return value !== undefined && !isFalsy(value);
}
