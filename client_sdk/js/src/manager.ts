/**
 * `ToolReferenceManager`: one endpoint's sender (docs/js.md, "What is sent"; the wire contract
 * of issue 38). Until the receiver answered `Toolref-Edits`, a request goes as it is, the exact
 * bytes the app gave, with the offer `Toolref-Edits: 6`; once it did, every request goes as an
 * edit of version min(N, 5) through the manager's `Editor` (edits/editor.ts): the first of a
 * conversation with no base, the later ones against the recipe the receiver confirmed with
 * `Toolref-History` (a first one not worth an edit, `notWorthAnEdit`: smaller as it is, and no
 * later turn could be an edit of it, goes as it is with the offer, as Python's); a 409 missing-history / missing-pieces (or a 400 dictionary-mismatch) is
 * resent by the Editor (at most 3 times, the last everything inline) before the app sees any
 * answer; a 413 `too-many-items` (a receiver whose TOOLREF_MAX_EDIT_ENTRIES is below the default; a backend's 415 naming
 * it) sends the request as it is, the limit kept (edits/entries.ts, said once), no pause: a later request past it goes as it is at
 * once; any other 415 to an edit (the receiver cannot apply edits, or not now) sends the request as
 * it is, and the endpoint's requests as they are for a while (`pausedUntil`: 1 s, doubled
 * after each further 415, at most 30 s), offering edits. An answer to an edit that names neither
 * a recipe nor `Toolref-Edits` and is no toolref problem comes from no receiver of edits: what
 * follows is stranger.ts's rule (Python's `toolref.sending.stranger`): forgotten, paused,
 * sent again as it is when refused unread (a 4xx but 429, a 500), a proxy's 502-504 the app's.
 * The answer is handed back unread (streams stay streams), but for a problem it had to
 * read to decide (at most `MAX_PROBLEM_BYTES` of it, as Python reads one, within
 * `PROBLEM_READ_MS`: refusals.ts; handed back byte for byte).
 */

import { tapFor } from "./edits/answer.js";
import { Editor, asItCameBytes, notWorthAnEdit, type Edit } from "./edits/editor.js";
import { Entries, tooManyItems, tooManyLearnt } from "./edits/entries.js";
import { DEFAULT_MAX_BYTES, DEFAULT_MAX_RECIPES } from "./edits/recipes.js";
import { Said, unreadableSaid } from "./edits/said.js";
import { MEDIA_TYPE, VERSION, writtenAs } from "./edits/wire.js";
import type { BodyCut } from "./edits/segments.js";
import { UsageError } from "./errors.js";
import { checkOptions, type Spec } from "./options.js";
import { discard, readProblem } from "./refusals.js";
import { endpointShown } from "./shown.js";
import { FIRST_PAUSE_MS, LONGEST_PAUSE_MS, UNREADABLE_LONGEST_MS, UNREADABLE_PAUSE_MS, resent, strangerPause } from "./stranger.js";
import { EDITS_HEADER, HISTORY_HEADER, PROBLEM_TYPE, TOOLREF_PREFIX, isToolrefProblem, mayResend, problemType } from "./protocol.js";

const encoder = new TextEncoder();

export interface ManagerOptions {
  /** Where the messages sit in the request body. Default "messages". */
  messagesKey?: string;
  /** Recipes the receiver confirmed, kept to send later requests against (LRU). Default 64. */
  maxRecipes?: number;
  /** The most bytes those recipes hold together. Default 64 MiB. */
  maxRecipeBytes?: number;
}

/** The manager's options and what each holds (checked: an unknown name fails with the nearest). */
export const MANAGER_OPTIONS: Spec = { messagesKey: "string", maxRecipes: "integer", maxRecipeBytes: "integer" };

