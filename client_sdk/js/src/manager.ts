/**
 * `ToolReferenceManager`: send refs for payloads the server holds, and only the messages
 * after the longest history it confirmed; everything else in full (client_sdk/toolref/
 * rewriter.py and upload.py).
 *
 * The manager remembers the refs the server confirmed (`Toolref-References`, a JSON
 * answer's `toolReferences`; a confirmed `Toolref-History` head stands for every invocation
 * in it) and the histories it confirmed. A 409 `missing-refs` or `missing-history` and a 400
 * `dictionary-mismatch` are answered by resending, automatically, before the app sees any
 * answer. A server that never answers `Toolref-Protocol: 2` is never sent a ref or a history.
 */

import { COMPRESS_FROM, gzip } from "./compression.js";
import { marked } from "./conversation.js";
import { UsageError } from "./errors.js";
import { FORMATS, type FormatName } from "./formats/index.js";
import {
  CHECKPOINT_HEADER,
  COMPRESS_WINDOW,
  DICTIONARY_HEADER,
  HISTORY_HEADER,
  KEEP_HISTORY,
  checkpointOf,
  dictionary,
  historyRef,
  isHistoryRef,
  longestConfirmed,
  opening,
  primed,
  reach,
} from "./history.js";
import { KeptBodies, MAX_KEPT_BYTES } from "./kept.js";
import { LruMap } from "./memory.js";
import { checkOptions, type Spec } from "./options.js";
import {
  DICTIONARY_MISMATCH,
  JSON_TYPE,
  MISSING_HISTORY,
  MISSING_REFS,
  PROTOCOL_HEADER,
  PROTOCOL_REFS,
  REFERENCES_HEADER,
  mayResend,
} from "./protocol.js";
import { isRef } from "./ref.js";
import { Transcripts, transcribe, type Transcript } from "./transcript.js";
import { platformZstd, type Zstd } from "./zstd.js";

const encoder = new TextEncoder();

export interface ManagerOptions {
  /** The messages' format; detected (ai-sdk-v5 or ai-sdk-v4) when absent. */
  format?: FormatName | null;
  /** Where the messages sit in the request body. Default "messages". */
  messagesKey?: string;
  /** Ask the server to keep each conversation, and send only what follows a confirmed one. Default true. */
  historyRefs?: boolean;
  /** Compress request bodies (a continuation as zstd against its history where the platform
   * has it and the server keeps bodies, gzip otherwise): true always, false never,
   * null/absent once the server confirmed a history. */
  compress?: boolean | null;
  /** Refs remembered (LRU). Default 100,000 (about 6 MB). */
  maxRefs?: number;
  /** Confirmed histories remembered (LRU): one per live conversation is enough. Default 64. */
  maxHistories?: number;
  /** Conversations whose transcript is kept (LRU). Default 16; 0 prepares every turn from scratch. */
  maxConversations?: number;
  /** The most the transcripts hold together, roughly (UTF-16 text + overhead). Default 32 MiB. */
  maxConversationBytes?: number;
  /** The most the request bodies kept to compress against hold together. Default 16 MiB; 0 keeps none. */
  maxPriorBytes?: number;
}

/** What went over the wire, next to what full payloads would have cost. */
export interface Savings {
  requests: number;
  fallbacks: number;
  sentBytes: number;
  fullBytes: number;
  refsSent: number;
  historiesUsed: number;
}

/** One request's body and headers, as built for one attempt. */
export interface Upload {
  readonly body: Uint8Array;
  readonly headers: Record<string, string>;
  /** The history ref the body continues. */
  readonly continued: string | null;
  /** The ref the server should confirm for the whole conversation. */
  readonly head: string | null;
  readonly length: number;
  readonly refs: readonly string[];
  readonly used: number;
  /** The body as sent, before compression (what a server keeps with the history). */
  readonly plain?: Uint8Array;
  /** The conversation's opening (`history.opening`), when it has messages in a format. */
  readonly first?: string;
  /** The chain heads of its messages (to read a checkpoint the answer names). */
  readonly chain?: readonly Uint8Array[];
  /** A history of this conversation was confirmed that is no prefix of it (its last message
   * changed): from now on, the server is asked to keep checkpoints. */
  readonly rewound?: boolean;
}

