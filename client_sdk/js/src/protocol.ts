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

/** The most a `Toolref-References` header carries, in bytes; larger, it is left out (proxies
 * cut long headers), as ToolRefMiddleware does. */
export const HEADER_LIMIT = 8192;

/** `value` as JSON in ASCII, every other character a `\u` escape, as Python's `json.dumps`
 * writes it: a header value is bytes (fetch refuses any character above U+00FF), and both
 * SDKs read it back with a JSON parser. */
export function asciiJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}
