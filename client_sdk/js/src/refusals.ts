/**
 * Reading a refusal to an edit for what the sender does next (manager.ts): a problem it may
 * resend on or act on, read whole when small (`readProblem`), and a refusal it drops before
 * sending the request as it is (`discard`). These are the only bytes of a server's that the
 * SDK itself consumes (an answer it hands back is the app's, unread: a stream stays a
 * stream), so each read is bounded in size and in time, and ends at the caller's abort:
 *
 * - size: `MAX_PROBLEM_BYTES` read to tell a problem (Python's), `DISCARD_BYTES` dropped;
 * - time: `PROBLEM_READ_MS` for the whole read of one answer, whatever its pace (a head
 *   then a body that trickles or never ends cannot hold the caller's request);
 * - the caller's `AbortSignal` ends the read at once, its reason thrown, even where the
 *   app's `fetch` ignores signals; a body not handed on is cancelled (its socket closed)
 *   and every timer cleared.
 */

/** The most bytes of a problem read to tell what it is (Python's `MAX_PROBLEM_BYTES`): one
 * toolref writes is < 2 KiB. */
export const MAX_PROBLEM_BYTES = 64 << 10;

/** The most bytes of a refused answer read before it is cancelled (a refusal is small). */
const DISCARD_BYTES = 64 << 10;

/** The longest the SDK reads one refusal's body, in ms, the whole read whatever its pace:
 * Python's sender reads the same within its `PROBLEM_READ_S` (5 s, `sending/refusals.py`):
 * 5 s for the whole, then the body is handed on as it comes (a problem) or cancelled (a
 * refusal dropped). A problem toolref writes is one small write. */
export const PROBLEM_READ_MS = 5000;

/** Answers handed on by `readProblem` unread to their end (over `MAX_PROBLEM_BYTES`, or past
 * `PROBLEM_READ_MS`): no small refusal, so `discard` cancels one at once. */
const handedOn = new WeakSet<Response>();

const LATE = Symbol("late");
type Read = ReadableStreamReadResult<Uint8Array>;

/** Reads of `reader` bounded by one deadline (`PROBLEM_READ_MS` from now) and `signal`: a
 * read past the deadline is `LATE` (the read still pending is kept, `pending`, for whoever
 * reads on); one the caller aborted throws its reason. `end` clears the timer and listener. */
class Bounded {
  pending: Promise<Read> | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly late: Promise<typeof LATE>;
  private readonly aborted: Promise<never> | null;
  private readonly stop = (): void => this.abort?.();
  private abort: (() => void) | undefined;

  constructor(
    readonly reader: ReadableStreamDefaultReader<Uint8Array>,
    readonly signal: AbortSignal | undefined,
  ) {
    this.late = new Promise((done) => (this.timer = setTimeout(() => done(LATE), PROBLEM_READ_MS)));
    this.aborted = signal === undefined ? null : new Promise<never>((_, fail) => (this.abort = () => fail(signal.reason)));
    this.aborted?.catch(() => undefined);
    signal?.addEventListener("abort", this.stop, { once: true });
  }

  async read(): Promise<Read | typeof LATE> {
    this.signal?.throwIfAborted();
    if (this.pending === null) {
      this.pending = this.reader.read();
      this.pending.catch(() => undefined); // awaited below, or by whoever reads on
    }
    const next = await Promise.race(this.aborted === null ? [this.pending, this.late] : [this.pending, this.late, this.aborted]);
    if (next !== LATE) this.pending = null;
    return next;
  }

  end(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener("abort", this.stop);
  }
}

/** `response`'s body read whole when it is at most `MAX_PROBLEM_BYTES` and comes within
 * `PROBLEM_READ_MS` (`whole`; `response` then used up); else `whole` null and `response` one
 * holding every byte it had (those read, then the rest as they come), at most that much read
 * of it (none when its `Content-Length` says more), as Python's `read_problem` does. The
 * caller's abort cancels the body and throws its reason. */
export async function readProblem(response: Response, signal?: AbortSignal): Promise<{ whole: Uint8Array | null; response: Response }> {
  const length = (response.headers.get("content-length") ?? "").trim();
  if (/^[0-9]+$/.test(length) && Number(length) > MAX_PROBLEM_BYTES) return { whole: null, response };
  const reader = response.body?.getReader();
  if (reader === undefined) return { whole: new Uint8Array(0), response };
  const bounded = new Bounded(reader, signal);
  const pieces: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const next = await bounded.read();
      if (next !== LATE && next.done) break;
      if (next !== LATE) {
        pieces.push(next.value);
        size += next.value.length;
      }
      if (next === LATE || size > MAX_PROBLEM_BYTES) {
        const rest = replayed(pieces, reader, bounded.pending);
        const kept = new Response(rest, { status: response.status, statusText: response.statusText, headers: response.headers });
        handedOn.add(kept);
        return { whole: null, response: kept };
      }
    }
  } catch (error) {
    void reader.cancel(error).catch(() => undefined); // the socket closed, not left to the pool half read
    throw error;
  } finally {
    bounded.end();
  }
  const whole = new Uint8Array(size);
  let at = 0;
  for (const piece of pieces) {
    whole.set(piece, at);
    at += piece.length;
  }
  return { whole, response };
}

/** A stream of `pieces` (read already from `reader`), then `pending` (a read of it begun),
 * then the rest of `reader`; cancelled, it cancels `reader`. */
function replayed(pieces: Uint8Array[], reader: ReadableStreamDefaultReader<Uint8Array>, pending: Promise<Read> | null): ReadableStream<Uint8Array> {
  let next = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (next < pieces.length) {
          controller.enqueue(pieces[next]!);
          pieces[next++] = EMPTY; // handed on: not held twice
          return;
        }
        const read = pending ?? reader.read();
        pending = null;
        const { done, value } = await read;
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

const EMPTY = new Uint8Array(0);

/** Read a refused answer to its end and drop it (its connection is then reused), at most
 * `DISCARD_BYTES` and `PROBLEM_READ_MS` (then cancelled: a body that never ends, or
 * trickles, holds nothing up); one `readProblem` handed on is cancelled at once. Gone (the
 * connection failed): nothing to drop. The caller's abort cancels it and throws its reason. */
export async function discard(response: Response, signal?: AbortSignal): Promise<void> {
  const reader = response.body?.getReader();
  if (reader === undefined) return;
  if (handedOn.has(response)) {
    await reader.cancel().catch(() => undefined);
    return;
  }
  const bounded = new Bounded(reader, signal);
  let read = 0;
  try {
    for (;;) {
      const next = await bounded.read();
      if (next !== LATE && next.done) return;
      if (next !== LATE) read += next.value.length;
      if (next === LATE || read > DISCARD_BYTES) {
        await reader.cancel().catch(() => undefined);
        return;
      }
    }
  } catch (error) {
    void reader.cancel(error).catch(() => undefined);
    if (signal?.aborted) throw signal.reason;
    // else gone (the connection failed): the next request says so
  } finally {
    bounded.end();
  }
}
