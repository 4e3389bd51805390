"""The edit path of OpenAI Responses and Gemini turns against the answer the turn before
streamed (version-3 records of kind 3, `editor._rendering`), on conversations as Codex CLI
and Gemini CLI write them and as other clients do (compact, spaced, pretty, ASCII-only,
escapes of every kind, keys in odd orders and repeated, numbers as written): each turn's
answer streamed (by the fake provider, or as generated events spelled oddly) and tapped by
sender and receiver alike, the next request writing it back the agent's way or another.
Every turn reaches the receiver byte for byte; a turn compressed against an answer the
receiver holds other bytes of (or none) is refused and sent again without; and only the
model's items just after the base's (the run that renders the answer) are ever compressed
against it, never a user's text or a tool's output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fake_provider import wire as provider
from tests.unit.edits.exactness import (
    GEMINI,
    INSTRUCTIONS,
    MODEL_TYPES,
    RESPONSES,
    WRITERS,
    Request,
    Sent,
    against_answer,
    answers,
    check_turn,
    events_stream,
    read_events,
    request,
    send,
    spelled,
)
from tests.unit.edits.oracle import Registry
from tests.unit.json_texts import strings
from toolref.edits import bodycut
from toolref.sending.editor import Editor

# --- Responses -----------------------------------------------------------------------------

texts = st.one_of(strings, st.text(min_size=0, max_size=40), st.sampled_from(["", "ok", "é😀"]))
long_texts = st.one_of(
    st.lists(texts, min_size=1, max_size=6).map(
        lambda parts: "run the tests and fix what fails; " * 3 + "".join(parts)
    ),
    # past the long window's 4 KiB: cut again at its line ends (`window`)
    st.tuples(st.integers(150, 400), texts).map(
        lambda made: "".join(f"{n}: ran pytest -q, {made[1]}\n" for n in range(made[0]))
    ),
)
# Codex's reasoning items carry kilobytes of it
encrypted = st.one_of(
    st.text("ABCDEFabcdef0123456789+/=", min_size=8, max_size=80),
    st.integers(3000, 9000).map(lambda n: ("QUJDRGVm" * n)[:n]),
)


@st.composite
def responses_item(draw: st.DrawFn, n: int) -> dict[str, Any]:
    """One output item of the model's, as the server streams it (with its id)."""
    kind = draw(
        st.sampled_from(
            ["reasoning", "message", "function_call", "custom_tool_call", "shell", "hosted"]
        )
    )
    if kind == "hosted":
        return draw(hosted_item(n))
    if kind == "reasoning":
        summary = [{"type": "summary_text", "text": draw(texts)}]
        item: dict[str, Any] = {"id": f"rs_{n}", "type": "reasoning", "summary": summary}
        if draw(st.booleans()):
            item["content"] = None
        return item | {"encrypted_content": "gAAAAAB" + draw(encrypted)}
    if kind == "message":
        entry = {"type": "output_text", "annotations": [], "text": draw(long_texts)}
        return {
            "id": f"msg_{n}",
            "type": "message",
            "status": "completed",
            "content": [entry],
            "role": "assistant",
        }
    if kind == "function_call":
        arguments = json.dumps({"command": ["bash", "-lc", draw(texts)], "timeout_ms": 10000})
        return {
            "id": f"fc_{n}",
            "type": "function_call",
            "status": "completed",
            "arguments": arguments,
            "call_id": f"call_{n}",
            "name": "shell",
        }
    if kind == "custom_tool_call":
        patch = (
            "*** Begin Patch\n*** Update File: a.py\n@@\n-" + draw(long_texts) + "\n*** End Patch"
        )
        return {
            "id": f"ctc_{n}",
            "type": "custom_tool_call",
            "status": "completed",
            "call_id": f"call_{n}",
            "name": "apply_patch",
            "input": patch,
        }
    number = draw(st.sampled_from([1e5, -0.0, 10**30, 0.1, 7]))
    action = {"type": "exec", "command": ["ls", draw(texts)], "timeout_ms": number}
    return {
        "id": f"lsh_{n}",
        "type": "local_shell_call",
        "call_id": f"call_{n}",
        "status": "completed",
        "action": action,
    }