const HISTORY_FIX = "requests are edits now (docs/js.md, \"What is sent\"), which need no such option: remove it";
/** Options of the history-ref protocol (retired in 0.3.0) and the fix each is told. */
export const RETIRED_OPTIONS: Readonly<Record<string, string>> = {
  format: "edits cut any JSON body and need no format (messagesKey names where the messages are): remove it",
  historyRefs: HISTORY_FIX,
  compress: "each new segment is compressed alone when that is smaller, always: remove it",
  maxRefs: `${HISTORY_FIX}; maxRecipes and maxRecipeBytes bound what is kept`,
  maxHistories: `${HISTORY_FIX}; maxRecipes bounds the recipes kept`,
  maxConversations: HISTORY_FIX,
  maxConversationBytes: `${HISTORY_FIX}; maxRecipeBytes bounds what is kept`,
  maxPriorBytes: `${HISTORY_FIX}; maxRecipeBytes bounds what is kept`,
};

/** What went over the wire, next to what the requests weigh as the app wrote them. */
export interface Savings {
  requests: number;
  /** Requests sent as edits. */
  edits: number;
  /** Attempts resent after a miss (or a 415). */
  resends: number;
  rawBytes: number;
  wireBytes: number;
}

/** The outcome of {@link ToolReferenceManager.send}: the answer kept, and what it cost. */
export interface Sent {
  readonly response: Response;
  /** Bytes of the body as the app wrote it. */
  readonly rawBytes: number;
  /** Body bytes put on the wire, all attempts together. */
  readonly wireBytes: number;
  /** The recipe the receiver confirmed (`Toolref-History: tb_...`), or null. */
  readonly historyRef: string | null;
  /** The recipe the last attempt was an edit of, or null (as it is, or no base). */
  readonly continued: string | null;
  readonly attempts: number;
  /** The last attempt was an edit. */
  readonly edit: boolean;
  /** Segments of the request the receiver held already, sent by reference (kept or named). */
  readonly reused: number;
}

/** Sends one attempt: `body` with `headers` (toolref's: the offer, or the edit's media type);
 * `edit`: the body is an edit (the caller sends only the request's credentials and toolref's
 * own headers beside it, as Python's `Sender` does: the others are in the edit). */
export type Post = (body: Uint8Array, headers: Record<string, string>, edit: boolean) => Promise<Response>;

/** Every manager option with its default, or a `UsageError` naming the option, the value and
 * the fix (the checks `toolrefFetch` runs when called, before any request). */
export function settle(options: ManagerOptions): Required<ManagerOptions> {
  const messagesKey = options.messagesKey ?? "messages";
  if (typeof messagesKey !== "string" || !messagesKey) {
    throw new UsageError(`messagesKey is ${JSON.stringify(messagesKey)}; name the body member holding the messages`);
  }
  const settled = { messagesKey, maxRecipes: options.maxRecipes ?? DEFAULT_MAX_RECIPES, maxRecipeBytes: options.maxRecipeBytes ?? DEFAULT_MAX_BYTES };
  for (const name of ["maxRecipes", "maxRecipeBytes"] as const) {
    const value = settled[name];
    if (!Number.isSafeInteger(value) || value < 1) throw new UsageError(`${name} is ${String(value)}; use a whole number of at least 1`);
  }
  return settled;
}

/** The request's headers as segment 0 takes them: end to end (no hop-by-hop header, none the
 * `Connection` header names, no `proxy-*`), none of toolref's own. */
export function segmentHeaders(headers: Headers): [string, string][] {
  const named = new Set((headers.get("connection") ?? "").split(",").map((token) => token.trim().toLowerCase()));
  const hop = ["connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"];
  const pairs: [string, string][] = [];
  headers.forEach((value, name) => {
    const low = name.toLowerCase();
    if (!hop.includes(low) && !named.has(low) && !low.startsWith("proxy-") && !low.startsWith(TOOLREF_PREFIX)) pairs.push([name, value]);
  });
  return pairs;
}

/** Toolref's 503 when a receiver's store is down (Python's `answers.store_down`). */
const STORE_DOWN = problemType("store-unavailable");
/** Toolref's 400 to an edit whose bytes it cannot read (a receiver rolled back). */
const MALFORMED_BODY = problemType("malformed-body");
const UNSUPPORTED_MEDIA_TYPE = problemType("unsupported-media-type");

