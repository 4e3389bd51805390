"""Test vectors for the TypeScript SDK, computed by the Python SDK (the reference).

`python -m tests.js_vectors --write` writes client_sdk/js/test/vectors.json; without
`--write` it says whether the committed file is current. `tests/unit/test_js_vectors.py`
asserts the committed file equals what Python computes now, and the JS suite
(client_sdk/js/test/vectors.test.ts) asserts the TypeScript SDK computes the same.

The file is written with ASCII escapes, so every string (lone surrogates included) reaches
JavaScript exactly as Python holds it. Values JavaScript cannot hold exactly (integers at or
beyond 2^53: `JSON.parse` makes them doubles) are in `bigIntegers`, each with the canonical
text Python computes for the exact integer, the one it computes for the double JavaScript
holds (what a JavaScript client sends, and so what the server digests), and the value with
each such integer as `{"$bigint": "<digits>"}` for JavaScript to rebuild as a `bigint`.
`edits` holds the edits vectors (tests/js_edit_vectors.py): cuts, diffs and editors' attempts.
`answers` holds streamed answers and the bytes the answer tap makes of each
(tests/js_answer_vectors.py). `endpoints` holds requests (method, path) and the LLM endpoint
`toolref.wire.endpoints.endpoint` finds for each (JS's `endpoint` must find the same).
`said` holds sequences of what receivers said and the edits version `toolref.sending.said.Said`
writes after each (tests/js_said_vectors.py). `entries` holds sequences of 413
`too-many-items` refusals and the entries limit `toolref.sending.entries.Entries` learns after
each (tests/js_entries_vectors.py). `printable` holds peers' texts and each as
`toolref.wire.redaction.printable` shows it, and `shownEndpoints` URLs and the endpoint a
warning names for each (tests/js_printable_vectors.py). `stranger` holds, for each status of
an answer to an edit from no receiver of edits, whether the request goes again as it is and
how edits pause (tests/js_stranger_vectors.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Container
from pathlib import Path
from typing import Any, Final

from tests import (
    js_answer_vectors,
    js_edit_vectors,
    js_entries_vectors,
    js_printable_vectors,
    js_said_vectors,
    js_stranger_vectors,
)
from toolref import formats
from toolref.sending.rewrite import rewrite
from toolref.wire.canonical import canonical_json, digest_of
from toolref.wire.endpoints import endpoint
from toolref.wire.errors import CanonicalizationError

ROOT: Final = Path(__file__).resolve().parents[1]
VECTORS: Final = ROOT / "client_sdk" / "js" / "test" / "vectors.json"
SAFE: Final = 2**53


class _All(Container[str]):
    def __contains__(self, item: object) -> bool:
        return True


def _canonical_case(name: str, value: Any) -> dict[str, Any]:
    data = canonical_json(value)
    return {
        "name": name,
        "value": value,
        "canonical": data.decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _nested(depth: int) -> Any:
    value: Any = {"leaf": [1.5, "é", None]}
    for level in range(depth):
        value = [value] if level % 2 else {"k": value, "n": level}
    return value


def _big_object(rng: random.Random) -> dict[str, Any]:
    alphabet = [
        "a",
        "B",
        "é",
        "\u00ff",
        "\u0100",
        "\ue000",
        "\uffff",
        "😀",
        "\U00010000",
        "\U0010ffff",
        "1",
        "_",
    ]
    out: dict[str, Any] = {}
    for index in range(300):
        key = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) + str(index % 7)
        out[key] = rng.choice([index, -index / 7, f"v{index}", None, True, [index, {"x": key}]])
    return out


def canonical_cases() -> list[dict[str, Any]]:
    rng = random.Random(21)
    controls = "".join(chr(c) for c in range(0x20)) + "\x7f\u2028\u2029"
    floats = [
        1e21,
        1e-7,
        -0.0,
        5e-324,
        1.7976931348623157e308,
        0.1,
        1e20,
        999999999999999900000.0,
        1.0,
        -1.5,
        123456789.123456789,
        2.2250738585072014e-308,
        1e-6,
        1.2345e-6,
        9.999e20,
        3.0e300,
        -2.5e-10,
        0.000001,
        100.0,
        1 / 3,
        4.35,
        0.3 - 0.1,
        float(2**53),
        float(2**60),
    ]
    cases = [
        _canonical_case("ascii", {"b": 1, "a": "x", "c": [True, False, None]}),
        _canonical_case("unicode", {"text": "héllo wörld ß ç 中文 русский عربى"}),
        _canonical_case("astral", {"emoji": "😀🎉𝄞\U0010ffff", "mixed": "a😀b\U00010000c"}),
        _canonical_case("escapes", {"q": '"quoted" \\back\\ /slash/', "nl": "a\nb\rc\td\be\ff"}),
        _canonical_case("controls", {"all": controls}),
        _canonical_case("floats", floats),
        _canonical_case(
            "integers near 2^53", [SAFE - 1, -(SAFE - 1), SAFE - 2, 0, -1, 2**31, 2**32]
        ),
        _canonical_case("deep nesting", _nested(300)),
        _canonical_case("key order, non-BMP keys", _big_object(rng)),
        _canonical_case(
            "utf-16 key order",
            {"\U0001f600": 1, "\ue000": 2, "\uffff": 3, "a": 4, "\u00e9": 5, "": 6, "aa": 7},
        ),
        _canonical_case("long string", {"text": ('line of output é😀 "q" \\ \t\n' * 400)}),
        _canonical_case("empty", {"o": {}, "a": [], "s": ""}),
    ]
    for index in range(20):
        cases.append(
            _canonical_case(
                f"random float {index}", rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-30, 30)
            )
        )
    return cases


def error_cases() -> list[dict[str, Any]]:
    """Values Python refuses to canonicalize (and so must JavaScript)."""
    cases = []
    for name, value in [
        ("lone high surrogate", {"s": "a\ud800b"}),
        ("lone low surrogate", {"s": "\udc00"}),
        ("reversed pair", ["\ude00\ud83d"]),
        ("lone surrogate key", {"\ud800": 1}),
    ]:
        try:
            canonical_json(value)
        except CanonicalizationError:
            cases.append({"name": name, "value": value, "error": "CanonicalizationError"})
        else:  # pragma: no cover - the vectors would be wrong
            raise AssertionError(f"Python accepted {name}")
    return cases


def _as_double(value: Any) -> Any:
    """`value` as JavaScript's JSON.parse holds it: integers beyond 2^53 as doubles."""
    if type(value) is int and abs(value) >= SAFE:
        return float(value)
    if isinstance(value, list):
        return [_as_double(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_double(item) for key, item in value.items()}
    return value


def _marked_bigints(value: Any) -> Any:
    if type(value) is int and abs(value) >= SAFE:
        return {"$bigint": str(value)}
    if isinstance(value, list):
        return [_marked_bigints(item) for item in value]
    if isinstance(value, dict):
        return {key: _marked_bigints(item) for key, item in value.items()}
    return value


def big_integer_cases() -> list[dict[str, Any]]:
    values = [
        ("2^53", SAFE),
        ("2^53 + 1", SAFE + 1),
        ("-(2^53 + 1)", -(SAFE + 1)),
        ("snowflake id", {"id": 1234567890123456789, "name": "x"}),
        ("2^64 + 1", 2**64 + 1),
        ("10^21", 10**21),
        ("10^21 + 1", 10**21 + 1),
        ("10^30 in a list", [1, 10**30, -(10**25) - 7]),
    ]
    cases = []
    for name, value in values:
        double = _as_double(value)
        cases.append(
            {
                "name": name,
                "value": value,
                "bigint": _marked_bigints(value),
                "canonical": canonical_json(value).decode(),
                "jsCanonical": canonical_json(double).decode(),
                "exact": canonical_json(value) == canonical_json(double),
            }
        )
    return cases


def invocation_cases() -> list[dict[str, Any]]:
    invocations: list[dict[str, Any]] = [
        {"name": "weather", "args": {"city": "Paris"}, "result": {"temp": 21.5, "unit": "C"}},
        {"name": "read_file", "args": '{"path": "src/app.py"}', "result": "print('hé😀')\n" * 50},
        {"name": "fail", "args": {}, "result": "boom", "isError": True},
        {"name": "fail", "args": {}, "result": "boom", "isError": False},
        {"name": "floats", "args": {"x": -0.0, "y": 1e-7}, "result": [1e21, 5e-324, 0.1]},
        {"name": "ünïcode 😀", "args": {"\U0001f600": "\ue000", "a": None}, "result": None},
        {"name": "", "args": None, "result": {"nested": _nested(50)}},
    ]
    cases = []
    for invocation in invocations:
        digest = digest_of(invocation)
        cases.append(
            {
                "invocation": invocation,
                "canonical": canonical_json(
                    {**invocation, "isError": invocation.get("isError", False)}
                ).decode(),
                "ref": str(digest.ref),
            }
        )
    return cases


def _v5_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append(
            {
                "id": f"u{turn}",
                "role": "user",
                "parts": [{"type": "text", "text": f"read file {turn} é😀"}],
            }
        )
        parts: list[dict[str, Any]] = [{"type": "step-start"}]
        for call in range(rng.randint(0, 3)):
            call_id = f"call_{turn}_{call}"
            args = {"path": f"src/m{turn}_{call}.py", "limit": rng.choice([10, 1.5, -0.0, 1e-7])}
            kind = rng.choice(["ok", "ok", "error", "pending", "reordered", "dynamic"])
            if kind == "ok":
                parts.append(
                    {
                        "type": "tool-read",
                        "toolCallId": call_id,
                        "state": "output-available",
                        "input": args,
                        "output": {"text": f"line {call}\n" * rng.randint(1, 40)},
                        "providerExecuted": False,
                    }
                )
            elif kind == "error":
                parts.append(
                    {
                        "type": "tool-read",
                        "toolCallId": call_id,
                        "state": "output-error",
                        "input": args,
                        "errorText": "ENOENT: no such file",
                    }
                )
            elif kind == "pending":
                parts.append(
                    {
                        "type": "tool-read",
                        "toolCallId": call_id,
                        "state": "input-available",
                        "input": args,
                    }
                )
            elif kind == "reordered":
                parts.append(
                    {
                        "type": "tool-grep",
                        "output": ["a:1", "b:2 😀"],
                        "toolCallId": call_id,
                        "state": "output-available",
                        "callProviderMetadata": {"x": 1},
                        "input": {"pattern": "TODO"},
                    }
                )
            else:
                parts.append(
                    {
                        "type": "dynamic-tool",
                        "toolName": "search",
                        "toolCallId": call_id,
                        "state": "output-available",
                        "input": {"q": "ü"},
                        "output": "found 3",
                    }
                )
        parts.append({"type": "text", "text": f"done {turn}", "state": "done"})
        messages.append(
            {"id": f"a{turn}", "role": "assistant", "parts": parts, "metadata": {"turn": turn}}
        )
    return messages


def _v4_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"id": f"u{turn}", "role": "user", "content": f"list dir {turn}"})
        invocations: list[dict[str, Any]] = []
        for call in range(rng.randint(1, 3)):
            call_id = f"call_{turn}_{call}"
            args = {"path": f"dir{turn}", "depth": rng.choice([1, 2.5, 1e21])}
            kind = rng.choice(["result", "result", "call", "reordered"])
            if kind == "result":
                invocations.append(
                    {
                        "state": "result",
                        "toolCallId": call_id,
                        "toolName": "list_dir",
                        "args": args,
                        "result": "\n".join(f"f{i}.py" for i in range(rng.randint(1, 30))),
                    }
                )
            elif kind == "call":
                invocations.append(
                    {"state": "call", "toolCallId": call_id, "toolName": "list_dir", "args": args}
                )
            else:
                invocations.append(
                    {
                        "result": {"ok": True},
                        "state": "result",
                        "toolCallId": call_id,
                        "toolName": "touch",
                        "args": args,
                        "step": 0,
                    }
                )
        messages.append(
            {"id": f"a{turn}", "role": "assistant", "content": "", "toolInvocations": invocations}
        )
        if turn % 2:
            part = {
                "type": "tool-invocation",
                "toolInvocation": {
                    "state": "result",
                    "toolCallId": f"p{turn}",
                    "toolName": "grep",
                    "args": {"q": "x"},
                    "result": ["m😀"],
                },
            }
            messages.append(
                {
                    "id": f"b{turn}",
                    "role": "assistant",
                    "content": "see",
                    "parts": [{"type": "text", "text": "see"}, part],
                }
            )
    return messages


