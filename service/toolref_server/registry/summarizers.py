"""Summarizers: an id that names model, prompt version and budget, and `summarize`.

To plug in another, implement `Summarizer` (a `name`, `id(max_chars)` and an async
`summarize(invocation, max_chars)` that returns at most `max_chars` characters or raises
`SummarizerError`) and register it in `build_summarizers`. The id is part of the cache key,
so change it whenever the output for the same input could change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

import httpx

from toolref.asgi.workers import CONTAINER_BYTES, Workers, weight
from toolref.kit import extractive
from toolref.kit.kinds import KindTable
from toolref_server.registry.completions import (
    CompletionBusy,
    CompletionEmpty,
    CompletionError,
    CompletionRefused,
    Completions,
)
from toolref_server.settings import Settings

# Versioned: the version is part of the summarizer id, so a new prompt never reuses old
# summaries.
PROMPTS: Final = {
    "v1": (
        "You summarize one tool result for an AI coding agent that will read the summary "
        "instead of the full result. In at most {max_chars} characters, keep what the agent "
        "needs to act: file paths, identifiers, numbers, error messages, and the conclusion. "
        "Plain text, no preamble, no markdown headings."
    ),
}


DIALOGUE_PROMPTS: Final = {
    "v1": (
        "You hand a conversation between a user and an AI agent over to another model. In at "
        "most {max_chars} characters, say what the user asked for, what was decided and done, "
        "and what remains open. Plain text, no preamble. Do not describe tool outputs: they "
        "are passed on verbatim."
    ),
}


class SummarizerError(Exception):
    """A summarizer could not produce a summary (timeout, HTTP error, empty answer)."""


class SummarizerBusy(SummarizerError):
    """The model was not asked: no connection to it came free in time. Not its failure."""


class SummarizerRefused(SummarizerError):
    """The model refused this input (400, 413, 422: a content filter's, say): that summary
    failed, and the model is no less healthy for it."""

    reason = "refused"  # its fallbacks' label


class SummarizerEmpty(SummarizerError):
    """The model answered with no text (an output filter's empty or null content): that
    summary failed, and the model answered, so it is healthy."""

    reason = "empty"


class Summarizer(Protocol):
    name: str

    def id(self, max_chars: int) -> str: ...

    async def summarize(self, invocation: Mapping[str, Any], max_chars: int) -> str: ...


# Values of an invocation `sized` looks at before it calls the invocation large: the look
# runs on the event loop, so it is bounded, whatever the invocation holds.
SIZED_VALUES: Final = 64
LINE_BYTES: Final = 16  # a line of a result outlined: 0.1-0.2 us, as bytes at 30 ns each


def sized(invocation: Mapping[str, Any], threshold: int | None) -> int:
    """The work of summarizing `invocation`, in `workers.weight`'s bytes, counted over at
    most `SIZED_VALUES` values: `CONTAINER_BYTES` for each object or array, and each string
    (`_string`) as the summarizer works through it; the threshold (work for a thread) once
    past them, or past the threshold. O(SIZED_VALUES) steps, each string counted at C speed
    while the total is under the threshold: O(the threshold)."""
    if threshold is None:
        return 0
    total, pending = 0, [invocation]
    for _ in range(SIZED_VALUES):
        if not pending:
            return total
        value: Any = pending.pop()
        if isinstance(value, str):
            if total + len(value) >= threshold:
                return threshold  # by its length: nothing counted
            total += _string(value)
        elif isinstance(value, Mapping | list):
            total += CONTAINER_BYTES
            if len(pending) + len(value) > SIZED_VALUES:
                return threshold  # more values than it looks at: a thread's
            if isinstance(value, Mapping):
                total += sum(len(key) if isinstance(key, str) else 8 for key in value)
                value = value.values()
            pending.extend(value)
        else:
            total += 8  # a number, a boolean, null
        if total >= threshold:
            return threshold
    return threshold if pending else total


def _string(text: str) -> int:
    """What summarizing a string costs: its `weight` (a result that is JSON as text is
    parsed and outlined, about 0.4 us a container) and `LINE_BYTES` a line (outlined in
    Python: half a million newlines took 22-53 ms)."""
    return weight(text) + LINE_BYTES * text.count("\n")


class ExtractiveSummarizer:
    """`toolref.kit.extractive`: deterministic, no model."""

    name = extractive.NAME

    def __init__(self, kinds: KindTable, workers: Workers | None = None) -> None:
        self.kinds = kinds
        self.workers = workers  # summaries run there: linear, but a result may be 64 MiB
        overrides = json.dumps(sorted((k, v.value) for k, v in kinds.overrides.items()))
        # Kind overrides change the output, so they are part of the id.
        self._table = hashlib.sha256(overrides.encode()).hexdigest()[:8] if kinds.overrides else ""

    def id(self, max_chars: int) -> str:
        table = f":{self._table}" if self._table else ""
        return f"{self.name}:{extractive.VERSION}{table}:{max_chars}"

    async def summarize(self, invocation: Mapping[str, Any], max_chars: int) -> str:
        """In place for a small invocation, in a worker thread for a large one (or one of
        more than `SIZED_VALUES` values, whose size is not counted): a thread's hop cost a
        small summary more than it took."""
        if self.workers is None:
            return extractive.summarize(invocation, max_chars, self.kinds)
        size = sized(invocation, self.workers.threshold)
        return await self.workers.run(size, extractive.summarize, invocation, max_chars, self.kinds)


class OpenAICompatibleSummarizer:
    """`POST {base_url}/chat/completions` with a versioned prompt; each call bounded in
    time (`timeout`, the whole call), answer bytes (`max_answer_bytes`) and connections
    (`connections`, waited for at most `pool_wait`), see
    `toolref_server.registry.completions`."""

    name = "openai-compatible"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None,
        prompt_version: str,
        timeout: float,
        input_chars: int,
        max_answer_bytes: int = 64 * 1024,
        connections: int = 100,
        pool_wait: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        workers: Workers | None = None,
    ) -> None:
        if prompt_version not in PROMPTS:
            raise ValueError(f"unknown prompt version {prompt_version!r}; one of {sorted(PROMPTS)}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.prompt_version = prompt_version
        self.input_chars = input_chars
        self.timeout = timeout
        # The prompt is made there: a result that is no string is written out whole as
        # JSON before it is cut to `input_chars` (64 MiB: about 0.4 s of the event loop).
        self.workers = workers
        self._completions = Completions(
            self.base_url,
            api_key=api_key,
            deadline=timeout,
            max_bytes=max_answer_bytes,
            connections=connections,
            pool_wait=pool_wait,
            transport=transport,
        )

    def id(self, max_chars: int) -> str:
        return f"{self.name}:{self.model}:{self.prompt_version}:{max_chars}"

    def _prompt(self, invocation: Mapping[str, Any], max_chars: int) -> list[dict[str, str]]:
        result = invocation.get("result")
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        if len(text) > self.input_chars:
            half = self.input_chars // 2
            omitted = len(text) - 2 * half
            text = f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"
        args = invocation.get("args")
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return [
            {"role": "system", "content": PROMPTS[self.prompt_version].format(max_chars=max_chars)},
            {
                "role": "user",
                "content": f"Tool: {invocation.get('name')}\nArguments: {args_text[:2000]}\n"
                f"Result:\n{text}",
            },
        ]

    async def summarize(self, invocation: Mapping[str, Any], max_chars: int) -> str:
        if self.workers is None:
            messages = self._prompt(invocation, max_chars)
        else:
            messages = await self.workers.offload(self._prompt, invocation, max_chars)
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": max(16, max_chars // 2),
        }
        return await self._complete(body, max_chars)

    def clip_transcript(self, transcript: str) -> str:
        """What of a dialogue the model is sent: its end, when it is long."""
        return transcript[-self.input_chars :] if len(transcript) > self.input_chars else transcript

    async def summarize_dialogue(self, transcript: str, max_chars: int) -> str:
        """A handoff's text summary of a conversation (its user and assistant turns)."""
        transcript = self.clip_transcript(transcript)
        prompt = DIALOGUE_PROMPTS.get(self.prompt_version, DIALOGUE_PROMPTS["v1"])
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": prompt.format(max_chars=max_chars)},
                {"role": "user", "content": transcript},
            ],
            "temperature": 0,
            "max_tokens": max(16, max_chars // 2),
        }
        return await self._complete(body, max_chars)

    async def _complete(self, body: dict[str, Any], max_chars: int) -> str:
        try:
            text = await self._completions.text(body)
        except CompletionBusy as exc:
            raise SummarizerBusy(str(exc)) from exc
        except CompletionRefused as exc:
            raise SummarizerRefused(str(exc)) from exc
        except CompletionEmpty as exc:
            raise SummarizerEmpty(str(exc)) from exc
        except CompletionError as exc:
            raise SummarizerError(str(exc)) from exc
        return text if len(text) <= max_chars else text[: max_chars - 1] + "…"

    async def aclose(self) -> None:
        await self._completions.aclose()


def build_summarizers(
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
    workers: Workers | None = None,
) -> dict[str, Summarizer]:
    """The summarizers the settings offer, by name; extractive is always there."""
    found: dict[str, Summarizer] = {extractive.NAME: ExtractiveSummarizer(settings.kinds, workers)}
    if settings.llm_base_url:
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        found[OpenAICompatibleSummarizer.name] = OpenAICompatibleSummarizer(
            settings.llm_base_url,
            settings.llm_model,
            api_key=key,
            prompt_version=settings.llm_prompt_version,
            timeout=settings.llm_timeout,
            input_chars=settings.llm_input_chars,
            max_answer_bytes=settings.llm_max_answer_bytes,
            connections=settings.llm_max_connections,
            pool_wait=settings.llm_pool_wait_seconds,
            transport=transport,
            workers=workers,
        )
    return found
