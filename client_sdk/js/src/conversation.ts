/**
 * The tool invocations of a conversation: pair calls with results, name them, replace
 * payloads by refs and back (client_sdk/toolref/formats/conversation.py). Pure functions:
 * inputs are never modified.
 *
 * `scan` pairs each result with the oldest unanswered call of the same id (ids do repeat in
 * real traces), or, where a format has no ids, with the oldest unanswered call of the same
 * tool name. A result no pending call answers (an orphan, or a second result for an
 * answered call) is left as it is.
 */

import { UsageError } from "./errors.js";
import type { Format } from "./formats/index.js";
import { MARKER, ORDER, fromMarker, getAt, has, payloadKeys, toMarker, updateAll, type Change, type JsonObject, type Path, type Site } from "./formats/site.js";
import { isRef, refOf, type Invocation } from "./ref.js";

/** One side of an invocation: the message it is in, where, and the object there. */
export interface Side {
  readonly message: number;
  readonly site: Site;
  readonly obj: JsonObject;
}

/** A call and its result (the same side in the AI SDK formats); either may be missing. */
export class Found {
  constructor(
    /** The `toolReferences` key: the call id, made unique (`id#2`) when reused. */
    readonly key: string,
    public call: Side | null,
    public result: Side | null = null,
  ) {}

  /** The sides, each object once. */
  get sides(): Side[] {
    const found: Side[] = [];
    if (this.call !== null) found.push(this.call);
    if (this.result !== null && this.result.obj !== this.call?.obj) found.push(this.result);
    return found;
  }

  /** The ref a marker on either side carries (both agree: `scan` checks). */
  get marker(): string | null {
    for (const side of this.sides) if (has(side.obj, MARKER)) return side.obj[MARKER] as string;
    return null;
  }

  /** Both payloads in full (and no toolRefOrder of their own): it can be a ref. */
  get complete(): boolean {
    if (this.call === null || this.result === null || this.marker !== null) return false;
    if (this.sides.some((side) => has(side.obj, ORDER))) return false;
    return this.call.site.argsKey !== null && this.result.site.resultKey !== null;
  }

  get name(): string {
    return this.call?.site.name ?? this.result?.site.name ?? "";
  }
}

export function invocationOf(found: Found): Invocation {
  const { call, result } = found;
  if (!found.complete || call === null || result === null) {
    throw new UsageError(`tool call ${JSON.stringify(found.key)} has no complete invocation`);
  }
  return {
    name: found.name,
    args: call.obj[call.site.argsKey!],
    result: result.obj[result.site.resultKey!],
    isError: result.site.isError,
  };
}

/** Calls in the order they came, taken from the front by moving `head`: an array's `shift`
 * moves every element left in V8 once the array is large, which made taking them all
 * quadratic. */
interface Queue {
  readonly items: Found[];
  head: number;
}

/** Calls waiting for their result, by id, by name, and by name for those without an id;
 * taking the oldest one a result answers is O(1) amortized. */
class Pending {
  private readonly byId = new Map<string, Queue>();
  private readonly byName = new Map<string | null, Queue>();
  private readonly idlessByName = new Map<string | null, Queue>();
  private readonly taken = new Set<Found>();

  add(found: Found): void {
    const site = found.call!.site;
    push(this.byName, site.name, found);
    if (site.callId === null) push(this.idlessByName, site.name, found);
    else push(this.byId, site.callId, found);
  }

  answeredBy(site: Site): Found | null {
    if (site.callId !== null) return this.take(this.byId.get(site.callId)) ?? this.take(this.idlessByName.get(site.name));
    return this.take(this.byName.get(site.name));
  }

  private take(queue: Queue | undefined): Found | null {
    while (queue !== undefined && queue.head < queue.items.length) {
      const found = queue.items[queue.head++]!;
      if (!this.taken.has(found)) {
        this.taken.add(found);
        return found;
      }
    }
    return null;
  }
}

function push<K>(map: Map<K, Queue>, key: K, found: Found): void {
  const queue = map.get(key);
  if (queue === undefined) map.set(key, { items: [found], head: 0 });
  else queue.items.push(found);
}