@st.composite
def hosted_item(draw: st.DrawFn, n: int) -> dict[str, Any]:
    """An item of a tool the provider runs: a web search (the model's query), or one
    holding the tool's output (an MCP call's, a file search's results, an interpreter's
    logs, an image), as streamed."""
    kind = draw(
        st.sampled_from(
            ["web_search_call", "mcp_call", "file_search_call", "code_interpreter_call",
             "image_generation_call"]
        )
    )  # fmt: skip
    said = draw(long_texts)
    if kind == "web_search_call":
        action = draw(
            st.sampled_from(
                [{"type": "search", "query": said, "sources": [{"type": "url", "url": said}]},
                 {"type": "open_page", "url": "https://x.test/" + said},
                 {"type": "find_in_page", "url": "https://x.test", "pattern": said}]
            )
        )  # fmt: skip
        return {"id": f"ws_{n}", "type": kind, "status": "completed", "action": action}
    made: dict[str, Any] = {"id": f"h_{n}", "type": kind, "status": "completed"}
    if kind == "mcp_call":
        return made | {"server_label": "docs", "name": "read", "arguments": "{}", "output": said}
    if kind == "file_search_call":
        return made | {"queries": [draw(texts)], "results": [{"file_id": "f", "text": said}]}
    if kind == "code_interpreter_call":
        return made | {"code": "print(1)", "outputs": [{"type": "logs", "logs": said}]}
    return made | {"revised_prompt": said, "result": "iVBORw0KGgo" + draw(texts)}


