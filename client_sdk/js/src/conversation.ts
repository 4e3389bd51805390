/**
 * The tool invocations of a conversation: find them, name them, replace payloads by refs
 * and back (client_sdk/toolref/formats/conversation.py, for formats that keep a call and
 * its result in one object). Pure functions: inputs are never modified.
 */

import { UsageError } from "./errors.js";
import type { Format } from "./formats/index.js";
import { MARKER, ORDER, fromMarker, getAt, has, toMarker, updateAt, type JsonObject, type Site } from "./formats/site.js";
import { isRef, refOf, type Invocation } from "./ref.js";

/** One invocation found in a message. */
export interface Found {
  /** The `toolReferences` key: the call id, made unique (`id#2`) when reused. */
  readonly key: string;
  readonly message: number;
  readonly site: Site;
  readonly obj: JsonObject;
  /** The ref its marker carries, if it is already a marker. */
  readonly marker: string | null;
  /** Both payloads present in full (and no toolRefOrder of its own): it can be a ref. */
  readonly complete: boolean;
}

export function invocationOf(found: Found): Invocation {
  const { site, obj } = found;
  if (!found.complete || site.resultKey === null) {
    throw new UsageError(`tool call ${JSON.stringify(found.key)} has no complete invocation`);
  }
  return { name: site.name ?? "", args: obj[site.argsKey], result: obj[site.resultKey], isError: site.isError };
}

/** Every invocation in `messages`, in order, keyed as the Python SDK keys them. */
export function scan(messages: readonly unknown[], format: Format): Found[] {
  const found: Found[] = [];
  const uses = new Map<string, number>();
  const keys = new Set<string>();
  messages.forEach((message, index) => {
    for (const site of format.sites(message)) {
      const obj = getAt(message, site.path) as JsonObject;
      const marker = has(obj, MARKER) ? obj[MARKER] : null;
      if (marker !== null && !isRef(marker)) {
        throw new UsageError(
          `the toolRef marker at message ${index} (${site.path.join(".")}) is ${JSON.stringify(marker)}, not a ref; send markers as the SDK made them`,
        );
      }
      const complete = marker === null && site.resultKey !== null && !has(obj, ORDER);
      found.push({
        key: keyOf(site, index, uses, keys),
        message: index,
        site,
        obj,
        marker: marker as string | null,
        complete,
      });
    }
  });
  return found;
}

function keyOf(site: Site, message: number, uses: Map<string, number>, keys: Set<string>): string {
  const base = site.callId ?? `${site.name}@${[message, ...site.path].join(".")}`;
  let count = (uses.get(base) ?? 0) + 1;
  let key = count === 1 ? base : `${base}#${count}`;
  while (keys.has(key)) {
    count += 1;
    key = `${base}#${count}`;
  }
  uses.set(base, count);
  keys.add(key);
  return key;
}

/** The message with the invocations at these sites as markers (the same object if none). */
export function marked(message: unknown, marks: readonly { site: Site; ref: string }[]): unknown {
  let out = message;
  for (const { site, ref } of marks) {
    const keys = site.resultKey === null ? [site.argsKey] : [site.argsKey, site.resultKey];
    out = updateAt(out, site.path, (obj) => toMarker(obj as JsonObject, keys, ref));
  }
  return out;
}

export interface Rewrite {
  readonly messages: unknown[];
  /** key -> ref sent as a marker. */
  readonly used: Record<string, string>;
  /** key -> ref of every complete invocation, sent or not. */
  readonly refs: Record<string, string>;
}

/** Pure: `messages` with every complete invocation whose ref `usable` holds as a marker. */
export function rewrite(
  messages: readonly unknown[],
  format: Format,
  usable: (ref: string) => boolean = () => true,
): Rewrite {
  const refs: Record<string, string> = {};
  const used: Record<string, string> = {};
  const marks: { site: Site; ref: string }[][] = messages.map(() => []);
  for (const found of scan(messages, format)) {
    if (!found.complete) continue;
    const ref = refOf(invocationOf(found));
    refs[found.key] = ref;
    if (usable(ref)) {
      used[found.key] = ref;
      marks[found.message]!.push({ site: found.site, ref });
    }
  }
  return { messages: messages.map((message, index) => marked(message, marks[index]!)), used, refs };
}

/** `messages` with every complete invocation as a marker: what history heads digest. */
export function chainForm(messages: readonly unknown[], format: Format): unknown[] {
  return rewrite(messages, format).messages;
}

/** Pure: markers whose ref is in `invocations` filled back with the payloads. */
export function fill(
  messages: readonly unknown[],
  format: Format,
  invocations: Readonly<Record<string, Invocation>>,
): unknown[] {
  const out = [...messages];
  for (const found of scan(messages, format)) {
    const invocation = found.marker === null ? undefined : invocations[found.marker];
    if (invocation === undefined) continue;
    const values: JsonObject = { [found.site.argsKey]: invocation.args };
    if (found.site.resultKey !== null) values[found.site.resultKey] = invocation.result;
    out[found.message] = updateAt(out[found.message], found.site.path, (obj) => fromMarker(obj as JsonObject, values));
  }
  return out;
}
