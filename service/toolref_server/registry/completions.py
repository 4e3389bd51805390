"""Chat completions from an OpenAI-compatible endpoint, bounded in time, bytes and shape.

One call is `POST {base_url}/chat/completions`. Whatever the endpoint does:

- **time**: the whole call (waiting for a connection, connecting, sending, the status line,
  every byte of the answer) ends within `deadline` seconds. A per-read timeout alone is not
  a bound: a server that sends one byte a second never trips it.
- **connections**: at most `connections` calls at once (every tenant's: one client per
  process); a call waits for one of them at most `pool_wait` seconds (within `deadline`),
  then is `CompletionBusy`: the endpoint was never asked, so that is no failure of it, and
  a call it does answer too late had at least `deadline - pool_wait` seconds.
- **bytes**: at most `max_bytes` of answer are read. An answer that declares more
  (`Content-Length`) is refused before its first byte; one that does not is refused one
  network read past the limit, and the connection is closed (never drained). The answer is
  asked for uncompressed (`Accept-Encoding: identity`); a compressed one is refused, so the
  limit is on what is held in memory.
- **shape**: the answer is parsed by the service's own bounded decoder (`documents.decode`:
  UTF-8, nesting depth `ANSWER_DEPTH`, containers counted before parsing) and must hold
  `choices[0].message.content` as text. Anything else (a deep nest, bad UTF-8, a number
  Python cannot read, the wrong shape) is a `CompletionError`, never another exception.
- **refusals**: an answer saying the request was wrong (`REFUSED`: 400, 413, 422; a content
  filter's 400, say) is `CompletionRefused`: the endpoint answered, about that input, so it
  says nothing of the endpoint's health, which one tenant's inputs must not decide.
- **no text**: a chat completion whose message holds no text (content empty, blank or null:
  an output filter's, a model's refusal) is `CompletionEmpty`: the endpoint answered, so it
  is healthy, and that answer is no summary.

The caller (a summarizer) turns a `CompletionError` into its fallback.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import httpx

from toolref.wire import redaction
from toolref.wire.errors import ToolrefError
from toolref_server import documents

# A chat completion nests about 6 levels (choices, message, tool_calls, logprobs); an
# answer nested deeper than this is not one.
ANSWER_DEPTH: Final = 32


class CompletionError(Exception):
    """The endpoint gave no usable answer: an HTTP error, a timeout, too many bytes, not a
    chat completion, or no text in it."""


# Statuses that say the request, not the endpoint, was wrong: an input it will not take.
REFUSED: Final = frozenset({400, 413, 422})


class CompletionRefused(CompletionError):
    """The endpoint refused this request's input (`REFUSED`): no failure of the endpoint."""


class CompletionEmpty(CompletionError):
    """The endpoint answered a chat completion whose message holds no text: it answered,
    and the answer is no summary (an output filter's, say)."""


class CompletionBusy(CompletionError):
    """No connection to the endpoint came free within the pool wait: it was not asked."""


class Completions:
    """A client for one OpenAI-compatible endpoint."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        deadline: float,
        max_bytes: int,
        connections: int = 100,
        pool_wait: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.pool_wait = min(pool_wait, deadline) if pool_wait is not None else deadline / 4
        # Calls take a place here before httpx's pool (as large), so the wait for a
        # connection is bounded, and told apart from the endpoint's own slowness.
        self._places = asyncio.Semaphore(connections)
        self.limits = documents.BodyLimits(max_bytes, max_bytes, ANSWER_DEPTH)
        headers = {"Accept-Encoding": "identity"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # httpx's own timeouts (per connect, per read) stay as an inner bound.
        idle = min(connections, 20)  # httpx's own default of connections kept open idle
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=idle)
        self._http = httpx.AsyncClient(
            headers=headers, timeout=deadline, limits=limits, transport=transport
        )

    async def text(self, body: dict[str, Any]) -> str:
        """The text of the completion `body` asks for (stripped, never empty); a
        `CompletionBusy` when no connection came free within `pool_wait`."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.pool_wait):
                await self._places.acquire()
        except TimeoutError:
            raise CompletionBusy(
                f"no free connection to the model within {self.pool_wait}s (all "
                "TOOLREF_LLM_MAX_CONNECTIONS in use; TOOLREF_LLM_POOL_WAIT)"
            ) from None
        try:
            async with asyncio.timeout_at(started + self.deadline):
                data = await self._answer(body)
        except TimeoutError:
            raise CompletionError(
                f"no complete answer within {self.deadline}s (TOOLREF_LLM_TIMEOUT bounds the "
                "whole call)"
            ) from None
        except httpx.HTTPError as exc:
            shown = redaction.urls_in(str(exc))  # httpx may name the URL, credentials and all
            raise CompletionError(f"{type(exc).__name__}: {shown}") from exc
        finally:
            self._places.release()
        return answer_text(data, self.limits)

    async def _answer(self, body: dict[str, Any]) -> bytes:
        """The answer's bytes, read up to the limit. Memory: at most `max_bytes` plus one
        network read."""
        async with self._http.stream("POST", self.url, json=body) as response:
            if not response.is_success:
                said = f"HTTP {response.status_code} from {redaction.url(self.url)}"
                refused = response.status_code in REFUSED
                raise CompletionRefused(said) if refused else CompletionError(said)
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise CompletionError(
                    f"the answer is {encoding}-encoded although identity was asked; its size "
                    "could not be bounded before inflating it"
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise CompletionError(self._too_large(f"declares {declared} bytes"))
            parts: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():  # identity: as received
                size += len(chunk)
                if size > self.max_bytes:
                    raise CompletionError(self._too_large(f"ran past {size} bytes"))
                parts.append(chunk)
        return b"".join(parts)

    def _too_large(self, what: str) -> str:
        return (
            f"the answer {what}, over the limit of {self.max_bytes} "
            "(TOOLREF_LLM_MAX_ANSWER_BYTES); the rest was not read"
        )

    async def aclose(self) -> None:
        await self._http.aclose()


def answer_text(data: bytes, limits: documents.BodyLimits) -> str:
    """`choices[0].message.content` of a chat completion's bytes, stripped; a
    `CompletionEmpty` when the message holds no text (content empty, blank, null or absent),
    a `CompletionError` for anything else. Linear in `data` (at most `limits.max_body_bytes`,
    so small enough to parse on the event loop)."""
    try:
        value = documents.decode(data, "json", limits)
    except ToolrefError as exc:
        raise CompletionError(f"the answer is not a JSON chat completion: {exc.detail}") from None
    choices = value.get("choices") if isinstance(value, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise CompletionError("the answer holds no message at choices[0].message")
    text = message.get("content")
    if text is None or (isinstance(text, str) and not text.strip()):
        assert isinstance(first, dict)  # `message` came from it
        finish = first.get("finish_reason")  # "content_filter", say; the peer's: cut
        said = f" (finish_reason {finish[:40]!r})" if isinstance(finish, str) else ""
        raise CompletionEmpty(f"the model answered no text at choices[0].message.content{said}")
    if not isinstance(text, str):
        raise CompletionError("the answer holds no text at choices[0].message.content")
    return text.strip()
