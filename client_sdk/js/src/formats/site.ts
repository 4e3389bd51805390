/**
 * Where one tool invocation sits in a message, and how its marker is made and undone
 * (client_sdk/toolref/formats/site.py). The AI SDK formats keep call and result in one
 * object, so a site is always inside one message and holds both sides.
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
  readonly argsKey: string;
  /** null while the call waits for its result. */
  readonly resultKey: string | null;
  readonly isError: boolean;
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
