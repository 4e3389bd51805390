/**
 * `Entries`: the most entries of a recipe one receiver takes in an edit, learnt from its 413
 * `too-many-items`: every sender's rule, Python's `toolref.sending.entries` (the relay's and
 * the SDK's), here once for the JS sender (manager.ts).
 *
 * A receiver refuses an edit whose recipe holds more entries than `TOOLREF_MAX_EDIT_ENTRIES`
 * (50,000 by default: no sender makes an edit of more, `MAX_ENTRIES`) with 413
 * `too-many-items`, before anything is built. An operator may set it lower; then the edit
 * refused is sent again as it is (which the receiver forwards), and the limit is learnt
 * (`refused`): the problem's `limit` when it is below the entries the edit held, else (a
 * problem naming none) one below them. A later request whose recipe would hold more (`most`)
 * goes as it is at once, no refused edit first. A `limit` at or above the entries sent says the
 * refusal was of something else (a JSON array's items): nothing learnt.
 *
 * Behind a chat backend's middleware (`withToolRef`, `ToolRefMiddleware`) the registry's 413 is
 * the middleware's 415 (`unsupported-media-type`, which every sender resends on), naming it:
 * `cause` `too-many-items` and its `limit`. That is the same refusal (`tooManyItems`): the
 * same rule, and none of the pause a 415 begins.
 *
 * A limit learnt holds for `KEPT_MS` (an hour), then edits are tried again: a receiver whose
 * limit was raised is sent edits again, at the cost of one refused edit an hour. The lowest
 * limit said within it holds (replicas of two limits behind one address: the lower).
 *
 * Pure: the caller passes its clock's reading (`now`, ms, monotonic: `performance.now()`).
 * O(1) a call, one limit a receiver.
 */

import { printable } from "../shown.js";
import { MAX_ENTRIES } from "./editor.js";

/** How long a limit learnt holds: Python's `entries.KEPT` (seconds there). */
export const KEPT_MS = 3_600_000;
export const TOO_MANY_ITEMS = "urn:toolref:problem:too-many-items";
const UNSUPPORTED_MEDIA_TYPE = "urn:toolref:problem:unsupported-media-type";

/** The answer to an edit is the receiver's 413 `too-many-items`, or a middleware's 415 standing
 * for its registry's (`cause`; see above): `problem` read, and the caller checked it names no
 * recipe. The edit not applied, the request goes as it is; the problem's `limit` is the
 * receiver's. Python's `entries.too_many_items` (shared vectors). */
export function tooManyItems(status: number, problem: Record<string, unknown> | null): boolean {
  if (problem === null) return false;
  if (status === 413) return problem["type"] === TOO_MANY_ITEMS;
  return status === 415 && problem["type"] === UNSUPPORTED_MEDIA_TYPE && problem["cause"] === TOO_MANY_ITEMS;
}

export class Entries {
  /** The lowest limit learnt within `KEPT_MS`, and when. */
  private limit: number | null = null;
  private at = 0;
  /** The last limit `refused` returned (said once). */
  private told: number | null = null;

  /** The most entries an edit to this receiver holds: the limit learnt while it holds, else
   * the default a receiver takes (`MAX_ENTRIES`). */
  most(now: number): number {
    if (this.limit === null || now - this.at >= KEPT_MS) return MAX_ENTRIES;
    return Math.min(this.limit, MAX_ENTRIES);
  }

  /** An edit whose recipe held `sent` entries was refused 413 `too-many-items` at `now`;
   * `limit`: the problem's member (anything but a whole number from 1 to
   * `Number.MAX_SAFE_INTEGER` names none). The limit learnt (see above) when it is news to
   * say, one not returned before; null when it is not, or nothing was learnt. */
  refused(sent: number, limit: unknown, now: number): number | null {
    const named = typeof limit === "number" && Number.isSafeInteger(limit) && limit >= 1 ? limit : null;
    if (named !== null && named >= sent) return null; // not the recipe's entries
    const learnt = named ?? Math.max(sent - 1, 0);
    if (learnt > this.most(now)) return null; // a lower limit holds
    this.limit = learnt;
    this.at = now;
    if (learnt === this.told) return null;
    this.told = learnt;
    return learnt;
  }
}

/** `entries` told that `response` (`status` 413 or 415, its `problem` read: `tooManyItems`)
 * refused an edit of `sent` entries to `where`: the limit learnt said once (`console.warn`). */
export function tooManyLearnt(entries: Entries, sent: number, problem: Record<string, unknown> | null, where: string, response: Response): void {
  const learnt = entries.refused(sent, problem?.["limit"], performance.now());
  if (learnt !== null) console.warn(tooManySaid(where, sent, learnt, response.headers.get("x-request-id"), response.status));
}

/** What a sender says once a receiver refused an edit of `sent` entries and its limit `learnt`
 * is news (Python's `Sender` logs the same words); `requestId`, the receiver's, shown as
 * `printable` shows a peer's text; `status`, the refusal's (413, or a middleware's 415). */
export function tooManySaid(where: string, sent: number, learnt: number, requestId: string | null, status = 413): string {
  return (
    `toolref: ${where} refused an edit of ${sent} entries (${status} too-many-items; request id ${printable(requestId ?? "none given")}): it takes a ` +
    `limit of ${learnt} entries (its TOOLREF_MAX_EDIT_ENTRIES, 50000 by default), so the request went again as it is, and so do ` +
    "its requests of more (long conversations: about 2 entries a message), whole, edits tried again in an hour; raise that " +
    "setting to send them as edits"
  );
}
