"""What context editing needs to know of a request body, message by message: where each
message sits in the text, its size, whether it is the model's, and the tool calls and
results it holds (`Facts`).

A turn's body is the one before plus what changed, so facts are remembered (the last
`MEMOS` bodies, `MEMO_BYTES` in all, per tenant and endpoint) and a body's
facts are its closest remembered body's for every message that body's shared prefix holds
whole; only the messages after it are parsed. The messages are found by
`toolref.edits.scanner` (which resumes the same way). So a turn costs a comparison at C
speed, the scan and parse of its new messages, and one step per message (their sizes).
The facts are a cache: a body's facts are the same whether or not a memo was used.

Results an agent returns as text are results too, where the text says so: a user message
(its string content, or a text part) that begins as an agent writes a tool's output
(`OBSERVATIONS`: Cline's and Roo's `[read_file for 'x'] Result:`, mini-SWE-agent's
`<returncode>0</returncode>`, the ReAct agents' `Observation:`), after a message of the
model's, in a conversation that has had no result of the format's own (there, such text
is a person's). Such a result is replaced whole, by text; where the header stands alone in
its text part (Cline and Roo write `[read_file for 'x'] Result:` so, the output in the part
after it), the part after it is the result.

A message's size is its text less its cache marks and ids (the scanner's spans), so a
cache mark moving on from one turn to the next does not change what earlier turns are
counted at (`toolref_server.context.batches` replays them).
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
from toolref.edits.scanner import ANSWER_ROLES, MARK_KEYS, closest, messages_after, scan
from toolref.formats import Site
from toolref.formats.replaceable import direct, textual
from toolref_server.settings.context import Policy

MEMOS: Final = 16  # bodies whose facts are remembered
MAX_MESSAGES: Final = Policy().max_messages  # TOOLREF_CONTEXT_MAX_MESSAGES' default
MAX_CONTAINERS: Final = 1_000_000  # TOOLREF_MAX_CONTAINERS' default
# A JSON string, its escapes whole, or one never closed (to the end): what `containers`
# leaves out of its count. Each backslash starts an iteration, so the match is found
# without going back: linear (a pattern that fails on an unclosed string is quadratic).
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)', re.DOTALL)
MEMO_BYTES: Final = 64 << 20  # what they hold in all, about (`_weight`; a heavier body: none)
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
# By a result's member: the member beside it holding the result's media, counted with it and
# emptied (`[]`) when it is replaced: Gemini's `functionResponse.parts` (inline data, files,
# beside `response`; optional, so a response without them is whole).
BESIDE: Final = {"response": "parts"}


@dataclass(slots=True, eq=False)
class Call:
    """A tool call: its id (None: the format has none), its tool's name, its message's
    index and its site in that message (the message's index there is 0); `direct`: the
    model made it (False: code did, its `caller` another tool's: Anthropic's and OpenAI's
    programmatic tool calling), so the model can make it again."""

    call_id: str | None
    name: str
    message: int
    site: Site
    direct: bool = True


@dataclass(slots=True, eq=False)
class Result:
    """A tool result: its site in its message, the id of the call it answers, its tool's
    name where it says it, its JSON text's bytes, whether it is an error; once replaced,
    what stands in for it (`stand_in`: by the summarizer's id, the JSON text) and where
    its pin is kept in the store (`pins`), remembered: a cache of the store's pin, which
    decides (`toolref_server.gateway.context_edits`); `text`: for a result the agent
    returned as text, the arguments its text names ("" for none; None: a result of the
    format's own).
    """

    site: Site
    call_id: str | None
    name: str | None
    size: int
    error: bool
    stand_in: dict[str, str] = field(default_factory=dict)
    text: str | None = None  # a result returned as text: the arguments its text names
    beside: tuple[str, ...] = ()  # members beside it that go with it (`BESIDE`), emptied
    # by the summarizer's id: none is made (its call unknown, or code's) and none was pinned
    unmade: set[str] = field(default_factory=set)
    # by the summarizer's id: where its pin is (the store's `Slot`, opaque here: the
    # context package names no storage)
    pins: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Message:
    """A message: its JSON text (`text`), where it sits in the body's bytes (`bstart`,
    `bend`), its size (`size`: bytes, less its cache marks and ids), whether the model
    wrote it, its calls and results; `rewritten`: its bytes with some of its results
    replaced (which, by index, and by what; then the bytes), remembered."""

    text: str
    bstart: int
    bend: int
    size: int
    model: bool
    calls: tuple[Call, ...] = ()
    results: tuple[Result, ...] = ()
    rewritten: tuple[tuple[tuple[int, str], ...], bytes] | None = None
    structured: bool = False  # it, or a message before it, holds results of the format's own


@dataclass(slots=True, eq=False)
class Facts:
    """A body's bytes, whose it is (tenant, format, messages key), its messages, and
    `replay`: the plan's state at a turn, to go on from (`toolref_server.context.batches`)."""

    body: bytes
    tenant: str
    format: str
    key: str
    messages: list[Message] = field(default_factory=list)
    replay: Any = None
    weight: int = 0  # what it holds in memory, about (`_weight`)


def facts_of(
    body: bytes,
    tenant: str,
    format_name: str,
    key: str,
    max_messages: int = MAX_MESSAGES,
    *,
    max_containers: int = MAX_CONTAINERS,
) -> Facts | None:
    """The facts of `body` (a JSON object in UTF-8 whose `key` member lists messages of
    `format_name`, at most `max_messages` of them, counted before any is parsed, of at
    most `max_containers` arrays and objects in all, counted before anything is: what a
    parse of its messages holds); None when it is not one. O(what follows the messages it
    shares with the closest remembered body, plus a comparison and a count at C speed):
    only that is decoded, scanned (`toolref.edits.scanner.messages_after`) and parsed; the
    messages before are the memo's (the same objects). With no memo: the whole body,
    scanned once."""
    if containers(body, max_containers) > max_containers:
        return None
    with _LOCK:
        memos = [
            m for m in reversed(_MEMOS) if (m.tenant, m.format, m.key) == (tenant, format_name, key)
        ]
    closest_memo = closest(memos, body, _body_of, _whole)
    memo, common = closest_memo
    kept = bisect.bisect_right(memo.messages, common, key=_bend) if memo is not None else 0
    fmt = formats.get(format_name)  # type: ignore[arg-type]  # a name of the endpoint table
    facts = Facts(body, tenant, format_name, key)
    found = None
    if memo is not None and kept:
        facts.messages = memo.messages[:kept]
        facts.replay = memo.replay
        found = _after(facts, body, memo.messages[kept - 1].bend, fmt, max_messages)
    if found is None:
        facts.messages, facts.replay = [], None
        if not _whole_body(facts, body, key, fmt, max_messages):
            return None
    facts.weight = _weight(facts)
    if facts.weight <= MEMO_BYTES:
        with _LOCK:
            if memo is not None and memo in _MEMOS:
                _MEMOS.remove(memo)  # this body goes on from it: the conversation moved on
            _MEMOS.append(facts)
            while sum(m.weight for m in _MEMOS) > MEMO_BYTES:
                _MEMOS.popleft()
    return facts


def containers(body: bytes, bound: int) -> int:
    """The arrays and objects of `body` (its opening brackets outside JSON strings), or
    an upper bound of them when that is within `bound` (brackets in strings counted too:
    two counts at C speed, no more when that is enough). Linear."""
    found = body.count(b"[") + body.count(b"{")
    if found <= bound:
        return found
    outside = _STRING.sub(b"", body)
    return outside.count(b"[") + outside.count(b"{")


def _after(
    facts: Facts, body: bytes, at: int, fmt: formats.Format, max_messages: int
) -> bool | None:
    """`facts` gone on from its messages (the memo's) with the messages that follow byte
    `at` of `body`; None when what follows is not the rest of a messages list."""
    try:
        tail = body[at:].decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = messages_after(tail, 0, facts.key)
    if found is None or len(facts.messages) + len(found) > max_messages:
        return None
    _append(facts, tail, at, found, fmt)
    return True


def _whole_body(
    facts: Facts, body: bytes, key: str, fmt: formats.Format, max_messages: int
) -> bool:
    """`facts` of the whole of `body`, scanned from its start; False when it is not a JSON
    object listing messages under `key`."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    found = scan(text, key, False)
    if found is None or not found.ends or found.lists != 1:  # two lists: a parser keeps one
        return False
    if len(found.ends) > max_messages:
        return False
    cuts, counts = found.cuts, found.counts
    listed = []
    for index, (start, end) in enumerate(zip(found.starts, found.ends, strict=True)):
        first = counts[index - 1][0] if index else bisect.bisect_left(cuts, (start, -1))
        listed.append((start, end, sum(b - a for a, b in cuts[first : counts[index][0]])))
    _append(facts, text, 0, listed, fmt)
    return True


def _append(
    facts: Facts,
    text: str,
    at: int,
    listed: list[tuple[int, int, int]],
    fmt: formats.Format,
) -> None:
    """The messages `listed` in `text` (start, end, characters less marks and ids), `text`
    being the body's bytes from `at` decoded, appended to `facts`. O(their text)."""
    before = facts.messages[-1] if facts.messages else None
    position, byte = 0, at  # a place in `text` and its byte in the body
    for start, end, spans in listed:
        bstart = byte + len(text[position:start].encode("utf-8"))
        own = text[start:end]
        bend = bstart + len(own.encode("utf-8"))
        size = bend - bstart - (end - start - spans)  # marks and ids are ASCII: bytes = chars
        # a result as text only follows the model's, in a conversation with no results of
        # the format's own so far (where a person's "Observation: ..." is the person's)
        texts = before is not None and before.model and not before.structured
        index = len(facts.messages)
        message = _message(own, bstart, bend, size, index=index, fmt=fmt, texts=texts)
        own_results = any(r.text is None for r in message.results)
        message.structured = own_results or (before is not None and before.structured)
        facts.messages.append(message)
        before, position, byte = message, end, bend


def _weight(facts: Facts) -> int:
    """What a body's facts hold in memory, about: its bytes, its messages' texts (up to 4
    bytes a character), and each message's objects and the plan's checkpoint (a few
    hundred bytes each)."""
    return 5 * len(facts.body) + 512 * len(facts.messages)


def _body_of(facts: Facts) -> bytes:
    return facts.body


def _bend(message: Message) -> int:
    return message.bend


def _whole(facts: Facts, common: int) -> bool:
    return common >= len(facts.body)  # a prefix of the body whole: its conversation's own


def forget() -> None:
    """Remember no facts (tests, benches)."""
    with _LOCK:
        _MEMOS.clear()


def _message(
    text: str,
    bstart: int,
    bend: int,
    size: int,
    *,
    index: int,
    fmt: formats.Format,
    texts: bool,
) -> Message:
    """The facts of the message whose JSON text is `text`, the `index`th (`texts`: a
    result returned as text may stand here): parsed once."""
    try:
        value = json.loads(text)
    except ValueError:  # a number no float holds, and the like: a message with no tools
        return Message(text, bstart, bend, size, model=False)
    calls: list[Call] = []
    results: list[Result] = []
    marked = any(f'"{key}"' in text for key in MARK_KEYS)
    for site in fmt.sites([value]):
        held = _at(value, site)
        if site.args_key is not None:
            calls.append(Call(site.call_id, site.name or "", index, site, direct(held)))
        # only a result a text may stand in for (`toolref.formats.replaceable`: the rule
        # hydrate's summary mode keeps too)
        result = held.get(site.result_key) if isinstance(held, dict) and site.result_key else None
        if site.result_key is not None and isinstance(held, dict) and textual(held, result):
            # its own size, less its cache marks: `size` is the message's (the plan counts
            # the turns by it)
            own = json_size(unmarked(result) if marked else result)
            media = held.get(BESIDE.get(site.result_key, ""))
            beside: tuple[str, ...] = ()
            if isinstance(media, list) and media:
                beside = (BESIDE[site.result_key],)
                own += json_size(media) - len("[]")  # what emptying it frees
            found = Result(site, site.call_id, site.name, own, site.is_error, beside=beside)
            results.append(found)
    if not calls and not results and texts:
        results = _observations(value)
    return Message(text, bstart, bend, size, _is_model(value), tuple(calls), tuple(results))


def json_size(value: Any) -> int:
    """The bytes of `value` as JSON text in UTF-8, a lone surrogate (JSON carries `\\ud800`;
    UTF-8 has no form for it) counted as its 6-byte escape. Linear in the value."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace"))


def unmarked(value: Any) -> Any:
    """`value` without its cache marks (`MARK_KEYS` members, at any depth): what a result
    is counted, named (its ref) and summarized by, so a mark a client moves on from one
    turn to the next leaves its stand-in the same bytes. Linear in the value, on a stack
    of its own: as deep as a body's parse goes (recursion here took two frames a level,
    so a marked result failed at half the depth an unmarked one was read to)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (value, its copy's home, key)
    while stack:
        item, home, key = stack.pop()
        copy: Any = item
        if isinstance(item, dict):
            copy = {}
            for name, member in item.items():
                if name not in MARK_KEYS:
                    copy[name] = None  # its place kept: members stay in order
                    stack.append((member, copy, name))
        elif isinstance(item, list):
            copy = [None] * len(item)
            stack.extend((member, copy, at) for at, member in enumerate(item))
        home[key] = copy
    return root[0]


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
    header: Result | None = None  # a part that is a header alone: the next part is its result
    for j, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            header = None
            continue
        if part.get("type", "text") not in _TEXT_PARTS:
            header = None
            continue
        site = Site((0, member, j), None, result_key="text")
        if header is not None:  # Cline's and Roo's: `[read_file for 'x'] Result:`, then it
            size = json_size(part["text"])
            named = Site(site.path, None, header.name, result_key="text")
            results.append(Result(named, None, header.name, size, False, text=header.text))
            header = None
            continue
        found = _observation(part["text"], site)
        if found is not None and OBSERVATIONS[0][0].fullmatch(part["text"].strip()):
            header = found  # alone in its part: what follows is the result
        elif found is not None:
            results.append(found)
    return results


def _observation(text: str, site: Site) -> Result | None:
    start = len(text) - len(text.lstrip())
    for pattern, name in OBSERVATIONS:
        match = pattern.match(text, start)
        if match is not None:
            named = match.groupdict()
            tool = named.get("name") or name
            size = json_size(text)
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
