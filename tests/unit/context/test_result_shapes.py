"""Context editing on the shapes of results real agents send: an image or a document in a
result (a screenshot, a PDF read) is named in its stand-in, never summarized as its base64;
a cache mark inside a replaced result, moved on by the client the next turn, leaves its
stand-in the same bytes (the provider's cache holds)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from toolref.asgi.workers import Workers
from toolref.kit import extractive
from toolref.wire.canonical import invocation_digest
from toolref.wire.endpoints import Endpoint
from toolref_server.context import facts as facts_module
from toolref_server.context.batches import plan
from toolref_server.gateway.context_edits import edit_context
from toolref_server.gateway.stand_ins import invocations_of as _invocations
from toolref_server.metrics import Metrics
from toolref_server.registry.summary_cache import Summary
from toolref_server.settings.context import Policy

POLICY = Policy(mode="on", trigger_tokens=0, keep=1, clear_at_least=1, rewrite_weight=0.0)
IMAGE = base64.b64encode(bytes(range(256)) * 120).decode()  # 40 KB of base64


class Store:
    """A summary store in memory: pins kept, first writer wins."""

    def __init__(self) -> None:
        self.held: dict[Any, str] = {}

    def invocation(self, tenant: str, ref: str, summarizer: str) -> tuple[str, str, str]:
        return (tenant, ref, summarizer)

    ttl = 86_400  # seconds a pin lives unread

    async def read(
        self, tenant: str, slots: Sequence[Any], renew: Sequence[Any] | None = None
    ) -> Sequence[Any]:
        return [self.held.get(slot) for slot in slots]

    async def pin(self, tenant: str, slots: Sequence[Any], texts: Sequence[str]) -> list[str]:
        return [self.held.setdefault(slot, text) for slot, text in zip(slots, texts, strict=True)]


class Summaries:
    """The summary cache, its summaries the extractive summarizer's."""

    def __init__(self) -> None:
        self.store = Store()

    async def many(
        self, tenant: str, items: Sequence[tuple[Any, Mapping[str, Any]]], name: str, chars: int
    ) -> list[Summary]:
        return [
            Summary(extractive.summarize(invocation, chars), name, False, False)
            for _, invocation in items
        ]


async def edited(body: Any, summaries: Summaries, fmt: str, key: str) -> bytes:
    out, outcome = await edit_context(
        json.dumps(body).encode(),
        tenant="t",
        upstream="up",
        llm=Endpoint(fmt, key),  # type: ignore[arg-type]
        policy=POLICY,
        summaries=summaries,  # type: ignore[arg-type]
        workers=Workers(None, None),
        metrics=Metrics(),
    )
    assert outcome is not None
    assert outcome.plan.cleared
    return out


