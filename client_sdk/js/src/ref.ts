/** Tool invocations and their refs (DESIGN.md "Identity"). */

import { canonicalBytes } from "./canonical.js";
import { digestKey, sha256 } from "./digest.js";
import { UsageError } from "./errors.js";

export const REF_PREFIX = "tr_";
export const REF_LENGTH = REF_PREFIX.length + 26;
const REF_RE = /^tr_[a-z2-7]{25}[aeimquy4]$/;

/** One tool call with its result: what a ref names. Provider ids are not part of it. */
export interface Invocation {
  name: string;
  args: unknown;
  result: unknown;
  isError?: boolean;
}

/** The four-member object whose canonical bytes identify an invocation. */
export function invocationObject(invocation: Invocation): Record<string, unknown> {
  const { name, args, result } = invocation;
  const isError = invocation.isError ?? false;
  if (typeof name !== "string") {
    throw new UsageError(`an invocation's name is a string, not ${typeof name} (${String(name)})`);
  }
  if (typeof isError !== "boolean") {
    throw new UsageError(`an invocation's isError is true or false, not ${String(isError)}`);
  }
  // JSON.stringify drops an undefined or function member: the ref would be of an invocation
  // without it (one the registry refuses), not of the call the app made.
  for (const [member, value] of [["args", args], ["result", result]] as const) {
    if (value === undefined || typeof value === "function" || typeof value === "symbol") {
      throw new UsageError(
        `invocation ${JSON.stringify(name)}'s ${member} is ${value === undefined ? "undefined" : `a ${typeof value}`}, ` +
          `which has no JSON form (JSON.stringify would drop it); give its JSON value ` +
          `(${member === "args" ? "{} for no arguments" : "the tool's output, such as a string"})`,
      );
    }
  }
  return { name, args, result, isError };
}

export function invocationBytes(invocation: Invocation): Uint8Array {
  return canonicalBytes(invocationObject(invocation));
}

/** `tr_` + lowercase unpadded base32 of the first 16 bytes of the SHA-256. */
export function refOf(invocation: Invocation): string {
  return REF_PREFIX + digestKey(sha256(invocationBytes(invocation)));
}

export function isRef(text: unknown): text is string {
  return typeof text === "string" && REF_RE.test(text);
}
