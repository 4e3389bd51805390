"""The one exception tree shared by the SDK and the service.

Every error that can cross the wire is a `ToolrefError` subclass with a stable problem
`slug` and HTTP `status`. The service renders them as RFC 9457 problem+json; the client
maps a problem back to the same class by its `type`, so both sides raise the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from toolref.wire.numbers import whole_number

PROBLEM_BASE = "urn:toolref:problem:"


class ToolrefError(Exception):
    """Base of every toolref error. `detail` says what was wrong and how to fix it."""

    slug: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra: dict[str, Any] = extra

    @classmethod
    def problem_type(cls) -> str:
        return PROBLEM_BASE + cls.slug

    def http_headers(self) -> dict[str, str]:
        """Headers the service sends with this problem (Retry-After, WWW-Authenticate)."""
        return {}

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        """Rebuild the error a service answered with (the client side of `to_problem`)."""
        return cls(detail, **extra)

    def to_problem(self) -> dict[str, Any]:
        """The RFC 9457 problem object for this error."""
        problem: dict[str, Any] = {
            "type": self.problem_type(),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        problem.update(self.extra)
        return problem


# --- canonical form and refs (raised by the SDK and the service alike) ---


class CanonicalizationError(ToolrefError, ValueError):
    """A value has no canonical JSON form."""

    slug = "not-canonicalizable"
    status = 422
    title = "Value has no canonical JSON form"


class NonFiniteNumberError(CanonicalizationError):
    """NaN or Infinity, which JSON (and RFC 8785) cannot represent."""

    slug = "non-finite-number"
    title = "NaN and Infinity are not JSON"


class InvalidRefError(ToolrefError, ValueError):
    """A string that is not a well-formed `tr_` ref."""

    slug = "invalid-ref"
    status = 422
    title = "Malformed ref"


# --- request problems (4xx) ---


class BadRequestError(ToolrefError):
    """The request cannot be read as sent."""

    slug = "bad-request"
    status = 400
    title = "Bad request"


class MalformedBodyError(BadRequestError):
    """The body is not valid JSON or msgpack."""

    slug = "malformed-body"
    title = "Malformed request body"


class DictionaryMismatchError(MalformedBodyError):
    """An edit's inline bytes (sent without the size guard) did not inflate against the
    dictionary its base's segments make: send them again with no dictionary."""

    slug = "dictionary-mismatch"
    title = "Body does not match the history's dictionary"


class InvalidProtocolError(BadRequestError):
    """The `Toolref-Protocol` header is not a supported version number."""

    slug = "invalid-protocol"
    title = "Invalid Toolref-Protocol header"


class ProtocolRequiredError(BadRequestError):
    """The endpoint deals in refs, which protocol 1 clients never receive."""

    slug = "protocol-required"
    title = "Endpoint needs protocol 2"


class MalformedRequestError(BadRequestError):
    """The request is not valid HTTP/1.1: refused by the HTTP layer before any route runs."""

    slug = "malformed-request"
    title = "Malformed HTTP request"


class HeadersTooLargeError(MalformedRequestError):
    """The request line and headers are longer than the HTTP layer reads."""

    slug = "headers-too-large"
    status = 431
    title = "Request headers too large"


class RequestTimeoutError(ToolrefError):
    """The request (its head, or its body) did not arrive in time; the connection is closed."""

    slug = "request-timeout"
    status = 408
    title = "Request not received in time"


class UnsupportedMediaTypeError(ToolrefError):
    """Unsupported `Content-Type` or `Content-Encoding`."""

    slug = "unsupported-media-type"
    status = 415
    title = "Unsupported media type"


class LimitExceededError(ToolrefError):
    """A configured limit was exceeded; `limit` names it."""

    slug = "limit-exceeded"
    status = 413
    title = "Limit exceeded"


class BodyTooLargeError(LimitExceededError):
    slug = "body-too-large"
    title = "Request body too large"


class DecompressedTooLargeError(LimitExceededError):
    slug = "decompressed-too-large"
    title = "Decompressed request body too large"


class BatchTooLargeError(LimitExceededError):
    slug = "batch-too-large"
    title = "Batch too large"


class TooManyItemsError(LimitExceededError):
    """A body holds an array or object with more items, or more arrays and objects in all,
    than the service decodes (refused while decoding, before they are built)."""

    slug = "too-many-items"
    title = "Too many items in the body"