/** Every invocation in `messages`, in order of first appearance, keyed as the Python SDK
 * keys them; `offset` is the index of `messages[0]` in the conversation (for the keys of
 * sides without an id). */
export function scan(messages: readonly unknown[], format: Format, offset = 0): Found[] {
  const found: Found[] = [];
  const pending = new Pending();
  const uses = new Map<string, number>();
  const keys = new Set<string>();
  messages.forEach((message, index) => {
    for (const site of format.sites(message)) {
      const obj = getAt(message, site.path) as JsonObject;
      checkMarker(obj, index + offset, site);
      const side: Side = { message: index, site, obj };
      if (site.argsKey !== null) {
        const pair = new Found(keyOf(site, index + offset, uses, keys), side);
        if (site.resultKey !== null) pair.result = side;
        else pending.add(pair);
        found.push(pair);
      } else if (site.resultKey !== null || site.bare === true) {
        const call = pending.answeredBy(site);
        if (call !== null) {
          call.result = side;
          checkSameRef(call);
        } else {
          found.push(new Found(keyOf(site, index + offset, uses, keys), null, side));
        }
      }
    }
  });
  return found;
}

function checkMarker(obj: JsonObject, message: number, site: Site): void {
  if (!has(obj, MARKER)) return;
  const marker = obj[MARKER];
  if (!isRef(marker)) {
    throw new UsageError(
      `the toolRef marker at message ${message} (${site.path.join(".")}) is ${JSON.stringify(marker)}, not a ref; send markers as the SDK made them`,
    );
  }
}

function checkSameRef(found: Found): void {
  const refs = new Set(found.sides.filter((side) => has(side.obj, MARKER)).map((side) => side.obj[MARKER]));
  if (refs.size > 1) {
    throw new UsageError(
      `tool call ${JSON.stringify(found.key)} carries different refs on its call and its result; both sides carry the ref of the same invocation`,
    );
  }
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

/** One side of a complete invocation in its message: where, and the invocation's ref. */
export interface Mark {
  readonly site: Site;
  readonly ref: string;
}

/** The message with these sides as markers (the same object if none); each container on
 * the way copied once, however many marks it holds. */
export function marked(message: unknown, marks: readonly Mark[]): unknown {
  return updateAll(
    message,
    marks.map(({ site, ref }): [Path, Change] => [site.path, (obj) => toMarker(obj as JsonObject, payloadKeys(site), ref)]),
  );
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
  const marks: Mark[][] = messages.map(() => []);
  for (const found of scan(messages, format)) {
    if (!found.complete) continue;
    const ref = refOf(invocationOf(found));
    refs[found.key] = ref;
    if (usable(ref)) {
      used[found.key] = ref;
      for (const side of found.sides) marks[side.message]!.push({ site: side.site, ref });
    }
  }
  return { messages: messages.map((message, index) => marked(message, marks[index]!)), used, refs };
}

/** Pure: markers whose ref is in `invocations` filled back with the payloads. */
export function fill(
  messages: readonly unknown[],
  format: Format,
  invocations: Readonly<Record<string, Invocation>>,
): unknown[] {
  const changes = new Map<number, [Path, Change][]>(); // by message: each copied once
  for (const found of scan(messages, format)) {
    const ref = found.marker;
    const invocation = ref === null ? undefined : invocations[ref];
    if (invocation === undefined) continue;
    for (const { message, site, obj } of found.sides) {
      if (!has(obj, MARKER)) continue;
      const values: JsonObject = {};
      if (site.argsKey !== null) values[site.argsKey] = invocation.args;
      if (site.resultKey !== null) values[site.resultKey] = invocation.result;
      const change: Change = (marker) => fromMarker(marker as JsonObject, values);
      const here = changes.get(message);
      if (here === undefined) changes.set(message, [[site.path, change]]);
      else here.push([site.path, change]);
    }
  }
  return messages.map((message, index) => {
    const here = changes.get(index);
    return here === undefined ? message : updateAll(message, here);
  });
}
