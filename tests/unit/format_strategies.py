"""Hypothesis strategies: realistic conversations in each of the six message formats.

Every strategy draws a `Conversation`: the messages, and what the format layer must find in
them, planned independently of it: the complete invocations (name, args, result, isError),
where their call and result sides sit (they become markers), and where the pending calls,
the orphan results and the payload-less results sit (they stay as they are).

The conversations have several turns, parallel calls, calls never answered, results whose
call is not in the messages, error results, call ids used again for a later call (once the
earlier call was answered, as OpenAI does), string and block-list content, arbitrary JSON
payloads, unknown members at every level, and members in random order in every object.

Three things keep the plan unambiguous, because the format layer pairs a result with the
oldest unanswered call of its id (or, without ids, of its tool name): an id is used again
only after every earlier call with it was answered, or by parallel calls that are all
answered, in call order; without ids the pending calls and orphan results have tool names
of their own. Payload objects never have a `type` member, so
a payload placed in a message's `content` cannot look like another format's block list.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

Path = tuple[int | str, ...]
Json = Any

# --- payloads -----------------------------------------------------------------------------

# Text from the whole of Unicode: astral characters (surrogate pairs in UTF-16) included.
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_TRICKY = st.sampled_from(
    [
        "",
        " ",
        "\U0001f600",
        "\U0001d11e clef",
        "na\u00efve",
        "\u2028\u2029",
        "\x00\x1f\x7f",
        "tab\tnew\nline\r",
        '"quoted"',
        "back\\slash",
        "</script>",
        "\ufeffbom",
        "\u20ac\u00e9\u4e2d\u6587",
    ]
)
STRINGS = st.one_of(_TEXT, _TRICKY)
_BIG_INTS = st.one_of(
    st.integers(min_value=2**53, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-(2**53)),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    _BIG_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
_KEYS = st.one_of(
    STRINGS,
    st.sampled_from(
        ["path", "command", "offset", "limit", "stdout", "exit_code", "", "\U0001f511"]
    ),
).filter(lambda key: key != "type")
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)
OBJECTS = st.dictionaries(_KEYS, JSON_VALUES, max_size=4)
_SMALL = st.one_of(
    SCALARS,
    st.fixed_dictionaries({"type": st.just("ephemeral")}),
    st.dictionaries(st.sampled_from(["a", "\U0001f600", ""]), SCALARS, max_size=2),
)
# Tool output as agents get it: numbered lines, large enough that a ref pays for itself.
LONG_TEXT = st.builds(
    lambda line, lines: "".join(f"{n:>6}\t{line}\n" for n in range(1, lines + 1)),
    STRINGS,
    st.integers(min_value=1, max_value=24),
)
RESULTS = st.one_of(
    LONG_TEXT,
    JSON_VALUES,
    st.builds(lambda out, code: {"stdout": out, "exit_code": code}, LONG_TEXT, _BIG_INTS),
)
ARGS = st.one_of(
    OBJECTS, st.builds(lambda text, n: {"path": text, "limit": n}, LONG_TEXT, st.integers())
)


def _dumps(value: Json, ascii_only: bool, compact: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":") if compact else None)


# OpenAI `arguments`: the JSON text of the arguments object, kept as a string.
ARGUMENT_STRINGS = st.one_of(
    st.builds(_dumps, ARGS, st.booleans(), st.booleans()), st.sampled_from(["", "{}"])
)
TOOL_NAMES = st.sampled_from(
    ["read_file", "bash", "Read", "str_replace_editor", "get_weather", "search", "\u5de5\u5177"]
)

# Unknown members, by where they appear.
MESSAGE_EXTRAS = ("extra", "provider_specific_fields", "x-request-id")
BLOCK_EXTRAS = ("cache_control", "extra", "provider_specific_fields")
FUNCTION_EXTRAS = ("extra", "provider_specific_fields")
GEMINI_PART_EXTRAS = ("thoughtSignature", "thought_signature", "extra")
V4_EXTRAS = ("step", "extra")
V5_EXTRAS = ("providerExecuted", "callProviderMetadata", "preliminary", "extra")


@functools.cache
def _extras(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Json]]:
    return st.dictionaries(st.sampled_from(names), _SMALL, max_size=2)


@functools.cache
def _orders(size: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(size))


# --- the plan -----------------------------------------------------------------------------


@dataclass
class Conversation:
    format: str
    messages: list[dict[str, Any]]
    invocations: list[dict[str, Any]] = field(default_factory=list)  # complete, wire form
    marked: list[Path] = field(default_factory=list)  # sides of complete invocations
    pending: list[Path] = field(default_factory=list)  # calls without a result
    orphans: list[Path] = field(default_factory=list)  # results without a call
    inert: list[Path] = field(default_factory=list)  # results that carry no payload

    @property
    def tool_sites(self) -> int:
        return len(self.marked) + len(self.pending) + len(self.orphans)

    @property
    def calls(self) -> int:
        """Tool calls, complete or pending."""
        return len(self.invocations) + len(self.pending)


@dataclass
class _Call:
    id: str | None
    name: str
    fate: str  # "answered", "error", "pending", "bare" (a result without payload), "orphan"
    args: Json = None
    path: Path = ()

    @property
    def answered(self) -> bool:
        return self.fate in ("answered", "error")


class _Builder:
    """Messages under construction, and the plan of what the format layer must find."""

    def __init__(self, draw: st.DrawFn, fmt: str, prefix: str, with_ids: bool = True) -> None:
        self.draw = draw
        self.conversation = Conversation(fmt, [])
        self.prefix = prefix
        self.with_ids = with_ids
        self.count = 0
        self.reusable: list[str] = []  # ids whose every call was answered: free to reuse

    @property
    def next_index(self) -> int:
        return len(self.conversation.messages)

    def add(self, message: dict[str, Any]) -> int:
        self.conversation.messages.append(message)
        return len(self.conversation.messages) - 1

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def obj(self, members: list[tuple[str, Json]], extras: tuple[str, ...] = ()) -> dict[str, Any]:
        """An object with these members, some unknown ones, all in a random order."""
        items = list(members)
        if extras:
            taken = {key for key, _ in items}
            drawn = self.draw(_extras(extras))
            items += [(k, v) for k, v in drawn.items() if k not in taken]
        return dict(items[n] for n in self.draw(_orders(len(items))))

    def plan(self, fates: tuple[str, ...], most: int = 3) -> list[_Call]:
        """The calls of one assistant turn: parallel, some reusing an earlier call's id."""
        calls: list[_Call] = []
        used: set[str] = set()
        for _ in range(self.draw(st.integers(min_value=0, max_value=most))):
            fate = self.draw(st.sampled_from(fates))
            name = self.draw(TOOL_NAMES)
            call_id: str | None = None
            if self.with_ids:
                free = [i for i in self.reusable if i not in used]
                if fate_is_answered(fate):  # some servers give parallel calls one id
                    free += sorted({c.id for c in calls if c.answered and c.id is not None})
                reuse = bool(free) and self.draw(st.booleans())
                call_id = self.draw(st.sampled_from(free)) if reuse else self.fresh()
                used.add(call_id)
            elif not fate_is_answered(fate):
                name = f"never_answered_{self.fresh()}"  # would otherwise take a later result
            calls.append(_Call(call_id, name, fate))
        return calls

    def results(self, calls: list[_Call], orphans: bool = True) -> list[_Call]:
        """The results of a turn, in any order (in call order without ids), orphans among them."""
        answered = [c for c in calls if c.answered or c.fate == "bare"]
        if self.with_ids:
            shuffled = list(self.draw(st.permutations(answered)))
            # Results of calls that share an id come in call order: oldest call first.
            by_id = {c.id: [d for d in answered if d.id == c.id] for c in answered}
            answered = [by_id[c.id].pop(0) for c in shuffled]
        for _ in range(self.draw(st.integers(min_value=0, max_value=1 if orphans else 0))):
            if self.with_ids:
                orphan = _Call(self.fresh(), self.draw(TOOL_NAMES), "orphan")
            else:
                orphan = _Call(None, f"orphan_{self.fresh()}", "orphan")
            answered.insert(self.draw(st.integers(min_value=0, max_value=len(answered))), orphan)
        return answered

    def settle(self, calls: list[_Call]) -> None:
        """After a turn: answered ids may be used again, ids of unanswered calls may not."""
        for call in calls:
            if call.id is None:
                continue
            if call.answered:
                if call.id not in self.reusable:
                    self.reusable.append(call.id)
            elif call.id in self.reusable:
                self.reusable.remove(call.id)

    def call_site(self, call: _Call, path: Path, args: Json) -> None:
        call.args, call.path = args, path
        if call.answered:
            self.conversation.marked.append(path)
        else:
            self.conversation.pending.append(path)

    def result_site(self, call: _Call, path: Path, result: Json = None) -> None:
        if call.fate == "orphan":
            self.conversation.orphans.append(path)
        elif call.fate == "bare":
            self.conversation.inert.append(path)
        else:
            self.conversation.marked.append(path)
            self.invocation(call.name, call.args, result, call.fate == "error")

    def invocation(self, name: str, args: Json, result: Json, is_error: bool) -> None:
        self.conversation.invocations.append(
            {"name": name, "args": args, "result": result, "isError": is_error}
        )

    def combined(self, path: Path, call: _Call, args: Json, result: Json) -> None:
        """A call and its result in one object (the AI SDK formats)."""
        if call.answered:
            self.conversation.marked.append(path)
            self.invocation(call.name, args, result, call.fate == "error")
        else:
            self.conversation.pending.append(path)


