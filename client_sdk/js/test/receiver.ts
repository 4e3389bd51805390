// A scripted receiver of edits for the unit tests (no network): it reads an edit as the
// registry does (the header line, raw, zstd and gzip records, kept ranges, named pieces),
// keeps each recipe and its pieces, answers 409 missing-history / missing-pieces as the
// registry does, and hands the restored request to `reply`; a request as it is goes to
// `reply` too. It can forget everything (a registry restarted empty) or only its pieces.
import * as zlib from "node:zlib";
import { PIECE_MIN, entryOf, gunzip, headerLines, parsePieceRef, recipeRef, toHex, type Entry } from "../src/index.js";

export interface Arrived {
  readonly url: string;
  readonly headers: Headers;
  /** The bytes that travelled. */
  readonly wire: Uint8Array;
  /** The request as the app wrote it: restored from an edit, or as it came. */
  readonly restored: { headers: [string, string][]; body: Uint8Array };
  readonly edit: { line: Record<string, unknown>; records: number[] } | null;
}

export type Reply = (arrived: Arrived) => Response;

/** zlib's zstd (Node 22.15+; a Node without it never sends zstd records). */
const zstdDecompressSync = (zlib as unknown as { zstdDecompressSync: (data: Uint8Array) => Uint8Array }).zstdDecompressSync;

const json = (value: unknown): Record<string, unknown> => value as Record<string, unknown>;

function problem(status: number, slug: string, extra: Record<string, unknown> = {}): Response {
  return new Response(JSON.stringify({ type: `urn:toolref:problem:${slug}`, status, ...extra }), {
    status,
    headers: { "content-type": "application/problem+json", "Toolref-Edits": "2" },
  });
}

function join(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

export class Receiver {
  readonly recipes = new Map<string, Uint8Array[]>();
  readonly pieces = new Map<string, Uint8Array>();
  readonly arrived: Arrived[] = [];
  /** Answers `Toolref-Edits: 2` (false: a receiver that does not speak toolref). */
  speaks = true;
  /** Answers every edit 415 (a receiver that cannot apply edits now). */
  refuses = false;

  constructor(private readonly reply: Reply = () => new Response("data: {}\n\n", { headers: { "content-type": "text/event-stream" } })) {}

  forget(pieces = false): void {
    if (!pieces) this.recipes.clear();
    this.pieces.clear();
  }

  readonly fetch = (async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    const wire = new Uint8Array(await request.arrayBuffer());
    const media = request.headers.get("content-type") ?? "";
    if (media !== "application/vnd.toolref.edit") {
      const headers: [string, string][] = [];
      request.headers.forEach((value, name) => headers.push([name, value]));
      const arrived = { url: request.url, headers: request.headers, wire, restored: { headers, body: wire }, edit: null };
      this.arrived.push(arrived);
      const response = this.reply(arrived);
      if (this.speaks && request.headers.has("Toolref-Edits")) response.headers.set("Toolref-Edits", "2");
      return response;
    }
    if (this.refuses || !this.speaks) return problem(415, "unsupported-media-type");
    return this.apply(request, wire);
  }) as typeof fetch;

  private async apply(request: Request, wire: Uint8Array): Promise<Response> {
    const end = wire.indexOf(0x0a);
    const line = json(JSON.parse(new TextDecoder().decode(wire.subarray(0, end))));
    const base = line["b"] === null ? [] : this.recipes.get(line["b"] as string);
    if (base === undefined) return problem(409, "missing-history", { missingHistory: line["b"] });
    const segments: Uint8Array[] = [];
    const records: number[] = [];
    const missing: string[] = [];
    let at = end + 1;
    for (const op of line["o"] as unknown[]) {
      if (Array.isArray(op)) segments.push(...base.slice(op[0] as number, op[1] as number));
      else if (typeof op === "string") {
        const piece = this.pieces.get(toHex(parsePieceRef(op)!));
        if (piece === undefined) missing.push(op);
        else segments.push(piece);
      } else {
        const kind = wire[at++]!;
        records.push(kind);
        if (kind === 0) {
          segments.push(wire.slice(at, at + (op as number)));
          at += op as number;
          continue;
        }
        let size = 0;
        for (let shift = 0; ; shift += 7) {
          const byte = wire[at++]!;
          size += (byte & 0x7f) * 2 ** shift;
          if (!(byte & 0x80)) break;
        }
        const frame = wire.subarray(at, at + size);
        at += size;
        const data = kind === 1 ? new Uint8Array(zstdDecompressSync(frame)) : await gunzip(frame);
        if (data.length !== op) return problem(400, "malformed-body");
        segments.push(data);
      }
    }
    if (missing.length) return problem(409, "missing-pieces", { missingPieces: missing });
    if (at !== wire.length) return problem(400, "malformed-body");
    const entries: Entry[] = await Promise.all(segments.map(entryOf));
    const ref = await recipeRef(entries);
    this.recipes.set(ref, segments);
    for (const segment of segments) if (segment.length >= PIECE_MIN) this.pieces.set(toHex((await entryOf(segment)).bytes.subarray(1)), segment);
    const lines = headerLines(segments[0]!)!;
    const headers = lines.map(([name, value]): [string, string] => [name, value ?? request.headers.get(name) ?? "MISSING"]);
    const arrived = { url: request.url, headers: request.headers, wire, restored: { headers, body: join(segments.slice(1)) }, edit: { line, records } };
    this.arrived.push(arrived);
    const response = this.reply(arrived);
    response.headers.set("Toolref-History", ref);
    response.headers.set("Toolref-Edits", "2");
    return response;
  }
}

