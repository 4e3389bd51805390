"""The size bound counts the bytes written (`toolref.acp.bounds`): `max_value_bytes` is the
JSON one value takes on the line, UTF-8 and escapes included, exactly; and the depth bound
holds for a client that parses the whole line and for one that parses `params` apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.acp.conformance import SERDE_JSON_DEPTH, json_depth
from toolref.acp import ToolCallTracker, jsonrpc
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import AcpError

MakeTracker = Callable[..., ToolCallTracker]
Sent = list[dict[str, Any]]

# Values whose JSON is far larger than their code points: control characters are written
# as six-byte escapes, a backslash as two, CJK as three bytes, an emoji as four; floats
# and negative numbers as all their characters.
WIDE: list[Any] = [
    "\x00" * 100,
    "\x1f\n\t" * 40,
    '"\\' * 60,
    "\\ud800" * 50,  # a lone surrogate as start_call carries it: its escape, as text
    "日本語" * 40,
    "🙂" * 60,
    [1.2345678901234567e-300] * 20,
    [-(2**63)] * 20,
    [True, False, None] * 20,
    {"\x00": "é", "ключ": ["\x01", {"ü": -1.5}], "a": []},
    {str(n): {} for n in range(30)},
]


@pytest.mark.parametrize("value", WIDE, ids=range(len(WIDE)))
def test_max_value_bytes_bounds_the_bytes_written_exactly(
    make_tracker: MakeTracker, sent: Sent, value: Any
) -> None:
    """Before: a string cost its code points (+2), a float 1 and a key's escapes nothing, so
    a value of "\\x00" * 100 (602 bytes written) passed a bound of 102, and 20 floats
    (481 bytes) one of 22: a bound named in bytes let up to 6x (23x for floats) through.
    Now the bound is the bytes the value's JSON takes on the line: a bound one byte short
    refuses it, the exact size takes it, and what goes out is that size."""
    size = len(dumps_json(value))
    with pytest.raises(AcpError, match=rf"over {size - 1} bytes"):
        make_tracker(max_value_bytes=size - 1).start("a", "bash", raw_input=value)
    tracker = make_tracker(max_value_bytes=size)
    tracker.start("b", "bash", raw_input=value)
    tracker.update("b").raw_output(value).send()
    assert len(dumps_json(sent[-2]["update"]["rawInput"])) == size
    assert len(dumps_json(sent[-1]["update"]["rawOutput"])) == size


def test_an_item_written_stays_within_the_bound(make_tracker: MakeTracker, sent: Sent) -> None:
    item = {"type": "content", "content": {"type": "text", "text": "\x00" * 100}}
    size = len(dumps_json(item))
    with pytest.raises(AcpError, match=rf"over {size - 1} bytes"):
        make_tracker(max_value_bytes=size - 1).start("a", "bash", content=[item])
    make_tracker(max_value_bytes=size).start("b", "bash", content=[item])
    assert len(dumps_json(sent[-1]["update"]["content"][0])) == size


def _deep_list(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_the_deepest_value_fits_a_client_parsing_params_apart(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """ACP's Rust SDK up to 0.10 (Zed's until 2026) reads the line with `params` as a raw
    value and parses it apart, from its own `{`; from 0.11 it parses the line whole. The
    deepest value taken makes a whole line of exactly 127 levels, and `params` alone of
    126: one level to spare for the first reader, none wasted for the second."""
    tracker = make_tracker()
    tracker.start("c", "bash", raw_input=_deep_list(124))
    with pytest.raises(AcpError, match=rf"past {SERDE_JSON_DEPTH} levels"):
        tracker.start("d", "bash", raw_input=_deep_list(125))
    line = json.dumps(jsonrpc(sent[-1]))
    assert json_depth(line) == SERDE_JSON_DEPTH
    assert json_depth(json.dumps(sent[-1])) == SERDE_JSON_DEPTH - 1


@pytest.mark.parametrize("where", ["raw_input", "raw_output"])
def test_an_integer_past_python_s_digit_limit_is_an_acp_error(
    make_tracker: MakeTracker, sent: Sent, where: str
) -> None:
    """Before: a value holding an integer of 5,000 digits (no JSON form: both SDKs and the
    service refuse past 4,300) raised ValueError from the error message's own `repr` of it,
    not `AcpError`. Now `AcpError` saying it has no JSON form, and nothing is sent."""
    tracker = make_tracker()
    options: dict[str, Any] = {where: {"n": 10**5000}}
    with pytest.raises(AcpError, match="no JSON form"):
        tracker.start("a", "bash", **options)
    tracker.start("b", "bash")
    with pytest.raises(AcpError, match="no JSON form"):
        getattr(tracker.update("b"), where)([10**5000])
    assert [note["update"]["toolCallId"] for note in sent] == ["b"]