def fate_is_answered(fate: str) -> bool:
    return fate in ("answered", "error")


# --- openai-chat --------------------------------------------------------------------------


def _chat_content(draw: st.DrawFn, b: _Builder) -> Json:
    if draw(st.booleans()):
        return draw(STRINGS)
    return [b.obj([("type", "text"), ("text", draw(STRINGS))], BLOCK_EXTRAS)]


@st.composite
def openai_chat(draw: st.DrawFn) -> Conversation:
    b = _Builder(draw, "openai-chat", "call_")
    if draw(st.booleans()):
        b.add(b.obj([("role", "system"), ("content", draw(STRINGS))], MESSAGE_EXTRAS))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if draw(st.booleans()):
            b.add(b.obj([("role", "user"), ("content", _chat_content(draw, b))], MESSAGE_EXTRAS))
        calls = b.plan(("answered", "answered", "pending"))
        i = b.next_index
        tool_calls = []
        for j, call in enumerate(calls):
            args = draw(ARGUMENT_STRINGS)
            function = b.obj([("name", call.name), ("arguments", args)], FUNCTION_EXTRAS)
            tool_calls.append(
                b.obj([("id", call.id), ("type", "function"), ("function", function)], BLOCK_EXTRAS)
            )
            b.call_site(call, (i, "tool_calls", j, "function"), args)
        members: list[tuple[str, Json]] = [("role", "assistant")]
        members.append(("content", draw(st.none() | STRINGS) if calls else draw(STRINGS)))
        if bool(calls) or draw(st.booleans()):
            members.append(("tool_calls", tool_calls))
        b.add(b.obj(members, MESSAGE_EXTRAS))
        for call in b.results(calls):
            payload = draw(RESULTS) if draw(st.booleans()) else _chat_content(draw, b)
            fields = [("role", "tool"), ("tool_call_id", call.id), ("content", payload)]
            if draw(st.booleans()):
                fields.append(("name", call.name))
            b.result_site(call, (b.add(b.obj(fields, MESSAGE_EXTRAS)),), payload)
        b.settle(calls)
    return b.conversation


