"""Context editing tells the model to call a result's tool again to see it whole: a result
whose tool is unknown (its call not in the conversation) or that code made (a call whose
`caller` is the code-execution tool's, not the model's) is left as it came, where the
model could not make that call; a stand-in already pinned for one stays (the same bytes, so
the provider's cache holds). A Gemini result's media (`functionResponse.parts`) goes with
its result."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from tests.unit.context.test_result_shapes import Summaries
from toolref.asgi.workers import Workers
from toolref.wire.endpoints import Endpoint
from toolref_server.context import facts as facts_module
from toolref_server.gateway.context_edits import Outcome, edit_context
from toolref_server.metrics import Metrics
from toolref_server.settings.context import Policy

POLICY = Policy(mode="on", trigger_tokens=0, keep=1, clear_at_least=1, rewrite_weight=0.0)
BIG = "line of output\n" * 300


async def edited(body: Any, summaries: Any, fmt: str, key: str) -> tuple[Any, Outcome]:
    out, outcome = await edit_context(
        json.dumps(body).encode(),
        tenant="t",
        upstream="up",
        llm=Endpoint(fmt, key),  # type: ignore[arg-type]
        policy=POLICY,
        summaries=summaries,
        workers=Workers(None, None),
        metrics=Metrics(),
    )
    assert outcome is not None
    return json.loads(out), outcome


def responses_with_an_orphan() -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    items.append({"type": "function_call_output", "call_id": "gone", "output": "0" + BIG})
    for t in range(3):
        items += [
            {"type": "function_call", "call_id": f"c{t}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{t}", "output": f"{t}" + BIG},
        ]
    items.append({"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]})
    return {"model": "m", "input": items}


async def test_a_result_whose_call_is_not_in_the_conversation_is_left_as_it_came() -> None:
    """Found in review: a Responses output whose call is not in the input (trimmed away)
    was replaced by a stand-in saying `call tool({}) again`: a tool the model has none of,
    so the result was gone for good. Its tool unknown, it is left as it came now."""
    facts_module.forget()
    body = responses_with_an_orphan()
    sent, outcome = await edited(body, Summaries(), "openai-responses", "input")
    assert sent["input"][1] == body["input"][1]  # the orphan, as it came
    assert sent["input"][3]["output"].startswith("[toolref:")  # its neighbours replaced
    assert "call tool(" not in json.dumps(sent)
    assert all(c.message != 1 for c in outcome.plan.cleared)


class PinnedStore:
    """A summary store holding a pinned stand-in for every result asked for (an earlier
    turn's, made before this rule)."""

    def invocation(self, tenant: str, ref: str, summarizer: str) -> tuple[str, str, str]:
        return (tenant, ref, summarizer)

    ttl = 86_400  # seconds a pin lives unread

    async def read(
        self, tenant: str, slots: Sequence[Any], renew: Sequence[Any] | None = None
    ) -> Sequence[Any]:
        return ['"[stand-in]"' for _ in slots]


class Pinned:
    store = PinnedStore()


async def test_an_orphan_a_batch_already_replaced_stays_replaced_in_the_same_bytes() -> None:
    facts_module.forget()
    sent, _ = await edited(responses_with_an_orphan(), Pinned(), "openai-responses", "input")
    assert sent["input"][1]["output"] == "[stand-in]"


def programmatic(callers: list[dict[str, Any] | None]) -> dict[str, Any]:
    """An Anthropic conversation: a `tool_use` per caller (None: no `caller`) and its
    result; then the model's answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "sum the regions"}]
    for t, caller in enumerate(callers):
        use: dict[str, Any] = {"type": "tool_use", "id": f"t{t}", "name": "query", "input": {}}
        if caller is not None:
            use["caller"] = caller
        result = {"type": "tool_result", "tool_use_id": f"t{t}", "content": f"{t}" + BIG}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {"model": "m", "messages": [*messages, {"role": "assistant", "content": "ok"}]}


async def test_a_result_of_a_call_code_made_is_left_as_it_came() -> None:
    """Found in review: a `tool_use` made by the code-execution tool (programmatic tool
    calling: `caller` {"type": "code_execution_20250825", "tool_id": ...}) had its result
    replaced by a stand-in telling the model to call `query` directly, which a tool allowed
    only to code (`allowed_callers`) refuses. Such a result is left as it came now; a
    direct call's (`caller` {"type": "direct"}, or none) is replaced as before."""
    facts_module.forget()
    code = {"type": "code_execution_20250825", "tool_id": "srvtoolu_01"}
    body = programmatic([code, {"type": "direct"}, None, None])
    sent, _ = await edited(body, Summaries(), "anthropic", "messages")
    assert sent["messages"][2] == body["messages"][2]
    assert sent["messages"][4]["content"][0]["content"].startswith("[toolref:")
    assert sent["messages"][6]["content"][0]["content"].startswith("[toolref:")


async def test_gemini_media_beside_a_response_goes_with_it() -> None:
    """Found in review: a Gemini `functionResponse` carrying media in `parts` (a screenshot
    beside a small `response`) was counted at its `response` alone, so it was never chosen
    (under `min_tokens`), and where the response was replaced the media stayed, still
    costing its tokens. Its `parts` are counted with it and emptied with it now."""
    facts_module.forget()
    image = base64.b64encode(bytes(range(256)) * 40).decode()
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "look"}]}]
    for t in range(3):
        call = {"functionCall": {"name": "screenshot", "args": {"n": t}}}
        media = {"inlineData": {"mimeType": "image/png", "data": image}}
        answer = {"name": "screenshot", "response": {"ok": True}, "parts": [media]}
        contents += [
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [{"functionResponse": answer}]},
        ]
    contents.append({"role": "model", "parts": [{"text": "ok"}]})
    body = {"contents": contents}
    sent, outcome = await edited(body, Summaries(), "gemini", "contents")
    first = sent["contents"][2]["parts"][0]["functionResponse"]
    assert first["response"]["output"].startswith("[toolref:")
    assert first["parts"] == []
    assert image not in json.dumps(sent["contents"][2])
    assert outcome.saved > 0
    assert sent["contents"][6] == body["contents"][6]  # the last result, whole
