/** Header names and problem types of the wire contract (DESIGN.md, docs/history.md). */

export const PROTOCOL_HEADER = "Toolref-Protocol";
export const PROTOCOL_REFS = 2;
export const REFERENCES_HEADER = "Toolref-References";
export const JSON_TYPE = "application/json";
export const PROBLEM_TYPE = "application/problem+json";
const PROBLEM_BASE = "urn:toolref:problem:";
export const MISSING_REFS = PROBLEM_BASE + "missing-refs";
export const MISSING_HISTORY = PROBLEM_BASE + "missing-history";
export const DICTIONARY_MISMATCH = PROBLEM_BASE + "dictionary-mismatch";

/** An answer the manager may resend on: a 400 or 409 problem, sent before any app answer. */
export function mayResend(status: number, contentType: string | null): boolean {
  return (status === 400 || status === 409) && (contentType ?? "").startsWith(PROBLEM_TYPE);
}
