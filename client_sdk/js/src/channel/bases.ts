/**
 * Bases named by stream on a channel (issue 39; Python's `toolref.websocket.bases`, byte for
 * byte): an edit's base travels as how many streams back the turn that made it went, one
 * byte, where its 16-byte id stood.
 *
 * The sender remembers which stream's answer head (status 200) named each recipe
 * (`Toolref-History`) and, where an edit's base is one made within the last `BASES_MOST`
 * streams, writes the turn's frame with the compact header's flags bit 2 and `varint(back)`
 * in place of the id; the receiver (the gateway's, `ToolRefMiddleware`'s channel) writes the
 * id back before the turn is served, or answers it busy where it forgot that stream (the
 * turn then goes over HTTP, as any busy one). Asked for on the upgrade (`BASES_HEADER: 1`)
 * and used only where the 101 grants it. Memory bounded: `BASES_KEPT` recipes.
 */

import { ID_BYTES, parseRecipeRef } from "../edits/recipe.js";
import { MEDIA_TYPE } from "../edits/wire.js";
import { varint, type Pairs } from "./frames.js";

export const BASES_HEADER = "toolref-channel-bases";
export const BASES_OFFER = "1";
/** Streams back a sender names a base by stream at most. */
export const BASES_MOST = 256;
/** Answer heads' recipes a side remembers. */
export const BASES_KEPT = 2 * BASES_MOST;
const COMPACT = new Set([4, 5, 7, 8]); // the compact headers' version bytes
const BASE = 1; // flags bit 0: a base by its id
const STREAM = 4; // flags bit 2: a base by stream
const HISTORY = "toolref-history";

const key = (id: Uint8Array): string => String.fromCharCode(...id); // 16 bytes as a map key

/** Whether the 101's headers grant bases by stream. */
export function basesKept(headers: readonly [string, string][]): boolean {
  return headers.some(([name, value]) => name.toLowerCase() === BASES_HEADER && value === BASES_OFFER);
}

function isEdit(headers: Pairs): boolean {
  return headers.some(([name, value]) => name.toLowerCase() === "content-type" && value.split(";")[0]!.trim().toLowerCase() === MEDIA_TYPE);
}

/** The sender's memory: the stream whose answer head named each recipe. */
export class SenderBases {
  private readonly streams = new Map<string, number>(); // recipe id -> the stream that made it

  /** Stream `stream`'s answer head came: the recipe it names remembered. */
  made(stream: number, status: number, headers: Pairs): void {
    if (status !== 200) return;
    const named = headers.find(([name]) => name.toLowerCase() === HISTORY);
    const id = named === undefined ? null : parseRecipeRef(named[1]);
    if (id === null) return;
    const found = key(id);
    this.streams.delete(found); // the latest stream, last in order
    this.streams.set(found, stream);
    if (this.streams.size > BASES_KEPT) this.streams.delete(this.streams.keys().next().value!);
  }

  /** `body` as stream `stream`'s frame carries it: an edit's base named by stream where one
   * of the last `BASES_MOST` made it, else as it is. */
  written(stream: number, headers: Pairs, body: Uint8Array): Uint8Array {
    if (body.length < 2 + ID_BYTES || !COMPACT.has(body[0]!) || (body[1]! & (BASE | STREAM)) !== BASE) return body;
    const made = this.streams.get(key(body.subarray(2, 2 + ID_BYTES)));
    if (made === undefined) return body;
    const back = stream - made;
    if (!(back > 0 && back < BASES_MOST) || !isEdit(headers)) return body;
    const count = varint(back);
    const out = new Uint8Array(body.length - ID_BYTES + count.length);
    out[0] = body[0]!;
    out[1] = (body[1]! & ~BASE) | STREAM;
    out.set(count, 2);
    out.set(body.subarray(2 + ID_BYTES), 2 + count.length);
    return out;
  }
}