def anthropic(results: list[Any], *, marked: int | None = None) -> dict[str, Any]:
    """A conversation whose calls' results hold `results` (each a `tool_result`'s content),
    the `marked`th's last block with a cache mark; then the model's answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "look"}]
    for t, held in enumerate(results):
        content = held
        use = {"type": "tool_use", "id": f"c{t}", "name": "Read", "input": {"file_path": f"f{t}"}}
        if t == marked:
            content = [*held[:-1], {**held[-1], "cache_control": {"type": "ephemeral"}}]
        result = {"type": "tool_result", "tool_use_id": f"c{t}", "content": content}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {"model": "m", "messages": [*messages, {"role": "assistant", "content": "ok"}]}


async def test_an_image_or_a_document_in_a_result_is_named_not_summarized_as_base64() -> None:
    """A screenshot's or a PDF's stand-in said `[{"type":"image","source":{...,"data":"iVBO...`:
    the summary's whole budget spent on base64 no model reads. It names the media now, the
    text beside it kept; the block itself is gone with the rest of the result."""
    facts_module.forget()
    png = {"type": "base64", "media_type": "image/png", "data": IMAGE}
    image: dict[str, Any] = {"type": "image", "source": png}
    pdf = {"type": "document", "source": {**png, "media_type": "application/pdf"}}
    shot = [{"type": "text", "text": "Took a screenshot"}, image]
    body = anthropic([shot, [pdf], shot])
    sent = json.loads(await edited(body, Summaries(), "anthropic", "messages"))["messages"]
    first, second = sent[2]["content"][0]["content"], sent[4]["content"][0]["content"]
    assert first.startswith("[toolref:")
    assert "Took a screenshot\n[image/png image: cleared]" in first
    assert second.endswith("[application/pdf document: cleared]")
    assert IMAGE[:40] not in first + second
    assert sent[6] == body["messages"][6]  # the last result, whole


async def test_a_responses_image_output_is_named_too() -> None:
    facts_module.forget()
    picture = {"type": "input_image", "image_url": "data:image/jpeg;base64," + IMAGE}
    items: list[dict[str, Any]] = [{"role": "user", "content": "look"}]
    for t in range(2):
        items += [
            {"type": "function_call", "call_id": f"c{t}", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{t}", "output": [picture]},
        ]
    body = {"model": "m", "input": items}
    sent = json.loads(await edited(body, Summaries(), "openai-responses", "input"))["input"]
    assert sent[2]["output"].endswith("[image/jpeg image: cleared]")
    assert IMAGE[:40] not in sent[2]["output"]


async def test_a_cache_mark_inside_a_replaced_result_moving_on_leaves_its_stand_in_as_it_was() -> (
    None
):
    """A client's cache mark on a result's last block, moved to a later one the next turn:
    the result was counted, named and summarized with its mark, so its stand-in said another
    size the turn after (and was another pin): a replaced result in other bytes, the
    provider's cache missed from there on, though no batch was made."""
    facts_module.forget()
    summaries = Summaries()
    text = [{"type": "text", "text": "line of a file\n" * 300}]
    first = await edited(anthropic([text] * 4, marked=1), summaries, "anthropic", "messages")
    facts_module.forget()  # another replica, or the memo gone: the stand-in made again
    then = await edited(anthropic([text] * 4, marked=2), summaries, "anthropic", "messages")
    was, now = json.loads(first)["messages"], json.loads(then)["messages"]
    assert was[4]["content"][0]["content"].startswith("[toolref:")
    assert now[4]["content"][0]["content"] == was[4]["content"][0]["content"]


class Recording(Summaries):
    """The summary cache, recording the refs its summaries are kept under."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[Any] = []

    async def many(
        self, tenant: str, items: Sequence[tuple[Any, Mapping[str, Any]]], name: str, chars: int
    ) -> list[Summary]:
        self.refs += [ref for ref, _ in items]
        return await super().many(tenant, items, name, chars)


async def test_a_summary_of_named_media_is_kept_apart_from_the_whole_results() -> None:
    """Found in review: the media-named summary was kept under the result's own ref, the
    slot the registry's summaries of the whole result use (hydrate's summary mode, `GET
    /v1/invocations/{ref}/summary`): whichever came first, the other read its summary. It
    is kept under the digest of what it summarizes now; a result with no media keeps its
    ref, and the stand-in is pinned by the result's ref either way."""
    facts_module.forget()
    png = {"type": "base64", "media_type": "image/png", "data": IMAGE}
    shot = [{"type": "text", "text": "Took a screenshot"}, {"type": "image", "source": png}]
    text = [{"type": "text", "text": "plain output " * 200}]
    body = anthropic([shot, text, shot])
    found = facts_module.facts_of(json.dumps(body).encode(), "t", "anthropic", "messages")
    assert found is not None
    wanted = plan(found.messages, POLICY).cleared
    made = _invocations(found, wanted)
    media, plain = (made[item] for item in wanted[:2])
    assert media.summarized != media.ref  # what is summarized is not the whole result
    whole = invocation_digest("Read", {"file_path": "f0"}, shot, False).ref
    assert media.ref == whole  # the pin: the result as sent
    assert plain.summarized == plain.ref


def test_a_marked_result_is_read_as_deep_as_an_unmarked_one() -> None:
    """Found in review: leaving the marks out recursed two frames a level, so a result
    nested past about 500 levels whose message held a cache mark failed to read (its body
    passed unedited) where the same result unmarked was read: edited on one turn, not the
    next, as the client moved its mark."""
    facts_module.forget()
    deep: Any = "x" * 2000
    for _ in range(900):
        deep = [deep]
    content = [{"type": "text", "text": json.dumps(deep)}, {"type": "text", "text": "t"}]
    nested = [{"type": "text", "text": "deep"}, {"type": "text", "text": "n", "extra": deep}]
    for marked in (None, 0):
        body = anthropic([nested, content], marked=marked)
        found = facts_module.facts_of(json.dumps(body).encode(), "t", "anthropic", "messages")
        assert found is not None, marked
        assert facts_module.unmarked(deep) == deep