# --- openai-responses ---------------------------------------------------------------------


@st.composite
def openai_responses(draw: st.DrawFn) -> Conversation:
    b = _Builder(draw, "openai-responses", "call_")
    if draw(st.booleans()):
        b.add(b.obj([("role", "developer"), ("content", draw(STRINGS))], MESSAGE_EXTRAS))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if draw(st.booleans()):
            b.add(b.obj([("role", "user"), ("content", draw(STRINGS))], MESSAGE_EXTRAS))
        else:
            part = b.obj([("type", "input_text"), ("text", draw(STRINGS))], BLOCK_EXTRAS)
            b.add(b.obj([("type", "message"), ("role", "user"), ("content", [part])]))
        if draw(st.booleans()):
            summary = b.obj([("type", "summary_text"), ("text", draw(STRINGS))])
            b.add(
                b.obj(
                    [
                        ("type", "reasoning"),
                        ("id", f"rs_{b.fresh()}"),
                        ("summary", [summary]),
                        ("encrypted_content", draw(STRINGS)),
                    ]
                )
            )
        if draw(st.booleans()):
            text = b.obj([("type", "output_text"), ("text", draw(STRINGS)), ("annotations", [])])
            b.add(
                b.obj(
                    [
                        ("type", "message"),
                        ("id", f"msg_{b.fresh()}"),
                        ("role", "assistant"),
                        ("status", "completed"),
                        ("content", [text]),
                    ],
                    MESSAGE_EXTRAS,
                )
            )
        calls = b.plan(("answered", "answered", "pending"))
        custom = {id(c): draw(st.booleans()) for c in calls}
        for call in calls:
            if custom[id(call)]:
                args: Json = draw(STRINGS | LONG_TEXT)
                kind, key = "custom_tool_call", "input"
            else:
                args, kind, key = draw(ARGUMENT_STRINGS), "function_call", "arguments"
            members = [
                ("type", kind),
                ("id", f"fc_{b.fresh()}"),
                ("call_id", call.id),
                ("name", call.name),
                (key, args),
            ]
            if draw(st.booleans()):
                members.append(("status", "completed"))
            b.call_site(call, (b.add(b.obj(members, MESSAGE_EXTRAS)),), args)
        for call in b.results(calls):
            is_custom = custom.get(id(call), draw(st.booleans()))
            kind = "custom_tool_call_output" if is_custom else "function_call_output"
            output: Json = draw(
                st.one_of(
                    RESULTS,
                    st.builds(lambda text: [{"type": "input_text", "text": text}], LONG_TEXT),
                )
            )
            fields = [("type", kind), ("call_id", call.id), ("output", output)]
            b.result_site(call, (b.add(b.obj(fields, MESSAGE_EXTRAS)),), output)
        b.settle(calls)
    return b.conversation


