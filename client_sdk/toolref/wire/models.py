"""Pydantic wire models: the JSON (or msgpack) shapes of DESIGN.md's REST API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, TypeVar

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from toolref.wire.canonical import Digest, invocation_digest, invocation_object
from toolref.wire.errors import ValidationError


def _a_number(value: Any) -> Any:
    """A JSON number, for an integer member: pydantic's own check then takes 5 and 5.0
    (JSON Schema's integers both) and refuses 5.5; a string ("5") or a boolean, which its
    lax mode would also take, is refused here, as the published schema says."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


WholeNumber = Annotated[int, BeforeValidator(_a_number)]
"""An integer member of a request: a JSON number without a fraction, nothing else."""


class WireModel(BaseModel):
    """Base for request models: camelCase names as on the wire, unknown members refused."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel
    )


class AnswerModel(BaseModel):
    """Base for answer models: unknown members ignored, so a newer server's additions do
    not break an older client."""

    model_config = ConfigDict(
        extra="ignore", populate_by_name=True, frozen=True, alias_generator=to_camel
    )


class Invocation(WireModel):
    """One tool invocation. Provider ids are not part of it: the same call twice is one."""

    name: StrictStr = Field(description="Tool name.")
    args: Any = Field(description="Arguments as the message carried them (any JSON).")
    result: Any = Field(description="Result as the message carried it (any JSON).")
    is_error: StrictBool = Field(default=False, description="True when the result is an error.")

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": self.args,
            "result": self.result,
            "isError": self.is_error,
        }

    def digest(self) -> Digest:
        return invocation_digest(self.name, self.args, self.result, self.is_error)

    def canonical_object(self) -> dict[str, Any]:
        return invocation_object(self.name, self.args, self.result, self.is_error)


class RegisterRequest(WireModel):
    invocations: list[Invocation] = Field(description="Invocations to store, in order.")


class RegisteredRef(AnswerModel):
    ref: str = Field(description="The invocation's ref.")
    size: int = Field(description="Size in bytes of its canonical form.")
    new: bool = Field(description="False when the registry already held it.")


class RegisterResponse(AnswerModel):
    refs: list[RegisteredRef] = Field(description="One entry per invocation, in request order.")


class RefsRequest(WireModel):
    refs: list[StrictStr] = Field(description="Refs, each `tr_` plus 26 base32 characters.")


class FindMissingResponse(AnswerModel):
    missing: list[str] = Field(description="Requested refs the registry does not hold.")


class ResolveResponse(AnswerModel):
    invocations: dict[str, Invocation] = Field(description="Held invocations by ref.")
    missing: list[str] = Field(description="Requested refs the registry does not hold.")


FormatName = Literal[
    "openai-chat", "anthropic", "openai-responses", "ai-sdk-v5", "ai-sdk-v4", "gemini"
]
"""A message format's name (`toolref.formats.NAMES`, in the same order)."""

HydrateMode = Literal["full", "summary"]
RECIPE_REF_PATTERN: Final = r"^tb_[a-z2-7]{25}[aeimquy4]$"  # toolref.edits.recipe's
MIN_SUMMARY_CHARS: Final = 40  # a summary budget, in characters (hydrate's, a summary's)
MAX_SUMMARY_CHARS: Final = 20_000
"""What hydrate does with results: `full` payloads, or older ones as a `summary`."""


class OptimizeRequest(WireModel):
    format: FormatName | None = Field(
        default=None, description="Message format; detected when absent."
    )
    messages: list[dict[str, Any]] = Field(description="The conversation, in that format.")


class HydrateRequest(WireModel):
    format: FormatName | None = Field(
        default=None, description="Message format; detected when absent."
    )
    messages: list[dict[str, Any]] = Field(description="The conversation, with toolRef markers.")
    mode: HydrateMode = Field(
        default="full",
        description="`full`: every marker becomes its payload. `summary`: results older than "
        "the last `keepRecent` become a placeholder naming the ref, followed by a summary.",
    )
    keep_recent: WholeNumber = Field(
        default=3, ge=0, description="Summary mode: this many most recent results stay full."
    )
    exclude_tools: list[StrictStr] = Field(
        default_factory=list, description="Summary mode: results of these tools stay full."
    )
    summarizer: StrictStr | None = Field(
        default=None, description="Summary mode: which summarizer (the server's default if absent)."
    )
    # The bounds ahead of the validator, or the schema would spell them `ge` and `le`.
    max_chars: (
        Annotated[
            int, Field(ge=MIN_SUMMARY_CHARS, le=MAX_SUMMARY_CHARS), BeforeValidator(_a_number)
        ]
        | None
    ) = Field(default=None, description="Summary mode: the summary budget.")
    shadow: StrictBool = Field(
        default=False,
        description="Summary mode: answer the full messages, and report in the stats what "
        "summary mode would have saved.",
    )


class OptimizationStats(AnswerModel):
    original_bytes: int = Field(description="Compact JSON bytes of the messages with payloads.")
    optimized_bytes: int = Field(description="Compact JSON bytes of the messages with refs.")
    refs_used: int = Field(description="Distinct refs in the messages with refs.")
    new_refs: int = Field(description="Invocations this request stored for the first time.")
    cache_hits: int = Field(description="Invocations the registry already held.")
    summarized: int | None = Field(
        default=None, description="Summary mode: results replaced by a summary placeholder."
    )
    summary_cache_hits: int | None = Field(
        default=None, description="Summary mode: summaries served from the cache."
    )
    hydrated_bytes: int | None = Field(
        default=None,
        description="Summary mode: compact JSON bytes of the messages summary mode gives "
        "(also in shadow mode, where the full messages are answered).",
    )


class MessagesAnswer(AnswerModel):
    """What optimize and hydrate answer besides the messages (`MessagesResponse`): read and
    written on its own where the messages travel as the JSON text made for them."""

    format: FormatName = Field(description="The format, as named or detected.")
    tool_references: dict[str, str] | None = Field(
        default=None,
        description="Tool call id -> ref of every invocation in the messages (protocol 2 only).",
    )
    optimization_stats: OptimizationStats


class MessagesResponse(MessagesAnswer):
    messages: list[dict[str, Any]] = Field(description="The rewritten conversation.")


class SummaryResponse(AnswerModel):
    summarizer: str = Field(
        description="Id of the summarizer that made it (model, prompt, budget)."
    )
    summary: str = Field(description="The summary, within the budget.")
    cached: bool = Field(description="Made earlier (or by a concurrent request).")
    fallback: bool = Field(
        description="The requested summarizer failed; this is the extractive summary (not cached "
        "under the requested summarizer's id)."
    )


class HandoffRequest(WireModel):
    format: FormatName | None = Field(
        default=None, description="Format of `messages`; detected when absent."
    )
    messages: list[dict[str, Any]] = Field(
        description="The conversation so far (toolRef markers are hydrated first)."
    )
    max_tool_context_chars: WholeNumber = Field(
        default=40_000, ge=1000, le=2_000_000, description="The whole block fits this."
    )
    per_result_chars: WholeNumber = Field(
        default=4_000, ge=200, le=1_000_000, description="Each result is cut head and tail to this."
    )
    summarize_text: StrictBool = Field(
        default=True,
        description="Open the block with a summary of the dialogue: the LLM summarizer's when "
        "configured, otherwise a deterministic digest.",
    )
    request: list[dict[str, Any]] | None = Field(
        default=None,
        description="The request for the new backend: answered with the block in front of its "
        "first user message.",
    )
    request_format: FormatName | None = Field(
        default=None, description="Format of `request` (the new backend's); detected when absent."
    )


class HandoffStats(AnswerModel):
    tool_calls: int = Field(description="Tool calls seen.")
    kept: int = Field(description="Tool calls carried in the block.")
    dropped_duplicates: int = Field(description="Left out because a later one supersedes them.")
    left_out: int = Field(description="Left out to fit maxToolContextChars (oldest first).")
    chars_omitted: int = Field(description="Characters cut from the middle of long results.")
    interrupted: int = Field(description="Calls that never got a result.")
    errors: int = Field(description="Calls whose result is an error.")


class HandoffResponse(AnswerModel):
    format: FormatName = Field(description="Format of `messages`, as named or detected.")
    block: str = Field(description="The [CONTEXT FROM PREVIOUS SESSION] markdown block.")
    summary_source: str = Field(
        description="What wrote the dialogue summary: a summarizer id, `digest`, or `none`."
    )
    stats: HandoffStats
    messages: list[dict[str, Any]] | None = Field(
        default=None, description="`request` with the block prepended (when `request` was sent)."
    )


class ProtocolRange(AnswerModel):
    low: int
    high: int


class RefScheme(AnswerModel):
    prefix: str = Field(description="Ref prefix.")
    length: int = Field(description="Characters in a ref, prefix included.")
    digest: str = Field(description="Digest function over the canonical bytes.")
    digest_bytes: int = Field(description="Digest bytes a ref encodes.")
    encoding: str = Field(description="Encoding of those bytes.")
    canonicalization: str = Field(description="How an invocation becomes bytes.")


class Limits(AnswerModel):
    max_body_bytes: int = Field(description="Largest request body, as sent.")
    max_decompressed_bytes: int = Field(description="Largest request body once inflated.")
    max_depth: int = Field(description="Deepest JSON nesting of a body.")
    max_batch: int = Field(description="Most items in one batch request.")
    max_messages: int = Field(description="Most messages in one conversation.")
    max_items: int | None = Field(
        default=None, description="Most items in one array or object of a body."
    )
    max_containers: int | None = Field(
        default=None, description="Most arrays and objects in one body."
    )
    summary_wait_seconds: float | None = Field(
        default=None,
        description="Longest a summary (or a handoff's dialogue summary) waits for a model "
        "before the extractive one is used: set client timeouts above it.",
    )
    summarizer_calls_per_request: int | None = Field(
        default=None,
        description="Most summaries one request gets from a model; its other results get the "
        "extractive summary.",
    )
    summarizer_calls_per_minute: int | None = Field(
        default=None,
        description="Most model calls one tenant's requests start per minute.",
    )
    requests_per_second: float | None = Field(
        default=None,
        description="Requests per second a tenant may send to one server process (429 "
        "`quota-exceeded` past it); absent: no limit.",
    )
    stored_bytes: int | None = Field(
        default=None,
        description="Bytes a tenant may keep in the registry, as stored (a write past it is "
        "429 `quota-exceeded`); absent: no limit.",
    )
    keep_alive_seconds: int | None = Field(
        default=None,
        description="Seconds the server keeps an idle connection open: close pooled "
        "connections sooner.",
    )


class Capabilities(AnswerModel):
    protocol: ProtocolRange
    ref_scheme: RefScheme = Field(description="How refs are made.")
    encodings: list[str] = Field(description="Media types for request and response bodies.")
    compressors: list[str] = Field(description="Accepted request Content-Encodings.")
    limits: Limits
    ttl_seconds: int = Field(description="Sliding lifetime of a ref.")
    formats: list[str] = Field(description="Message formats optimize and hydrate understand.")
    summarizers: list[str] = Field(description="Summarizer ids available to hydrate.")
    version: str | None = Field(default=None, description="The toolref release serving.")
    upstreams: list[str] | None = Field(
        default=None,
        description="The gateway's upstream names (`/llm/{name}/...`, TOOLREF_UPSTREAMS), "
        "never their URLs: to a known key, or to anyone when the service has no API keys; "
        "null otherwise.",
    )
    edits: int = Field(
        default=0,
        ge=0,
        description="The version of edits the gateway applies (`application/vnd.toolref.edit`, "
        "toolref.edits.wire); 0: none (send requests whole).",
    )


class Problem(BaseModel):
    """RFC 9457 problem details; extra members (such as `missingRefs`) are allowed."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str


class Health(AnswerModel):
    status: str


Model = TypeVar("Model", bound=BaseModel)


def validated(model: type[Model], value: Any) -> Model:
    """`value` (a decoded body) as `model`: pydantic's errors become one 422 problem
    (`ValidationError`: each error a JSON Pointer and a message)."""
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        errors = [
            {"pointer": pointer(err["loc"]), "message": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        shown = "; ".join(f"{e['pointer'] or '/'}: {e['message']}" for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise ValidationError(
            f"the body does not match {model.__name__}: {shown}{more}; "
            "see /openapi.json for the expected shape",
            errors=errors,
        ) from None


def pointer(loc: Sequence[int | str]) -> str:
    """JSON Pointer (RFC 6901) of a pydantic error location."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in loc)
