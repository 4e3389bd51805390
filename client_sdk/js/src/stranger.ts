/**
 * What a sender does with an answer to an edit from no receiver of edits: one naming neither
 * a recipe (`Toolref-History`) nor `Toolref-Edits` and holding no toolref problem (a
 * framework's own problem+json is none): a backend rolled back, or a proxy, load balancer or
 * firewall in front of the receiver. Python's `toolref.sending.stranger`, every sender's rule
 * (shared vectors: tests/js_stranger_vectors.py). The endpoint is forgotten in every case;
 * then, by the answer's status: refused unread (a 4xx but 413 and 429, a framework's 415 among them;
 * a 500 or 501, a route whose `request.json()` threw), the request goes again as it is and
 * edits pause 5 minutes, doubled, at most an hour (behind a firewall refusing the media type,
 * whose receiver's answers say `Toolref-Edits` again, a few refused edits an hour, not one a
 * turn); any other refusal (413: a proxy's body limit, which the request as it is, never smaller than
 * its edit, passes no better; 429; 502 and above: a proxy's timeout, which may have forwarded
 * the edit, the provider answering it) is the app's as it came, to retry as it would without
 * toolref (sent again, the provider would be called twice), edits paused 1 s, doubled, at most
 * 30 s; any other answer is the app's, no pause. Pure, O(1).
 */

/** The pause after a 415 (the receiver cannot apply edits now): 1 s, doubled, at most 30 s
 * (Python's `pause.FIRST`, `LONGEST`). */
export const FIRST_PAUSE_MS = 1000;
export const LONGEST_PAUSE_MS = 30_000;
/** After an edit refused unread (a stranger's; one of the lowest version refused as
 * unreadable, which no rollback explains): 5 minutes, doubled, at most an hour (Python's
 * `pause.UNREADABLE_FIRST`, `UNREADABLE_LONGEST`). */
export const UNREADABLE_PAUSE_MS = 300_000;
export const UNREADABLE_LONGEST_MS = 3_600_000;

/** A stranger's refusal of the body unread: the request goes again as it is. */
export function resent(status: number): boolean {
  return (status >= 400 && status < 500 && status !== 413 && status !== 429) || status === 500 || status === 501;
}

/** The pause of edits after a stranger's answer of `status` ([first, longest] in ms), or null
 * (not a refusal). */
export function strangerPause(status: number): [number, number] | null {
  if (status < 400) return null;
  return resent(status) ? [UNREADABLE_PAUSE_MS, UNREADABLE_LONGEST_MS] : [FIRST_PAUSE_MS, LONGEST_PAUSE_MS];
}