def _chat_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """Chat Completions: calls in the assistant's `tool_calls`, results in later `tool`
    messages (paired by id, an id reused, one result missing, one orphan)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read files."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"read file {turn} é😀"})
        calls = []
        for call in range(rng.randint(1, 3)):
            call_id = "call_same" if turn % 4 == 3 else f"call_{turn}_{call}"
            if call == 2:
                spec = {"name": "patch", "input": f"*** edit {turn}"}
                calls.append({"id": call_id, "type": "custom", "custom": spec})
            else:
                args = json.dumps({"path": f"src/m{turn}_{call}.py", "limit": 1.5})
                spec = {"name": "read", "arguments": args}
                calls.append({"id": call_id, "type": "function", "function": spec})
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for index, made in enumerate(calls):
            if turn % 5 == 4 and index == 0:
                continue  # a call without its result
            content = f"line {index}\n" * rng.randint(1, 40)
            messages.append({"role": "tool", "tool_call_id": made["id"], "content": content})
        if turn == 1:
            messages.append({"role": "tool", "tool_call_id": "orphan", "content": "lost"})
        messages.append({"role": "assistant", "content": f"done {turn}"})
    return messages


def _anthropic_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """Messages: `tool_use` blocks, `tool_result` blocks in the next user message (an error,
    a result without content, member order of its own)."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"list dir {turn}"})
        uses = []
        for call in range(rng.randint(1, 3)):
            uses.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{turn}_{call}",
                    "name": "list_dir",
                    "input": {"path": f"dir{turn}", "depth": rng.choice([1, 2.5, 1e21])},
                }
            )
        text = {"type": "text", "text": "looking"}
        messages.append({"role": "assistant", "content": [text, *uses]})
        results: list[dict[str, Any]] = []
        for index, use in enumerate(uses):
            if index == 1 and turn % 2:
                results.append({"type": "tool_result", "tool_use_id": use["id"]})  # bare
            elif index == 2:
                results.append(
                    {
                        "content": "EACCES",
                        "is_error": True,
                        "tool_use_id": use["id"],
                        "type": "tool_result",
                    }
                )
            else:
                listing = [{"type": "text", "text": "\n".join(f"f{i}.py" for i in range(9))}]
                results.append(
                    {"type": "tool_result", "tool_use_id": use["id"], "content": listing}
                )
        messages.append({"role": "user", "content": results})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    return messages