# --- anthropic ----------------------------------------------------------------------------

_RESULT_KIND = {
    "tool_use": "tool_result",
    "server_tool_use": "web_search_tool_result",
    "mcp_tool_use": "mcp_tool_result",
}
_TEXT_BLOCKS = st.builds(lambda text: [{"type": "text", "text": text}], LONG_TEXT)


@st.composite
def anthropic(draw: st.DrawFn) -> Conversation:
    b = _Builder(draw, "anthropic", "toolu_")
    for turn in range(draw(st.integers(min_value=1, max_value=4))):
        if turn == 0 or draw(st.booleans()):
            text = b.obj([("type", "text"), ("text", draw(STRINGS))], BLOCK_EXTRAS)
            content = draw(st.just([text]) | STRINGS)
            b.add(b.obj([("role", "user"), ("content", content)], MESSAGE_EXTRAS))
        calls = b.plan(("answered", "answered", "error", "pending", "bare"))
        i = b.next_index
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            thinking = [("type", "thinking"), ("thinking", draw(STRINGS)), ("signature", "c2ln")]
            blocks.append(b.obj(thinking))
        if draw(st.booleans()):
            blocks.append(b.obj([("type", "text"), ("text", draw(STRINGS))], BLOCK_EXTRAS))
        kinds = {}
        for call in calls:
            kind = draw(
                st.sampled_from(["tool_use", "tool_use", "server_tool_use", "mcp_tool_use"])
            )
            kinds[id(call)] = kind
            args = draw(ARGS)
            members = [("type", kind), ("id", call.id), ("name", call.name), ("input", args)]
            if kind == "mcp_tool_use":
                members.append(("server_name", "files"))
            b.call_site(call, (i, "content", len(blocks)), args)
            blocks.append(b.obj(members, BLOCK_EXTRAS))
        content = blocks if bool(blocks) or draw(st.booleans()) else draw(STRINGS)
        b.add(b.obj([("role", "assistant"), ("content", content)], MESSAGE_EXTRAS))
        results = b.results(calls)
        if results:
            i = b.next_index
            out: list[dict[str, Any]] = []
            for call in results:
                members = [("type", _RESULT_KIND[kinds.get(id(call), "tool_use")])]
                members.append(("tool_use_id", call.id))
                payload: Json = None
                if call.fate != "bare":  # a tool_result may come without content
                    payload = draw(st.one_of(RESULTS, _TEXT_BLOCKS))
                    members.append(("content", payload))
                if call.fate == "error":
                    members.append(("is_error", True))
                elif draw(st.booleans()):
                    members.append(("is_error", False))
                b.result_site(call, (i, "content", len(out)), payload)
                out.append(b.obj(members, BLOCK_EXTRAS))
            if draw(st.booleans()):
                out.append(b.obj([("type", "text"), ("text", draw(STRINGS))], BLOCK_EXTRAS))
            b.add(b.obj([("role", "user"), ("content", out)], MESSAGE_EXTRAS))
        b.settle(calls)
    return b.conversation


