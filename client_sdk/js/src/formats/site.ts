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

/** A member as JSON.stringify sees it: own, and not undefined. */
export function has(obj: JsonObject, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key) && obj[key] !== undefined;
}

export function getAt(root: unknown, path: Path): unknown {
  let node: unknown = root;
  for (const step of path) node = (node as Record<string | number, unknown>)[step];
  return node;
}

/** Copy of `root` with the object at `path` replaced by `change(it)`; only the containers
 * on the way are copied, the input is never modified. */
export function updateAt<T>(root: T, path: Path, change: (value: unknown) => unknown): T {
  if (path.length === 0) return change(root) as T;
  const [step, ...rest] = path;
  const copy = (Array.isArray(root) ? [...(root as unknown[])] : { ...(root as JsonObject) }) as Record<
    string | number,
    unknown
  >;
  copy[step!] = updateAt(copy[step!], rest, change);
  return copy as T;
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
      marker[key] = obj[key];
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
    order = [...named, ...order.filter((key) => !named.includes(key))];
  }
  const restored: JsonObject = {};
  for (const key of order) {
    if (key in values) restored[key] = values[key];
    else if (key in marker && key !== MARKER && key !== ORDER) restored[key] = marker[key];
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
