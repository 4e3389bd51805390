"""Canonical bytes against the `rfc8785` reference, digests and refs."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.wire import canonical
from toolref.wire.canonical import (
    REF_LENGTH,
    Digest,
    Ref,
    canonical_json,
    digest_of,
    format_float,
    invocation_digest,
    is_ref,
)
from toolref.wire.errors import CanonicalizationError, InvalidRefError, NonFiniteNumberError

SAFE = 2**53 - 1

# Text from the whole of Unicode, surrogate pairs (astral characters) included.
unicode_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
# Long strings take the bytes.replace escaper; built by repeating a random chunk (cheap to
# generate) that mixes in every character the escaper must handle.
long_text = st.builds(
    lambda chunk, extra: chunk * (512 // len(chunk) + 1) + extra,
    st.text(
        st.one_of(
            st.characters(exclude_categories=["Cs"]),
            st.sampled_from(list('\n\t\r"\\\x00\x01\x1f\x7f/é€\U0001f600\u2028')),
        ),
        min_size=1,
        max_size=24,
    ),
    unicode_text,
)
keys = st.one_of(
    unicode_text,
    st.sampled_from(["a", "b", "\ue000", "\U0001f600", "\u20ac", "aa", "", "\x7f", "\u2028"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-SAFE, max_value=SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    unicode_text,
    long_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=60,
)
# Without floats: these take the C-encoder path unless a key sorts differently in UTF-16.
plain_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-SAFE, max_value=SAFE),
        unicode_text,
        long_text,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=60,
)


@settings(max_examples=600)
@given(json_values)
def test_identical_to_rfc8785_on_arbitrary_json(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=400)
@given(plain_values)
def test_fast_path_identical_to_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=300)
@given(long_text)
def test_long_strings_identical_to_rfc8785(text: str) -> None:
    assert canonical_json({"result": text, "k": [text]}) == rfc8785.dumps(
        {"result": text, "k": [text]}
    )


@settings(max_examples=1000)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_format_matches_reference(number: float) -> None:
    assert format_float(number).encode() == rfc8785.dumps(number)


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (0.1, "0.1"),
        (-0.0, "0"),
        (100.0, "100"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
        (123456789012.5, "123456789012.5"),
    ],
)
def test_es6_number_forms(number: float, text: str) -> None:
    assert format_float(number) == text


def test_big_integers_are_written_exactly() -> None:
    snowflake = 1_234_567_890_123_456_789
    assert canonical_json({"id": snowflake}) == b'{"id":1234567890123456789}'
    assert canonical_json([-(2**70), 2**53]) == f"[{-(2**70)},{2**53}]".encode()
    # The extension only widens the domain: within it the reference is unchanged.
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(snowflake)
    # And a float of the same magnitude stays an ES6 number.
    assert canonical_json([1.5, 2**60]) == f"[1.5,{2**60}]".encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_raise_a_typed_error(bad: float) -> None:
    with pytest.raises(NonFiniteNumberError) as info:
        canonical_json({"x": [1, bad]})
    assert isinstance(info.value, CanonicalizationError)
    assert "finite" in info.value.detail


def test_utf16_key_order_differs_from_code_point_order() -> None:
    # U+E000 sorts before U+1F600 by code point, after it by UTF-16 code unit (RFC 8785 3.2.3).
    value = {"\ue000": 1, "\U0001f600": 2}
    assert canonical_json(value) == '{"\U0001f600":2,"\ue000":1}'.encode()
    assert canonical_json(value) == rfc8785.dumps(value)


def test_rfc8785_appendix_example() -> None:
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(value) == expected.encode()


def test_lone_surrogate_is_refused() -> None:
    lone = json.loads('"\\ud800x"')
    with pytest.raises(CanonicalizationError, match="surrogate"):
        canonical_json({"text": lone})
    with pytest.raises(CanonicalizationError, match="surrogate"):
        canonical_json({lone: 1})


def test_surrogate_pairs_from_json_escapes_are_one_character() -> None:
    value = json.loads('"\\ud83d\\ude00"')
    assert canonical_json(value) == '"\U0001f600"'.encode()


@pytest.mark.parametrize("bad", [b"bytes", {1: "int key"}, {1.5}, object()])
def test_non_json_types_are_refused(bad: object) -> None:
    with pytest.raises(CanonicalizationError):
        canonical_json({"v": bad})


def test_deep_nesting_matches_reference() -> None:
    value: Any = "leaf"
    for depth in range(300):
        value = [value] if depth % 2 else {"k": value, "f": 0.5}
    assert canonical_json(value) == rfc8785.dumps(value)


def test_deep_nesting_past_orjsons_limit_matches_reference() -> None:
    """No float: the orjson path, which refuses past 255 levels; the serializer takes it."""
    value: Any = "leaf"
    for depth in range(300):
        value = [value] if depth % 2 else {"k": value}
    assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("padding", [0, 600])  # a short string, and a long one
def test_every_escape_and_character_range_matches_reference(padding: int) -> None:
    points = [*range(0x2100), 0x2028, 0x2029, 0xD7FF, 0xE000, 0xFEFF, 0xFFFF, 0x10000, 0x10FFFF]
    for point in points:
        text = "a" * padding + chr(point) + "b"
        assert canonical_json(text) == rfc8785.dumps(text), hex(point)
        assert canonical_json({"k": [text]}) == rfc8785.dumps({"k": [text]}), hex(point)


@pytest.mark.parametrize("number", [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
def test_integers_around_64_bits_are_written_exactly(number: int) -> None:
    expected = f'{{"n":{number},"s":"{"x" * 600}"}}'.encode()
    assert canonical_json({"n": number, "s": "x" * 600}) == expected


def test_absurd_nesting_is_a_typed_error_not_a_crash() -> None:
    value: Any = 1.5
    for _ in range(100_000):
        value = [value]
    with pytest.raises(CanonicalizationError, match="nested too deeply"):
        canonical_json(value)


def _nested(depth: int, leaf: Any) -> tuple[Any, bytes]:
    """`depth` levels of arrays and objects around `leaf`, and their canonical bytes."""
    value, text = leaf, json.dumps(leaf)
    for level in range(depth):
        value, text = ([value], f"[{text}]") if level % 2 else ({"k": value}, f'{{"k":{text}}}')
    return value, text.encode()


def _called_from_depth(frames: int, call: Any) -> Any:
    return call() if frames == 0 else _called_from_depth(frames - 1, call)


@pytest.mark.parametrize("leaf", [1, 1.5])  # the orjson path gives up at 255 levels, too
def test_nesting_limit_is_the_js_sdks_whatever_the_callers_stack(leaf: Any) -> None:
    """Up to MAX_DEPTH (1000, as canonical.ts) levels have bytes, from a caller already 600
    frames deep too (Python's recursion limit gave up near 400 levels there); one more is a
    typed error, as in JavaScript."""
    deepest, expected = _nested(canonical.MAX_DEPTH, leaf)
    assert _called_from_depth(600, lambda: canonical_json(deepest)) == expected
    with pytest.raises(CanonicalizationError, match="over 1000 levels"):
        canonical_json(_nested(canonical.MAX_DEPTH + 1, leaf)[0])


def test_an_integer_longer_than_python_writes_is_a_typed_error() -> None:
    """Was a bare ValueError from int.__str__; the service refuses such numbers too."""
    with pytest.raises(CanonicalizationError, match="more than 4300 digits"):
        canonical_json({"n": 10**4300, "f": 0.5})
    assert canonical_json(10**4299) == b"1" + b"0" * 4299


def test_digest_is_sha256_of_canonical_bytes_with_size() -> None:
    data = canonical_json({"name": "read", "args": {"path": "a"}, "result": "x", "isError": False})
    digest = invocation_digest("read", {"path": "a"}, "x")
    assert digest == Digest(hashlib.sha256(data).digest(), len(data))
    assert digest_of({"name": "read", "args": {"path": "a"}, "result": "x"}) == digest


def test_key_order_and_provider_ids_do_not_change_identity() -> None:
    first = invocation_digest("t", {"a": 1, "b": [1, 2]}, {"y": 1, "x": 2})
    second = invocation_digest("t", {"b": [1, 2], "a": 1}, {"x": 2, "y": 1})
    assert first == second
    assert invocation_digest("t", {"a": 1, "b": [1, 2]}, {"y": 1, "x": 2}, True) != first


def test_openai_string_arguments_stay_strings() -> None:
    as_string = invocation_digest("t", '{"a":1}', "r")
    as_object = invocation_digest("t", {"a": 1}, "r")
    assert as_string != as_object


@settings(max_examples=300)
@given(st.binary(min_size=32, max_size=32))
def test_ref_round_trips_and_validates(digest: bytes) -> None:
    ref = Ref.from_digest(digest)
    assert len(ref) == REF_LENGTH == 29
    assert ref.startswith("tr_")
    assert ref == ref.lower()
    assert "=" not in ref
    assert Ref.parse(str(ref)) == ref
    assert ref.digest_prefix == digest[:16]
    assert is_ref(str(ref))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tr_wnzvojnptnbbakachpkv654p2", "29"),  # too short
        ("tr_wnzvojnptnbbakachpkv654p2mm", "29"),  # too long
        ("TR_wnzvojnptnbbakachpkv654p2m", "start"),
        ("tr_WNZVOJNPTNBBAKACHPKV654P2M", "lowercase"),
        ("tr_wnzvojnptnbbakachpkv654p28", "lowercase"),  # 8 is not base32
        ("tr_wnzvojnptnbbakachpkv654p2n", "padding"),  # sets the 2 unused bits
        ("th_wnzvojnptnbbakachpkv654p2m", "start"),
        ("", "start"),
        ("tr_wnzvojnptnbbakachpkv654p2m=", "29"),
    ],
)
def test_malformed_refs_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(InvalidRefError) as info:
        Ref.parse(text)
    assert why in info.value.detail
    assert not is_ref(text)


def test_ref_of_a_known_digest() -> None:
    # base32 of 16 zero bytes is 26 'a's; of 0xff..ff it ends with '4' (2 padding bits clear).
    assert Ref.from_digest(bytes(32)) == "tr_" + "a" * 26
    assert Ref.from_digest(b"\xff" * 32) == "tr_" + "7" * 25 + "4"


def test_ref_rejects_non_strings() -> None:
    with pytest.raises(InvalidRefError):
        Ref(123)  # type: ignore[arg-type]


def test_a_long_string_peaks_within_three_times_its_canonical_bytes() -> None:
    """orjson sizes its buffer for the worst escaping of what it is given (7x a long
    string's bytes at peak): long strings go in slices, so the peak stays near the output
    (the slices, then their join)."""
    import tracemalloc

    text = 'line "quoted"\n\ttab\\' * 100_000
    value: dict[str, Any] = {"name": "read", "args": {}, "result": text, "isError": False}
    tracemalloc.start()
    try:
        out = canonical_json(value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out == rfc8785.dumps(value)
    assert peak <= 3 * len(out), peak / len(out)


def test_values_with_strings_take_the_orjson_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: a string (every invocation has its name) sent any value to the
    Python serializer, so orjson, several times faster, never canonicalized an invocation."""

    def serializer_used(value: object, out: list[bytes]) -> None:
        raise AssertionError(f"the serializer took {value!r}")

    invocation: dict[str, Any] = {
        "name": "read",
        "args": {"path": "é/a"},
        "result": ["x" * 600, 7, None],
    }
    expected = rfc8785.dumps(invocation)
    monkeypatch.setattr(canonical, "_serialize", serializer_used)
    assert canonical_json(invocation) == expected


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_value_that_contains_itself_is_refused_not_walked_for_ever(kind: str) -> None:
    """SDK misuse (no parsed JSON contains itself): the fast path's check stops after
    `_FAST_CONTAINERS` arrays and objects and the serializer refuses it at `MAX_DEPTH`."""
    looped: Any
    if kind == "list":
        looped = [1]
        looped.append(looped)
    else:
        looped = {}
        looped["x"] = looped
    with pytest.raises(CanonicalizationError, match="or it contains itself"):
        canonical_json(looped)
