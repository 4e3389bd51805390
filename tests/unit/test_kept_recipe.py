"""When a turn's recipe keep begins (`gateway.edited.kept_recipe`): over HTTP the answer's
end waits for it (begun once the body went upstream, by the forwarder); a channel's turn
begins it with the answer's end, before the end is sent on, so its work never holds the
event loop while the answer streams, and the next turn here finds it under way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import Message

from toolref_server.gateway.edited import kept_recipe
from toolref_server.registry.edits import Keeping


async def _nothing() -> None:
    return None


def _turn() -> tuple[Keeping, list[str], list[int]]:
    sent: list[str] = []
    begun: list[int] = []
    keeping = Keeping(_nothing(), begun=lambda _: begun.append(len(sent)))
    return keeping, sent, begun


def _recorder(sent: list[str]) -> Callable[[Message], Awaitable[None]]:
    async def send(message: Message) -> None:
        more = message.get("more_body", False)
        sent.append(message["type"] + ("" if more or "body" not in message else " (end)"))

    return send


async def test_a_channel_turn_s_keep_begins_with_its_answer_s_end() -> None:
    keeping, sent, begun = _turn()
    ending = kept_recipe(_recorder(sent), keeping, lambda: False, at_end=True)
    await ending({"type": "http.response.start", "status": 200, "headers": []})
    await ending({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
    assert begun == []  # not while the answer streams
    await ending({"type": "http.response.body", "body": b"", "more_body": False})
    assert begun == [2]  # begun before the end was sent on
    assert sent[-1] == "http.response.body (end)"
    await keeping.task


async def test_a_held_end_waits_for_the_keep_and_nothing_else_begins_it() -> None:
    keeping, sent, begun = _turn()
    ending = kept_recipe(_recorder(sent), keeping)  # over HTTP: the end always waits
    await ending({"type": "http.response.start", "status": 200, "headers": []})
    await ending({"type": "http.response.body", "body": b"{}", "more_body": True})
    assert begun == []  # the forwarder begins it (SENT_KEY), not the answer's head or body
    await ending({"type": "http.response.body", "body": b"", "more_body": False})
    assert begun == [2]
    assert keeping.task.done()  # the end went once the keep ended
