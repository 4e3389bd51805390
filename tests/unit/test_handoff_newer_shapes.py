"""The handoff and the switch rewrite on the newer tool-call shapes: Gemini `functionResponse`
with `parts` and thought parts, Responses call items, Anthropic web search results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolref.handoff import build, digest
from toolref.handoff.switch import switched, switched_text

_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20


def test_media_in_a_gemini_function_response_is_named_not_dropped() -> None:
    """A `functionResponse` with a screenshot in its `parts` beside a small `response`
    came into the block as the `response` alone: the image was gone without a word, and
    the new model read `ok` as the whole result."""
    messages = [
        {"role": "user", "parts": [{"text": "look at the page"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "s1", "name": "shot", "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "s1",
                        "name": "shot",
                        "response": {"output": "SHOT-CAPTION"},
                        "parts": [
                            {"inlineData": {"mimeType": "image/png", "data": _PNG}},
                            {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/r"}},
                        ],
                    }
                }
            ],
        },
    ]
    block = build(messages, "gemini", summarize_text=False).block
    assert "SHOT-CAPTION" in block
    assert "[image/png image: not carried in this block]" in block
    assert "[application/pdf file: not carried in this block]" in block
    assert "iVBORw0KGgo" not in block


def test_gemini_thought_parts_are_no_conclusions_in_the_digest() -> None:
    """A model part with `thought: true` is the model's thinking (a summary of it), as an
    Anthropic `thinking` block is: the digest gave it to the new model as a conclusion."""
    messages = [
        {"role": "user", "parts": [{"text": "Fix the bug."}]},
        {
            "role": "model",
            "parts": [
                {"text": "THOUGHT: maybe delete the tests", "thought": True},
                {"text": "Fixed it.", "thoughtSignature": "SIG"},
            ],
        },
    ]
    text = digest(messages)
    assert "THOUGHT" not in text
    assert "Fixed it." in text


@pytest.mark.parametrize(
    ("kind", "member", "value"),
    [
        ("custom_tool_call", "input", "*** Begin Patch\n*** End Patch"),
        ("shell_call", "action", {"commands": ["ls"]}),
        ("apply_patch_call", "operation", {"type": "delete_file", "path": "a.py"}),
    ],
)
def test_a_call_item_before_the_switch_loses_its_optional_item_id(
    kind: str, member: str, value: Any
) -> None:
    """As a `function_call`'s `fc_` id: the item `id` of a `custom_tool_call` (Codex's
    `apply_patch`), `shell_call` or `apply_patch_call` names an item of the old backend
    whose reasoning item the switch drops, and OpenAI refuses the pair half-kept (400).
    Its `call_id` pairs the output; the API takes the item without its `id`. After the
    switch the id stays."""
    body = {
        "input": [
            {"role": "user", "content": "patch it"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "OPAQUE", "summary": []},
            {"type": kind, "id": "item_old", "call_id": "c1", "name": "p", member: value},
            {"type": f"{kind}_output", "call_id": "c1", "output": "Done"},
            {"type": "reasoning", "id": "rs_2", "encrypted_content": "NEW", "summary": []},
            {"type": kind, "id": "item_new", "call_id": "c2", "name": "p", member: value},
        ]
    }
    out = switched(body, "openai-responses", "input", 4)["input"]
    calls = [i for i in out if i.get("type") == kind]
    assert "id" not in calls[0]
    assert calls[0]["call_id"] == "c1"
    assert calls[1]["id"] == "item_new"
    text = switched_text(json.dumps(body), "openai-responses", "input", 4)
    assert text is not None
    assert '"item_old"' not in text
    assert '"item_new"' in text


def test_a_local_shell_call_keeps_its_required_item_id() -> None:
    """The API requires a `local_shell_call`'s `id`: dropping it would be a 400 of its own."""
    body = {
        "input": [
            {"role": "user", "content": "ls"},
            {
                "type": "local_shell_call",
                "id": "lsh_1",
                "call_id": "c1",
                "status": "completed",
                "action": {"type": "exec", "command": ["ls"], "env": {}},
            },
            {"type": "local_shell_call_output", "id": "c1", "output": "a.py"},
        ]
    }
    out = switched(body, "openai-responses", "input")["input"]
    assert out[1]["id"] == "lsh_1"


def _web_search(encrypted: str) -> list[Any]:
    return [
        {"role": "user", "content": "what is new in Python 3.14?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01",
                    "name": "web_search",
                    "input": {"query": "python 3.14"},
                },
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_01",
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "https://docs.python.org/3.14/whatsnew",
                            "title": "What's new in Python 3.14",
                            "encrypted_content": encrypted,
                            "page_age": "2 days",
                        }
                    ],
                },
                {"type": "text", "text": "Template strings."},
            ],
        },
    ]


def test_a_web_search_result_carries_its_page_not_its_encrypted_content() -> None:
    """Anthropic's `web_search_result` holds the page as `encrypted_content`, which only
    Anthropic reads: it came into the block as base64 that filled the result's share
    (cut in the middle) while the page's address and title were what a model can use."""
    encrypted = "EqgfCioIARgBIiQ3" * 400
    out = build(_web_search(encrypted), "anthropic", summarize_text=False)
    assert "EqgfCioIARgBIiQ3" not in out.block
    assert "https://docs.python.org/3.14/whatsnew" in out.block
    assert "What's new in Python 3.14" in out.block
    assert out.chars_omitted == 0


def test_a_computer_call_screenshot_is_named_not_carried_as_base64() -> None:
    """Found in review: a `computer_call_output` is a result now (its `output` a
    `computer_screenshot` object), and its `image_url` came into the block as base64, as a
    Chat or Anthropic image did before `without_media`; it is named as they are."""
    shot = {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{_PNG}"}
    messages = [
        {"role": "user", "content": "look"},
        {"type": "computer_call", "call_id": "k1", "actions": [{"type": "screenshot"}]},
        {"type": "computer_call_output", "call_id": "k1", "output": shot},
        {"type": "computer_call", "call_id": "k2", "actions": [{"type": "screenshot"}]},
        {
            "type": "computer_call_output",
            "call_id": "k2",
            "output": {"type": "computer_screenshot", "file_id": "file_9"},
        },
    ]
    block = build(messages, "openai-responses", summarize_text=False).block
    assert "computer" in block
    assert "[image/png image: not carried in this block]" in block
    assert "[image: not carried in this block]" in block
    assert "iVBORw0KGgo" not in block
    assert "file_9" not in block
