"""`Sender`: a client's LLM requests as edits (`application/vnd.toolref.edit`) once its
receiver says it reads them, as a sans-I/O exchange (`toolref.registry.exchange`): the
manager (`post`, `stream`) and `toolref.Transport` drive it, sync or async, over `httpx` or
`httpx2`.

Negotiation, per endpoint (scheme, host, port and path): until an answer from it carried
`Toolref-Edits`, a request goes as it is, with `Toolref-Edits: 5` added (an offer a
receiver that does not speak toolref ignores); once one did, every request goes as an edit
of that version or lower through the client's `Editor`: the first of a conversation with
no base (each segment inline, alone), later ones against the recipe the receiver confirmed
(`Toolref-History`); a first one that is not worth an edit (smaller as it is, and no later
turn could be an edit of it: `editor.not_worth_an_edit`, every sender's rule) goes as it
is, with the offer. The version is relearnt from every answer, and from a refusal 400
`malformed-body` (a receiver rolled back to a version that does not read the edit's bytes;
behind a middleware, its 415 naming one, its registry rolled back: the request goes again
as it is, no pause, and the version below them is said; each step is logged
once per endpoint, a warning: were it no rollback, the sender's bug would be hidden), by
every sender's rule (`toolref.sending.said`: replicas of 4 and 6 are both sent 4). A miss (409
`missing-history`, `missing-pieces`, 400 `dictionary-mismatch`) is resent by the `Editor`
(at most 3 times, the last with everything inline); a 413 `too-many-items` (a receiver
whose `TOOLREF_MAX_EDIT_ENTRIES` is below the default; behind a middleware, its 415 naming
one) sends the request as it is, and the endpoint's limit is kept (`toolref.sending.entries`,
logged once), no pause: a later request past it goes as it is at once; any other 415 (a
receiver that cannot apply
edits now), or a 503 `store-unavailable` (its store down: `answers.store_down`), sends the
request as it is, and the endpoint's requests go as they are, offering edits, for a while
(`toolref.sending.pause`). An answer to an edit that names neither a recipe nor
`Toolref-Edits` and is no toolref problem (`urn:toolref:problem:`; a framework's own
problem+json, Spring's `about:blank` or ASP.NET's RFC 9110 link, is none) comes from no
receiver of edits (a backend rolled back, a proxy or firewall in front): the endpoint is
forgotten (its requests go as they are, with the offer) and edits to it paused; refused
unread (a 4xx but 429, 415 included; a 500, 501), the request is sent again as it is;
any other refusal (a proxy's 502-504, which may have forwarded the edit; a 429) is the
app's, as it came, to retry as it would without toolref (`toolref.sending.stranger`, every
sender's rule, as the TypeScript manager and the relay follow it). The answer kept is
handed back as it came: a stream stays a stream (only a problem the exchange resends on is
read, by the driver).

Segment 0 holds the request's headers but credentials (name-only), hop headers and
toolref's; an edit travels with its media type, the credentials and toolref's own headers
(`Toolref-Key`) as real headers, and nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, TypeVar, cast

import httpx

from toolref.asgi.hops import decoded, end_to_end, on_the_wire
from toolref.edits import wire
from toolref.kit.lru import LRU
from toolref.registry.exchange import Exchange
from toolref.sending.answers import edits_said, problem_of, read_answer, store_down, unreadable
from toolref.sending.editor import Edit, Editor, as_it_came_bytes, not_worth_an_edit
from toolref.sending.entries import Entries, too_many_items
from toolref.sending.pause import UNREADABLE_FIRST, UNREADABLE_LONGEST, Pause
from toolref.sending.said import Said, unreadable_said
from toolref.sending.savings import Savings
from toolref.sending.stranger import no_reader, resent, stranger_pause
from toolref.wire.headers import EDITS_HEADER, HISTORY_HEADER, TOOLREF_PREFIX
from toolref.wire.redaction import printable

MAX_ENDPOINTS: Final = 64  # endpoints whose answer to the offer is remembered
R = TypeVar("R")
OFFER: Final = (EDITS_HEADER, str(wire.VERSION))
log = logging.getLogger(__name__)

# (the request to send again, its body, its headers): a request of the same class, URL and
# extensions as the app's.
Rebuild = Callable[[Any, bytes, list[tuple[str, str]]], Any]


def rebuilt(request: Any, content: bytes, headers: list[tuple[str, str]]) -> Any:
    """`request` again (its class, method, URL, extensions) with `content` and `headers`
    (as `header_pairs` reads them: each byte a latin-1 character, so each goes back as the
    byte it was, UTF-8 or not)."""
    raw = on_the_wire(headers)
    return type(request)(
        request.method, request.url, headers=raw, content=content, extensions=request.extensions
    )


def target_of(url: Any) -> str:
    """The endpoint a request's URL names, as messages show it: origin (scheme, host as IDNA,
    a port only when not the scheme's own) and path as sent (percent-encoded), no query nor
    fragment (an API key's place) nor credentials: what JS's `endpointShown` writes (shared
    vectors, tests/js_printable_vectors.py)."""
    path = bytes(url.raw_path).partition(b"?")[0].decode("ascii", "backslashreplace")
    return f"{url.scheme}://{bytes(url.netloc).decode('ascii', 'backslashreplace')}{path}"


@dataclass
class Sender:
    """One client's requests to its receivers (see the module docstring). `editor`: its
    recipes and choices; `savings`: what its requests cost. Shared by threads (an app's
    one client) and by the tasks of an event loop: each step of an exchange (the work
    between two sends) and each answer told to the editor run holding `lock`, never a send
    nor the app's reading of an answer."""

    editor: Editor = field(default_factory=Editor)
    savings: Savings = field(default_factory=Savings)
    reads: LRU[str, Said] = field(default_factory=lambda: LRU(MAX_ENDPOINTS))
    pauses: LRU[str, Pause] = field(default_factory=lambda: LRU(MAX_ENDPOINTS))
    entries: LRU[str, Entries] = field(default_factory=lambda: LRU(MAX_ENDPOINTS))
    # (endpoint, edits version) whose refusal as unreadable was logged (`_warn_unreadable`)
    warned: LRU[tuple[str, int], bool] = field(
        default_factory=lambda: LRU(MAX_ENDPOINTS * len(wire.VERSIONS))
    )
    clock: Callable[[], float] = time.monotonic
    lock: AbstractContextManager[Any] = field(default_factory=threading.RLock)

    def exchange(
        self, request: Any, content: bytes, messages_key: str, rebuild: Rebuild = rebuilt
    ) -> Exchange[httpx.Response]:
        """The exchange for `request` (an LLM request as the app made it, `content` its
        body): yields the requests to send, returns the answer to hand back."""
        return _locked(self._exchange(request, content, messages_key, rebuild), self.lock)

    def _exchange(
        self, request: Any, content: bytes, messages_key: str, rebuild: Rebuild
    ) -> Exchange[httpx.Response]:
        target = target_of(request.url)
        said = self.reads.get(target)
        version = said.version(self.clock()) if said is not None else None
        self.savings.request(len(content))
        pairs = decoded(request.headers.raw)  # each byte a latin-1 character, UTF-8 or not
        edit = None
        pause = self.pauses.get(target)
        seen = pause.begun if pause is not None else 0  # the pauses begun when it was sent
        if version is not None and (pause is None or pause.over(self.clock())):
            self.editor.version = version
            edit = self._prepared(target, pairs, content, messages_key)
        if edit is not None and not_worth_an_edit(edit, as_it_came_bytes(edit, (OFFER,))):
            edit = None  # a tiny first turn: smaller as it is, and no later turn's base
        if edit is None:
            return (yield from self._as_it_is(request, content, pairs, rebuild, target))
        own = [(k, v) for k, v in pairs if k.lower().startswith(TOOLREF_PREFIX)]
        while True:
            response = cast(
                httpx.Response, (yield rebuild(request, edit.body, [*edit.headers, *own]))
            )
            self._told(target, response)
            self.savings.sent(len(edit.body), resend=edit.resends > 0)
            if self._too_many(target, edit, response):
                # more entries than the receiver's limit (set below the default; a
                # middleware's 415 naming its registry's 413): not applied, and the request
                # as it is is forwarded; the limit kept for the next ones, no pause
                return (yield from self._as_it_is(request, content, pairs, rebuild, target))
            if version is not None and unreadable(response):
                # a receiver rolled back (or, a middleware's 415 naming it, its registry): it
                # reads less than the edit's bytes (said, as the relay learns it), no pause;
                # the request as it is, whose answer says what it reads
                said = self.reads.peek(target)
                stepped = said is not None and said.unreadable(version, self.clock())
                if said is not None and not stepped:  # no lower version: not a rollback
                    self._paused(target, seen, UNREADABLE_FIRST, UNREADABLE_LONGEST)
                if said is not None:  # a genuine sender bug would be hidden: logged
                    written = said.version(self.clock()) if stepped else None
                    self._warn_unreadable(target, version, written, response)
                return (yield from self._as_it_is(request, content, pairs, rebuild, target))
            down = store_down(response)  # not applied either: the receiver's store down
            if not down and no_reader(response):  # no receiver of edits answered: forgotten
                self.reads.pop(target)
                status = response.status_code
                paused = stranger_pause(status)  # `toolref.sending.stranger`
                if paused is not None:
                    pause = self._paused(target, seen, *paused)
                if resent(status):  # refused unread (a 4xx, a 500): the request as it is
                    return (yield from self._as_it_is(request, content, pairs, rebuild, target))
                return response  # a proxy's 502-504 (forwarded, maybe), a 429: the app's
            if down or (response.status_code == 415 and HISTORY_HEADER not in response.headers):
                # the edit not applied (an app's own 415 names its recipe): paused
                pause = self._paused(target, seen)
                return (yield from self._as_it_is(request, content, pairs, rebuild, target))
            # the resend as its own endpoint reads edits: another endpoint's turn, prepared
            # while this one was sent, set the editor's version to what that one reads
            self.editor.version = version if version is not None else self.editor.version
            following = self._next(edit, response)
            if following is None:
                if self.editor.confirm(edit, response.headers.get(HISTORY_HEADER)):
                    answered = partial(self._answered, edit.ref)
                    read_answer(response, request.url.path, answered, self.editor.version)
                self.savings.edits += 1
                if pause is not None:
                    pause.answered()
                return response
            edit = following

    def _as_it_is(
        self,
        request: Any,
        content: bytes,
        pairs: list[tuple[str, str]],
        rebuild: Rebuild,
        target: str,
    ) -> Exchange[httpx.Response]:
        """The request as the app made it, with the offer."""
        offered = [(k, v) for k, v in pairs if k.lower() != EDITS_HEADER.lower()]
        response = cast(httpx.Response, (yield rebuild(request, content, [*offered, OFFER])))
        self._told(target, response)
        self.savings.sent(len(content), resend=False)
        return response

    def _answered(self, ref: str, answer: bytes | None) -> None:
        """The answer of recipe `ref`'s request, told as the app reads it (in its thread)."""
        with self.lock:
            self.editor.answered(ref, answer)

    def _paused(
        self, target: str, seen: int, first: float | None = None, longest: float | None = None
    ) -> Pause:
        """The endpoint's edits paused (`toolref.sending.pause`): an edit sent when `seen`
        pauses had begun was refused (one another edit's refusal began since counts it)."""
        pause = self.pauses.peek(target)
        if pause is None:
            pause = Pause()
            self.pauses.put(target, pause)
        pause.refused(self.clock(), seen, first, longest)
        return pause

    def _warn_unreadable(
        self, target: str, version: int, written: int | None, response: httpx.Response
    ) -> None:
        """Say, once per endpoint and version refused, that an edit was refused 400
        `malformed-body` (or a middleware's 415 naming its registry's) and the version
        stepped down (to `written`; None: none lower,
        paused). A rollback explains it; else the sender wrote bytes its receiver cannot
        read (a bug, which the resend as it is would hide from the app)."""
        if (target, version) in self.warned:
            return
        self.warned.put((target, version), True)
        problem = problem_of(response) or {}
        request_id = response.headers.get("x-request-id")
        detail, status = problem.get("detail"), response.status_code
        log.warning(
            "%s", unreadable_said(target, version, written, detail, request_id, status=status)
        )

    def _prepared(
        self, target: str, pairs: list[tuple[str, str]], content: bytes, messages_key: str
    ) -> Edit | None:
        """The request's first attempt (`Editor.prepare`), of at most the entries the
        endpoint takes (`toolref.sending.entries`: lower where its 413 said so)."""
        limit = self.entries.get(target)
        most = limit.most(self.clock()) if limit is not None else wire.DEFAULT_MAX_ENTRIES
        return self.editor.prepare(_segment_headers(pairs), content, messages_key, most)

    def _too_many(self, target: str, edit: Edit, response: httpx.Response) -> bool:
        """Whether the endpoint refused `edit` 413 `too-many-items` (its problem read, no
        recipe named; or a middleware's 415 naming it: `entries.too_many_items`); its limit
        kept then (`Entries`), and said once, a warning (its
        requests of more entries go whole: savings lost, which raising its
        `TOOLREF_MAX_EDIT_ENTRIES` brings back)."""
        problem = problem_of(response) if HISTORY_HEADER not in response.headers else None
        if problem is None or not too_many_items(response.status_code, problem):
            return False
        entries = self.entries.get(target)
        if entries is None:
            entries = Entries()
            self.entries.put(target, entries)
        learnt = entries.refused(len(edit.cut.entries), problem.get("limit"), self.clock())
        if learnt is None:
            return True
        log.warning(
            "toolref: %s refused an edit of %d entries (%d too-many-items; request id %s): "
            "it takes a limit of %d entries (its TOOLREF_MAX_EDIT_ENTRIES, 50000 by "
            "default), so the request went again as it is, and so do its requests of more "
            "(long conversations: about 2 entries a message), whole, edits tried again in "
            "an hour; raise that setting to send them as edits",
            target,
            len(edit.cut.entries),
            response.status_code,
            printable(response.headers.get("x-request-id", "none given"), 200),
            learnt,
        )
        return True

    def _told(self, target: str, response: httpx.Response) -> None:
        """Learn from an answer whether its endpoint reads edits, and of which version (each
        said is kept: `toolref.sending.said`)."""
        version = edits_said(response)
        if version is None or version < min(wire.VERSIONS):
            return
        said = self.reads.get(target)  # the most recently used, as a `put` made it
        if said is None:
            said = Said()
            self.reads.put(target, said)
        said.said(version, self.clock())

    def _next(self, edit: Edit, response: httpx.Response) -> Edit | None:
        if response.status_code not in (400, 409):
            return None
        problem = problem_of(response)
        return None if problem is None else self.editor.on_miss(edit, response.status_code, problem)


def _locked(exchange: Exchange[R], lock: AbstractContextManager[Any]) -> Exchange[R]:
    """`exchange`, each of its steps run holding `lock`: the requests it yields are sent,
    and what they answer (or raise) handed back, without it. O(1) per step."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            with lock:
                step = exchange.send(answer) if error is None else exchange.throw(error)
        except StopIteration as stop:
            done: R = stop.value
            return done
        answer = error = None
        try:
            answer = yield step
        except GeneratorExit:
            with lock:
                exchange.close()
            raise
        except BaseException as exc:  # a transport's error, thrown in: the exchange's own
            error = exc


def _segment_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request's headers as segment 0 holds them: end to end, none of toolref's (the cut
    leaves out those describing the hop: host, length, encoding)."""
    return [(k, v) for k, v in end_to_end(list(pairs)) if not k.lower().startswith(TOOLREF_PREFIX)]
