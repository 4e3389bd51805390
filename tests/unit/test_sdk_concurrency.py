"""One manager (one `toolref.Transport` / `AsyncTransport`) used as real apps use it: by
many threads at once (a Flask or gunicorn-threads app sharing one client), and by many
tasks of one event loop, turns of several endpoints interleaved. The interleavings are
forced (a hook waits inside one turn's work until the other turn has run, or is waiting
its own turn), never left to luck."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.unit.edits.oracle import Registry
from toolref.edits import wire
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending import recipes as recipes_module
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.transport import AsyncTransport, Transport
from toolref.wire.encoding import PROBLEM_TYPE

JSON = {"content-type": "application/json"}


def body(conversation: str, turns: int) -> bytes:
    messages = [
        {"role": "user", "content": f"{conversation}: question {turn} " + "lorem ipsum " * 12}
        for turn in range(turns)
    ]
    return json.dumps({"model": "m", "messages": messages}).encode()


class Receiver:
    """Reads edits (the oracle registry restores them) once offered them, answering
    `Toolref-Edits: said`; records what it restored, and the version of each edit."""

    def __init__(self, said: str = "5") -> None:
        self.said = said
        self.registry = Registry()
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []
        self.versions: list[int] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        content = request.read()
        headers = {"toolref-edits": self.said, "content-type": "application/json"}
        with self.lock:
            if request.headers.get("content-type") != MEDIA_TYPE:
                self.bodies.append(content)
                return httpx.Response(200, json={"id": "r"}, headers=headers)
            self.versions.append(wire.read(content, 1 << 30)[0].version)
            answer = self.registry.answer(content, [])
            if answer.status != 200:
                problem = {**headers, "content-type": PROBLEM_TYPE}
                return httpx.Response(answer.status, json=answer.problem, headers=problem)
            assert answer.body is not None
            assert answer.history is not None
            self.bodies.append(answer.body)
        return httpx.Response(
            200, json={"id": "r"}, headers={**headers, "toolref-history": answer.history}
        )


class Gate:
    """A forced interleaving between a first thread and a second: the first, at the hook,
    waits until the second has run its turn or is waiting for the manager (its lock);
    a lock the second waits on is watched through `watched`."""

    def __init__(self) -> None:
        self.second: threading.Thread | None = None
        self.done = threading.Event()  # the second's turn ended, or it waits its turn
        self.fired = False

    def hold(self) -> None:
        """At the hook, in the first thread (once): let the second run, then go on."""
        if self.fired or threading.current_thread() is self.second:
            return
        self.fired = True
        assert self.second is not None
        self.second.start()
        assert self.done.wait(30), "the second thread neither ran nor waited"

    def watched(self, lock: Any) -> Any:
        gate = self

        class Watched:
            def __enter__(self) -> None:
                if lock.acquire(blocking=False):
                    return
                if threading.current_thread() is gate.second:
                    gate.done.set()  # it waits its turn: the first goes on
                lock.acquire()

            def __exit__(self, *_: object) -> None:
                lock.release()

        return Watched()


def hooked(monkeypatch: pytest.MonkeyPatch, gate: Gate, when: Callable[[], bool]) -> None:
    """The hook: inside `Editor._trim_answers`' walk of the recipes it keeps (each ref looked
    up in `Recipes`), once `when()` says so."""
    original = recipes_module.Recipes.__contains__

    def contains(self: recipes_module.Recipes, ref: object) -> bool:
        if when():
            gate.hold()
        return original(self, ref)

    monkeypatch.setattr(recipes_module.Recipes, "__contains__", contains)


def hook_in_confirm(
    monkeypatch: pytest.MonkeyPatch, manager: ToolReferenceManager, gate: Gate
) -> None:
    """The hook inside `Editor.confirm` (its walk of what it keeps), and the manager's lock
    (when it has one) watched."""
    lock = getattr(manager.sender, "lock", None)
    if lock is not None:
        manager.sender.lock = gate.watched(lock)
    confirming = threading.local()
    original_confirm = type(manager.sender.editor).confirm

    def confirm(self: Any, edit: Any, history: str | None) -> bool:
        confirming.on = True
        try:
            return bool(original_confirm(self, edit, history))
        finally:
            confirming.on = False

    monkeypatch.setattr(type(manager.sender.editor), "confirm", confirm)
    hooked(monkeypatch, gate, lambda: getattr(confirming, "on", False))


def test_threads_sharing_a_transport_each_get_their_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two threads of an app sharing one client: a turn whose answer came back while another
    thread's turn keeps its recipe. Before: the first thread's `confirm` walked the recipes'
    bookkeeping while the second changed it, and the app got `RuntimeError: dictionary
    changed size during iteration` for a turn the provider had answered."""
    receiver = Receiver()
    manager = ToolReferenceManager()
    client = httpx.Client(
        transport=Transport(httpx.MockTransport(receiver.answer), manager=manager)
    )
    url = "https://llm.test/v1/chat/completions"
    for turn in (1, 2):  # both conversations known, each recipe kept
        for name in ("a", "b"):
            assert client.post(url, content=body(name, turn), headers=JSON).status_code == 200
    gate = Gate()
    errors: list[BaseException] = []

    def second() -> None:
        try:
            assert client.post(url, content=body("b", 3), headers=JSON).status_code == 200
        except BaseException as exc:  # the assertion below says it
            errors.append(exc)
        finally:
            gate.done.set()

    gate.second = threading.Thread(target=second)
    hook_in_confirm(monkeypatch, manager, gate)
    try:
        first = client.post(url, content=body("a", 3), headers=JSON)
    finally:
        if gate.fired:
            gate.second.join(30)
    assert gate.fired  # the hook held the first turn inside the editor's bookkeeping
    assert errors == []
    assert first.status_code == 200
    assert receiver.bodies[-2:] in ([body("a", 3), body("b", 3)], [body("b", 3), body("a", 3)])
    assert manager.savings.requests == 6
    assert manager.savings.edits == 5  # all but the first, which learnt the endpoint reads them