/** The outcome of {@link ToolReferenceManager.send}: the answer kept, and what it cost. */
export interface Sent {
  readonly response: Response;
  /** UTF-8 bytes of the body as the app wrote it (full payloads, whole conversation). */
  readonly rawBytes: number;
  /** Bytes put on the wire, all attempts together. */
  readonly wireBytes: number;
  /** The history ref the server confirmed for this conversation, if it did. */
  readonly historyRef: string | null;
  /** The history the last attempt continued, if any. */
  readonly continued: string | null;
  readonly attempts: number;
  readonly refsSent: number;
}

/** Sends one attempt: `body` with `headers` (added to the caller's own). */
export type Post = (body: Uint8Array, headers: Record<string, string>) => Promise<Response>;

interface Turn {
  readonly messages: unknown[] | null; // null: no message list (sent as it is)
  readonly transcript: Transcript | null; // null: messages in no format the SDK reads
}

function positive(name: string, value: number, zero = false): number {
  if (!Number.isInteger(value) || value < (zero ? 0 : 1)) {
    throw new UsageError(`${name} is ${String(value)}; use a whole number of at least ${zero ? 0 : 1}`);
  }
  return value;
}

/** The manager's options and what each holds (checked: an unknown name fails with the nearest). */
export const MANAGER_OPTIONS: Spec = {
  format: "format",
  messagesKey: "string",
  historyRefs: "boolean",
  compress: "nullable-boolean",
  maxRefs: "integer",
  maxHistories: "integer",
  maxConversations: "integer",
  maxConversationBytes: "integer",
  maxPriorBytes: "integer",
};

/** Every manager option with its default, or a `UsageError` naming the option, the value
 * and the fix (the checks `toolrefFetch` runs when called, before any request). */
export function settle(options: ManagerOptions): Required<ManagerOptions> {
  if (options.format != null && !FORMATS.some((f) => f.name === options.format)) {
    throw new UsageError(
      `format ${JSON.stringify(options.format)} is not one the JS SDK reads; use one of ${FORMATS.map((f) => JSON.stringify(f.name)).join(", ")}, or omit it to have it detected`,
    );
  }
  const messagesKey = options.messagesKey ?? "messages";
  if (typeof messagesKey !== "string" || !messagesKey) {
    throw new UsageError(`messagesKey is ${JSON.stringify(messagesKey)}; name the body member holding the messages`);
  }
  return {
    format: options.format ?? null,
    messagesKey,
    historyRefs: options.historyRefs ?? true,
    compress: options.compress ?? null,
    maxRefs: positive("maxRefs", options.maxRefs ?? 100_000),
    maxHistories: positive("maxHistories", options.maxHistories ?? 64),
    maxConversations: positive("maxConversations", options.maxConversations ?? 16, true),
    maxConversationBytes: positive("maxConversationBytes", options.maxConversationBytes ?? 32 << 20),
    maxPriorBytes: positive("maxPriorBytes", options.maxPriorBytes ?? MAX_KEPT_BYTES, true),
  };
}

export class ToolReferenceManager {
  readonly format: FormatName | null;
  readonly messagesKey: string;
  readonly historyRefs: boolean;
  readonly compress: boolean | null;
  readonly savings: Savings = { requests: 0, fallbacks: 0, sentBytes: 0, fullBytes: 0, refsSent: 0, historiesUsed: 0 };
  /** The backend has answered as protocol 2. */
  refsAccepted = false;
  /** The backend has confirmed a history. */
  historiesAccepted = false;
  private readonly confirmed: LruMap<string, true>;
  private readonly histories: LruMap<string, number>; // ref -> messages it holds
  private readonly transcripts: Transcripts;
  /** zstd with a dictionary on this platform (Node's zlib), or null: gzip. */
  private readonly zstd: Zstd | null = platformZstd();
  /** The server keeps each confirmed history's body (`Toolref-Dictionary: ?1`): a Python
   * middleware or gateway, which reads zstd against a history. Only such a server is sent
   * zstd (a JS backend reads gzip). */
  keepsBodies = false;
  private readonly kept: KeptBodies;
  private readonly openings: LruMap<string, string>; // history ref -> its conversation's opening
  /** Ask the server to keep each conversation's checkpoint (set once a last message changed). */
  checkpoints = false;