export class ToolReferenceManager {
  readonly messagesKey: string;
  readonly editor: Editor;
  /** The edit version to write to the receiver, by every sender's rule (edits/said.ts, Python's
   * `toolref.sending.said`) from what it said recently: each answer's `Toolref-Edits`, and a
   * 400 `malformed-body` to an edit (rolled back); 0 until it said, or once forgotten. */
  get edits(): number {
    return this.said.version(performance.now()) ?? 0;
  }
  /** Set by the app: 0 forgets the receiver (requests go as they are, with the offer, until an
   * answer says it reads edits); a version is written from now on as one the receiver said
   * now (relearnt from its answers, as any said; one above `VERSION` as `VERSION`). A
   * `UsageError` for anything else (negative, fractional, not a number). */
  set edits(version: number) {
    if (!Number.isSafeInteger(version) || version < 0) {
      throw new UsageError(
        `manager.edits is ${String(version)}; set 0 (forget the receiver: requests go as they are, with the offer) or an edits version, a whole number from 1 (one above ${VERSION} is written as ${VERSION})`,
      );
    }
    this.forget();
    if (version > 0) this.said.said(version, performance.now());
  }
  /** The versions the receiver said (its `Toolref-Edits`, a refusal's), each with when. */
  private said = new Said();
  /** The most entries an edit holds, from the receiver's 413 `too-many-items` (entries.ts). */
  private readonly entries = new Entries();
  /** After a 415 to an edit (the receiver cannot apply one now), requests go as they are
   * until `pausedUntil` (`performance.now()` ms: a monotonic clock, so a wall clock set back
   * cannot stretch a pause): 1 s after a first 415, doubled after each further one,
   * at most 30 s, reset once an edit is answered (as `toolref.sending.pause`). */
  pausedUntil = 0;
  pauseMs = 0;
  /** Pauses begun so far: a 415 to an edit sent before the latest began is the same outage
   * seen again by a request that was in flight, not a further refusal (no doubling). */
  private pauses = 0;
  /** Toolref's headers never reach this endpoint: a browser refused them (a cross-origin
   * request whose CORS preflight does not allow `Toolref-Edits`, or the edit's media type),
   * so requests go as the app wrote them, with no offer (see {@link ToolReferenceManager.send}'s
   * `crossOrigin`). Until the page reloads or `forgetSharedState()`. */
  bare = false;
  /** An attempt carrying the offer, and one carrying an edit, got an answer: their headers
   * pass the browser's checks, so a later failure to send one is the network's. */
  private offerPassed = false;
  private editPassed = false;
  readonly savings: Savings = { requests: 0, edits: 0, resends: 0, rawBytes: 0, wireBytes: 0 };

  constructor(options: ManagerOptions = {}) {
    checkOptions("new ToolReferenceManager", options, MANAGER_OPTIONS, RETIRED_OPTIONS);
    const settled = settle(options);
    this.messagesKey = settled.messagesKey;
    this.editor = new Editor(settled.maxRecipes, settled.maxRecipeBytes);
  }