def responses_events(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a Responses stream makes of `items`: each added, its deltas, done."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    ]
    for index, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "function_call":
            piece = {"type": "response.function_call_arguments.delta", "output_index": index}
            events.append(piece | {"delta": item["arguments"]})
        if item["type"] == "message":
            piece = {"type": "response.output_text.delta", "output_index": index}
            events.append(piece | {"content_index": 0, "delta": item["content"][0]["text"]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    output = {"id": "resp_1", "status": "completed", "output": items}
    return [*events, {"type": "response.completed", "response": output}]


# Codex's members of an item it writes back, in order (its id dropped; docs/edits.md)
CODEX_KEEP: Final = {
    "message": ("type", "role", "content"),
    "reasoning": ("type", "summary", "content", "encrypted_content"),
    "function_call": ("type", "name", "arguments", "call_id"),
    "custom_tool_call": ("type", "status", "call_id", "name", "input"),
}
# hosted items Codex reads as none it knows (`ResponseItem::Other`) and never writes back
CODEX_DROPS: Final = frozenset({"mcp_call", "file_search_call", "code_interpreter_call"})
CODEX_OUTPUTS: Final = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}


def codex_written(item: dict[str, Any]) -> dict[str, Any] | None:
    if item["type"] in CODEX_DROPS:
        return None
    if item["type"] == "web_search_call":  # its query, none of the search's results
        action = {k: v for k, v in item["action"].items() if k != "sources"}
        return {"type": item["type"], "status": item["status"], "action": action}
    if item["type"] == "image_generation_call":  # its id kept
        return {k: item[k] for k in ("type", "id", "status", "revised_prompt", "result")}
    keep = CODEX_KEEP.get(item["type"])
    if keep is None:
        return {k: v for k, v in item.items() if k != "id"}
    made = {k: item[k] for k in keep if k in item}
    if item["type"] == "message":
        made["content"] = [
            {k: e[k] for k in ("type", "text", "refusal") if k in e} for e in made["content"]
        ]
    return made


def output_of(
    item: dict[str, Any], draw: Callable[[st.SearchStrategy[Any]], Any]
) -> dict[str, Any] | None:
    """The agent's output of a call of the model's (None: no call)."""
    if "call_id" not in item:
        return None
    kind = "custom_tool_call_output" if item["type"] == "custom_tool_call" else None
    output = draw(texts) + " exit code 0"
    return {"type": kind or "function_call_output", "call_id": item["call_id"], "output": output}


def user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def is_model_item(value: Any) -> bool:
    """A Responses item of the model's, as a parser reads it (the last of repeated keys)."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return False
    role, kind = value.get("role"), value["type"]
    if isinstance(role, str):
        return role in ("assistant", "model") and (kind in MODEL_TYPES or kind == "message")
    return kind in MODEL_TYPES


cuts_of = st.lists(st.integers(min_value=1, max_value=301), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_responses_turns_restore_exactly_and_only_model_items_go_against_the_answer(
    data: st.DataObject,
) -> None:
    draw = data.draw
    bodycut.forget()
    how = draw(st.sampled_from(WRITERS))
    stream_how = draw(st.sampled_from(["compact", "spaced", "pretty", "ascii", "odd"]))
    other = draw(st.sampled_from(["same", "same", "other", "none"]))
    seed = draw(st.integers(0, 10**6))
    extra = {
        "model": "gpt-5-codex",
        "instructions": INSTRUCTIONS,
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a7c4-5c1e",
    }
    # with the long window (a long item cut again, each piece's item known) or without
    editor, registry = Editor(long_window=draw(st.booleans())), Registry()
    items = [spelled(user_item(draw(long_texts)), how, seed)]
    counts: dict[str, int] = {}
    for turn in range(draw(st.integers(1, 4))):
        made = request("input", items, how, seed, extra)
        attempts = send(editor, registry, made.body, "input")
        check_turn(attempts, made, counts, is_model_item, holds=other == "same")
        ref = attempts[-1].answer.history
        assert ref is not None
        counts[ref] = len(items)
        if draw(st.booleans()):
            reply = provider.Reply(text=draw(long_texts), index=turn)
            if draw(st.booleans()):
                call = provider.Call("shell", {"command": ["ls", draw(texts)]})
                reply = provider.Reply(call=call, index=turn)
            stream = b"".join(provider.frames("responses", reply, "m", 10, usage=True))
        else:
            drawn = [draw(responses_item(100 * turn + n)) for n in range(draw(st.integers(1, 4)))]
            stream = events_stream(responses_events(drawn), stream_how, seed + turn)
        # the model's items as the agent reads them from the stream
        done = [e for e in read_events(stream) if e["type"] == "response.output_item.done"]
        model = [e["item"] for e in sorted(done, key=lambda e: e["output_index"])]
        mine, theirs = answers(RESPONSES, stream, (draw(cuts_of), draw(cuts_of)), other)
        assert mine is not None
        editor.answered(ref, mine)
        if theirs is not None:
            registry.answers[ref] = theirs
        way = draw(st.sampled_from(["codex", "codex", "kept", "odd"]))
        # each call's output after the model's items, or (as older Codex) after its call
        interleaved = draw(st.booleans())
        outputs: list[dict[str, Any]] = []
        for n, item in enumerate(model):
            back = codex_written(item) if way == "codex" else item
            if back is not None:
                items.append(spelled(back, "odd" if way == "odd" else how, seed + 7 * turn + n))
            if (output := output_of(item, draw)) is not None:
                outputs.append(output)
                if interleaved:
                    items.append(spelled(outputs.pop(), how, seed + turn + n))
        if not outputs or draw(st.booleans()):
            outputs.append(user_item(draw(long_texts)))
        items += [spelled(item, how, seed + turn) for item in outputs]
        if len(items) > 2 and draw(st.booleans()):  # an older item rewritten (inline again)
            at = draw(st.integers(0, len(items) - 2))
            items[at] = spelled(items[at].value, "odd", seed + 1000 + turn)
    made = request("input", items, how, seed, extra)
    check_turn(
        send(editor, registry, made.body, "input"), made, counts, is_model_item, other == "same"
    )


# --- Gemini --------------------------------------------------------------------------------


@st.composite
def gemini_parts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The model's parts of one answer, as streamed: thoughts, texts, signatures, calls."""
    parts: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["thought", "text", "text", "signed", "call"]))
        if kind == "thought":
            parts.append({"text": draw(texts), "thought": True})
        elif kind == "text":
            parts.append({"text": draw(st.one_of(texts, long_texts))})
        elif kind == "signed":
            parts.append({"text": draw(texts), "thoughtSignature": "c2ln" + draw(texts)})
        else:
            number = draw(st.sampled_from([1e5, -0.0, 10**30, 0.5, 3]))
            call = {"name": "run_shell_command", "args": {"command": draw(texts), "n": number}}
            parts.append({"functionCall": call})
    return parts


def gemini_chunks(
    parts: list[dict[str, Any]], draw: Callable[[st.SearchStrategy[Any]], Any]
) -> list[dict[str, Any]]:
    """The chunks streaming `parts`: a few parts each, the last with its finishReason."""
    chunks: list[dict[str, Any]] = []
    at = 0
    while at < len(parts) or not chunks:
        step = draw(st.integers(1, 3))
        candidate = {"content": {"role": "model", "parts": parts[at : at + step]}, "index": 0}
        chunks.append({"candidates": [candidate], "modelVersion": "gemini-2.5-pro"})
        at += step
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    chunks[-1]["usageMetadata"] = {"promptTokenCount": 10, "totalTokenCount": 18}
    return chunks


