"""What the registry answers, as the client hands it over: `Resolved`, `MessagesResult`,
`HydratedText`, `AppliedEdit`, each read through its wire model (`toolref.wire.models`), and
`read`, the one way a decoded answer becomes its model (anything else is
`UnexpectedResponseError`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic

from toolref.kit import spans
from toolref.wire.errors import UnexpectedResponseError
from toolref.wire.models import (
    Invocation,
    MessagesAnswer,
    MessagesResponse,
    pointer,
)

Answer = TypeVar("Answer", bound=pydantic.BaseModel)


def problems(exc: pydantic.ValidationError) -> str:
    """How many things are wrong, and the first (where, what), in words."""
    first = exc.errors(include_url=False, include_input=False)[0]
    return f"{exc.error_count()} problem(s), first: {pointer(first['loc']) or '/'}: {first['msg']}"


def read(model: type[Answer], body: Any, where: str, status: int) -> Answer:
    """`body`, a decoded answer of `where` (`GET http://host/path`), as `model`."""
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        raise UnexpectedResponseError(
            f"{where} answered with what is not a toolref {model.__name__} ({problems(exc)}); "
            "is it a toolref registry?",
            httpStatus=status,
        ) from None


@dataclass(frozen=True, slots=True)
class Resolved:
    invocations: dict[str, Invocation]
    missing: list[str]


@dataclass(frozen=True, slots=True)
class MessagesResult:
    """What optimize and hydrate answer."""

    format: str
    messages: list[Any]
    tool_references: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, answer: MessagesResponse) -> MessagesResult:
        return cls(
            format=answer.format,
            messages=answer.messages,
            tool_references=dict(answer.tool_references or {}),
            stats=answer.optimization_stats.model_dump(by_alias=True, exclude_none=True),
        )


@dataclass(frozen=True, slots=True)
class HydratedText:
    """A hydrate answer read as text: its messages stay the JSON text the registry wrote
    (the payloads and messages exactly as their clients sent them), to be spliced; its
    other members are read through `MessagesAnswer`."""

    text: str
    messages: tuple[int, int]  # span of the messages array in `text`
    format: str
    tool_references: dict[str, str]

    @property
    def messages_text(self) -> str:
        return self.text[self.messages[0] : self.messages[1]]

    @classmethod
    def of(cls, text: str) -> HydratedText:
        """`ValueError` (saying why) for a text that is not a hydrate answer."""
        document = spans.document(text)
        found = document.members.get("messages")
        if not isinstance(document.value, dict) or found is None:
            raise ValueError("not a hydrate answer: no `messages`")
        if text[found.start : found.start + 1] != "[":
            raise ValueError("not a hydrate answer: `messages` is not an array")
        others = {k: v for k, v in document.value.items() if k != "messages"}
        try:
            answer = MessagesAnswer.model_validate(others)
        except pydantic.ValidationError as exc:
            raise ValueError(f"not a hydrate answer ({problems(exc)})") from None
        return cls(
            text,
            (found.start, found.end),
            answer.format,
            dict(answer.tool_references or {}),
        )


@dataclass(frozen=True, slots=True)
class AppliedEdit:
    """An edit the registry applied (`POST /v1/edits:apply`): the request's segment 0 (its
    header lines, a credential's name-only), its body, the recipe kept (`ref`), and the
    request's segments, headers first, when they were asked for (else empty)."""

    head: bytes
    body: bytes
    ref: str
    segments: Sequence[bytes] = ()


# Called with the bytes of an applied edit's body before it is built (joined): a budget
# charges them, a limit refuses them by raising; nothing is held yet when it raises.
Reserve = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class HeldRequest:
    """A recipe whose request a caller holds as segments (an earlier `AppliedEdit`'s):
    what an edit of it is answered against."""

    ref: str
    segments: Sequence[bytes]
