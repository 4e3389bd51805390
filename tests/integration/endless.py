"""A server for the slow-answer tests: each path answers as `Endless.routes` says, whole
(`Whole`) or a head, a start, then `piece` every `pause` seconds until the client leaves
(`Flood`); `closed` counts the endless answers the client left (nothing left behind)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

JSON = b"application/json"


@dataclass
class Whole:
    status: int
    body: bytes
    kind: bytes = JSON


@dataclass
class Flood:
    status: int
    start: bytes
    piece: bytes
    pause: float
    kind: bytes = JSON


HOW = {"trickled": (b" ", 0.02), "flooded": (b" " * 65536, 0.0)}


def flood(how: str, start: bytes, status: int = 200, kind: bytes = JSON) -> Flood:
    piece, pause = HOW[how]
    return Flood(status, start, piece, pause, kind)


def capabilities(**more: Any) -> bytes:
    """A registry's capabilities document (protocol 2, edits 2)."""
    limits = {
        "max_body_bytes": 1 << 25,
        "max_decompressed_bytes": 1 << 26,
        "max_depth": 64,
        "max_batch": 1000,
        "max_messages": 10_000,
    }
    document = {
        "protocol": {"low": 1, "high": 2},
        "ref_scheme": {
            "prefix": "tr_",
            "length": 29,
            "digest": "sha256",
            "digestBytes": 16,
            "encoding": "base32",
            "canonicalization": "jcs",
        },
        "encodings": ["application/json"],
        "compressors": [],
        "limits": limits,
        "ttl_seconds": 3600,
        "formats": ["openai"],
        "summarizers": [],
        "version": "test",
        "edits": 2,
        **more,
    }
    return json.dumps(document).encode()


@dataclass
class Endless:
    routes: dict[str, Whole | Flood]
    seen: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # endless answers the client left
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set at each one left

    async def leaving(self, path: str, times: int = 1) -> None:
        """Until the client left the endless answer at `path` `times` (its connection
        closed)."""
        while self.left.count(path) < times:
            self.changed.clear()
            await self.changed.wait()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        path = scope["path"]
        self.seen.append(f"{scope['method']} {path}")
        route = self.routes.get(path, Whole(404, b'{"error":"not found"}'))
        head = [(b"content-type", route.kind)]
        await send({"type": "http.response.start", "status": route.status, "headers": head})
        if isinstance(route, Whole):
            await send({"type": "http.response.body", "body": route.body})
            return
        await send({"type": "http.response.body", "body": route.start, "more_body": True})
        gone = asyncio.ensure_future(receive())
        try:
            while not gone.done():
                await asyncio.wait({gone}, timeout=route.pause)
                await send({"type": "http.response.body", "body": route.piece, "more_body": True})
                await asyncio.sleep(0)
        except OSError:
            pass
        finally:
            gone.cancel()
            self.left.append(path)
            self.changed.set()