def _responses_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """Responses: `function_call` and `custom_tool_call` items, their outputs later."""
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        items.append(
            {"role": "user", "content": [{"type": "input_text", "text": f"grep {turn} 😀"}]}
        )
        calls = []
        for call in range(rng.randint(1, 2)):
            call_id = f"fc_{turn}_{call}"
            if call == 1:
                calls.append(
                    {
                        "type": "custom_tool_call",
                        "call_id": call_id,
                        "name": "apply_patch",
                        "input": "*** Begin Patch",
                    }
                )
            else:
                calls.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": "grep",
                        "arguments": json.dumps({"q": f"x{turn}"}),
                    }
                )
        items.extend(calls)
        for made in calls:
            kind = made["type"] + "_output"
            items.append({"type": kind, "call_id": made["call_id"], "output": "m😀\n" * 12})
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"found {turn}"}],
            }
        )
    return items


def _responses_tool_items() -> list[dict[str, Any]]:
    """Responses: the shell, apply_patch and computer tools' items, with their outputs (an
    array, a string or none, an object), and a `computer_call` with `action` alone (no
    call)."""
    click = {"type": "click", "button": "left", "x": 1, "y": 2}
    shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBOR😀"}
    exit_0 = {"type": "exit", "exit_code": 0}
    patch = {"type": "create_file", "path": "a😀.py", "diff": "+x = 1.0\n"}
    return [
        {"role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "shell_call", "call_id": "sh_1", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "sh_1",
            "output": [{"stdout": "a😀\n" * 8, "stderr": "", "outcome": exit_0}],
        },
        {"type": "apply_patch_call", "call_id": "ap_1", "operation": patch},
        {"type": "apply_patch_call_output", "call_id": "ap_1", "status": "failed", "output": "x"},
        {"type": "apply_patch_call", "call_id": "ap_2", "operation": patch},
        {"type": "apply_patch_call_output", "call_id": "ap_2", "status": "completed"},
        {"type": "computer_call", "id": "cu_1", "call_id": "cc_1", "actions": [click]},
        {"type": "computer_call_output", "call_id": "cc_1", "output": shot},
        {"type": "computer_call", "call_id": "cc_2", "action": click, "actions": None},
        {"type": "computer_call_output", "call_id": "cc_2", "output": shot},
        {"type": "computer_call", "call_id": "cc_3", "action": click},
        {"type": "computer_call_output", "call_id": "cc_3", "output": shot},
    ]