  /**
   * Send `body` (the request's, as the app wrote it: bytes, text, or a value to write as
   * JSON) through `post`: as it is with the offer, or as an edit (see the module docstring).
   * `headers`: the request's own (what segment 0 holds). `cut`: the body's cut, when the
   * caller made it already. `path`: the request's URL path, whose streamed answer (an LLM
   * API's: edits/answer.ts) is read as it passes, the dictionary of the next edit.
   * `crossOrigin`: `post` sends from a browser page to another origin, where toolref's headers
   * need the receiver's CORS to allow them: an attempt carrying them that fails with a
   * `TypeError` (fetch's "Failed to fetch", a refused preflight) before any such attempt was
   * answered is sent again as the app wrote it, and the endpoint's requests go so from then on
   * (`bare`); the app sees the answer the request would have had without toolref.
   * `signal`: the caller's (fetch's `signal`): it ends the SDK's own reads of a refusal and
   * any further attempt, its reason thrown, even where `post` ignores it.
   */
  async send(
    body: Uint8Array | string | object,
    post: Post,
    headers: HeadersInit = { "content-type": "application/json" },
    cut?: BodyCut | null,
    path?: string,
    crossOrigin = false,
    signal?: AbortSignal,
  ): Promise<Sent> {
    // Bytes are copied (into a plain Uint8Array: a Buffer's `slice` is a view) unless the
    // caller cut them already (it copied them then): they are read until the answer, resends
    // included, and the caller may reuse its buffer meanwhile.
    const data =
      body instanceof Uint8Array ? (cut == null ? new Uint8Array(body) : body) : encoder.encode(typeof body === "string" ? body : JSON.stringify(body));
    const pairs = segmentHeaders(new Headers(headers));
    const counted = { attempts: 0, wire: 0, resends: 0 };
    const sent = await this.exchange(data, pairs, crossOrigin ? this.guarded(post, data) : post, counted, cut, path, crossOrigin, signal);
    this.savings.requests += 1;
    this.savings.rawBytes += data.length;
    this.savings.wireBytes += counted.wire;
    this.savings.resends += counted.resends; // attempts after a miss, as Python's `Savings`
    if (sent.edit) this.savings.edits += 1;
    return sent;
  }

