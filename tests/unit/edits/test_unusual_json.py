"""The relay's scan and cut of a body (`toolref.edits.scanner`, `bodycut`, `request`) on
JSON as unusual clients write it (`tests.unit.json_texts`: whitespace anywhere, every
escape, numbers as written, repeated keys, strings that look like structure): a scan
resumed from a remembered body is the scan from the start whatever changed (messages
appended, one in the middle edited, the last one grown by a character or a digit, the tail
removed), each message's span holds exactly that message, and a cut restores the bytes."""

from __future__ import annotations

import bisect
import json
import random
from dataclasses import dataclass
from typing import Final

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.test_scanner import same
from tests.unit.json_texts import SPACES, J, keys, values, write, write_string
from toolref.edits import bodycut, scanner
from toolref.edits.request import cut, restore
from toolref.edits.segments import cut_body

SYSTEM: Final = "a system prompt, long enough for a body to be resumed from. " * 20

messages_of = st.lists(
    st.one_of(
        values,
        st.lists(st.tuples(keys, values), max_size=4).map(
            lambda items: ("obj", [("role", ("str", "assistant")), *items])
        ),
    ),
    max_size=5,
)
members_of = st.lists(st.tuples(keys, values), max_size=2)


def grown(value: J) -> J:
    """`value` with its last character before its closing brackets changed in a way that
    keeps it JSON: a string a character longer, a number a digit longer, a container one
    more item (its text shares all but its end with the text of `value`)."""
    kind, data = value
    if kind == "str":
        return ("str", data + "é")
    if kind == "num":
        return ("num", data + ("0" if data.lstrip("-")[0] != "0" and data.isdigit() else "1"))
    if kind == "lit":
        return ("arr", [value])
    if kind == "arr":
        return ("arr", [*data[:-1], grown(data[-1])] if data else [("lit", "null")])
    return ("obj", [*data[:-1], (data[-1][0], grown(data[-1][1]))] if data else [("a", value)])


@dataclass(frozen=True)
class Body:
    """A body: members before the messages, the messages, members after; each part spelled
    from its own seed (`write`), so that the parts two bodies share have the same text."""

    before: list[tuple[str, J]]
    messages: list[J]
    after: list[tuple[str, J]]
    seed: int
    respelled: int = -1  # a message spelled from another seed (the same value, other text)

    def text(self) -> str:
        rnd = random.Random(self.seed)
        spaces = [rnd.choice(SPACES) for _ in range(8)]

        def member(key: str, value: J, at: int) -> str:
            own = random.Random(self.seed * 100 + at)
            return write_string(key, own) + spaces[at % 8] + ":" + write(value, own)

        head = ["{" + spaces[0] + '"system":' + json.dumps(SYSTEM)]
        head += [member(k, v, n) for n, (k, v) in enumerate(self.before)]
        inner = [
            spaces[n % 3]
            + write(m, random.Random(self.seed + n + 1000 * (n == self.respelled)))
            + spaces[n % 3 + 3]
            for n, m in enumerate(self.messages)
        ]
        head.append(spaces[1] + '"messages"' + spaces[2] + ":[" + ",".join(inner) + "]")
        head += [member(k, v, n + 4) for n, (k, v) in enumerate(self.after)]
        return ("," + spaces[5]).join(head) + spaces[6] + "}" + spaces[7]


@st.composite
def turns(draw: st.DrawFn) -> tuple[str, str]:
    """A body and the next one: the conversation grown, edited in the middle, a message
    grown at its end or spelled another way, its tail removed, its members after the
    messages changed."""
    first = Body(draw(members_of), draw(messages_of), draw(members_of), draw(st.integers(0, 99)))
    messages = list(first.messages)
    change = draw(st.sampled_from(["append", "edit", "grow", "cut", "after", "same", "respell"]))
    if change == "append":
        messages += draw(messages_of)
    elif change == "edit" and messages:
        messages[draw(st.integers(0, len(messages) - 1))] = draw(values)
    elif change == "grow" and messages:
        at = draw(st.integers(0, len(messages) - 1))
        messages[at] = grown(messages[at])
    elif change == "cut":
        messages = messages[: draw(st.integers(0, len(messages)))]
    after = draw(members_of) if change == "after" else first.after
    respelled = draw(st.integers(0, len(messages))) if change == "respell" else -1
    return first.text(), Body(first.before, messages, after, first.seed, respelled).text()


def check_scan(text: str, found: scanner.Scan | None) -> None:
    """A fresh scan against `json.loads`: None for no object; each message of the list a
    parser keeps spans exactly its text."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        assert found is None
        return
    assert found is not None
    kept = value.get("messages")
    if isinstance(kept, list) and found.lists:
        last = [n for n, lists in enumerate(found.lists_at) if lists == found.lists]
        spanned = [json.loads(text[found.starts[n] : found.ends[n]]) for n in last]
        assert spanned == kept


@settings(max_examples=400, deadline=None)
@given(turns(), st.booleans())
def test_a_resumed_scan_of_unusual_json_is_the_scan_from_the_start(
    bodies: tuple[str, str], window: bool
) -> None:
    before, after = bodies
    scanner.forget()
    check_scan(before, scanner.scan(before, "messages", window))
    resumed = scanner.scan(after, "messages", window)
    scanner.forget()
    again = scanner.scan(after, "messages", window)
    check_scan(after, again)
    assert same(resumed, again)
    if resumed is not None and again is not None:
        assert (resumed.starts, resumed.counts, resumed.lists, resumed.lists_at) == (
            again.starts, again.counts, again.lists, again.lists_at)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(turns(), st.booleans())
def test_a_resumed_cut_of_unusual_json_is_the_cut_from_scratch(
    bodies: tuple[str, str], window: bool
) -> None:
    before, after = (text.encode("utf-8", "surrogatepass") for text in bodies)
    headers = [("content-type", "application/json"), ("x-api-key", "k")]
    bodycut.forget()
    cut(headers, before, "messages", window=window)
    resumed = cut(headers, after, "messages", window=window)
    bodycut.forget()
    again = cut(headers, after, "messages", window=window)
    if again is None:
        assert resumed is None
        return
    assert resumed is not None
    assert (resumed.segments, resumed.ref, resumed.messages, resumed.answered) == (
        again.segments, again.ref, again.messages, again.answered)  # fmt: skip
    assert resumed.owners == again.owners
    restored = restore(resumed.segments, resumed.secrets)
    assert restored is not None
    assert restored.body == after
    assert restored.headers == headers
    if not window:
        assert cut_body(after.decode(), "messages") == [s.decode() for s in again.segments[1:]]


@settings(max_examples=300, deadline=None)
@given(turns())
def test_the_messages_after_one_are_those_of_the_scan(bodies: tuple[str, str]) -> None:
    text = bodies[1]
    scanner.forget()
    found = scanner.scan(text, "messages", False)
    if found is None or found.lists != 1:
        return
    single = isinstance(json.loads(text)["messages"], list)  # no other member after it
    cuts, counts = found.cuts, found.counts
    listed = []
    for n, (start, end) in enumerate(zip(found.starts, found.ends, strict=True)):
        first = counts[n - 1][0] if n else bisect.bisect_left(cuts, (start, -1))
        listed.append((start, end, sum(b - a for a, b in cuts[first : counts[n][0]])))
    for n, (_, end, _) in enumerate(listed):
        after = scanner.messages_after(text, end, "messages")
        assert after == (listed[n + 1 :] if single else None)