# --- ai-sdk-v4 ----------------------------------------------------------------------------


def _v4_invocation(b: _Builder, call: _Call, args: Json, result: Json) -> dict[str, Any]:
    draw = b.draw
    members: list[tuple[str, Json]] = [("toolCallId", call.id), ("toolName", call.name)]
    if call.answered:
        members += [("state", "result"), ("args", args), ("result", result)]
    else:
        members += [("state", draw(st.sampled_from(["call", "partial-call"]))), ("args", args)]
    return b.obj(members, V4_EXTRAS)


@st.composite
def ai_sdk_v4(draw: st.DrawFn) -> Conversation:
    b = _Builder(draw, "ai-sdk-v4", "call_")
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        members: list[tuple[str, Json]] = [
            ("id", f"m{b.fresh()}"),
            ("role", "user"),
            ("content", draw(STRINGS)),
        ]
        if draw(st.booleans()):
            members.append(("createdAt", "2025-03-01T12:00:00.000Z"))
        if draw(st.booleans()):
            members.append(("parts", [{"type": "text", "text": draw(STRINGS)}]))
        b.add(b.obj(members, MESSAGE_EXTRAS))
        calls = b.plan(("answered", "answered", "pending"))
        # AI SDK 4.0 keeps `toolInvocations`; 4.2+ adds `parts`, holding the same invocations.
        style = draw(st.sampled_from(["invocations", "parts", "both"]))
        i = b.next_index
        invocations: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append({"type": "step-start"})
        if draw(st.booleans()):
            parts.append(b.obj([("type", "reasoning"), ("reasoning", draw(STRINGS))]))
        for call in calls:
            args, result = draw(ARGS), draw(RESULTS)
            invocation = _v4_invocation(b, call, args, result)
            if style != "parts":
                b.combined((i, "toolInvocations", len(invocations)), call, args, result)
                invocations.append(invocation)
            if style != "invocations":
                b.combined((i, "parts", len(parts), "toolInvocation"), call, args, result)
                part = [("type", "tool-invocation"), ("toolInvocation", copy.deepcopy(invocation))]
                parts.append(b.obj(part))
        if draw(st.booleans()):
            parts.append({"type": "text", "text": draw(STRINGS)})
        members = [("id", f"m{b.fresh()}"), ("role", "assistant"), ("content", draw(STRINGS))]
        if style != "parts":
            members.append(("toolInvocations", invocations))
        if style != "invocations":
            members.append(("parts", parts))
        b.add(b.obj(members, MESSAGE_EXTRAS))
        b.settle(calls)
    return b.conversation


# --- ai-sdk-v5 ----------------------------------------------------------------------------