def gemini_cli_written(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's turn as Gemini CLI writes it back: thoughts dropped, a plain text part
    added to the plain one before it when that one's text is not empty."""
    kept: list[dict[str, Any]] = []
    for part in parts:
        if part.get("thought"):
            continue
        plain = isinstance(part.get("text"), str) and not any(
            part.get(k) for k in ("thought", "thoughtSignature", "functionCall", "functionResponse")
        )
        if plain and kept and kept[-1].get("_plain") and kept[-1]["text"]:
            kept[-1] = kept[-1] | {"text": kept[-1]["text"] + part["text"]}
            continue
        kept.append(part | ({"_plain": True} if plain else {}))
    return {"role": "model", "parts": [{k: v for k, v in p.items() if k != "_plain"} for p in kept]}


def is_model_content(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in ("assistant", "model")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_gemini_turns_restore_exactly_and_only_the_models_turn_goes_against_the_answer(
    data: st.DataObject,
) -> None:
    draw = data.draw
    bodycut.forget()
    how = draw(st.sampled_from(WRITERS))
    stream_how = draw(st.sampled_from(WRITERS))
    other = draw(st.sampled_from(["same", "same", "other", "none"]))
    seed = draw(st.integers(0, 10**6))
    extra = {
        "systemInstruction": {"parts": [{"text": INSTRUCTIONS}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
        "generationConfig": {"temperature": 1.0, "topP": 0.95, "thinkingConfig": {}},
    }
    editor, registry = Editor(long_window=draw(st.booleans())), Registry()
    first = {"role": "user", "parts": [{"text": draw(long_texts)}]}
    contents = [spelled(first, how, seed)]
    counts: dict[str, int] = {}
    for turn in range(draw(st.integers(1, 4))):
        made = request("contents", contents, how, seed, extra)
        attempts = send(editor, registry, made.body, "contents")
        check_turn(attempts, made, counts, is_model_content, holds=other == "same", single=True)
        ref = attempts[-1].answer.history
        assert ref is not None
        counts[ref] = len(contents)
        if draw(st.booleans()):
            reply = provider.Reply(text=draw(long_texts), index=turn)
            stream = b"".join(provider.frames("gemini", reply, "m", 10, usage=True))
        else:
            chunks = gemini_chunks(draw(gemini_parts()), draw)
            stream = events_stream(chunks, stream_how, seed + turn)
        # the model's parts as the agent reads them from the stream
        parts = [
            part
            for event in read_events(stream)
            for part in event["candidates"][0]["content"]["parts"]
        ]
        mine, theirs = answers(GEMINI, stream, (draw(cuts_of), draw(cuts_of)), other)
        assert mine is not None
        editor.answered(ref, mine)
        if theirs is not None:
            registry.answers[ref] = theirs
        way = draw(st.sampled_from(["cli", "cli", "streamed", "odd"]))
        back = gemini_cli_written(parts) if way == "cli" else {"role": "model", "parts": parts}
        if way == "cli":
            cli = json.dumps(back, ensure_ascii=False, separators=(",", ":"))
            # the halves of a pair streamed in two chunks: one character once merged
            cli = cli.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
            assert cli.encode("utf-8", "surrogatepass") == mine
        if way == "streamed" and len(parts) > 1 and draw(st.booleans()):
            # written back as two contents of the model's: only the first renders it
            half = draw(st.integers(1, len(parts) - 1))
            first_half = {"role": "model", "parts": parts[:half]}
            contents.append(spelled(first_half, how, seed + 7 * turn))
            back = {"role": "model", "parts": parts[half:]}
        contents.append(spelled(back, "odd" if way == "odd" else how, seed + 7 * turn))
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        answered: list[dict[str, Any]] = [
            {"functionResponse": {"name": c["name"], "response": {"output": draw(texts)}}}
            for c in calls
        ]
        answered = answered or [{"text": draw(long_texts)}]
        contents.append(spelled({"role": "user", "parts": answered}, how, seed + turn))
        if draw(st.booleans()):  # an older content rewritten (inline again)
            at = draw(st.integers(0, len(contents) - 2))
            contents[at] = spelled(contents[at].value, "odd", seed + 1000 + turn)
    made = request("contents", contents, how, seed, extra)
    attempts = send(editor, registry, made.body, "contents")
    check_turn(attempts, made, counts, is_model_content, holds=other == "same", single=True)


# --- the properties above, seen to bite --------------------------------------------------


LINES: Final = "".join(f"{n}: collected 40 items, 39 passed, 1 failed\n" for n in range(40))


def codex_turn(
    holds: str, model: list[dict[str, Any]] | None = None
) -> tuple[list[Sent], Request, dict[str, int]]:
    """A Codex turn after one whose answer was `model` (by default reasoning, a text and two
    calls: a shell command's arguments, a patch), written back as Codex writes them, then
    their outputs; `holds`: what the receiver holds of the answer ("same", "other", "none")."""
    bodycut.forget()
    extra = {"model": "gpt-5-codex", "instructions": INSTRUCTIONS, "stream": True}
    editor, registry = Editor(), Registry()
    items = [spelled(user_item("fix the failing test in module_3.py " * 8), "compact", 0)]
    made = request("input", items, "compact", 0, extra)
    ref = send(editor, registry, made.body, "input")[-1].answer.history
    assert ref is not None
    lines = LINES
    model = model or [
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "QUJD" * 600},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": lines, "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
         "arguments": json.dumps({"command": ["pytest", "-q", lines]}), "name": "shell"},
        {"id": "ctc_1", "type": "custom_tool_call", "status": "completed", "call_id": "call_2",
         "name": "apply_patch", "input": "*** Begin Patch\n" + lines + "*** End Patch"},
    ]  # fmt: skip
    mine, theirs = answers(RESPONSES, events_stream(responses_events(model), "compact", 0),
                           ([], [5]), holds)  # fmt: skip
    editor.answered(ref, mine)
    if theirs is not None:
        registry.answers[ref] = theirs
    items += [spelled(back, "compact", 0) for item in model if (back := codex_written(item))]
    items += [
        spelled({"type": kind, "call_id": item["call_id"], "output": lines}, "compact", 0)
        for item in model
        if (kind := CODEX_OUTPUTS.get(item["type"]))
    ]
    made = request("input", items, "compact", 0, extra)
    return send(editor, registry, made.body, "input"), made, {ref: 1}


def test_a_codex_turn_goes_against_the_answer_its_items_only() -> None:
    """The reasoning, the text and both calls go against the answer (kind 3); the outputs,
    repeating the call's very text, never do."""
    attempts, made, counts = codex_turn("same")
    check_turn(attempts, made, counts, is_model_item, holds=True)
    header, segments = against_answer(attempts[0].edit.body)
    assert header.answer is not None
    offsets = [0]
    for data in attempts[0].edit.cut.segments[1:]:
        offsets.append(offsets[-1] + len(data))
    owners = {k for s in segments for k, (a, b) in enumerate(made.spans) if a <= offsets[s - 1] < b}
    assert owners == {1, 2, 3, 4}, owners


def test_a_codex_turn_whose_answer_searched_the_web_goes_against_the_answer() -> None:
    """A web search (Codex writes back its `status` and `action`: the model's query, no
    result) is the model's item as a call is: an answer that searched first, then wrote
    and called, goes against the answer whole (before, the search ended the run where it
    began: nothing went). Hosted items holding a tool's output (an MCP call's, a file
    search's results, an interpreter's logs) Codex does not write back."""
    model: list[dict[str, Any]] = [
        {"id": "ws_1", "type": "web_search_call", "status": "completed",
         "action": {"type": "search", "query": "pytest fixture scope " + LINES[:400]}},
        {"id": "mcp_1", "type": "mcp_call", "server_label": "docs", "name": "read",
         "arguments": "{}", "output": LINES, "status": "completed"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": LINES, "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
         "arguments": json.dumps({"command": ["pytest", "-q", LINES]}), "name": "shell"},
    ]  # fmt: skip
    attempts, made, counts = codex_turn("same", model)
    check_turn(attempts, made, counts, is_model_item, holds=True)
    header, segments = against_answer(attempts[0].edit.body)
    assert header.answer is not None
    offsets = [0]
    for data in attempts[0].edit.cut.segments[1:]:
        offsets.append(offsets[-1] + len(data))
    owners = {k for s in segments for k, (a, b) in enumerate(made.spans) if a <= offsets[s - 1] < b}
    assert owners == {1, 2, 3}, owners


def test_a_receiver_holding_other_bytes_of_the_answer_or_none_refuses_and_the_resend_is_exact() -> (
    None
):
    for holds in ("other", "none"):
        attempts, made, counts = codex_turn(holds)
        assert len(attempts) == 2
        check_turn(attempts, made, counts, is_model_item, holds=False)
