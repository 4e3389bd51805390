/** Where a receiver's channel is (Python's `toolref.wire.endpoints.CHANNEL_PATH`,
 * `toolref.wire.headers.CHANNEL_HEADER`). */

/** On the answer to a request offering edits, and to an edit: the path of the receiver's
 * channel on the same origin; on a channel turn's 503, `busy`. */
export const CHANNEL_HEADER = "Toolref-Channel";

/** A channel's path as a receiver may name it: a URL path of at most 256 characters. */
const CHANNEL_PATH = /^\/[!$&'()*+,;=:@/A-Za-z0-9._~%-]{0,255}$/;

/** The channel path `value` names, or null when it names none (absent, or not a path). */
export function channelPath(value: string | null): string | null {
  return value !== null && CHANNEL_PATH.test(value) ? value : null;
}
