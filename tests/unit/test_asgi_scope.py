"""`toolref.asgi.scope`: the scope of a body the app is handed instead, and work run while
the client is connected."""

from __future__ import annotations

import asyncio

import pytest

from toolref.asgi.scope import Message, Scope, while_connected, with_body


def test_with_body_replaces_the_framing_headers_in_any_case() -> None:
    """A scope whose header names are not lowercased (a middleware before this one wrote
    them so): the old `Content-Encoding` and `Content-Length` go, whatever their case."""
    scope: Scope = {
        "type": "http",
        "headers": [
            (b"Content-Encoding", b"gzip"),
            (b"Content-Length", b"12"),
            (b"X-Title", b"kept"),
        ],
    }
    assert with_body(scope, 345)["headers"] == [(b"X-Title", b"kept"), (b"content-length", b"345")]


async def test_a_watch_that_fails_does_not_cancel_the_work() -> None:
    """`receive` failing (a server that raises once the client is gone, say) says nothing
    about a disconnect: the work runs to its end, its result kept."""
    finished = asyncio.Event()

    async def receive() -> Message:
        raise RuntimeError("receive failed")

    async def work() -> None:
        for _ in range(20):  # past the failed watch
            await asyncio.sleep(0)
        finished.set()

    await while_connected(work(), receive)
    assert finished.is_set()


async def test_the_works_exception_is_raised_even_when_the_watch_failed() -> None:
    async def receive() -> Message:
        raise RuntimeError("receive failed")

    async def work() -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        raise ValueError("the work's own")

    with pytest.raises(ValueError, match="the work's own"):
        await while_connected(work(), receive)


async def test_a_disconnect_cancels_the_work() -> None:
    cancelled = asyncio.Event()

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await while_connected(work(), receive)
    assert cancelled.is_set()
