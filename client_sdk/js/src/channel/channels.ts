/**
 * The channels of `toolrefFetch` (Python's `toolref.sending.channels.Channels`, issue 39):
 * the channel each endpoint's answer told of (`Toolref-Channel: <path>` beside
 * `Toolref-Edits`, the latest said; an answer saying `Toolref-Edits` and naming none says it
 * serves none any more), and the channels open, one per origin, path and credentials (a
 * channel carries one caller's turns, authenticated as the caller that opened it), at most
 * `MAX_CHANNELS`, the least recently used idle one closed first; `MAX_ENDPOINTS` endpoints
 * remembered. Only edits ride a channel. Shared by every `toolrefFetch` of the process, as
 * the endpoints' state is (`shared.ts`); `forgetSharedState()` closes them.
 */

import type { Pairs } from "./frames.js";
import { CHANNEL_HEADER, channelPath } from "./paths.js";
import { ChannelTransport } from "./transport.js";

export const MAX_CHANNELS = 64;
export const MAX_ENDPOINTS = 256;
/** A request's credentials, repeated on its channel's upgrade (a receiver may check them
 * there); a channel is one set of them. */
export const CREDENTIALS = ["authorization", "x-api-key", "api-key", "x-goog-api-key", "toolref-key"] as const;
/** Headers a frame never carries: the HTTP framing (the receiver sets the body's length). */
const FRAMING = new Set(["host", "content-length", "transfer-encoding", "connection"]);

const paths = new Map<string, string>(); // endpoint (origin + path) -> its channel's path
const open = new Map<string, ChannelTransport>();

/** The report line of a channel that cannot be had (Python logs it at INFO). */
let report: (line: string) => void = (line) => console.info(line);

/** Where report lines go (tests; an app with a logger of its own). */
export function reportChannelsTo(to: (line: string) => void): void {
  report = to;
}

/** Learn from `response` (to a request to `url`) where the endpoint's channel is. */
export function told(url: string, response: Response): void {
  if (!response.headers.has("toolref-edits")) return; // not a receiver's word (a problem, a plain backend)
  const where = new URL(url);
  const endpoint = where.origin + where.pathname;
  const path = channelPath(response.headers.get(CHANNEL_HEADER));
  paths.delete(endpoint);
  if (path === null) return;
  paths.set(endpoint, path); // now the most recent
  if (paths.size > MAX_ENDPOINTS) paths.delete(paths.keys().next().value!);
}

/**
 * Send an edit to `url` over its endpoint's channel: its answer, or null to send it over
 * HTTP (no channel told of, none to be had now, or the turn not carried: nothing done with
 * it). `headers`: what the HTTP request would carry; `body`: the edit's bytes, exactly.
 */
export async function viaChannel(url: string, headers: Headers, body: Uint8Array, signal?: AbortSignal): Promise<Response | null> {
  const where = new URL(url);
  const path = paths.get(where.origin + where.pathname);
  if (path === null || path === undefined) return null;
  const credentials: Pairs = [];
  for (const name of CREDENTIALS) {
    const value = headers.get(name);
    if (value !== null) credentials.push([name, value]);
  }
  const key = JSON.stringify([where.origin, path, credentials]);
  let channel = open.get(key);
  if (channel === undefined) {
    if (open.size >= MAX_CHANNELS) {
      const idle = [...open].find(([, found]) => !found.busy);
      if (idle === undefined) return null; // every one busy: this turn over HTTP, no channel made
      open.delete(idle[0]);
      idle[1].retire();
    }
    channel = new ChannelTransport(where.origin, path, credentials, { report: (line) => report(line) });
  }
  open.delete(key);
  open.set(key, channel); // now the most recently used
  const pairs: Pairs = [];
  headers.forEach((value, name) => {
    if (!FRAMING.has(name)) pairs.push([name, value]);
  });
  return channel.send(where.pathname + where.search, pairs, body, signal);
}

/** Close every channel and forget every endpoint's (`forgetSharedState`). */
export function closeChannels(): void {
  for (const channel of open.values()) channel.retire();
  open.clear();
  paths.clear();
}
