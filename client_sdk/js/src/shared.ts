/**
 * The state `toolrefFetch` keeps, shared per endpoint: one `ToolReferenceManager` per
 * (endpoint, options), however many `toolrefFetch()` calls there are.
 *
 * The documented one-liner is written inline in a React component, so every render calls
 * `toolrefFetch()` again, and AI SDK 6 and 7 send each turn through the newest transport.
 * Every `toolrefFetch()` for the same endpoint, with the same options, uses the same manager:
 * what the endpoint said it reads (`Toolref-Edits`) and the recipes it confirmed. The endpoint
 * is the request URL's origin and path (its query ignored); the options are the manager's
 * (messagesKey, maxRecipes, maxRecipeBytes) and the identity of `options.fetch` (another
 * fetch may reach another server). `onExchange` is not part of it: each fetch reports its
 * own requests.
 *
 * Bounded: at most {@link SHARED_ENDPOINTS} managers, least recently used dropped first
 * (a dropped endpoint starts again from nothing: its next request goes as it is, with the
 * offer, then as edits).
 *
 * A `fetch` option written inline is a new function each render, so each render's
 * `toolrefFetch()` gets a new manager, and no request is ever an edit. Past
 * {@link INLINE_FETCHES} new fetch functions for one endpoint and options, a console
 * warning says so, once per process (until `forgetSharedState`), naming the fix.
 */

import { closeChannels } from "./channel/channels.js";
import { MANAGER_OPTIONS, ToolReferenceManager, type ManagerOptions } from "./manager.js";
import { LruMap } from "./memory.js";

/** The most managers kept across all endpoints (each within its own memory bounds). */
export const SHARED_ENDPOINTS = 16;
/** New `fetch` functions for one endpoint and options past which the app is warned. */
export const INLINE_FETCHES = 4;

const managers = new LruMap<string, ToolReferenceManager>(SHARED_ENDPOINTS);
const fetchIds = new WeakMap<object, number>();
let nextFetchId = 1;
/** Per endpoint and manager options: the newest fetch id a manager was made for, and how
 * many new fetch functions made one (bounded as the managers are). */
const fetchesSeen = new LruMap<string, { newest: number; count: number }>(SHARED_ENDPOINTS);
let warnedInline = false;

/** The manager options among `options` (the others are the fetch's own). */
export function managerOptions(options: ManagerOptions): ManagerOptions {
  const picked: Record<string, unknown> = {};
  for (const name of Object.keys(MANAGER_OPTIONS) as (keyof ManagerOptions)[]) if (options[name] !== undefined) picked[name] = options[name];
  return picked as ManagerOptions;
}

/** Origin and path of a request URL, resolved against the page's location in a browser;
 * the text itself when it is no URL. */
export function endpointOf(url: string): string {
  const base = (globalThis as { location?: { href?: unknown } }).location?.href;
  try {
    const parsed = new URL(url, typeof base === "string" ? base : undefined);
    return parsed.origin + parsed.pathname;
  } catch {
    return url;
  }
}

function fetchId(send: object | undefined): number {
  if (send === undefined) return 0;
  let id = fetchIds.get(send);
  if (id === undefined) {
    id = nextFetchId++;
    fetchIds.set(send, id);
  }
  return id;
}

/** The manager every `toolrefFetch` with these options uses for `endpoint`. */
export function sharedManager(endpoint: string, options: ManagerOptions, send?: object): ToolReferenceManager {
  const picked = managerOptions(options);
  const listed = Object.entries(picked).sort(([a], [b]) => (a < b ? -1 : 1));
  const key = JSON.stringify([endpoint, fetchId(send), listed]);
  let manager = managers.get(key);
  if (manager === undefined) {
    manager = new ToolReferenceManager(picked);
    if (send !== undefined) newFetch(endpoint, JSON.stringify([endpoint, listed]), fetchId(send));
  }
  managers.set(key, manager); // now the most recently used
  return manager;
}

/** A manager was made for fetch `id`: past `INLINE_FETCHES` new ones for one endpoint and
 * options (ids only grow: one evicted and made again for the same fetch is not new), the
 * fetch is written inline: warned once. */
function newFetch(endpoint: string, same: string, id: number): void {
  const seen = fetchesSeen.get(same) ?? { newest: 0, count: 0 };
  if (id > seen.newest) seen.count += 1;
  seen.newest = Math.max(seen.newest, id);
  fetchesSeen.set(same, seen);
  if (seen.count <= INLINE_FETCHES || warnedInline) return;
  warnedInline = true;
  console.warn(
    `toolref: toolrefFetch({ fetch }) for ${endpoint} was given a new \`fetch\` function ${seen.count} times: ` +
      "each starts its state over, so requests sent through a new one each render are never edits. " +
      "Define the fetch once, at module level, " +
      'not inline (docs/js.md, "State shared per endpoint")',
  );
}

/** How many endpoints have shared state now. */
export function sharedEndpoints(): number {
  return managers.size;
}

/** Forget every endpoint's state (a user who logs out; tests): the next requests start over. */
export function forgetSharedState(): void {
  closeChannels();
  for (const [key] of managers.entries()) managers.delete(key);
  for (const [key] of fetchesSeen.entries()) fetchesSeen.delete(key);
  warnedInline = false;
}