  constructor(options: ManagerOptions = {}) {
    checkOptions("new ToolReferenceManager", options, MANAGER_OPTIONS);
    const settled = settle(options);
    this.format = settled.format;
    this.messagesKey = settled.messagesKey;
    this.historyRefs = settled.historyRefs;
    this.compress = settled.compress;
    this.confirmed = new LruMap(settled.maxRefs);
    this.histories = new LruMap(settled.maxHistories);
    this.kept = new KeptBodies(settled.maxHistories, settled.maxPriorBytes);
    this.openings = new LruMap(settled.maxHistories);
    this.transcripts = new Transcripts(settled.maxConversations, settled.maxConversationBytes);
  }

  // --- memory --------------------------------------------------------------------

  confirm(refs: Iterable<string>): void {
    for (const ref of refs) if (isRef(ref)) this.confirmed.set(ref, true);
  }

  forget(refs: Iterable<string>): void {
    for (const ref of refs) this.confirmed.delete(ref);
  }

  isConfirmed(ref: string): boolean {
    return this.confirmed.has(ref);
  }

  /** Confirmed histories (ref, messages), least recently used first. */
  confirmedHistories(): [string, number][] {
    return this.histories.entries();
  }

  /** What the transcripts hold: conversations and approximate bytes. */
  memory(): { refs: number; histories: number; conversations: number; conversationBytes: number } {
    return {
      refs: this.confirmed.size,
      histories: this.histories.size,
      conversations: this.transcripts.count,
      conversationBytes: this.transcripts.size,
    };
  }

  /** Confirm the refs of an answer: `toolReferences`, or a register answer's `refs`. */
  learn(body: unknown): void {
    if (typeof body !== "object" || body === null) return;
    const references = (body as { toolReferences?: unknown }).toolReferences;
    if (typeof references === "object" && references !== null) this.confirm(Object.values(references) as string[]);
    const registered = (body as { refs?: unknown }).refs;
    if (Array.isArray(registered)) {
      this.confirm(registered.map((item) => (item as { ref?: unknown } | null)?.ref).filter(isRef));
    }
  }

  // --- one turn ------------------------------------------------------------------

  private turn(body: Record<string, unknown>): Turn {
    const messages = body[this.messagesKey];
    if (!Array.isArray(messages)) return { messages: null, transcript: null };
    try {
      const texts = messages.map((message) => JSON.stringify(message) ?? "null");
      const kept = this.transcripts.conversations ? this.transcripts.find(this.format, texts) : null;
      const transcript = transcribe(messages, texts, this.format, kept);
      if (this.transcripts.conversations) this.transcripts.keep(transcript, kept);
      return { messages, transcript: transcript.format === null ? null : transcript };
    } catch {
      return { messages, transcript: null }; // never let rewriting fail a conversation: sent as it is
    }
  }