  private async exchange(
    data: Uint8Array,
    pairs: [string, string][],
    post: Post,
    counted: { attempts: number; wire: number; resends: number },
    cut?: BodyCut | null,
    path?: string,
    crossOrigin = false,
    signal?: AbortSignal,
  ): Promise<Sent> {
    const sent = (response: Response, edit: Edit | null, historyRef: string | null = null): Sent => ({
      response,
      rawBytes: data.length,
      wireBytes: counted.wire,
      historyRef,
      continued: edit?.base ?? null,
      attempts: counted.attempts,
      edit: edit !== null,
      reused: edit === null ? 0 : edit.ops.reduce((sum, op) => sum + (op.op === "keep" ? op.end - op.start : op.op === "named" ? 1 : 0), 0),
    });
    const plain = async (): Promise<Sent> => {
      signal?.throwIfAborted(); // a request as it is after a refusal: not sent once the caller left
      const response = await post(data, this.bare ? {} : { [EDITS_HEADER]: String(VERSION) }, false);
      counted.attempts += 1;
      counted.wire += data.length;
      this.learn(response);
      return sent(response, null);
    };
    const version = this.edits; // the bytes written for it: a refusal says the one below
    if (this.bare || version === 0 || performance.now() < this.pausedUntil) return plain();
    this.editor.version = version;
    let edit = await this.editor.prepare(pairs, data, this.messagesKey, cut, this.entries.most(performance.now()));
    // Read again after the await: while the edit was made (hashing, compressing), another
    // request may have found the endpoint paused or reading no edits, or a refusal said a
    // version below the bytes this one is written in; it is not sent as an edit already known
    // to be refused.
    const current = this.edits; // another turn may have lowered it meanwhile
    if (edit === null || this.bare || current === 0 || writtenAs(current) < writtenAs(version) || performance.now() < this.pausedUntil) return plain();
    // A tiny first turn: smaller as it is, and no later turn's base (Python's `Sender` alike).
    if (notWorthAnEdit(edit, asItCameBytes(edit, [[EDITS_HEADER, String(VERSION)]]))) return plain();
    for (;;) {
      const pauses = this.pauses; // the pauses begun before this attempt went
      signal?.throwIfAborted(); // a resend: not sent once the caller left
      let response = await post(edit.body, { "Content-Type": MEDIA_TYPE }, true);
      counted.attempts += 1;
      if (this.bareAnswers.has(response)) {
        counted.wire += data.length; // the edit never left the browser: the request as it is did
        return sent(response, null);
      }
      counted.wire += edit.body.length;
      const { status } = response;
      const where = response.url ? endpointShown(response.url) : path || "this endpoint"; // before a problem read rebuilds it
      const named = response.headers.has(HISTORY_HEADER);
      this.learn(response);
      const told = response.headers.has(EDITS_HEADER);
      if (crossOrigin && told && !named && status >= 200 && status < 300) this.historyHidden();
      const isProblem = (response.headers.get("content-type") ?? "").startsWith(PROBLEM_TYPE);
      if (status === 415 && !named) {
        // The edit not applied (an app's own 415 is marked with the recipe): this request as
        // it is, and the offer again; paused when a receiver of edits refused it (toolref's
        // problem, or `Toolref-Edits`: its registry down), forgotten too when none did (a
        // framework's own 415: a backend rolled back), as Python's `Sender` does; a backend's
        // naming its registry's 413 too-many-items is that refusal (no pause). It is read to its
        // end (cancelled past `DISCARD_BYTES` or `PROBLEM_READ_MS`), not cancelled at once: a
        // cancelled answer is a failed request to a browser's tools, its connection not reused.
        const read = isProblem ? await readProblem(response, signal) : { whole: null, response };
        if (read.whole === null) await discard(read.response, signal);
        const refusal = read.whole === null ? null : parseObject(read.whole);
        if (tooManyItems(status, refusal)) return this.tooMany(edit, refusal, where, response, plain);
        // a backend's naming its registry's 400 malformed-body (rolled back): that refusal, no pause
        if (refusal?.["type"] === UNSUPPORTED_MEDIA_TYPE && refusal["cause"] === MALFORMED_BODY) return this.unreadable(version, pauses, where, refusal, response, plain);
        if (!told && !isToolrefProblem(refusal)) this.stranger(status, pauses); // a framework's own 415
        else this.refused(pauses);
        return plain();
      }
      // A problem is read (as Python's `may_resend` reads it, at most `MAX_PROBLEM_BYTES`):
      // one the editor resends on, and a 4xx one from no toolref receiver, which tells
      // whether it is toolref's. A longer one is none of toolref's: handed on, every byte.
      let whole: Uint8Array | null = null;
      if (mayResend(status, response.headers.get("content-type")) || (isProblem && !named && ((status >= 400 && status < 500 && !told) || status === 503 || status === 413))) {
        ({ whole, response } = await readProblem(response, signal));
      }
      const problem = whole === null ? null : parseObject(whole);
      if (status === 503 && !named && problem?.["type"] === STORE_DOWN) {
        // The receiver's store down, the edit's base not held where it went: not applied, as
        // a 415; this request as it is, edits paused (Python's `answers.store_down`).
        this.refused(pauses);
        return plain();
      }
      if (!named && !told && !isToolrefProblem(problem)) {
        // No receiver of edits answered it (a backend rolled back, an app that could not parse
        // the edit, a framework's own problem+json, a proxy in front): stranger.ts's rule.
        if (this.stranger(status, pauses)) {
          if (whole === null) await discard(response, signal);
          return plain();
        }
        if (status >= 400) return sent(whole === null ? response : new Response(whole as BodyInit, { status, statusText: response.statusText, headers: response.headers }), edit);
      }
      if (!named && tooManyItems(status, problem)) return this.tooMany(edit, problem, where, response, plain);
      if (status === 400 && !named && problem?.["type"] === MALFORMED_BODY) return this.unreadable(version, pauses, where, problem, response, plain);
      if (problem !== null) {
        const following = await this.editor.onMiss(edit, status, problem);
        if (following !== null) {
          edit = following;
          counted.resends += 1; // a miss resent (not a request sent as it is after a refusal)
          continue;
        }
      }
      if (whole !== null) response = new Response(whole as BodyInit, { status, statusText: response.statusText, headers: response.headers }); // the bytes as they came
      const history = response.headers.get(HISTORY_HEADER);
      this.pauseMs = 0; // answered: the next 415 pauses briefly again
      if (!this.editor.confirm(edit, history)) return sent(response, edit);
      const ref = edit.ref;
      const read = path === undefined ? response : readAnswer(response, path, (answer) => this.editor.answered(ref, answer), this.editor.version);
      return sent(read, edit, ref);
    }
  }

