"""A recipe's stored bytes that do not read (corrupt, or compressed with a dictionary this
replica lacks) are a miss that recovers by itself: they are deleted where they are read,
so the client's resend (written SET NX) stores the good bytes and the next turn is served.

Over real sockets, on the test engine, with no edit cache (every turn reads the store, as
a replica that did not serve the last turn does)."""

from __future__ import annotations

import random

import httpx
import pytest
from redis.asyncio import Redis

from tests.unit.edits.test_edits import conversation, edited
from toolref.edits.recipe import PIECE_MIN
from toolref_server.settings import LOCAL_TENANT
from toolref_server.storage import keys

from .test_gateway_edits import assert_exact, body_of, client, stack_of

pytestmark = pytest.mark.engine


def slugs(answers: list[httpx.Response]) -> list[str]:
    return [a.json()["type"].rsplit(":", 1)[-1] for a in answers if a.status_code >= 400]


# A piece's zstd frame header gone bad, declaring 1 TiB (single segment, an 8-byte size).
HUGE_FRAME = b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little") + b"gone bad"


@pytest.mark.parametrize("corrupt", [b"\x28\xb5\x2f\xfd not a frame", b"garbage"])
async def test_a_piece_that_does_not_read_is_deleted_and_the_resend_stores_it(
    redis: Redis, corrupt: bytes
) -> None:
    """Found in review: a piece whose stored bytes did not inflate or hash to its id read
    as missing but stayed; the resend wrote it SET NX (kept the bad bytes), so every later
    turn of the conversation missed again until the key expired. Now the bad value is
    deleted when read: the resend stores the piece, and the turn after it is served."""
    async for stack in stack_of(redis, 1, edit_cache_bytes=0):
        sender = await client(stack.gateways[0])
        large = [{"role": "user", "content": f"{n} " + "p" * PIECE_MIN} for n in range(2)]
        messages = [*large, *conversation(10, 3)]
        for n in range(2):  # a recipe of its own, then an edit of it
            messages = edited(messages, "append", random.Random(n))
            assert (await sender.send(body_of(messages))).status_code == 200
        assert len(sender.answers) == 2
        piece = sorted(sender.held)[0]
        key = keys.edit_piece(LOCAL_TENANT, piece)
        assert await redis.exists(key)
        await redis.set(key, corrupt, keepttl=True)  # the engine's bytes gone bad
        messages = edited(messages, "append", random.Random(5))
        answer = await sender.send(body_of(messages))  # a miss, then the resend
        assert answer.status_code == 200, answer.text
        assert slugs(sender.answers[2:]) == ["missing-history", "missing-pieces"]
        assert_exact(stack, body_of(messages))
        assert await redis.get(key) != corrupt  # the resend's bytes stored
        for n in range(2):  # served: each turn one request
            before = len(sender.answers)
            messages = edited(messages, "append", random.Random(10 + n))
            answer = await sender.send(body_of(messages))
            assert answer.status_code == 200, answer.text
            assert slugs(sender.answers[before:]) == []
            assert_exact(stack, body_of(messages))


async def test_a_named_piece_whose_frame_declares_an_impossible_size_is_a_miss_not_a_413(
    redis: Redis,
) -> None:
    """Found in review: a piece the edit names anew (here a message dropped, then brought
    back: the base does not read it) whose stored frame header went bad, declaring 1 TiB,
    failed the edit's size check with 413 before it was read, so it was never deleted:
    every edit naming it was refused until it expired. Now it is a miss: deleted, listed
    in `missingPieces`, resent and stored, and the turns after are served."""
    async for stack in stack_of(redis, 1, edit_cache_bytes=0, edit_snapshot_every=1):
        sender = await client(stack.gateways[0])
        large = {"role": "user", "content": "back " + "p" * PIECE_MIN}
        history = conversation(10, 3)
        assert (await sender.send(body_of([large, *history]))).status_code == 200
        assert (await sender.send(body_of(history))).status_code == 200  # dropped
        (piece,) = sender.held
        key = keys.edit_piece(LOCAL_TENANT, piece)
        assert await redis.exists(key)
        await redis.set(key, HUGE_FRAME, keepttl=True)
        messages = [large, *history]  # brought back: named, not in the base
        answer = await sender.send(body_of(messages))
        assert answer.status_code == 200, answer.text
        assert slugs(sender.answers[2:]) == ["missing-pieces"]
        assert_exact(stack, body_of(messages))
        assert await redis.get(key) != HUGE_FRAME  # the resend's bytes stored
        before = len(sender.answers)
        messages = edited(messages, "append", random.Random(1))
        assert (await sender.send(body_of(messages))).status_code == 200
        assert slugs(sender.answers[before:]) == []
