"""`ToolReferenceManager`: send refs for payloads the server holds, everything else in full.

The manager remembers the refs the server has confirmed (`toolReferences` in a chat
backend's answer, or a register response), and rewrites outgoing messages so confirmed
payloads travel as `toolRef` markers. The rewriting itself is the pure function `rewrite`
over the format layer. `post` / `apost` send a rewritten request and, when the backend
answers 409 with `missingRefs` (a ref expired or was evicted), forget those refs and resend
those payloads in full, automatically: a conversation never fails because of a ref.
`stream` / `astream` do the same for answers read as they arrive (event streams): those
resends are all answered before the app sends anything, so the stream handed back is the
one the app sends, unread.

With history refs (on by default; used once the server confirms one), the manager also
remembers the histories the server confirmed (`Toolref-History` in its answers) and sends
only the messages after the longest one that still fits the conversation, compressed
against it (see `upload`). A 409 `missing-history` (expired, evicted, or the server does not
keep histories) or a 400 `dictionary-mismatch` is answered by resending, automatically.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Callable,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from toolref import formats
from toolref.history import DICTIONARY_LIMIT
from toolref.lru import LRU
from toolref.registry.exchange import Exchange, run_async, run_sync
from toolref.sending import answers
from toolref.sending.checks import check_body, check_manager_options, check_stream_method
from toolref.sending.rewrite import Either, Rewrite, rewrite
from toolref.sending.savings import Savings, full_size
from toolref.sending.transcript import Transcripts, keys_of, transcribe
from toolref.sending.upload import Prior, Turn, Upload, prepare
from toolref.wire.canonical import is_ref
from toolref.wire.encoding import JSON_TYPE
from toolref.wire.errors import (
    ToolrefError,
)
from toolref.wire.headers import (
    CHECKPOINT_HEADER,
    DICTIONARY_HEADER,
    HISTORY_HEADER,
    KEEP_HISTORY,
    PROTOCOL_HEADER,
    REFERENCES_HEADER,
)
from toolref.wire.models import FormatName
from toolref.wire.protocol import PROTOCOL_REFS


@dataclass(frozen=True, slots=True)
class _Sending:
    """One attempt of a turn: what `prepare` builds the upload from, and its refs."""

    turn: Turn
    refs: Sequence[str]  # the ref of every complete invocation, in the order of their calls
    used: int  # how many of them travel as markers
    text_size: int | None  # len(dumps_json(messages)), when known without writing them again


@dataclass
class ToolReferenceManager:
    """Client-side memory of confirmed refs, and requests that use them.

    format: the conversation's message format (detected when None).
    optimistic: also send refs for payloads this manager has sent in full before, without
        waiting for a confirmation; the missing-ref fallback covers the rare miss.
    messages_key: where the messages sit in the request body.
    max_refs: how many refs to remember (least recently used are dropped first).
    track_savings: also measure what each request would have cost with full payloads.
    history_refs: ask the server to keep each conversation as a history, and send only the
        messages after a history it confirmed.
    compress: zstd request bodies (new messages against their history). None: once the
        server has confirmed a history (such a server reads zstd); True: from the first
        request (the server is known to); False: never.
    max_histories: how many confirmed histories to remember (one per live conversation is
        enough; least recently used are dropped first).
    max_transcripts: how many conversations to keep the transcript of (each message's JSON
        text, chain head and refs), so that preparing a turn costs in proportion to its new
        messages; least recently used are dropped first; 0 keeps none (every turn is then
        prepared from scratch). See `toolref.sending.transcript`.
    max_transcript_bytes: the most the transcripts hold together, roughly (about the size of
        the conversations' JSON text, once each); a larger conversation is not kept.
    max_prior_bytes: the most the bodies kept to compress against hold together (one per
        confirmed history the server keeps the body of, `Toolref-Dictionary`, each at most
        1 MiB; least recently used are dropped first); 0 keeps none.
    """

    format: FormatName | None = None
    optimistic: bool = False
    messages_key: str = "messages"
    max_refs: int = 100_000
    track_savings: bool = True
    history_refs: bool = True
    compress: bool | None = None
    max_histories: int = 64
    max_transcripts: int = 64
    max_transcript_bytes: int = 64 << 20
    max_prior_bytes: int = 16 << 20
    savings: Savings = field(default_factory=Savings)
    # Refs the server confirmed, refs sent in full (`optimistic`), histories (ref -> length):
    # each an LRU bound by max_refs or max_histories.
    confirmed: LRU[str, None] = field(init=False, repr=False, compare=False)
    seen: LRU[str, None] = field(init=False, repr=False, compare=False)
    histories: LRU[str, int] = field(init=False, repr=False, compare=False)
    # ref -> its `history.opening`, for the histories above (which conversation each
    # belongs to)
    openings: dict[str, bytes] = field(default_factory=dict)
    priors: OrderedDict[str, Prior] = field(default_factory=OrderedDict)  # ref -> its body
    # Backends without affinity refuse priors another replica keeps: after the n-th refusal
    # in a row, the next 2**n - 1 turns send none, so they cost O(log turns) round trips.
    prior_refusals: int = 0
    prior_pause: int = 0
    # A conversation that changes its last message every turn (Claude Code moves its cache
    # mark) is no prefix of any history confirmed for it: once seen, every turn asks the
    # server to keep its checkpoint too, which the next turn continues.
    checkpoints: bool = False
    refs_accepted: bool = False  # the backend has answered as protocol 2
    histories_accepted: bool = False  # the backend has confirmed a history
    transcripts: Transcripts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_manager_options(
            self.format,
            self.messages_key,
            self.max_refs,
            self.max_histories,
            max_transcripts=self.max_transcripts,
            max_transcript_bytes=self.max_transcript_bytes,
            max_prior_bytes=self.max_prior_bytes,
        )
        self.transcripts = Transcripts(self.max_transcripts, self.max_transcript_bytes)
        self.confirmed = LRU(self.max_refs)
        self.seen = LRU(self.max_refs)
        self.histories = LRU(self.max_histories, dropped=self._history_dropped)

    # --- memory --------------------------------------------------------------------

    def confirm(self, refs: Iterable[str]) -> None:
        for ref in refs:
            self.confirmed.put(ref, None)

    def forget(self, refs: Iterable[str]) -> None:
        for ref in refs:
            self.confirmed.pop(ref)
            self.seen.pop(ref)

    def learn(self, body: Any) -> None:
        """Confirm the refs in an answer: `toolReferences`, or a register response's `refs`."""
        if not isinstance(body, Mapping):
            return
        references = body.get("toolReferences")
        if isinstance(references, Mapping):
            self.confirm(r for r in references.values() if is_ref(r))
        registered = body.get("refs")
        if isinstance(registered, list):
            self.confirm(
                r["ref"] for r in registered if isinstance(r, Mapping) and is_ref(r.get("ref"))
            )

    # --- rewriting -----------------------------------------------------------------

    def usable(self) -> Container[str]:
        if not self.refs_accepted:
            return ()
        if self.optimistic:
            return Either(self.confirmed, self.seen)
        return self.confirmed

    def rewrite(
        self,
        messages: list[Any],
        usable: Container[str] | None = None,
        *,
        format: FormatName | None = None,
    ) -> Rewrite:
        """`messages` with confirmed payloads as refs; unchanged if they cannot be read.
        `format`: these messages' format, instead of the manager's."""
        try:
            fmt = formats.detect(messages, format or self.format)
            return rewrite(messages, fmt, self.usable() if usable is None else usable)
        except ToolrefError:
            return Rewrite(messages, None, {}, {})  # never let rewriting fail a conversation

    # --- sending with fallback -------------------------------------------------------

    def _turn(
        self,
        body: Mapping[str, Any],
        usable: Container[str] | None,
        fmt_name: FormatName | None,
        key: str,
    ) -> _Sending:
        messages = body[key]
        if self.max_transcripts and isinstance(messages, list) and messages:
            # What a transcript cannot hold (a message the stdlib cannot write, messages in
            # no one format), the plain path below computes, or fails on, as it always did.
            with contextlib.suppress(ValueError, TypeError, RecursionError):
                return self._transcribed(body, messages, usable, fmt_name, key)
        outgoing = self.rewrite(messages, usable, format=fmt_name)
        # Messages the format layer cannot read travel as they are, without history refs.
        fmt = formats.get(outgoing.format) if outgoing.format is not None else None
        turn = Turn(body, key, messages, outgoing.messages, fmt, outgoing.refs)
        return _Sending(turn, list(outgoing.refs.values()), len(outgoing.used), None)

    def _transcribed(
        self,
        body: Mapping[str, Any],
        messages: list[Any],
        usable: Container[str] | None,
        fmt_name: FormatName | None,
        key: str,
    ) -> _Sending:
        """`_turn` from the transcript of the conversation: only the messages after the
        longest unchanged prefix it holds are read, scanned, digested and written."""
        requested = fmt_name or self.format
        keys = keys_of(messages)
        kept, common = self.transcripts.find(requested, keys)
        transcript = transcribe(messages, keys, requested, kept, common)
        self.transcripts.keep(transcript, kept)
        markers = self.usable() if usable is None else usable
        refs = list(transcript.all_refs())
        turn = Turn(
            body,
            key,
            messages,
            transcript.outgoing(messages, markers),
            formats.get(transcript.format),
            heads=transcript.heads,
            dictionary=transcript.dictionary,
        )
        used = sum(map(markers.__contains__, refs))
        return _Sending(turn, refs, used, transcript.text_size)

    def exchange(
        self,
        build: Callable[[bytes, dict[str, str]], httpx.Request],
        body: Mapping[str, Any],
        *,
        format: FormatName | None = None,
        messages_key: str | None = None,
        streamed: bool = False,
    ) -> Exchange[httpx.Response]:
        """The sans-I/O exchange under `post`, `stream` and `toolref.Transport`: yields the
        requests `build(content, headers)` makes for `body`, and returns the answer to keep.

        format / messages_key: this request's, instead of the manager's (one manager serves
            several APIs through a transport).
        streamed: the driver hands answers back unread, except those `may_resend` picks,
            which it reads whole first; only the headers of the answer kept are learned from
            (`learn_answer` learns a JSON body read later).
        """
        key = messages_key or self.messages_key
        full: int | None = None
        usable: Container[str] | None = None
        attempt = 0
        histories = self.history_refs
        dictionary = True
        priors = self.prior_pause == 0
        self.prior_pause = max(self.prior_pause - 1, 0)
        while True:
            sending = self._turn(body, usable, format, key)
            if full is None:
                full = full_size(body, key, sending.text_size) if self.track_savings else 0
            compress = self.compress if self.compress is not None else self.histories_accepted
            upload = prepare(
                sending.turn,
                self.histories if histories else {},
                keep=self.history_refs,
                compress=compress,
                use_dictionary=dictionary,
                priors=self.priors if priors else None,
                checkpoint=self.checkpoints,
                openings=self.openings,
            )
            self.checkpoints = self.checkpoints or upload.rewound
            response = cast(httpx.Response, (yield build(upload.content, upload.headers)))
            self.savings.requests += 1
            self.savings.sent_bytes += len(upload.content)
            self.savings.full_bytes += full
            self.savings.refs_sent += sending.used
            self.savings.histories_used += upload.continued is not None
            problem = answers.problem_type(response)
            if upload.continued is not None and problem == answers.MISSING_HISTORY:
                # Expired or evicted: forget it and send the whole conversation.
                self.savings.fallbacks += 1
                self._forget_history(upload.continued)
                histories = False
                continue
            if upload.dictionary and problem == answers.DICTIONARY_MISMATCH:
                # A server that no longer holds the prior body (another replica, evicted)
                # is asked again without it; a history's own dictionary, without any.
                self.savings.fallbacks += 1
                if upload.prior is not None:
                    self._refused_prior(upload.prior)
                    priors = False
                else:
                    dictionary = False
                continue
            if upload.prior is not None and problem is None:
                self.prior_refusals = 0
            missing = answers.missing_refs(response)
            if missing is None or not sending.used or attempt == 2:
                self._learn_from(response, sending.refs, upload)
                if not streamed:
                    self.learn_answer(response.status_code, response.headers, response.content)
                return response
            # Refs expired or were evicted: forget them and send those payloads in full. If
            # that is refused too, the last attempt sends the whole conversation, every
            # payload in full (a ref the server misses may be one of the history's).
            self.savings.fallbacks += 1
            self.forget(missing)
            attempt += 1
            usable = () if attempt == 2 else None
            histories = histories and attempt < 2

    def _learn_from(self, response: httpx.Response, refs: Sequence[str], upload: Upload) -> None:
        self.refs_accepted = response.headers.get(PROTOCOL_HEADER) == str(PROTOCOL_REFS)
        if not self.refs_accepted or response.status_code >= 400:
            return
        if self.optimistic:
            for ref in refs:
                self.seen.put(ref, None)
        header = response.headers.get(REFERENCES_HEADER)
        if header:
            with contextlib.suppress(ValueError):
                self.learn({"toolReferences": json.loads(header)})
        confirmed = response.headers.get(HISTORY_HEADER)
        # Only a head the client computed itself is remembered: a server that chained the
        # messages differently is never sent a ref the two would disagree on.
        if confirmed is not None and confirmed == upload.head:
            # Every invocation of a confirmed history is held: its refs need no telling.
            self.confirm(refs)
            self.histories_accepted = True
            refs_kept = [confirmed]
            checkpoint = answers.checkpoint(response.headers.get(CHECKPOINT_HEADER), upload)
            if checkpoint is not None:
                self._remember_history(*checkpoint, upload.first)
                refs_kept.append(checkpoint[0])
            self._remember_history(confirmed, upload.length, upload.first)
            kept_body = response.headers.get(DICTIONARY_HEADER) == KEEP_HISTORY
            if kept_body and self.compress is not False:  # only zstd bodies use it
                self._keep_prior(refs_kept, upload)

    def _forget_history(self, ref: str) -> None:
        self.histories.pop(ref)
        self.openings.pop(ref, None)
        self.priors.pop(ref, None)

    def _refused_prior(self, ref: str) -> None:
        """The server does not hold the body kept for `ref`: forget it, and send none for
        the next 2**n - 1 turns after the n-th refusal in a row."""
        self.priors.pop(ref, None)
        self.prior_refusals += 1
        self.prior_pause = 2**self.prior_refusals - 1

    def _remember_history(self, ref: str, length: int, first: bytes | None) -> None:
        if first is not None:
            self.openings[ref] = first
        self.histories.put(ref, length)

    def _history_dropped(self, ref: str, _: int) -> None:
        self.openings.pop(ref, None)

    def _keep_prior(self, refs: Sequence[str], upload: Upload) -> None:
        """Keep the body the server keeps for histories `refs` (a head and its checkpoint
        share it), within `max_prior_bytes`."""
        body = upload.text[-DICTIONARY_LIMIT:]
        if upload.first is None or len(body) > self.max_prior_bytes:
            return
        # One per conversation: the server lets the one a continuation continued go, and a
        # newer one compresses the next turn better than any older.
        for older in [k for k, prior in self.priors.items() if prior.first == upload.first]:
            del self.priors[older]
        kept = Prior(upload.first, body)
        for ref in refs:
            self.priors[ref] = kept
        # Each body once (a checkpoint shares its head's); max_histories entries at most.
        size = sum(len(p.body) for p in {id(p): p for p in self.priors.values()}.values())
        while self.priors and (
            size > self.max_prior_bytes or len(self.priors) > self.max_histories
        ):
            _, oldest = self.priors.popitem(last=False)
            if all(p is not oldest for p in self.priors.values()):
                size -= len(oldest.body)

    def learn_answer(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        """Confirm the refs a successful protocol-2 JSON answer lists in `toolReferences`
        (headers by name, any case; `content` as decoded). `post` does this itself; a
        streamed answer is learned from once it has been read whole."""
        if headers.get(PROTOCOL_HEADER) != str(PROTOCOL_REFS) or status >= 400:
            return
        if not headers.get("content-type", "").startswith(JSON_TYPE):
            return
        with contextlib.suppress(ValueError):
            self.learn(json.loads(content))

    def post(
        self, client: httpx.Client, url: str, json: Mapping[str, Any], **kwargs: Any
    ) -> httpx.Response:
        """POST `json` (holding the messages) through `client`, with refs and fallback.

        Extra keyword arguments (headers, params, timeout, ...) go to `client.build_request`.
        """
        check_body(json, self.messages_key)
        return run_sync(self.exchange(answers.builder(client, url, kwargs), json), client.send)

    async def apost(
        self, client: httpx.AsyncClient, url: str, json: Mapping[str, Any], **kwargs: Any
    ) -> httpx.Response:
        """Async `post`."""
        check_body(json, self.messages_key)
        return await run_async(
            self.exchange(answers.builder(client, url, kwargs), json), client.send
        )

    @contextlib.contextmanager
    def stream(
        self,
        client: httpx.Client,
        method: str,
        url: str,
        *,
        json: Mapping[str, Any],
        **kwargs: Any,
    ) -> Iterator[httpx.Response]:
        """`client.stream("POST", url, ...)` with the rewriting and resends of `post`: the
        answer is handed back unread (read it with `iter_lines`, `iter_bytes`, ...).

        `method` must be "POST" (the messages travel in the body). The manager learns from
        the answer's headers (`Toolref-History`, `Toolref-References`); a JSON answer read
        whole in the block (`response.read()`) also teaches its `toolReferences` when the
        block ends (one read piece by piece, with `iter_bytes`, teaches only its headers).
        Extra keyword arguments go to `client.build_request`, as in `post`.
        """
        check_stream_method(method)
        check_body(json, self.messages_key)
        exchange = self.exchange(answers.builder(client, url, kwargs), json, streamed=True)
        response = run_sync(exchange, lambda request: answers.send_streaming(client, request))
        try:
            yield response
            if answers.is_read(response):
                self.learn_answer(response.status_code, response.headers, response.content)
        finally:
            response.close()

    @contextlib.asynccontextmanager
    async def astream(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        *,
        json: Mapping[str, Any],
        **kwargs: Any,
    ) -> AsyncIterator[httpx.Response]:
        """Async `stream`: `async with manager.astream(client, "POST", url, json=...)`."""
        check_stream_method(method)
        check_body(json, self.messages_key)
        exchange = self.exchange(answers.builder(client, url, kwargs), json, streamed=True)
        response = await run_async(
            exchange, lambda request: answers.asend_streaming(client, request)
        )
        try:
            yield response
            if answers.is_read(response):
                self.learn_answer(response.status_code, response.headers, response.content)
        finally:
            await response.aclose()