  /** `post` for a cross-origin request (see `send`): an attempt carrying toolref's headers
   * (the offer, or an edit) that fails with a `TypeError` before any attempt of its kind was
   * answered may be the browser refusing them (CORS), which no answer tells apart from a
   * network failure: the request goes again as the app wrote it (`data`, its own headers:
   * the request the app's fetch would have made), answered as one sent as it is; only once
   * that is answered are the endpoint's requests sent so from then on (`bare`). A failure
   * again is the app's to see. An edit answered so counts as sent as it is (`bareAnswers`). */
  private guarded(post: Post, data: Uint8Array): Post {
    return async (body, headers, edit) => {
      const carries = edit || EDITS_HEADER in headers;
      try {
        const response = await post(body, headers, edit);
        if (edit) this.editPassed = true;
        else if (carries) this.offerPassed = true;
        return response;
      } catch (error) {
        if (!carries || !(error instanceof TypeError) || (edit ? this.editPassed : this.offerPassed)) throw error;
        const response = await post(data, {}, false);
        if (!this.bare) {
          this.bare = true;
          this.forget();
          console.warn(
            "toolref: a request carrying toolref's headers failed where the same request without them was answered: " +
              "this page's origin is not allowed to send them (CORS), so requests go as they are, with no savings. " +
              "Allow the request headers Toolref-Edits and Content-Type, and expose Toolref-Edits, Toolref-History, " +
              "Toolref-Savings and Toolref-Channel, in the backend's CORS settings (docs/js.md, \"Cross-origin pages\")",
          );
        }
        this.bareAnswers.add(response);
        return response;
      }
    };
  }

  /** An edit to another origin answered 2xx with `Toolref-Edits` readable but no
   * `Toolref-History`: every receiver of edits names the recipe it kept, so the page's CORS
   * hides it (exposes `Toolref-Edits` only), and no edit ever has a base (each sends every
   * segment again). Said once, naming the header to expose. */
  private historyHidden(): void {
    if (this.historyWarned) return;
    this.historyWarned = true;
    console.warn(
      "toolref: an edit to another origin was answered with Toolref-Edits but no Toolref-History: the backend's CORS " +
        "does not expose Toolref-History to this page, so no edit is sent against the last one and each sends the whole " +
        "conversation again (compressed). Expose Toolref-History (with Toolref-Edits, Toolref-Savings and Toolref-Channel) " +
        'in the backend\'s CORS settings (docs/js.md, "Cross-origin pages")',
    );
  }

  private historyWarned = false;

  /** An edit written for `version` was refused as unreadable (`problem`, read from `response`)
   * and the version stepped down (to `written`; null: none lower, edits paused): said once per
   * version refused, in Python's `Sender`'s words (`unreadableSaid`, edits/said.ts). */
  private unreadableSaid(where: string, version: number, written: number | null, problem: Record<string, unknown>, response: Response): void {
    if (this.unreadableWarned.has(version)) return;
    this.unreadableWarned.add(version);
    console.warn(unreadableSaid(where, version, written, problem["detail"], response.headers.get("x-request-id"), response.status));
  }

  /** The versions whose refusal as unreadable was said (`unreadableSaid`): at most one each. */
  private readonly unreadableWarned = new Set<number>();

  /** Answers to an edit that went as the app wrote it instead (`guarded`): sent as it is. */
  private readonly bareAnswers = new WeakSet<Response>();

