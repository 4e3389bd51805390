/** How strongly one message says it belongs to a format, for autodetection (evidence.py). */

export const FOREIGN = 0; // cannot be this format
export const NEUTRAL = 1; // could be (plain text fits several formats)
export const DISTINCTIVE = 2; // only this format looks like this

/** The `type`s of the blocks of a list content (empty for anything else). */
export function partTypes(content: unknown): Set<string> {
  const types = new Set<string>();
  if (!Array.isArray(content)) return types;
  for (const part of content) {
    if (typeof part === "object" && part !== null && typeof (part as { type?: unknown }).type === "string") {
      types.add((part as { type: string }).type);
    }
  }
  return types;
}
