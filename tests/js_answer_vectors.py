"""Answer-tap vectors for the TypeScript SDK (client_sdk/js/test/answer.test.ts, "answer
vectors"): streams of every call shape each format's tap reads, and streams it must give up
on, each with the answer bytes the Python tap (`toolref.edits.answer`) makes of it (hex), or
none. Relay and gateway must make the same bytes of one stream, or the next edit is refused
(`dictionary-mismatch`) and sent again. Written into vectors.json by `tests.js_vectors`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from toolref.edits.answer import AnswerTap

CHAT_END: Final = b"data: [DONE]\n\n"


def sse(*events: Any) -> bytes:
    """Each event as one `data:` line (bytes as they are, anything else as JSON)."""
    lines = (e if isinstance(e, bytes) else json.dumps(e).encode() for e in events)
    return b"".join(b"data: " + line + b"\n\n" for line in lines)


def chat(*deltas: dict[str, Any]) -> bytes:
    """An OpenAI Chat stream of these deltas of choice 0, then `[DONE]`."""
    return sse(*({"choices": [{"index": 0, "delta": delta}]} for delta in deltas)) + CHAT_END


def calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


def anthropic(*events: dict[str, Any]) -> bytes:
    """An Anthropic Messages stream of these events, then `message_stop`."""
    return sse(*events, {"type": "message_stop"})


def start(index: Any, block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: Any, value: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": value}


COMPLETED: Final = {"type": "response.completed", "response": {"status": "completed"}}


def responses(*events: Any) -> bytes:
    """An OpenAI Responses stream of these events, then `response.completed`."""
    return sse(*events, COMPLETED)


def item_done(index: Any, item: Any) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def gemini(*parts: Any, finish: str | None = None) -> dict[str, Any]:
    """A Gemini `streamGenerateContent` event: these parts of candidate 0, its finishReason."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-pro"}


REASONING: Final = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "**Listing** the files"}],
    "encrypted_content": "gAAAAB" + "x9" * 40,
}
MESSAGE: Final = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Looking."}],
    "role": "assistant",
}
FUNCTION: Final = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"command":["bash","-lc","ls"],"workdir":"/w"}',
    "call_id": "call_1",
    "name": "shell",
}
SEARCH: Final = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {}}