  /** The upload of `body` for one attempt (pure but for compression, which is async).
   * Where the platform and the server can, a continuation is zstd against its history, and a
   * conversation sent whole against the body the server kept for it; `usePrior`: with the
   * body the server kept (false after it refused one). */
  async upload(
    body: Record<string, unknown>,
    usable: (ref: string) => boolean,
    useHistories: boolean,
    compress: boolean,
    usePrior = true,
  ): Promise<Upload> {
    const headers: Record<string, string> = { [PROTOCOL_HEADER]: String(PROTOCOL_REFS), "Content-Type": JSON_TYPE };
    const key = this.messagesKey;
    const { messages, transcript } = this.turn(body);
    if (messages === null || transcript === null || messages.length === 0) {
      return this.whole(body, headers, null, compress, [], 0, messages?.length ?? 0);
    }
    const refs = transcript.marks.flatMap((marks) => marks.filter((mark) => mark.site.argsKey !== null).map((mark) => mark.ref));
    const used = refs.filter(usable).length;
    const outgoing = (from: number) =>
      messages.slice(from).map((message, index) => {
        const marks = transcript.marks[from + index]!.filter((mark) => usable(mark.ref));
        return marked(message, marks);
      });
    if (!this.historyRefs) {
      return this.whole({ ...body, [key]: outgoing(0) }, headers, null, compress, refs, used, messages.length);
    }
    headers[HISTORY_HEADER] = KEEP_HISTORY;
    const head = historyRef(transcript.heads.at(-1)!);
    const candidates = useHistories ? this.histories.entries() : [];
    const pick = longestConfirmed(transcript.heads, candidates);
    const first = opening(messages, transcript.heads, (index, message) => marked(message, transcript.marks[index]!));
    const zstd = compress && this.keepsBodies ? this.zstd : null;
    const chain = transcript.heads;
    if (pick < 0) {
      // As Python's upload.prepare: a conversation whose last message changed (a moved cache
      // mark) asks for checkpoints, and goes against the body kept for it, when there is one.
      const rewound = this.openings.entries().some(([ref, opened]) => opened === first && this.histories.has(ref));
      if (this.checkpoints || rewound) headers[CHECKPOINT_HEADER] = KEEP_HISTORY;
      const same = zstd !== null && usePrior ? this.kept.newest(first) : undefined;
      if (zstd !== null && same !== undefined) {
        const plain = encoder.encode(JSON.stringify({ ...body, [key]: outgoing(0) }));
        headers[DICTIONARY_HEADER] = same[0];
        headers["Content-Encoding"] = "zstd";
        const content = await zstd(plain, same[1]);
        return { body: content, headers, continued: null, head, length: messages.length, refs, used, plain, first, chain, rewound };
      }
      const whole = await this.whole({ ...body, [key]: outgoing(0) }, headers, head, compress, refs, used, messages.length, first);
      return { ...whole, chain, rewound };
    }
    if (this.checkpoints) headers[CHECKPOINT_HEADER] = KEEP_HISTORY;
    const [ref, start] = candidates[pick]!;
    this.histories.set(ref, start); // in use: least recently used no more
    const usedAfter = new Set(transcript.marks.slice(start).flat().map((mark) => mark.ref).filter(usable)).size;
    if (zstd !== null) {
      // As Python's upload.prepare: the new messages against the history (and the body the
      // server kept for it, this conversation's only), the ref in the header.
      const plain = encoder.encode(JSON.stringify({ ...body, [key]: outgoing(start) }));
      let window = dictionary(transcript.texts.slice(0, start), COMPRESS_WINDOW);
      const prior = usePrior ? this.kept.get(ref, first) : undefined;
      if (prior !== undefined) {
        window = primed(window, prior);
        headers[DICTIONARY_HEADER] = ref;
      }
      const tail = window.length > reach(plain.length) ? window.slice(window.length - reach(plain.length)) : window;
      headers[HISTORY_HEADER] = ref;
      headers["Content-Encoding"] = "zstd";
      const content = await zstd(plain, tail);
      return { body: content, headers, continued: ref, head, length: messages.length, refs, used: usedAfter, plain, first, chain };
    }
    const plain = encoder.encode(JSON.stringify({ ...body, historyRef: ref, [key]: outgoing(start) }));
    let content: Uint8Array = plain;
    if (compress && content.length >= COMPRESS_FROM) {
      content = await gzip(content);
      headers["Content-Encoding"] = "gzip";
    }
    return { body: content, headers, continued: ref, head, length: messages.length, refs, used: usedAfter, plain, first, chain };
  }

  private async whole(
    body: Record<string, unknown>,
    headers: Record<string, string>,
    head: string | null,
    compress: boolean,
    refs: readonly string[],
    used: number,
    length: number,
    first?: string,
  ): Promise<Upload> {
    const plain = encoder.encode(JSON.stringify(body));
    let content: Uint8Array = plain;
    if (compress && content.length >= COMPRESS_FROM) {
      content = await gzip(content);
      headers["Content-Encoding"] = "gzip";
    }
    return { body: content, headers, continued: null, head, length, refs, used, plain, ...(first === undefined ? {} : { first }) };
  }

  // --- sending with fallback -----------------------------------------------------

