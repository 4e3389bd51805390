"""What context editing needs to know of a request body, message by message: where each
message sits in the text, its size, whether it is the model's, and the tool calls and
results it holds (`Facts`).

A turn's body is the one before plus what changed, so facts are remembered (the last
`MEMOS` bodies, `MEMO_CHARS` characters in all, per tenant and endpoint) and a body's
facts are its closest remembered body's for every message that body's shared prefix holds
whole; only the messages after it are parsed. The messages are found by
`toolref.edits.scanner` (which resumes the same way). So a turn costs a comparison at C
speed, the scan and parse of its new messages, and one step per message (their sizes).
The facts are a cache: a body's facts are the same whether or not a memo was used.

Results an agent returns as text are results too, where the text says so: a user message
(its string content, or a text part) that begins as an agent writes a tool's output, after
a message of the model's (`OBSERVATIONS`: Cline's and Roo's `[read_file for 'x'] Result:`,
mini-SWE-agent's `<returncode>0</returncode>`, the ReAct agents' `Observation:`). Such a
result is replaced whole, by text.

A message's size is its text less its cache marks and ids (the scanner's spans), so a
cache mark moving on from one turn to the next does not change what earlier turns are
counted at (`toolref_server.context.plan` replays them).
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from toolref import formats
from toolref.edits.scanner import ANSWER_ROLES, closest, scan
from toolref.formats import Site

MEMOS: Final = 16  # bodies whose facts are remembered
MEMO_CHARS: Final = 32 << 20  # characters of their texts, in all (a longer body: not kept)
_MEMOS: Final[deque[Facts]] = deque(maxlen=MEMOS)
_LOCK: Final = threading.Lock()  # facts are made on the loop and in worker threads
_MODEL_ITEMS: Final = frozenset({"reasoning"})  # Responses items the model writes, but `*_call`
# How agents that return results as text begin one: (pattern, the tool's name when the text
# does not say it). The name and the arguments the pattern finds, if any, name the call.
OBSERVATIONS: Final = (
    (re.compile(r"\[(?P<name>[\w.-]{1,64})(?: for '(?P<args>[^'\n]{0,500})')?\] Result:"), ""),
    (re.compile(r"<returncode>-?\d{1,5}</returncode>"), "shell"),
    (re.compile(r"(?:OBSERVATION|Observation):"), "observation"),
)
_TEXT_PARTS: Final = frozenset({"text", "input_text"})  # the types of a text part


@dataclass(slots=True, eq=False)
class Call:
    """A tool call: its id (None: the format has none), its tool's name, its message's
    index and its site in that message (the message's index there is 0)."""

    call_id: str | None
    name: str
    message: int
    site: Site


@dataclass(slots=True, eq=False)
class Result:
    """A tool result: its site in its message, the id of the call it answers, its tool's
    name where it says it, its JSON text's length, whether it is an error; once replaced,
    what stands in for it (`stand_in`: the summarizer's id and the JSON text), remembered;
    `text`: for a result the agent returned as text, the arguments its text names ("" for
    none; None: a result of the format's own).
    """

    site: Site
    call_id: str | None
    name: str | None
    chars: int
    error: bool
    stand_in: tuple[str, str] | None = None
    text: str | None = None  # a result returned as text: the arguments its text names


@dataclass(slots=True, eq=False)
class Message:
    """A message: where its text sits (`start`, `end`), its size (`chars`, less its marks
    and ids), whether the model wrote it, its calls and results; `rewritten`: its text
    with some of its results replaced (which, by index; then the text), remembered."""

    start: int
    end: int
    chars: int
    model: bool
    calls: tuple[Call, ...] = ()
    results: tuple[Result, ...] = ()
    rewritten: tuple[tuple[int, ...], str] | None = None


@dataclass(slots=True, eq=False)
class Facts:
    """A body's text, whose it is (tenant, format, messages key), its messages, and the
    characters outside them (`envelope`: the system prompt, tools, settings)."""

    text: str
    tenant: str
    format: str
    key: str
    messages: list[Message] = field(default_factory=list)
    envelope: int = 0


def facts_of(text: str, tenant: str, format_name: str, key: str) -> Facts | None:
    """The facts of `text` (a JSON object whose `key` member lists messages of
    `format_name`); None when it is not one. O(what changed since the closest remembered
    body, plus one step per message), a comparison at C speed."""
    found = scan(text, key, False)
    if found is None or not found.ends:
        return None
    fmt = formats.get(format_name)  # type: ignore[arg-type]  # a name of the endpoint table
    with _LOCK:
        memos = [
            m for m in reversed(_MEMOS) if (m.tenant, m.format, m.key) == (tenant, format_name, key)
        ]
    closest_memo = closest(memos, text, _text_of, _whole)
    memo, common = closest_memo
    facts = Facts(text, tenant, format_name, key)
    reuse = 0
    if memo is not None:
        ends = [m.end for m in memo.messages]
        reuse = bisect.bisect_right(ends, common)
        while reuse and not _same(memo.messages[reuse - 1], found.starts, found.ends, reuse - 1):
            reuse -= 1
        facts.messages = memo.messages[:reuse]
    cuts, counts = found.cuts, found.counts
    for index in range(reuse, len(found.ends)):
        start, end = found.starts[index], found.ends[index]
        first = counts[index - 1][0] if index else bisect.bisect_left(cuts, (start, -1))
        chars = sum(b - a for a, b in cuts[first : counts[index][0]])
        after_model = bool(index) and facts.messages[index - 1].model
        message = _message(text, start, end, chars, index=index, fmt=fmt, after_model=after_model)
        facts.messages.append(message)
    facts.envelope = len(text) - sum(m.end - m.start for m in facts.messages)
    if len(text) <= MEMO_CHARS:
        with _LOCK:
            if memo is not None and memo in _MEMOS:
                _MEMOS.remove(memo)  # this body goes on from it: the conversation moved on
            _MEMOS.append(facts)
            while sum(len(m.text) for m in _MEMOS) > MEMO_CHARS:
                _MEMOS.popleft()
    return facts


def _text_of(facts: Facts) -> str:
    return facts.text


def _whole(facts: Facts, common: int) -> bool:
    return common >= len(facts.text)  # a prefix of the body whole: its conversation's own


def forget() -> None:
    """Remember no facts (tests, benches)."""
    with _LOCK:
        _MEMOS.clear()


def _same(message: Message, starts: list[int], ends: list[int], index: int) -> bool:
    return index < len(ends) and (message.start, message.end) == (starts[index], ends[index])


def _message(
    text: str,
    start: int,
    end: int,
    chars: int,
    *,
    index: int,
    fmt: formats.Format,
    after_model: bool,
) -> Message:
    """The facts of the message at `text[start:end]`, the `index`th (`after_model`: the
    one before it is the model's): parsed once."""
    try:
        value = json.loads(text[start:end])
    except ValueError:  # a number no float holds, and the like: a message with no tools
        return Message(start, end, chars, model=False)
    calls: list[Call] = []
    results: list[Result] = []
    for site in fmt.sites([value]):
        held = _at(value, site)
        if site.args_key is not None:
            calls.append(Call(site.call_id, site.name or "", index, site))
        if site.result_key is not None and isinstance(held, dict):
            result = held.get(site.result_key)
            size = len(json.dumps(result, ensure_ascii=False))
            results.append(Result(site, site.call_id, site.name, size, site.is_error))
    if not calls and not results and after_model:
        results = _observations(value)
    return Message(start, end, chars, _is_model(value), tuple(calls), tuple(results))


def _observations(value: Any) -> list[Result]:
    """The results an agent returned as text in a user message (`OBSERVATIONS`): its string
    content, or each of its text parts (Gemini's `parts` too), that begins as one does."""
    if not isinstance(value, dict) or value.get("role") != "user":
        return []
    content = value.get("content", value.get("parts"))
    member = "content" if "content" in value else "parts"
    if isinstance(content, str):
        found = _observation(content, Site((0,), None, result_key="content"))
        return [found] if found is not None else []
    results = []
    for j, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            continue
        if part.get("type", "text") not in _TEXT_PARTS:
            continue
        found = _observation(part["text"], Site((0, member, j), None, result_key="text"))
        if found is not None:
            results.append(found)
    return results


def _observation(text: str, site: Site) -> Result | None:
    start = len(text) - len(text.lstrip())
    for pattern, name in OBSERVATIONS:
        match = pattern.match(text, start)
        if match is not None:
            named = match.groupdict()
            tool = named.get("name") or name
            size = len(json.dumps(text, ensure_ascii=False))
            site = Site(site.path, None, tool, result_key=site.result_key)
            return Result(site, None, tool, size, False, text=named.get("args") or "")
    return None


def _at(value: Any, site: Site) -> Any:
    for step in site.path[1:]:
        value = value[step]
    return value


def _is_model(value: Any) -> bool:
    """Did the model write this message (an answer, or a Responses item of one)?"""
    if not isinstance(value, dict):
        return False
    role, kind = value.get("role"), value.get("type")
    if isinstance(role, str) and role in ANSWER_ROLES:
        return True
    return isinstance(kind, str) and (kind.endswith("_call") or kind in _MODEL_ITEMS)