PATCH: Final = "*** Begin Patch\n*** Add File: a.py\n+print('hi')\n*** End Patch"
CUSTOM: Final = {
    "id": "ctc_1",
    "type": "custom_tool_call",
    "status": "completed",
    "call_id": "call_2",
    "input": PATCH,
    "name": "apply_patch",
}
CASES: Final[list[tuple[str, str, bytes]]] = [
    (
        "chat: a custom (freeform) tool call, its input in pieces",
        "openai-chat",
        chat(
            calls(
                {"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "apply_patch"}}
            ),
            calls({"index": 0, "custom": {"input": PATCH[:20]}}),
            calls({"index": 0, "custom": {"input": PATCH[20:]}}),
        ),
    ),
    (
        "chat: parallel calls, a function and a custom one, with text",
        "openai-chat",
        chat(
            {"role": "assistant", "content": "Both: "},
            calls(
                {"index": 0, "id": "call_f", "type": "function", "function": {"name": "ls"}},
                {"index": 1, "id": "call_c", "type": "custom", "custom": {"name": "patch"}},
            ),
            calls(
                {"index": 1, "custom": {"input": "x"}},
                {"index": 0, "function": {"arguments": "{}"}},
            ),
        ),
    ),
    (
        "chat: a custom call whose type comes after its input",
        "openai-chat",
        chat(calls({"index": 0, "custom": {"input": "a"}}), calls({"index": 0, "type": "custom"})),
    ),
    (
        "chat: a call that is both a function and a custom one: none",
        "openai-chat",
        chat(
            calls({"index": 0, "type": "custom", "custom": {"name": "p", "input": "a"}}),
            calls({"index": 0, "function": {"arguments": "{}"}}),
        ),
    ),
    (
        "chat: a call typed function that streams a custom input: none",
        "openai-chat",
        chat(calls({"index": 0, "type": "function", "custom": {"input": "a"}})),
    ),
    (
        "chat: a refusal",
        "openai-chat",
        chat({"refusal": "I can't "}, {"refusal": "help with that."}),
    ),
    (
        "chat: a refusal after text",
        "openai-chat",
        chat({"content": "Well."}, {"refusal": "No."}),
    ),
    (
        "chat: reasoning_content (not modelled, content kept)",
        "openai-chat",
        chat({"reasoning_content": "hm"}, {"content": "Done."}),
    ),
    (
        "chat: a surrogate pair split between two deltas",
        "openai-chat",
        chat({"content": "\ud83d"}, {"content": "\ude00 ok"}),
    ),
    (
        "chat: a custom input that is not a string (left out, as a function's)",
        "openai-chat",
        chat(calls({"index": 0, "type": "custom", "custom": {"name": "p", "input": 5}})),
    ),
    (
        "chat: event data in UTF-16: none",
        "openai-chat",
        b"data: "
        + '{"choices":[{"delta":{"content":"a"}}]}'.encode("utf-16-le")
        + b"\n\n"
        + CHAT_END,
    ),
    (
        "anthropic: text, thinking + signature, tool_use, redacted_thinking",
        "anthropic",
        anthropic(
            start(0, {"type": "thinking", "thinking": ""}),
            delta(0, {"type": "thinking_delta", "thinking": "Plan."}),
            delta(0, {"type": "signature_delta", "signature": "c2ln"}),
            start(1, {"type": "redacted_thinking", "data": "ZW5j"}),
            start(2, {"type": "text", "text": ""}),
            delta(2, {"type": "text_delta", "text": "Running."}),
            start(3, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
            delta(3, {"type": "input_json_delta", "partial_json": '{"command": '}),
            delta(3, {"type": "input_json_delta", "partial_json": '"ls"}'}),
        ),
    ),
    (
        "anthropic: server_tool_use and web_search_tool_result in the answer",
        "anthropic",
        anthropic(
            start(
                0,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ),
            delta(0, {"type": "input_json_delta", "partial_json": '{"query": "zstd"}'}),
            start(
                1,
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "u",
                            "title": "t",
                            "encrypted_content": "e",
                        }
                    ],
                },
            ),
            start(2, {"type": "text", "text": ""}),
            delta(2, {"type": "text_delta", "text": "Found."}),
        ),
    ),
    (
        "anthropic: a text delta of null: none",
        "anthropic",
        anthropic(
            start(0, {"type": "text", "text": ""}), delta(0, {"type": "text_delta", "text": None})
        ),
    ),
    (
        "anthropic: a block whose text is a number: none",
        "anthropic",
        anthropic(
            start(0, {"type": "text", "text": 5}), delta(0, {"type": "text_delta", "text": "a"})
        ),
    ),
    (
        "anthropic: a partial_json that is a number: none",
        "anthropic",
        anthropic(
            start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
            delta(0, {"type": "input_json_delta", "partial_json": 5}),
        ),
    ),
    (
        "anthropic: a surrogate pair as two three-byte sequences",
        "anthropic",
        sse(
            b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"\xed\xa0\xbd\xed\xb8\x80"}}'
        )
        + sse({"type": "message_stop"}),
    ),
    *[
        (f"responses: {name}", "openai-responses", data)
        for name, data in [
            (
                "reasoning, text, a function call and a custom call, deltas repeating them",
                responses(
                    {"type": "response.output_item.added", "output_index": 0, "item": REASONING},
                    item_done(0, REASONING),
                    {"type": "response.output_text.delta", "output_index": 1, "delta": "Lo"},
                    item_done(1, MESSAGE),
                    {"type": "response.function_call_arguments.delta", "output_index": 2},
                    item_done(3, CUSTOM),
                    item_done(2, FUNCTION),
                ),
            ),
            ("a web search call kept as sent, its id dropped", responses(item_done(0, SEARCH))),
            (
                "an item at output_index true, one at 2**70",
                responses(item_done(True, MESSAGE), item_done(2**70, FUNCTION)),
            ),
            (
                "an item again at its index: the last one",
                responses(item_done(0, FUNCTION), item_done(0, MESSAGE)),
            ),
            (
                "a lone surrogate and a pair in pieces",
                responses(
                    item_done(
                        0,
                        {
                            "type": "message",
                            "role": "assistant",
                            "content": [
                                {"type": "output_text", "text": "\ud83d"},
                                {"text": "\ude00\ud800"},
                            ],
                        },
                    )
                ),
            ),
            (
                "response.incomplete: none",
                sse(item_done(0, MESSAGE), {"type": "response.incomplete"}),
            ),
            ("an error event: none", sse(item_done(0, MESSAGE), {"type": "error"}, COMPLETED)),
            ("an item that is no object: none", responses(item_done(0, [MESSAGE]))),
            ("no response.completed: none", sse(item_done(0, MESSAGE))),
            ("data: [DONE] is no event: none", sse(item_done(0, MESSAGE), b"[DONE]")),
        ]
    ],
    *[
        (f"gemini: {name}", "gemini", data)
        for name, data in [
            (
                "text in pieces merged, a thought left out, a signed call",
                sse(
                    gemini({"text": "Plan", "thought": True}, {"text": "Run"}),
                    gemini({"text": "ning "}, {"text": ""}),
                    gemini({"text": "tests."}),
                    gemini(
                        {
                            "functionCall": {"name": "run", "args": {"cmd": "pytest -q", "n": 1.0}},
                            "thoughtSignature": "c2ln",
                        },
                        {"text": "x", "thoughtSignature": "c2ln"},
                        {"text": "y"},
                        finish="STOP",
                    ),
                ),
            ),
            (
                "an empty text starts a part, the next is added to it",
                sse(gemini({"text": ""}, {"text": "a"}, {"text": "b"}, finish="MAX_TOKENS")),
            ),
            (
                "thought false and {} are no thought",
                sse(
                    gemini(
                        {"text": "a", "thought": False}, {"text": "b", "thought": {}}, finish="STOP"
                    )
                ),
            ),
            (
                "usage-only events, parts none, content none",
                sse(
                    {"usageMetadata": {"promptTokenCount": 1}},
                    {"candidates": [{"content": {"role": "model"}}]},
                    {"candidates": [{"content": None, "finishReason": "STOP"}]},
                ),
            ),
            (
                "a surrogate pair cut between two parts",
                sse(gemini({"text": "\ud83d"}), gemini({"text": "\ude00"}, finish="STOP")),
            ),
            ("no finishReason: none", sse(gemini({"text": "a"}))),
            ("an empty finishReason: none", sse(gemini({"text": "a"}, finish=""))),
            ("an error event: none", sse(gemini({"text": "a"}), {"error": {"code": 500}})),
            ("a part that is no object: none", sse(gemini("a", finish="STOP"))),
            (
                "parts that are no list: none",
                sse(
                    {"candidates": [{"content": {"parts": {"text": "a"}}, "finishReason": "STOP"}]}
                ),
            ),
        ]
    ],
]


def made(fmt: str, data: bytes) -> bytes | None:
    """The answer the Python tap makes of `data`, fed whole."""
    tap = AnswerTap(fmt)
    tap.feed(data)
    return tap.answer


def build() -> list[dict[str, Any]]:
    """The vectors: each case's stream (hex) and the answer Python makes of it (hex, or None)."""
    cases = []
    for name, fmt, data in CASES:
        answer = made(fmt, data)
        cases.append(
            {
                "name": name,
                "format": fmt,
                "stream": data.hex(),
                "answer": None if answer is None else answer.hex(),
            }
        )
    return cases
