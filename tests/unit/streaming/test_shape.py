"""`Shape`, the delta-at-a-time reading of whether argument text has closed one JSON object:
however the text is cut, what the OpenAI Chat adapter concludes from it (`_Call.complete`)
is what a strict parse of the whole text says."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolref.streaming.adapters.openai_chat import _Call

SETTINGS = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_NOISE = st.sampled_from(["", " ", "\n", "}", "]", "{", '"', "\\", ",", "x", "\u00a0", "{}"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    """JSON values in any formatting, whole, cut short or with noise around them."""
    value: Any = draw(_JSON)
    text = json.dumps(
        value, indent=draw(st.sampled_from([None, 1])), ensure_ascii=draw(st.booleans())
    )
    text = text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text
    return draw(_NOISE) + text + draw(_NOISE)


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@SETTINGS
@given(texts(), st.data())
def test_a_call_is_complete_exactly_when_its_text_parses_to_an_object(
    text: str, data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    call = _Call(0)
    seen: list[str] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        call.append(text[start:end])
        seen.append(text[start:end])
        if data.draw(st.booleans()):  # asked mid-stream too, as resending servers make it
            assert call.complete() == _is_object("".join(seen)), "".join(seen)
    assert call.complete() == _is_object(text), text


def test_a_backslash_cut_from_the_character_it_escapes_is_still_an_escape() -> None:
    call = _Call(0)
    for piece in ['{"a": "x\\', '"}', '"}']:
        call.append(piece)
    assert call.complete()
    assert call.text() == '{"a": "x\\"}"}'