  /** An edit written for `version` refused as unreadable (400 malformed-body; a backend's 415
   * naming its registry's): a receiver rolled back to a version that does not read its bytes.
   * The version below them said (no lower one: not a rollback, edits paused), and this request
   * as it is, whose answer says what it reads (Python's `Sender`, the relay alike). An
   * endpoint another turn forgot meanwhile stays forgotten (Python's `Sender` alike). */
  private unreadable(version: number, pauses: number, where: string, problem: Record<string, unknown>, response: Response, plain: () => Promise<Sent>): Promise<Sent> {
    if (this.edits !== 0) {
      const stepped = this.said.unreadable(version, performance.now());
      if (!stepped) this.refused(pauses, UNREADABLE_PAUSE_MS, UNREADABLE_LONGEST_MS);
      this.unreadableSaid(where, version, stepped ? this.edits : null, problem, response);
    }
    return plain();
  }

  /** More entries than the receiver takes: as it is, the limit kept, said once (`entries`, as Python's `Sender`), no pause. */
  private tooMany(edit: Edit, problem: Record<string, unknown> | null, where: string, response: Response, plain: () => Promise<Sent>): Promise<Sent> {
    tooManyLearnt(this.entries, edit.cut.entries.length, problem, where, response);
    return plain();
  }

  /** An edit refused (415, or 503 store-unavailable): edits paused 1 s, doubled after each
   * further refusal, at most 30 s. `pauses`: the pauses begun when the edit was sent; one
   * begun since (a request in flight alongside it was refused first) already counts this
   * outage, so the many edits a server has in flight when its receiver's registry goes down
   * pause it once, not 2^n s. */
  private refused(pauses: number, first = FIRST_PAUSE_MS, longest = LONGEST_PAUSE_MS): void {
    if (pauses !== this.pauses) return;
    this.pauses += 1;
    this.pauseMs = Math.min(Math.max(this.pauseMs * 2, first), longest);
    this.pausedUntil = performance.now() + this.pauseMs;
  }

  /** The edit version an answer says its receiver reads, if it says one: 1-3 ASCII digits,
   * at least 1 (`4.0`, `0x4`, `+4`, `1e0` say nothing), as Python's `Sender._told` reads it. */
  private learn(response: Response): void {
    this.said.said(editsSaid(response), performance.now());
  }

  /** An answer to an edit from no receiver of edits (stranger.ts): the endpoint forgotten,
   * edits paused as its status says; whether the request goes again as it is. */
  private stranger(status: number, pauses: number): boolean {
    this.forget();
    const pause = strangerPause(status);
    if (pause !== null) this.refused(pauses, ...pause);
    return resent(status);
  }

  /** The endpoint forgotten: no receiver of edits answers there (its requests go as they are,
   * with the offer, until one says it reads them). */
  private forget(): void {
    this.said = new Said();
  }
}

/** The edits version an answer's `Toolref-Edits` says (1-3 ASCII digits, as Python's
 * `edits_said` reads it); null when it says none. */
function editsSaid(response: Response): number | null {
  const said = (response.headers.get(EDITS_HEADER) ?? "").trim();
  return /^[0-9]{1,3}$/.test(said) ? Number(said) : null;
}

/** `response`, its streamed answer read as it passes on (edits/answer.ts `tapFor`): told to
 * `answered` once whole (the receiver kept the same bytes). As it is when it cannot be an
 * answer, or one of a format a receiver of `version` keeps none of, or of the lower version
 * the answer says (`Toolref-Edits`: the receiver that streamed it, a replica of 5 among
 * others of 6, kept what one of 5 keeps), as Python's `read_answer`. */
export function readAnswer(response: Response, path: string, answered: (answer: Uint8Array | null) => void, version: number): Response {
  const said = editsSaid(response);
  const told = said !== null ? Math.min(version, said) : version;
  const tap = response.body !== null ? tapFor(path, response.status, response.headers, told) : null;
  if (tap === null || response.body === null) return response;
  const tapped = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (tap.feed(chunk)) answered(tap.answer);
        controller.enqueue(chunk);
      },
    }),
  );
  return new Response(tapped, { status: response.status, statusText: response.statusText, headers: response.headers });
}

const problemDecoder = new TextDecoder();

function parseObject(bytes: Uint8Array): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(problemDecoder.decode(bytes));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
