/** Header names and problem types of the wire contract (client_sdk/toolref/wire/headers.py,
 * docs/js.md). */

/** On an LLM request sent as it is, `2`: the sender sends edits to a receiver that reads
 * them; on a receiver's answer, the highest edit version it reads. */
export const EDITS_HEADER = "Toolref-Edits";
/** In the answer to an edit: the recipe the receiver kept (`tb_...`), the next edit's base. */
export const HISTORY_HEADER = "Toolref-History";
/** `raw=<bytes>, wire=<bytes>, ratio=<raw/wire>` of the request answered. */
export const SAVINGS_HEADER = "Toolref-Savings";
/** Protocol 2: `toolRef` markers in a JSON body (what `withToolRef` still hydrates). */
export const PROTOCOL_HEADER = "Toolref-Protocol";
export const PROTOCOL_REFS = 2;
export const REFERENCES_HEADER = "Toolref-References";
/** The older history-ref protocol's headers: retired (a request carrying one is refused). */
export const RETIRED_HEADERS = ["Toolref-History", "Toolref-Checkpoint", "Toolref-Dictionary"] as const;
/** The SDK version that sends edits: the upgrade a client of history refs is told of. */
export const EDITS_SINCE = "0.3";
export const TOOLREF_PREFIX = "toolref-";
export const JSON_TYPE = "application/json";
export const PROBLEM_TYPE = "application/problem+json";
export const PROBLEM_BASE = "urn:toolref:problem:";
export const MISSING_REFS = PROBLEM_BASE + "missing-refs";

/** The problem type of `slug`. */
export function problemType(slug: string): string {
  return PROBLEM_BASE + slug;
}

/** A problem document toolref wrote (its `type` under `urn:toolref:problem:`): not a
 * framework's own (`about:blank`, an RFC 9110 link), as Python's `toolref_problem` reads it. */
export function isToolrefProblem(problem: Readonly<Record<string, unknown>> | null): boolean {
  const kind = problem?.["type"];
  return typeof kind === "string" && kind.startsWith(PROBLEM_BASE);
}

/** An answer the sender may resend on: a 400 or 409 problem, sent before any app answer. */
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

/** The `Toolref-Savings` value, as Python's `savings_value` writes it (`ratio` to one
 * decimal, ties to even as Python's format rounds the double). */
export function savingsValue(raw: number, wire: number): string {
  const ratio = wire ? raw / wire : 1;
  let shown = ratio.toFixed(1);
  const quarters = ratio * 4;
  if (Number.isInteger(quarters) && quarters % 4 === 1) shown = (Math.floor(ratio) + 0.2).toFixed(1); // x.25: to x.2, not x.3
  return `raw=${raw}, wire=${wire}, ratio=${shown}`;
}
