"""An answer of zstd frames back to back, a frame ending where a piece of the stream does,
is read whole (`toolref.registry.bounded`).

Found: httpx 0.28.1's zstd decoder takes a frame that ends exactly at the end of a piece
for the body's end, and fails the next piece ("cannot use a decompressobj multiple
times", `httpx.DecodingError`): the registry client's, the relay's start check's and
`toolref doctor`'s reads (`read_within`), and a sender's read of a refusal
(`read_problem`), failed on a valid answer from a proxy that compresses with several zstd
frames (RFC 8878 lets frames follow one another). The pieces a bounded read holds are
handed to httpx as one: a frame then ends inside it, which that decoder reads on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import zstandard

from toolref.registry.bounded import aread_problem, aread_within, read_problem, read_within

BODY = b'{"type":"about:blank","title":"x","detail":"' + b"y" * 300 + b'"}'
FRAMES = [
    zstandard.ZstdCompressor().compress(BODY[:40]),
    zstandard.ZstdCompressor().compress(BODY[40:]),
]
HEADERS = {"content-encoding": "zstd", "content-type": "application/problem+json"}


class Pieces(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A stream of one piece a frame: each frame ends where a piece does."""

    def __iter__(self) -> Iterator[bytes]:
        yield from FRAMES

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in FRAMES:
            yield piece


def answer() -> httpx.Response:
    return httpx.Response(400, headers=HEADERS, stream=Pieces())


def test_a_sync_read_takes_frames_that_end_with_their_pieces() -> None:
    assert read_within(answer(), 5.0, 64 * 1024) == BODY
    response = answer()
    read_problem(response)
    assert response.json()["detail"] == "y" * 300


def test_an_async_read_takes_frames_that_end_with_their_pieces() -> None:
    async def read() -> None:
        assert await aread_within(answer(), 5.0, 64 * 1024) == BODY
        response = answer()
        await aread_problem(response)
        assert response.json()["detail"] == "y" * 300

    asyncio.run(read())


def test_a_body_over_the_bound_is_still_left_a_stream() -> None:
    """The pieces are joined only for a body read whole: one over the bound is left a
    stream of its pieces as they came."""
    response = answer()
    read_problem(response, most=50)
    assert list(response.stream) == FRAMES  # type: ignore[arg-type]  # a sync stream here
    with pytest.raises(httpx.ResponseNotRead):
        response.content  # noqa: B018