STREAMED = (  # an OpenAI Chat Completions answer, streamed: the tap keeps it
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"the parser '
    b'drops it"}}]}\n\n'
    b"data: [DONE]\n\n"
)


class Pieces(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield from (STREAMED[:40], STREAMED[40:])


def streaming(receiver: Receiver) -> Callable[[httpx.Request], httpx.Response]:
    """`receiver`, its answers streamed as SSE (read by the app as it reads them)."""

    def answer(request: httpx.Request) -> httpx.Response:
        answered = receiver.answer(request)
        headers = {**answered.headers, "content-type": "text/event-stream"}
        headers.pop("content-length", None)
        if answered.status_code != 200:
            return answered
        return httpx.Response(200, headers=headers, stream=Pieces())

    return answer


def test_an_answer_read_in_one_thread_while_another_keeps_a_recipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An app thread reading its streamed answer (the editor told of it at its end) while
    another thread's turn keeps its recipe. Before: the answer went into the editor's
    answers while the other thread walked them, and that thread's app got `RuntimeError:
    OrderedDict mutated during iteration` for a turn the provider had answered."""
    receiver = Receiver()
    manager = ToolReferenceManager()
    transport = Transport(httpx.MockTransport(streaming(receiver)), manager=manager)
    client = httpx.Client(transport=transport)
    url = "https://llm.test/v1/chat/completions"
    for turn in (1, 2):  # both conversations known, each answer kept
        for name in ("a", "b"):
            answer = client.post(url, content=body(name, turn), headers=JSON)
            assert answer.status_code == 200
            assert answer.content == STREAMED
    assert len(manager.sender.editor.answers) == 2
    gate = Gate()
    errors: list[BaseException] = []
    with client.stream("POST", url, content=body("b", 3), headers=JSON) as streamed:

        def second() -> None:
            try:
                assert streamed.read() == STREAMED  # its end tells the editor
            except BaseException as exc:  # the assertion below says it
                errors.append(exc)
            finally:
                gate.done.set()

        gate.second = threading.Thread(target=second)
        hook_in_confirm(monkeypatch, manager, gate)
        try:
            first = client.post(url, content=body("a", 3), headers=JSON)
        finally:
            if gate.fired:
                gate.second.join(30)
    assert gate.fired
    assert errors == []
    assert first.status_code == 200
    assert first.content == STREAMED
    assert len(manager.sender.editor.answers) == 2  # the third turns' (the second's dropped)


@pytest.fixture
def endpoints() -> dict[str, Receiver]:
    return {"old.test": Receiver(said="3"), "new.test": Receiver(said="5")}


async def test_a_resend_is_of_the_version_its_own_endpoint_reads(
    endpoints: dict[str, Receiver],
) -> None:
    """One `AsyncTransport` sending to a receiver that reads version 3 and to one that reads
    5, turns at once. Before: the editor wrote every edit at the version of the endpoint it
    last prepared a request for, so the older receiver's resend after a miss, built while
    the newer one's turn was under way, went as version 5 (which it cannot read, and the app
    got its refusal)."""
    newer_arrived = asyncio.Event()
    held_once: list[bool] = [True]  # none held until the turns at once

    async def handler(request: httpx.Request) -> httpx.Response:
        receiver = endpoints[request.url.host]
        edit = request.headers.get("content-type") == MEDIA_TYPE
        if edit and request.url.host == "new.test":
            newer_arrived.set()
        if edit and request.url.host == "old.test" and not held_once:
            held_once.append(True)
            await newer_arrived.wait()  # the newer endpoint's turn prepared meanwhile
            receiver.registry.flush()  # the older receiver's registry restarted: a miss
        return receiver.answer(request)

    transport = AsyncTransport(httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:

        async def turn(host: str, count: int) -> httpx.Response:
            url = f"https://{host}/v1/chat/completions"
            return await client.post(url, content=body(host, count), headers=JSON)

        for count in (1, 2):  # each endpoint says what it reads; a first edit each
            for host in endpoints:
                assert (await turn(host, count)).status_code == 200
        held_once.clear()
        newer_arrived.clear()
        answers = await asyncio.gather(turn("old.test", 3), turn("new.test", 3))
    assert [answer.status_code for answer in answers] == [200, 200]
    older = endpoints["old.test"]
    assert len(older.versions) == 3  # its first edit, the one missed, the resend
    assert held_once == [True]
    assert max(older.versions) <= 3, older.versions
    assert older.bodies[-1] == body("old.test", 3)
    assert min(endpoints["new.test"].versions) >= 4


async def test_one_outage_seen_by_edits_at_once_pauses_once() -> None:
    """Four edits in flight to one endpoint when its receiver's registry goes down (each
    answered 415), after an earlier outage had paused it once. Before: each refusal doubled
    the pause (1, 2, 4, 8 s: every request sent whole for 8 s after a blip); now one outage
    is one pause of 1 s, as JS's manager counts it."""
    now = [100.0]
    refusing = False
    arrived: list[asyncio.Event] = []
    everyone = asyncio.Event()
    receiver = Receiver()

    async def handler(request: httpx.Request) -> httpx.Response:
        edit = request.headers.get("content-type") == MEDIA_TYPE
        if edit and refusing:
            arrived.append(asyncio.Event())
            if len(arrived) == 4:
                everyone.set()
            await everyone.wait()  # all four sent before the first refusal is read
            # a middleware's 415, its registry down (a framework's own would be a stranger's:
            # `toolref.sending.stranger`)
            refusal = {"type": "urn:toolref:problem:unsupported-media-type", "detail": "down"}
            problem = {"content-type": "application/problem+json"}
            return httpx.Response(415, content=json.dumps(refusal).encode(), headers=problem)
        return receiver.answer(request)

    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    transport = AsyncTransport(httpx.MockTransport(handler), manager=manager)
    url = "https://llm.test/v1/chat/completions"
    async with httpx.AsyncClient(transport=transport) as client:

        async def turn(name: str, count: int) -> int:
            answer = await client.post(url, content=body(name, count), headers=JSON)
            return answer.status_code

        assert await turn("a", 1) == 200  # learns the endpoint reads edits
        refusing = True
        everyone.set()
        assert await turn("a", 2) == 200  # refused, sent as it is: paused 1 s
        now[0] += 2  # the pause over
        refusing = False
        assert await turn("a", 3) == 200  # an edit answered: the next outage starts at 1 s
        refusing, arrived[:] = True, []
        everyone.clear()
        assert await asyncio.gather(*(turn(name, 4) for name in "abcd")) == [200] * 4
    pause = manager.sender.pauses.peek("https://llm.test/v1/chat/completions")
    assert pause is not None
    assert len(arrived) == 4
    assert pause.length == 1.0
    assert pause.until == now[0] + 1.0


def test_two_threads_first_requests_at_once_make_one_inner_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `Transport` given no inner one makes it at the first request: two threads' first
    requests at once made one each, and the one overwritten was never closed (its pool
    leaked). The first to make it holds the second out until it is made."""
    made: list[object] = []
    inside = threading.Event()
    original = httpx.HTTPTransport.__init__

    def making(self: httpx.HTTPTransport, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        inside.set()
        if len(made) == 1:
            inside.clear()
            inside.wait(1.0)  # the second thread, unheld, would make its own meanwhile
        original(self, *args, **kwargs)

    monkeypatch.setattr(httpx.HTTPTransport, "__init__", making)
    monkeypatch.setattr(
        httpx.HTTPTransport, "handle_request", lambda self, request: httpx.Response(200, json={})
    )
    transport = Transport()
    request = httpx.Request("GET", "http://backend.test/health")
    threads = [threading.Thread(target=transport.handle_request, args=(request,)) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(made) == 1
    assert transport.inner is made[0]


async def test_a_send_cancelled_while_a_refusal_is_read_gives_its_connection_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller's task cancelled while the transport read a refusal (a 409 problem, read
    to see whether it is resent on): the answer was neither handed over nor closed, so its
    pooled connection never went back."""
    closed: list[bool] = []
    reading = asyncio.Event()

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            reading.set()
            await asyncio.Event().wait()  # a problem that trickles, then stalls
            yield b""

        async def aclose(self) -> None:
            closed.append(True)

    class Inner(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.headers.get("content-type") != MEDIA_TYPE:
                headers = {"toolref-edits": "5", "content-type": "application/json"}
                return httpx.Response(200, json={"id": "r"}, headers=headers)
            return httpx.Response(409, headers={"content-type": PROBLEM_TYPE}, stream=Stream())

    transport = AsyncTransport(Inner(), channel=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://backend.test") as client:
        await client.post("/v1/chat/completions", content=body("a", 1), headers=JSON)
        turn = asyncio.create_task(
            client.post("/v1/chat/completions", content=body("a", 2), headers=JSON)
        )
        await asyncio.wait_for(reading.wait(), 5)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
    assert closed == [True]