@st.composite
def ai_sdk_v5(draw: st.DrawFn) -> Conversation:
    b = _Builder(draw, "ai-sdk-v5", "call_")
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        text = b.obj([("type", "text"), ("text", draw(STRINGS))], BLOCK_EXTRAS)
        members: list[tuple[str, Json]] = [("id", f"m{b.fresh()}"), ("role", "user")]
        members.append(("parts", [text]))
        if draw(st.booleans()):
            members.append(("metadata", draw(_SMALL)))
        b.add(b.obj(members, MESSAGE_EXTRAS))
        calls = b.plan(("answered", "answered", "error", "pending"))
        i = b.next_index
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append({"type": "step-start"})
        if draw(st.booleans()):
            reasoning = [("type", "reasoning"), ("text", draw(STRINGS)), ("state", "done")]
            parts.append(b.obj(reasoning, ("providerMetadata", "extra")))
        for call in calls:
            args = draw(ARGS)
            tool: list[tuple[str, Json]]
            if draw(st.booleans()):
                tool = [("type", "dynamic-tool"), ("toolName", call.name)]
            else:
                tool = [("type", f"tool-{call.name}")]
            tool.append(("toolCallId", call.id))
            tool.append(("input", args))
            result: Json = None
            if call.fate == "answered":
                result = draw(RESULTS)
                tool += [("state", "output-available"), ("output", result)]
            elif call.fate == "error":
                result = draw(STRINGS | LONG_TEXT)
                tool += [("state", "output-error"), ("errorText", result)]
            else:
                tool.append(
                    ("state", draw(st.sampled_from(["input-available", "input-streaming"])))
                )
            b.combined((i, "parts", len(parts)), call, args, result)
            parts.append(b.obj(tool, V5_EXTRAS))
        if draw(st.booleans()):
            parts.append(b.obj([("type", "text"), ("text", draw(STRINGS)), ("state", "done")]))
        members = [("id", f"m{b.fresh()}"), ("role", "assistant"), ("parts", parts)]
        b.add(b.obj(members, MESSAGE_EXTRAS))
        b.settle(calls)
    return b.conversation


# --- gemini -------------------------------------------------------------------------------


@st.composite
def gemini(draw: st.DrawFn) -> Conversation:
    with_ids, snake = draw(st.booleans()), draw(st.booleans())
    call_key = "function_call" if snake else "functionCall"
    result_key = "function_response" if snake else "functionResponse"
    b = _Builder(draw, "gemini", "fc-", with_ids=with_ids)
    for turn in range(draw(st.integers(min_value=1, max_value=4))):
        if turn == 0 or draw(st.booleans()):
            b.add(b.obj([("role", "user"), ("parts", [{"text": draw(STRINGS)}])], MESSAGE_EXTRAS))
        calls = b.plan(("answered", "answered", "pending"))
        i = b.next_index
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append(b.obj([("text", draw(STRINGS)), ("thought", True)]))
        for call in calls:
            args = draw(ARGS)
            members: list[tuple[str, Json]] = [("name", call.name), ("args", args)]
            if call.id is not None:
                members.append(("id", call.id))
            b.call_site(call, (i, "parts", len(parts), call_key), args)
            parts.append(b.obj([(call_key, b.obj(members, FUNCTION_EXTRAS))], GEMINI_PART_EXTRAS))
        if not parts or draw(st.booleans()):
            parts.append({"text": draw(STRINGS)})
        b.add(b.obj([("role", "model"), ("parts", parts)], MESSAGE_EXTRAS))
        results = b.results(calls)
        if results:
            i = b.next_index
            out: list[dict[str, Any]] = []
            for call in results:
                response = draw(RESULTS)
                members = [("name", call.name), ("response", response)]
                if call.id is not None:
                    members.append(("id", call.id))
                b.result_site(call, (i, "parts", len(out), result_key), response)
                out.append(b.obj([(result_key, b.obj(members, FUNCTION_EXTRAS))]))
            role = draw(st.sampled_from(["user", "user", "function"]))
            b.add(b.obj([("role", role), ("parts", out)], MESSAGE_EXTRAS))
        b.settle(calls)
    return b.conversation


CONVERSATIONS: dict[str, st.SearchStrategy[Conversation]] = {
    "openai-chat": openai_chat(),
    "openai-responses": openai_responses(),
    "anthropic": anthropic(),
    "ai-sdk-v4": ai_sdk_v4(),
    "ai-sdk-v5": ai_sdk_v5(),
    "gemini": gemini(),
}