  /**
   * Send `body` (an object holding the messages) through `post`, with refs, history refs and
   * the resends a 409 missing-refs / missing-history or a 400 dictionary-mismatch asks for.
   * The response handed back is unread (streams stay streams), except a problem answer the
   * manager had to read to decide, which comes back as a new Response with the same body.
   */
  async send(body: Record<string, unknown>, post: Post, rawBytes?: number): Promise<Sent> {
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new UsageError("the request body must be a JSON object holding the messages; got " + typeof body);
    }
    const raw = rawBytes ?? encoder.encode(JSON.stringify(body)).length;
    let attempt = 0;
    let attempts = 0;
    let wire = 0;
    let refsSent = 0;
    let useHistories = true;
    let plain = false; // after a 400 dictionary-mismatch of a body with no kept one: uncompressed
    let usePrior = this.kept.turn(); // after a kept body was refused: none for a while
    for (;;) {
      const usable =
        !this.refsAccepted || attempt === 2 ? () => false : (ref: string) => this.confirmed.has(ref);
      const compress = !plain && (this.compress ?? this.historiesAccepted);
      const upload = await this.upload(body, usable, useHistories, compress, usePrior);
      if (upload.rewound === true) this.checkpoints = true;
      let response = await post(upload.body, upload.headers);
      attempts += 1;
      wire += upload.body.length;
      refsSent += upload.used;
      this.savings.requests += 1;
      this.savings.sentBytes += upload.body.length;
      this.savings.fullBytes += raw;
      this.savings.refsSent += upload.used;
      if (upload.continued !== null) this.savings.historiesUsed += 1;
      let problem: Record<string, unknown> | null = null;
      if (mayResend(response.status, response.headers.get("content-type"))) {
        const text = await response.text();
        problem = parseObject(text);
        response = new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
      }
      const kind = problem?.["type"];
      if (upload.continued !== null && kind === MISSING_HISTORY) {
        // Expired or evicted: forget it and send the whole conversation.
        this.savings.fallbacks += 1;
        this.histories.delete(upload.continued);
        this.openings.delete(upload.continued);
        useHistories = false;
        continue;
      }
      if (kind === DICTIONARY_MISMATCH && upload.headers[DICTIONARY_HEADER] !== undefined && usePrior) {
        // The server does not hold the body it kept (another replica, or evicted): this one
        // against the history alone.
        this.savings.fallbacks += 1;
        this.kept.refused(upload.headers[DICTIONARY_HEADER]);
        usePrior = false;
        continue;
      }
      if (kind === DICTIONARY_MISMATCH && upload.headers["Content-Encoding"] !== undefined && !plain) {
        // The server could not inflate the body as sent: once more, uncompressed.
        this.savings.fallbacks += 1;
        plain = true;
        continue;
      }
      if (response.status === 409 && kind === MISSING_REFS && upload.used > 0 && attempt < 2) {
        // Refs expired or were evicted: forget them and send those payloads in full; if that
        // is refused too, the last attempt sends every payload in full.
        const missing = problem?.["missingRefs"];
        this.forget(Array.isArray(missing) ? missing.map(String) : []);
        this.savings.fallbacks += 1;
        attempt += 1;
        continue;
      }
      const confirmed = this.learnFrom(response, upload);
      return { response, rawBytes: raw, wireBytes: wire, historyRef: confirmed, continued: upload.continued, attempts, refsSent };
    }
  }

  /** Learn from an answer's headers; the confirmed history ref, if the server confirmed one. */
  learnFrom(response: Response, upload: Upload): string | null {
    this.refsAccepted = response.headers.get(PROTOCOL_HEADER) === String(PROTOCOL_REFS);
    if (!this.refsAccepted || response.status >= 400) return null;
    const references = response.headers.get(REFERENCES_HEADER);
    if (references) this.learn({ toolReferences: parseObject(references) });
    const confirmed = response.headers.get(HISTORY_HEADER);
    // Only a head this client computed itself: a server that chained the messages
    // differently is never sent a ref the two would disagree on.
    if (confirmed !== null && isHistoryRef(confirmed) && confirmed === upload.head) {
      this.confirm(upload.refs); // every invocation of a confirmed history is held
      this.historiesAccepted = true;
      const refsKept = [confirmed];
      const checkpoint = checkpointOf(response.headers.get(CHECKPOINT_HEADER), upload.chain);
      if (checkpoint !== null) {
        this.remember(checkpoint[0], checkpoint[1], upload.first);
        refsKept.push(checkpoint[0]);
      }
      this.remember(confirmed, upload.length, upload.first);
      if (upload.headers[DICTIONARY_HEADER] !== undefined) this.kept.accepted();
      if (response.headers.get(DICTIONARY_HEADER) === KEEP_HISTORY) {
        this.keepsBodies = true;
        const { plain, first } = upload;
        const zstdOn = this.zstd !== null && this.compress !== false; // only zstd bodies use it
        if (zstdOn && plain !== undefined && first !== undefined) this.kept.keep(refsKept, first, plain);
      }
      return confirmed;
    }
    return null;
  }

  private remember(ref: string, length: number, first: string | undefined): void {
    if (first !== undefined) this.openings.set(ref, first);
    this.histories.set(ref, length);
  }

  /** Confirm the refs a successful protocol-2 JSON answer lists in `toolReferences`. */
  learnAnswer(status: number, headers: Headers, body: unknown): void {
    if (headers.get(PROTOCOL_HEADER) !== String(PROTOCOL_REFS) || status >= 400) return;
    this.learn(body);
  }
}

function parseObject(text: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
