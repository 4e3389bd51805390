"""The relay writes each edit for the version its gateway reads when the edit is made, under
the client's lock (`toolref_relay.as_edit.send_edit`'s `version`), and a refusal as
unreadable names the version that edit was written for (`Unreadable`). Before, the version
was set before the lock: a turn waiting for another (parallel subagents share a client)
wrote the version read before a replica of an older one answered, one refusal more, and
the refusal was counted against a version the edit was not written in."""

from __future__ import annotations

import asyncio
import json

import httpx

from toolref.edits import compact
from toolref.sending.answers import MALFORMED_BODY
from toolref.sending.editor import Editor
from toolref_relay.as_edit import Unreadable, send_edit
from toolref_relay.clients import Client

URL = "http://gateway/llm/anthropic/v1/messages"
BODY = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "Read the parser. " * 40}]}
).encode()
HEADERS = [("content-type", "application/json"), ("x-api-key", "sk-1")]


class Caps:
    version = 7


def refusing(sent: list[bytes]) -> httpx.MockTransport:
    """A gateway rolled back: every edit 400 `malformed-body`, as a receiver says it."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.read())
        problem = {"type": MALFORMED_BODY, "title": "Malformed body", "status": 400}
        headers = {"content-type": "application/problem+json", "toolref-edits": "6"}
        return httpx.Response(400, json=problem, headers=headers)

    return httpx.MockTransport(answer)


async def send(client: Client, pool: httpx.MockTransport, caps: Caps) -> object:
    return await send_edit(
        pool,
        client,
        url=URL,
        agent=HEADERS,
        extra=[],
        content=BODY,
        messages_key="messages",
        extensions={},
        version=lambda: caps.version,
    )


async def test_a_turn_that_waited_for_the_lock_writes_what_the_gateway_reads_by_then() -> None:
    client, caps = Client(Editor()), Caps()
    sent: list[bytes] = []
    await client.lock.acquire()  # another turn of the same client is preparing
    turn = asyncio.create_task(send(client, refusing(sent), caps))
    await asyncio.sleep(0)
    caps.version = 6  # meanwhile a replica of 6 answered: the relay writes 6 now
    client.lock.release()
    answer = await turn
    assert [body[0] for body in sent] == [5]  # 6's edits are written in 5's bytes
    assert answer == Unreadable(6)  # counted against the version it was written for
    assert client.editor.version == 6


async def test_an_unreadable_edit_names_its_own_version() -> None:
    client, caps = Client(Editor()), Caps()
    sent: list[bytes] = []
    answer = await send(client, refusing(sent), caps)
    assert [body[0] for body in sent] == [7]
    assert sent[0][0] in compact.MARKS
    assert answer == Unreadable(7)
