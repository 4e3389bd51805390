"""`toolref.kit.spans` on JSON as unusual clients write it (`json_texts`): a document's
value is `json.loads`'s, and every span it gives (members, elements, the messages'
items, `locate`'s paths) holds the text of exactly that value."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.json_texts import SPACES, J, values, write
from toolref.kit import spans
from toolref.wire.errors import NonFiniteNumberError, ToolrefError
from toolref_server import documents


def loads(text: str) -> tuple[bool, Any]:
    """`json.loads`, and whether every number in `text` is one a double holds (spans refuses
    one that is not, even as the value of a key repeated later)."""
    infinite: list[float] = []

    def number(written: str) -> float:
        found = float(written)
        if found in (math.inf, -math.inf):
            infinite.append(found)
        return found

    found = json.loads(text, parse_float=number)
    return not infinite, found


def paths(value: Any, path: tuple[int | str, ...] = ()) -> list[tuple[int | str, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*path, index))
    return found


@settings(max_examples=400, deadline=None)
@given(values, st.integers(0, 2**32), st.sampled_from(SPACES), st.sampled_from(SPACES))
def test_a_document_is_what_json_loads_makes_of_it(
    tree: J, seed: int, before: str, after: str
) -> None:
    text = before + write(tree, random.Random(seed)) + after
    finite, expected = loads(text)
    if not finite:
        with pytest.raises(NonFiniteNumberError):
            spans.document(text, "messages")
        return
    found = spans.document(text, "messages")
    assert found.value == expected
    if isinstance(expected, dict):
        assert list(found.value) == list(expected)  # the first place of a repeated key
        for key, member in found.members.items():
            assert json.loads(text[member.key_start : member.key_end]) == key
            assert json.loads(text[member.start : member.end]) == expected[key]
            assert json.loads("{" + spans.member_text(text, member) + "}") == {key: expected[key]}
        messages = expected.get("messages")
        if isinstance(messages, list):
            assert found.items is not None
            assert [json.loads(text[a:b]) for a, b in found.items] == messages
        else:
            assert found.items is None
    located = spans.locate(text, spans.skip_ws(text, 0), paths(expected))
    for path, (start, end) in located.items():
        value = expected
        for step in path:
            value = value[step]
        assert json.loads(text[start:end]) == value


@settings(max_examples=200, deadline=None)
@given(values, st.integers(0, 2**32))
def test_members_and_elements_span_each_value(tree: J, seed: int) -> None:
    text = write(tree, random.Random(seed))
    finite, expected = loads(text)
    if not finite or not isinstance(expected, (dict, list)):
        return
    if isinstance(expected, dict):
        found, end = spans.members(text, 0)
        assert end == len(text)
        assert {k: m.value for k, m in found.items()} == expected
    else:
        items, end = spans.elements(text, 0)
        assert end == len(text)
        assert [v for v, _, _ in items] == expected
        assert [json.loads(text[a:b]) for _, a, b in items] == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "\ufeff{}", "{} x", '{"a":1,}', "[1,]", '{"a" 1}', "{'a':1}", "01", '"\\x"',
     "[1 2]", '{"messages":[1,]}', '{"messages":[1]', "-", "1.", ".5", "tru"],
)  # fmt: skip
def test_what_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises((spans.SpanError, json.JSONDecodeError)):  # the latter inside a value
        spans.document(text, "messages")


def test_what_no_double_holds_is_refused() -> None:
    for text in ("NaN", "[-Infinity]", '{"a":1e400,"a":1}'):
        with pytest.raises(NonFiniteNumberError):
            spans.document(text, "messages")


def outcome(data: bytes, limits: documents.BodyLimits, key: str | None) -> Any:
    try:
        return documents.decode_document(data, "json", limits, key).value
    except ToolrefError as error:
        return type(error)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(values, st.text("[{,a", max_size=12).map(lambda s: ("str", s))), max_size=6),
    st.integers(0, 2**32),
    st.integers(1, 6),
    st.integers(1, 6),
)
def test_a_body_of_messages_is_held_to_the_limits_of_any_body(
    messages: list[J], seed: int, depth: int, items: int
) -> None:
    """The service's walk of a body message by message refuses what the walk of the whole
    body refuses, and nothing more (a string message counts no items, whatever its size)."""
    text = write(("obj", [("messages", ("arr", messages))]), random.Random(seed))
    data = text.encode()
    limits = documents.BodyLimits(2**20, 2**20, max_depth=depth, max_items=items)
    kept = outcome(data, limits, "messages")
    assert kept == outcome(data, limits, None)
    if isinstance(kept, dict):  # each message's text as sent
        texts = documents.decode_document(data, "json", limits, "messages").texts
        assert texts is not None
        assert [json.loads(one) for one in texts] == kept["messages"]
        assert all(one in text for one in texts)


def test_a_message_that_is_a_string_has_no_depth_or_items_of_its_own() -> None:
    body = {"messages": ["[[[[ a message that is one string, longer than ten characters"]}
    data = json.dumps(body).encode()
    for depth, items in ((4, 10), (2, 100)):
        limits = documents.BodyLimits(2**20, 2**20, max_depth=depth, max_items=items)
        assert documents.decode_document(data, "json", limits, "messages").value == body
        assert documents.decode_document(data, "json", limits).value == body


def containers(tree: J) -> int:
    kind, data = tree
    if kind == "arr":
        return 1 + sum(containers(item) for item in data)
    if kind == "obj":
        return 1 + sum(containers(item) for _, item in data)
    return 0


@settings(max_examples=300, deadline=None)
@given(values, st.integers(0, 2**32))
def test_the_containers_counted_before_parsing_are_the_documents(tree: J, seed: int) -> None:
    data = write(tree, random.Random(seed)).encode()
    assert documents._containers(data) == containers(tree)  # brackets in strings left out


@pytest.mark.parametrize(
    "text",
    [
        # found by the property above: a message with too many items before one too deep
        '{ \n\t "messages"\t: [\n[ "",\n"" ,\n""],\r\n[\r[]\r\n] \n\t ]\r\n}',
        '{"messages": [[[]]], "x": [1, 2, 3]}',  # too deep before a member with too many
        '{"x": [1, 2, 3], "messages": [[[]]]}',  # the member first
        '{"messages": [[1, 2, 3], [[]]], "y": 1}',
    ],
)
def test_a_body_breaking_two_limits_is_refused_for_the_first_as_written(text: str) -> None:
    """Each walk refuses the first container that breaks a limit in the order the body is
    written: the same error whether the body's messages are walked one by one or whole
    (before, the whole walk went last child first, and the two could differ)."""
    limits = documents.BodyLimits(2**20, 2**20, max_depth=3, max_items=2)
    data = text.encode()
    assert outcome(data, limits, "messages") == outcome(data, limits, None)