def conversation_cases() -> list[dict[str, Any]]:
    rng = random.Random(5)
    conversations = [
        ("ai-sdk-v5 short", "ai-sdk-v5", _v5_conversation(rng, 3)),
        ("ai-sdk-v5 long", "ai-sdk-v5", _v5_conversation(rng, 12)),
        ("ai-sdk-v4 short", "ai-sdk-v4", _v4_conversation(rng, 3)),
        ("ai-sdk-v4 long", "ai-sdk-v4", _v4_conversation(rng, 10)),
        (
            "plain text",
            "ai-sdk-v5",
            [{"id": "1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        ),
    ]
    other = random.Random(7)  # the LLM APIs' formats: calls and results in different messages
    conversations += [
        ("openai-chat short", "openai-chat", _chat_conversation(other, 3)),
        ("openai-chat long", "openai-chat", _chat_conversation(other, 10)),
        ("anthropic short", "anthropic", _anthropic_conversation(other, 3)),
        ("anthropic long", "anthropic", _anthropic_conversation(other, 8)),
        ("openai-responses", "openai-responses", _responses_conversation(other, 6)),
        ("openai-responses tool items", "openai-responses", _responses_tool_items()),
    ]
    cases = []
    for name, fmt_name, messages in conversations:
        fmt = formats.detect(messages)
        assert fmt.name == fmt_name, (name, fmt.name)
        optimized = rewrite(messages, fmt, _All())
        cases.append(
            {
                "name": name,
                "format": fmt.name,
                "messages": messages,
                "optimized": optimized.messages,
                "toolReferences": optimized.refs,
            }
        )
    return cases


ENDPOINT_PATHS: Final = (
    "/v1/messages",
    "/v1/messages/",
    "/llm/claude/v1/messages//",
    "/v1/messages/count_tokens",
    "/v1/messages/batches",
    "/v1/chat/completions",
    "/v1/chat/completions/x",
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1beta/models/gemini-2.5-pro:generateContent",
    "/llm/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent",
    "/v1beta/models/g:streamGenerateContent/",
    "/v1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent",
    "/v1beta/models/g:countTokens",
    "/v1beta/models/g:embedContent",
    "/v1beta/models/g:generateContent:x",
    "/v1beta/models/g:GENERATECONTENT",
    ":generateContent",
    "/v1/models",
    "/",
    "",
)


def endpoint_cases() -> list[dict[str, Any]]:
    """Each path, POSTed (and once as a GET, a lower-case post), and its endpoint."""
    cases = []
    for method in ("POST", "post", "GET"):
        for path in (
            ENDPOINT_PATHS if method == "POST" else ENDPOINT_PATHS[:1] + ENDPOINT_PATHS[9:11]
        ):
            found = endpoint(method, path)
            made = (
                None
                if found is None
                else {"format": found.format, "messagesKey": found.messages_key}
            )
            cases.append({"method": method, "path": path, "endpoint": made})
    return cases


def build() -> dict[str, Any]:
    return {
        "comment": "Written by `python -m tests.js_vectors --write` (the Python SDK); do not edit.",
        "canonical": canonical_cases(),
        "errors": error_cases(),
        "bigIntegers": big_integer_cases(),
        "invocations": invocation_cases(),
        "conversations": conversation_cases(),
        "edits": js_edit_vectors.build(),
        "answers": js_answer_vectors.build(),
        "endpoints": endpoint_cases(),
        "said": js_said_vectors.build(),
        "entries": js_entries_vectors.build(),
        "printable": js_printable_vectors.build(),
        "shownEndpoints": js_printable_vectors.endpoints(),
        "stranger": js_stranger_vectors.build(),
    }


def render() -> str:
    """The file's text: ASCII escapes, so lone surrogates travel as `\\udXXX`."""
    return json.dumps(build(), ensure_ascii=True, indent=1) + "\n"


def main() -> int:
    return written(VECTORS, render(), __doc__)


def written(vectors: Path, text: str, doc: str | None) -> int:
    """A vectors file's command: with `--write` `text` written to `vectors`; without, 0
    where the file holds it, 1 where it is stale."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {vectors.relative_to(ROOT)}")
    if parser.parse_args().write:
        vectors.write_text(text)
        print(f"wrote {vectors.relative_to(ROOT)} ({len(text)} bytes)")
        return 0
    current = vectors.exists() and vectors.read_text() == text
    print(f"{vectors.relative_to(ROOT)} is {'current' if current else 'stale: run with --write'}")
    return 0 if current else 1


if __name__ == "__main__":
    sys.exit(main())
