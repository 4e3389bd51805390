/**
 * Option checks shared by the SDK's entry points: an options object holds only known names
 * (an unknown one fails naming the nearest known name: `historyRef` -> `historyRefs`), each
 * of the right type. A misspelt option is otherwise accepted silently and does nothing.
 */

import { UsageError } from "./errors.js";

/** What an option holds: checked by `typeof`, or "integer" (a whole number), "any" (any
 * value, checked by its owner), "format" (a string or null). */
export type Kind = "boolean" | "string" | "function" | "integer" | "format" | "nullable-boolean" | "object" | "any";

export type Spec = Readonly<Record<string, Kind>>;

const KINDS: Record<Kind, { test: (value: unknown) => boolean; says: string }> = {
  boolean: { test: (value) => typeof value === "boolean", says: "true or false" },
  "nullable-boolean": { test: (value) => value === null || typeof value === "boolean", says: "true, false or null" },
  string: { test: (value) => typeof value === "string", says: "a string" },
  format: { test: (value) => value === null || typeof value === "string", says: "a format name (a string) or null" },
  function: { test: (value) => typeof value === "function", says: "a function" },
  integer: { test: (value) => typeof value === "number" && Number.isInteger(value), says: "a whole number" },
  object: { test: (value) => typeof value === "object" && value !== null, says: "an object" },
  any: { test: () => true, says: "a value its owner checks" }, // a known name, checked where it is used
};

/** Edit distance between `a` and `b` (case-insensitive), O(|a| x |b|): option names are short. */
export function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let previous = Array.from({ length: y.length + 1 }, (_, index) => index);
  for (let i = 1; i <= x.length; i++) {
    const row = [i];
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost));
    }
    previous = row;
  }
  return previous[y.length]!;
}

/** The known name nearest `name`, if one is near enough to be a misspelling. */
export function nearest(name: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const found = distance(name, candidate);
    if (found < bestDistance) {
      best = candidate;
      bestDistance = found;
    }
  }
  return best !== null && bestDistance <= Math.max(2, Math.floor(best.length / 3)) ? best : null;
}

/**
 * Check `options` (what the caller passed to `where`) against `spec`: an object, whose
 * members each have a known name and, unless undefined, a value of their kind. Throws a
 * `UsageError` naming the option, the value and the fix; an option of `retired` (one that
 * no longer exists) fails too, whatever its value, with the fix it names.
 */
export function checkOptions(where: string, options: unknown, spec: Spec, retired: Readonly<Record<string, string>> = {}): void {
  if (options === undefined) return;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new UsageError(`${where}(options) takes an object of options, not ${describe(options)}; pass { ... } or nothing`);
  }
  const known = Object.keys(spec);
  for (const [name, value] of Object.entries(options)) {
    const kind = spec[name];
    const fix = Object.hasOwn(retired, name) ? retired[name] : undefined;
    if (kind === undefined && fix !== undefined) {
      throw new UsageError(`${where}({ ${name} }) is no longer an option: history refs were retired for edits (issue 38); ${fix}`);
    }
    if (kind === undefined) {
      const close = nearest(name, known);
      throw new UsageError(
        `${where}({ ${name} }) is not an option` +
          (close !== null ? `; did you mean ${close}?` : ".") +
          ` Known options: ${known.join(", ")}`,
      );
    }
    if (value !== undefined && !KINDS[kind].test(value)) {
      throw new UsageError(`${where}({ ${name} }) takes ${KINDS[kind].says}, not ${describe(value)}; pass one or leave it out`);
    }
  }
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return `the string ${JSON.stringify(value.slice(0, 40))}`;
  if (typeof value === "number" || typeof value === "boolean") return `${typeof value} ${String(value)}`;
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}