class ValidationError(ToolrefError, ValueError):
    """The body parsed but does not have the required shape. The SDK raises it too, before
    any request, for a value of the wrong shape handed to it: an unknown format name or
    mode, an invocation mapping with an unknown or missing key, a body without messages."""

    slug = "validation-failed"
    status = 422
    title = "Request validation failed"


class NestingTooDeepError(ValidationError):
    slug = "nesting-too-deep"
    title = "JSON nesting too deep"


class UnsupportedValueError(ValidationError):
    """A decoded value that JSON cannot carry (msgpack bin or ext, non-string keys)."""

    slug = "unsupported-value"
    title = "Value is not JSON"


class AuthenticationError(ToolrefError):
    """Missing or unknown API key. `key_header`: the key is sent alone in that header (the
    gateway's `Toolref-Key`, where `Authorization` is the provider's), not as a bearer
    token; the challenge then names that header, and says what to send."""

    slug = "unauthorized"
    status = 401
    title = "Missing or invalid API key"

    def __init__(
        self,
        detail: str,
        *,
        invalid_token: bool = False,
        key_header: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail, **extra)
        self.invalid_token = invalid_token
        self.key_header = key_header

    def http_headers(self) -> dict[str, str]:
        challenge = f'{self.key_header or "Bearer"} realm="toolref"'
        if self.invalid_token:
            challenge += ', error="invalid_token"'
        if self.key_header is not None:
            challenge += (
                f', error_description="send a toolref API key in the {self.key_header} header '
                '(toolref-server keygen makes one)"'
            )
        return {"WWW-Authenticate": challenge}


class ForbiddenError(ToolrefError):
    """Refused whoever asks: no key would open it from there (the metrics endpoints without
    TOOLREF_METRICS_KEY, asked from beyond this machine)."""

    slug = "forbidden"
    status = 403
    title = "Forbidden"


class NotFoundError(ToolrefError):
    """An unknown ref, or another tenant's: the two cannot be told apart."""

    slug = "not-found"
    status = 404
    title = "Not found"


