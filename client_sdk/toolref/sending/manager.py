"""`ToolReferenceManager`: a client app's LLM requests sent as edits of what its backend
already holds, through an `httpx` (or `httpx2`) client.

    manager = ToolReferenceManager()
    reply = manager.post(http, "/chat", json={"messages": history})

The body is the JSON an `httpx` client writes for `json=` (compact, UTF-8). The first
request to a backend goes as it is, offering edits (`Toolref-Edits: 5`); once the backend's
`ToolRefMiddleware` (or `withToolRef`, or the gateway) answers that it reads them, each
request travels as an edit: the segments the backend confirmed are kept by reference, new
ones inline, each compressed alone (`toolref.sending.sender`). The backend's app receives
exactly the bytes `http.post(url, json=...)` would have sent. A miss (the backend's registry
restarted, another replica, an expired recipe) is resent by itself; a backend that cannot
apply edits gets the request as it is. `stream` / `astream` hand the answer back unread.

Options:
    messages_key: where the messages sit in the body (checked: a list).
    max_recipes / max_recipe_bytes: the recipes the backend confirmed that are kept to edit
        against (`toolref.sending.recipes`; least recently used dropped first).
    size_guard: each new segment compressed alone (the default: its size tells nothing of
        what else the conversation holds); False: against the conversation (smaller, for a
        link no one else sees).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Final

import httpx

from toolref.kit.option_checks import check_count, check_key, check_retired
from toolref.registry.exchange import Exchange, run_async, run_sync
from toolref.sending import answers
from toolref.sending.editor import Editor
from toolref.sending.recipes import DEFAULT_MAX_BYTES, DEFAULT_MAX_RECIPES
from toolref.sending.request_checks import check_body, check_client, check_stream_method
from toolref.sending.savings import Savings
from toolref.sending.sender import Sender
from toolref.wire.encoding import JSON_TYPE, dumps_json
from toolref.wire.errors import ValidationError

# Options of the manager before edits (0.2): each is refused, naming why and what to do.
RETIRED: Final = {
    "format": "formats are not needed: requests travel as edits of their own bytes",
    "optimistic": "refs inside messages are no longer sent: requests travel as edits",
    "max_refs": "refs inside messages are no longer sent: use max_recipes",
    "track_savings": "savings are always counted (manager.savings)",
    "history_refs": "history refs were retired: requests travel as edits",
    "compress": "each new segment is compressed (size_guard says how)",
    "max_histories": "history refs were retired: use max_recipes",
    "max_transcripts": "transcripts were retired: use max_recipes",
    "max_transcript_bytes": "transcripts were retired: use max_recipe_bytes",
    "max_prior_bytes": "kept bodies were retired: use max_recipe_bytes",
}


class ToolReferenceManager:
    """A client's requests as edits (see the module docstring). `savings` says what they
    cost; one manager per client, which its threads or an event loop's tasks may share (the
    sender's lock is held for the work between sends, never across one)."""

    def __init__(
        self,
        *,
        messages_key: str = "messages",
        max_recipes: int = DEFAULT_MAX_RECIPES,
        max_recipe_bytes: int = DEFAULT_MAX_BYTES,
        size_guard: bool = True,
        **retired: Any,
    ) -> None:
        check_retired(
            "ToolReferenceManager",
            retired,
            RETIRED,
            "messages_key, max_recipes, max_recipe_bytes and size_guard",
        )
        check_key("messages_key", messages_key)
        check_count("max_recipes", max_recipes, 1)
        check_count("max_recipe_bytes", max_recipe_bytes, 1)
        if not isinstance(size_guard, bool):
            raise TypeError(f"size_guard must be True or False, not {size_guard!r}")
        self.messages_key = messages_key
        self.sender = Sender(Editor(max_recipes, max_recipe_bytes, size_guard=size_guard))

    @property
    def savings(self) -> Savings:
        return self.sender.savings

    def exchange(
        self, request: Any, *, messages_key: str | None = None
    ) -> Exchange[httpx.Response]:
        """The sans-I/O exchange under `post`, `stream` and `toolref.Transport`: `request`
        (its body read) as the app made it; yields the requests to send, returns the answer
        to hand back (a driver reads a problem to an edit the exchange may resend on, at most
        64 KiB, `answers.to_read`, hands every other answer back unread, and closes those
        the exchange resent past, `answers.drive`)."""
        content = request.content
        return self.sender.exchange(request, content, messages_key or self.messages_key)

    def post(
        self, client: httpx.Client, url: str, json: Mapping[str, Any], **kwargs: Any
    ) -> httpx.Response:
        """POST `json` (holding the messages) through `client`, as an edit once the backend
        reads them. Extra keyword arguments (headers, params, timeout, ...) go to
        `client.build_request`."""
        check_client(client, sync=True)
        request = self._request(client, url, json, kwargs)
        return run_sync(self.exchange(request), client.send)

    async def apost(
        self, client: httpx.AsyncClient, url: str, json: Mapping[str, Any], **kwargs: Any
    ) -> httpx.Response:
        """Async `post`."""
        check_client(client, sync=False)
        request = self._request(client, url, json, kwargs)
        return await run_async(self.exchange(request), client.send)

    @contextlib.contextmanager
    def stream(
        self,
        client: httpx.Client,
        method: str,
        url: str,
        *,
        json: Mapping[str, Any],
        **kwargs: Any,
    ) -> Iterator[httpx.Response]:
        """`client.stream("POST", url, ...)` sent as `post` sends: the answer is handed back
        unread (read it with `iter_lines`, `iter_bytes`, ...). `method` must be "POST"."""
        check_stream_method(method)
        check_client(client, sync=True)
        request = self._request(client, url, json, kwargs)
        response = answers.drive(
            self.exchange(request), lambda step: answers.send_streaming(client, step)
        )
        try:
            yield response
        finally:
            response.close()

    @contextlib.asynccontextmanager
    async def astream(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        *,
        json: Mapping[str, Any],
        **kwargs: Any,
    ) -> AsyncIterator[httpx.Response]:
        """Async `stream`: `async with manager.astream(client, "POST", url, json=...)`."""
        check_stream_method(method)
        check_client(client, sync=False)
        request = self._request(client, url, json, kwargs)
        response = await answers.adrive(
            self.exchange(request), lambda step: answers.asend_streaming(client, step)
        )
        try:
            yield response
        finally:
            await response.aclose()

    def _request(
        self,
        client: httpx.Client | httpx.AsyncClient,
        url: str,
        body: Mapping[str, Any],
        kwargs: dict[str, Any],
    ) -> httpx.Request:
        """The request `client.post(url, json=body, **kwargs)` would send."""
        check_body(body, self.messages_key)
        headers = httpx.Headers(kwargs.pop("headers", None))  # any case: one Content-Type
        headers.setdefault("Content-Type", JSON_TYPE)
        try:
            content = dumps_json(body)
        except (TypeError, ValueError) as error:  # a datetime, a set, NaN: no JSON form
            raise ValidationError(
                f"json is not JSON-serializable ({error}); convert such values first "
                "(str() a datetime, list() a set, None for NaN) or json.loads(your_dumps(body))"
            ) from error
        return client.build_request("POST", url, content=content, headers=headers, **kwargs)
