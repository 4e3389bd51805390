"""`Clients`: the relay's memory per client, one `Client` (an `Editor`) for each upstream
and provider credential, so that a process without the agent's credential shares nothing
with the agent.

A client's state holds what it sent: the recipes the gateway confirmed. Shared, one
client's request would be sent as an edit of another's recipe, and its size
(`Toolref-Savings`) would tell the sender what the other sent.
A client is known by the credential its requests carry for the provider
(`CREDENTIAL_HEADERS`, Gemini's `key` query parameter): a keyed digest of it, made with a
secret drawn at each start, never the value itself, never logged. Requests without any
credential are one client.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl

from toolref.asgi.hops import Pairs
from toolref.kit.lru import LRU
from toolref.sending.editor import Editor

# Where the providers the relay speaks take their credential (Anthropic `x-api-key` or an
# OAuth bearer, OpenAI `Authorization`, Azure `api-key`, Gemini `x-goog-api-key`).
CREDENTIAL_HEADERS: Final = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
CREDENTIAL_PARAMS: Final = frozenset({"key"})  # Gemini's ?key=


@dataclass(frozen=True, slots=True)
class Client:
    """One client's state: its editor (edits, when the gateway takes them) and the lock its
    turns take to use it one at a time."""

    editor: Editor
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def answered(self, ref: str, answer: bytes | None) -> None:
        """The editor told of the answer recipe `ref`'s request streamed, under the lock: a
        turn holding it may be preparing in a worker thread (a large body), and the editor
        is not thread-safe (keeping an answer may drop recipes that thread iterates). Told
        at once when the lock is free, else once it is (that turn's edit then does without
        this answer as its dictionary)."""
        if not self.lock.locked():
            self.editor.answered(ref, answer)
            return
        task = asyncio.get_running_loop().create_task(self._answered_later(ref, answer))
        _TELLING.add(task)
        task.add_done_callback(_TELLING.discard)

    async def _answered_later(self, ref: str, answer: bytes | None) -> None:
        async with self.lock:
            self.editor.answered(ref, answer)


_TELLING: Final[set[asyncio.Task[None]]] = set()  # answers waiting for their client's lock


def credential_digest(headers: Pairs, query: str, secret: bytes) -> bytes:
    """HMAC-SHA256 under `secret` of the request's provider credentials (every value of the
    headers and query parameters named above, in a fixed order); the same for every request
    of a client, and for every request with none. Linear in the headers and the query."""
    found = sorted(
        [(name.lower(), value) for name, value in headers if name.lower() in CREDENTIAL_HEADERS]
        + [
            ("?" + name, value)
            for name, value in parse_qsl(query, keep_blank_values=True)
            if name in CREDENTIAL_PARAMS
        ]
    )
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for name, value in found:
        for part in (name.encode("latin-1"), value.encode("latin-1", "replace")):
            mac.update(len(part).to_bytes(8, "big") + part)
    return mac.digest()


class Clients:
    """The state of the clients seen last: at most `limit` (least recently used dropped
    first, with all they held: that client's next turn travels whole once). `make`: a new,
    empty client."""

    def __init__(self, make: Callable[[], Client], limit: int) -> None:
        if limit < 1:
            raise ValueError(f"--max-clients is {limit}; give a positive number of clients")
        self.limit, self._make = limit, make
        self._secret = secrets.token_bytes(32)  # this start's: digests mean nothing after
        self._clients: LRU[tuple[str, bytes], Client] = LRU(limit)

    def __len__(self) -> int:
        return len(self._clients)

    def client(self, upstream: str, headers: Pairs, query: str) -> Client:
        """The state of the client that sent `headers` and `query`, for `upstream` (made on
        first use)."""
        key = (upstream, credential_digest(headers, query, self._secret))
        found = self._clients.get(key)
        if found is None:
            found = self._make()
            self._clients.put(key, found)
        return found
