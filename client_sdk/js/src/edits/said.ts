/**
 * `Said`: which edits version a sender writes to a receiver, from the versions it said
 * recently: every sender's rule, Python's `toolref.sending.said` (the relay's and the SDK's),
 * here once for the JS sender (manager.ts).
 *
 * A receiver says a version in each answer's `Toolref-Edits`, and one that refuses an edit 400
 * `malformed-body` says, without a header, that it reads less than the bytes the edit was
 * written in (`unreadable`: a receiver rolled back). The version written is the lowest said
 * within `RECENT_MS` where that one does not read the bytes written for the highest said
 * (`writtenAs`: versions 5 and 6 write version 5's), else the highest said within it, else
 * the last said. So replicas of 4 and 6 behind one address are sent what both read, not a
 * refused edit every other turn; replicas of 5 and 6 (the same bytes) keep 6, each answer
 * tapped by its own `Toolref-Edits`; rolled forward, a sender writes more once no lower version
 * was said for `RECENT_MS`.
 *
 * Pure: the caller passes its clock's reading (`now`, ms, monotonic: `performance.now()`). At
 * most one entry per version: O(versions) a call.
 *
 * `unreadableSaid`: the warning a sender says once it stepped down on such a refusal, in
 * Python's words (`unreadable_said`; shared vectors: tests/js_said_vectors.py).
 */

import { printable } from "../shown.js";
import { VERSION, writtenAs } from "./wire.js";

/** How long a version said (an answer's, a refusal's) is written to: Python's `RECENT`. */
export const RECENT_MS = 300_000;
const LOWEST = 1;

export class Said {
  /** version -> when it was last said */
  private readonly at = new Map<number, number>();

  /** `version` said at `now` (an answer's `Toolref-Edits`; null, or below every version of
   * edits: nothing said). One above `VERSION` counts as `VERSION`. */
  said(version: number | null, now: number): void {
    if (version !== null && version >= LOWEST) this.at.set(Math.min(version, VERSION), now);
  }

  /** An edit written for `version` was refused 400 `malformed-body`: the receiver reads less
   * than its bytes (`writtenAs`; one above `VERSION` counts as it), so the version below them is said. False: there
   * is none (the sender's own fault, not a rollback). */
  unreadable(version: number, now: number): boolean {
    const lower = writtenAs(Math.min(version, VERSION)) - 1;
    if (lower < LOWEST) return false;
    this.said(lower, now);
    return true;
  }

  /** The version to write (the module docstring); null while none was said. */
  version(now: number): number | null {
    if (this.at.size === 0) return null;
    const recent: number[] = [];
    let last = 0;
    let lastAt = -Infinity;
    for (const [version, at] of this.at) {
      if (now - at < RECENT_MS) recent.push(version);
      if (at > lastAt) [last, lastAt] = [version, at];
    }
    if (recent.length === 0) return last;
    const lowest = Math.min(...recent);
    const highest = Math.max(...recent);
    return writtenAs(lowest) < writtenAs(highest) ? lowest : highest;
  }
}

/** What a sender says once `where` refused an edit written for `version` `status` (400; a
 * middleware's 415 naming it) `malformed-body` (the problem's `detail`, shown when it is text)
 * and the version stepped down to `written` (null: none lower, edits paused). A rollback
 * explains it; else the SDK wrote bytes its receiver cannot read, a bug the resend hides from
 * the app. The receiver's text shown as `printable` shows a peer's. Linear in the texts. */
export function unreadableSaid(where: string, version: number, written: number | null, detail: unknown, requestId: string | null, status = 400): string {
  const after = written !== null ? `its requests are now written for version ${written}` : "no version is lower: edits paused for it a while, requests go as they are";
  const said = printable(typeof detail === "string" ? detail : "no detail");
  return (
    `toolref: ${where} refused an edit written for edits version ${version} as unreadable (${status} malformed-body: ${said}; request id ` +
    `${printable(requestId ?? "none given: note the time")}); ${after}. Expected only after its receiver was rolled back to an older ` +
    "toolref: if the backend was not rolled back, report this with the request id"
  );
}