class MethodNotAllowedError(ToolrefError):
    """The path is served, but not with this method; `allow` lists the methods it is
    (sent as the `Allow` header, as RFC 9110 requires of a 405)."""

    slug = "method-not-allowed"
    status = 405
    title = "Method not allowed"

    def __init__(self, detail: str, *, allow: Sequence[str] = (), **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.allow = tuple(allow)

    def http_headers(self) -> dict[str, str]:
        return {"Allow": ", ".join(self.allow)}

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        allow = [method.strip() for method in headers.get("allow", "").split(",")]
        return cls(detail, allow=[method for method in allow if method], **extra)


class HistoryRefsRetiredError(BadRequestError):
    """A request of the history-ref protocol (retired in 0.3: edits replace it)."""

    slug = "history-refs-retired"
    title = "History refs were retired"


class ConflictError(ToolrefError):
    slug = "conflict"
    status = 409
    title = "Conflict"


class RefCollisionError(ConflictError):
    """Two different invocations share a 128-bit ref; the stored one is never served for it."""

    slug = "ref-collision"
    title = "Ref collision"


class MissingRefsError(ConflictError):
    """Refs the server does not hold; resend those payloads in full."""

    slug = "missing-refs"
    title = "Unknown refs"

    def __init__(self, detail: str, missing_refs: list[str], **extra: Any) -> None:
        super().__init__(detail, missingRefs=missing_refs, **extra)
        self.missing_refs = missing_refs

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        missing = extra.pop("missingRefs", [])
        return cls(
            detail, [str(ref) for ref in missing] if isinstance(missing, list) else [], **extra
        )


class MissingHistoryError(ConflictError):
    """An edit's base recipe (`tb_` ref) the server does not hold whole (never kept for this
    API key, expired or evicted): send the edit again with no base."""

    slug = "missing-history"
    title = "Unknown history"

    def __init__(self, detail: str, missing_history: str, **extra: Any) -> None:
        super().__init__(detail, missingHistory=missing_history, **extra)
        self.missing_history = missing_history

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        missing = extra.pop("missingHistory", "")
        return cls(detail, str(missing), **extra)


class MissingPiecesError(ConflictError):
    """Pieces an edit names (`tp_` refs) that the server does not hold (never kept for this
    API key, expired or evicted): send the edit again with those segments inline."""

    slug = "missing-pieces"
    title = "Unknown pieces"

    def __init__(self, detail: str, missing_pieces: list[str], **extra: Any) -> None:
        super().__init__(detail, missingPieces=missing_pieces, **extra)
        self.missing_pieces = missing_pieces

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        missing = extra.pop("missingPieces", [])
        return cls(
            detail, [str(ref) for ref in missing] if isinstance(missing, list) else [], **extra
        )


# --- server-side conditions (5xx) ---


class ServiceUnavailableError(ToolrefError):
    """The service cannot answer now; retry after `retry_after` seconds."""

    slug = "unavailable"
    status = 503
    title = "Service unavailable"

    def __init__(self, detail: str, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after = retry_after

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}

    @classmethod
    def from_problem(cls, detail: str, extra: dict[str, Any], headers: Mapping[str, str]) -> Self:
        after = whole_number(headers.get("retry-after", "1"), 9)
        return cls(detail, retry_after=after if after else 1, **extra)


class OverloadedError(ServiceUnavailableError):
    """Client side too: the service holds as many connections or requests as it is set to
    serve at once; `limit` names the setting. Retry after `retry_after` seconds."""

    slug = "overloaded"
    title = "Service overloaded"


class QuotaExceededError(ServiceUnavailableError):
    """A tenant's quota is used up: `quota` names it (`requestsPerSecond`, `storedBytes`),
    `limit` its value. Like a 503, the registry cannot serve this request now: send full
    payloads, and try again after `retry_after` seconds."""

    slug = "quota-exceeded"
    status = 429
    title = "Quota exceeded"


class StoreUnavailableError(ServiceUnavailableError):
    slug = "store-unavailable"
    title = "Store unavailable"


class RegistryUnreachableError(ServiceUnavailableError):
    """Client side: the registry did not answer (connection errors, timeouts, 503s, retries
    spent). Send full payloads; the client keeps track of when to try again."""

    slug = "unreachable"
    title = "Registry unreachable"


class CircuitOpenError(RegistryUnreachableError):
    """Client side: recent calls failed, so this one was not even tried."""

    slug = "circuit-open"
    title = "Registry skipped after repeated failures"


class UnexpectedResponseError(ToolrefError):
    """Client side: an answer that is not the registry's (a proxy's error page, say)."""

    slug = "unexpected-response"
    title = "Unexpected response"


class ConfigurationError(ToolrefError):
    """Settings that cannot work; raised at start-up, never over the wire."""

    slug = "configuration"
    title = "Invalid configuration"


class StreamError(ToolrefError, ValueError):
    """Client side: a streamed response could not be turned into tool calls."""

    slug = "stream"
    title = "Stream problem"


class ChunkSequenceError(StreamError):
    """Client side: tool-call chunks arrived in an order that no provider produces."""

    slug = "chunk-sequence"
    title = "Chunks out of sequence"


class UnusableToolCallError(StreamError):
    """Client side: a tool call that is incomplete or invalid was asked to run or register."""

    slug = "unusable-tool-call"
    title = "Tool call cannot be used"


class AcpError(ToolrefError, ValueError):
    """Client side: an ACP notification the protocol cannot carry."""

    slug = "acp"
    title = "ACP notification refused"


class UnknownToolCallError(AcpError):
    """Client side: an update for a tool call id that was never announced with tool_call."""

    slug = "acp-unknown-tool-call"
    title = "Tool call never announced"


class DuplicateToolCallError(AcpError):
    """Client side: a second tool_call for an id; clients reset the call when they get one."""

    slug = "acp-duplicate-tool-call"
    title = "Tool call announced twice"


def _all_subclasses(cls: type[ToolrefError]) -> list[type[ToolrefError]]:
    found: list[type[ToolrefError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


def error_class_for(problem_type: str) -> type[ToolrefError]:
    """The error class whose problem `type` this is; `ToolrefError` when unknown."""
    for cls in _all_subclasses(ToolrefError):
        if cls.problem_type() == problem_type:
            return cls
    return ToolrefError


def error_from_problem(
    problem: Mapping[str, Any], status: int, headers: Mapping[str, str]
) -> ToolrefError:
    """The typed error for a problem+json answer (any status, any type)."""
    cls = error_class_for(str(problem.get("type", "")))
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    extra = {k: v for k, v in problem.items() if k not in ("type", "title", "status", "detail")}
    if cls is ToolrefError:
        return UnexpectedResponseError(detail, httpStatus=status, **extra)
    return cls.from_problem(detail, extra, headers)
