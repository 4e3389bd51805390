/**
 * Where one side of a tool invocation sits in a message, and how its marker is made and
 * undone (client_sdk/toolref/formats/site.py). The AI SDK formats keep call and result in
 * one object (a site holding both sides); the LLM APIs' formats keep the call in one
 * message and the result in a later one, paired by id (`conversation.ts`).
 */

export type Path = readonly (string | number)[];
export type JsonObject = Record<string, unknown>;

export const MARKER = "toolRef";
/** Present only when the default restoration would not give the original member order. */
export const ORDER = "toolRefOrder";

export interface Site {
  /** From the message: e.g. ["parts", 2]. */
  readonly path: Path;
  readonly callId: string | null;
  readonly name: string | null;
  /** The arguments' member; null on a result side. */
  readonly argsKey: string | null;
  /** The result's member; null on a call side, and on a call waiting for its result. */
  readonly resultKey: string | null;
  readonly isError: boolean;
  /** A result with no payload member (an Anthropic tool_result without content): it
   * answers its call, but there is nothing to replace. */
  readonly bare?: boolean;
}

/** The payload members a site's marker replaces, arguments first. */
export function payloadKeys(site: Site): string[] {
  return [site.argsKey, site.resultKey].filter((key): key is string => key !== null);
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function own(obj: JsonObject, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

/** `obj[key] = value` as an own member whatever its name: assigning `__proto__` (a member
 * `JSON.parse` makes) would set the object's prototype, and the member be lost. */
function put(obj: JsonObject, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

/** A member as JSON.stringify sees it: own, and not undefined. */
export function has(obj: JsonObject, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key) && obj[key] !== undefined;
}

export function getAt(root: unknown, path: Path): unknown {
  let node: unknown = root;
  for (const step of path) node = (node as Record<string | number, unknown>)[step];
  return node;
}

export type Change = (value: unknown) => unknown;

interface Trie {
  change?: Change;
  readonly below: Map<string | number, Trie>;
}

/** Copy of `root` with the object at each path replaced by `change(it)` (site.py's
 * `update_all`). Only the containers on the way are copied, each once however many changes
 * it holds (a message with thousands of markers costs one copy of it, not one per marker:
 * linear in the paths and the containers copied); the input is never modified. A change at
 * a path below another's is made first, and the outer change receives the object with it. */
export function updateAll<T>(root: T, changes: Iterable<readonly [Path, Change]>): T {
  const trie: Trie = { below: new Map() };
  for (const [path, change] of changes) {
    let node = trie;
    for (const step of path) {
      let next = node.below.get(step);
      if (next === undefined) node.below.set(step, (next = { below: new Map() }));
      node = next;
    }
    node.change = change;
  }
  return rebuilt(root, trie) as T;
}

function rebuilt(value: unknown, trie: Trie): unknown {
  if (trie.below.size > 0) {
    const copy = (Array.isArray(value) ? [...(value as unknown[])] : { ...(value as JsonObject) }) as Record<
      string | number,
      unknown
    >;
    for (const [step, sub] of trie.below) copy[step] = rebuilt(copy[step], sub);
    value = copy;
  }
  return trie.change === undefined ? value : trie.change(value);
}

/** `obj` with its payload `keys` removed and `toolRef` at the place of the first. */
export function toMarker(obj: JsonObject, keys: readonly string[], ref: string): JsonObject {
  const order = Object.keys(obj).filter((key) => obj[key] !== undefined);
  const first = Math.min(...keys.map((key) => order.indexOf(key)));
  const marker: JsonObject = {};
  order.forEach((key, index) => {
    if (keys.includes(key)) {
      if (index === first) marker[MARKER] = ref;
    } else {
      put(marker, key, obj[key]);
    }
  });
  if (!sameList(restoredOrder(Object.keys(marker), keys), order)) marker[ORDER] = order;
  return marker;
}

/** Inverse of {@link toMarker}: `values` (payload key -> value) back in their places. */
export function fromMarker(marker: JsonObject, values: JsonObject): JsonObject {
  const keys = Object.keys(values);
  let order = restoredOrder(Object.keys(marker).filter((key) => key !== ORDER), keys);
  const listed = marker[ORDER];
  if (Array.isArray(listed)) {
    const named = listed.filter((key): key is string => typeof key === "string");
    const seen = new Set(named); // a set: an array's `includes` made a long order quadratic
    order = [...named, ...order.filter((key) => !seen.has(key))];
  }
  const restored: JsonObject = {};
  for (const key of order) {
    // Own members only: `in` also finds `toString` and the rest of Object.prototype.
    if (own(values, key)) put(restored, key, values[key]);
    else if (own(marker, key) && key !== MARKER && key !== ORDER) put(restored, key, marker[key]);
  }
  return restored;
}

function restoredOrder(markerKeys: readonly string[], keys: readonly string[]): string[] {
  const order: string[] = [];
  for (const key of markerKeys) {
    if (key === MARKER) order.push(...keys);
    else if (key !== ORDER) order.push(key);
  }
  return order;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((item, index) => item === b[index]);
}
