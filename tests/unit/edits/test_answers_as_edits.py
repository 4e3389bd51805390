"""The registry's answer to a middleware as an edit of the request it holds (`POST
/v1/edits:apply` with `Accept: application/vnd.toolref.edit` and `Toolref-Held`): applied
to the held segments it gives the request's segments, sharing the kept ones (no copies);
anything that does not fit is refused, never guessed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.edits import isolated, wire
from toolref.edits.edit import EditError, Inline, Keep, Named, apply_segments, diff
from toolref.edits.recipe import entry_of, recipe_ref
from toolref.receiving.held import SEGMENT_OVERHEAD, HeldRequests, base_of, weight
from toolref.registry.answers import AppliedEdit, HeldRequest
from toolref.registry.client import AsyncRegistryClient
from toolref.wire.errors import UnexpectedResponseError

HEAD = b"content-type: application/json\r\n"


def segments_of(parts: list[bytes]) -> list[bytes]:
    return [HEAD, *parts]


@given(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=12),
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=12),
)
@settings(max_examples=200, deadline=None)
def test_an_edit_of_the_held_segments_gives_the_request_back(
    before: list[bytes], after: list[bytes]
) -> None:
    base, new = segments_of(before), segments_of(after)
    entries = [entry_of(s) for s in base]
    ops = diff(entries, [entry_of(s) for s in new], new, {})
    ops = [Inline(new[i]) if isinstance(op, Named) else op for i, op in enumerate(ops)]
    data = wire.encode_isolated(recipe_ref(entries), ops, compress=False)
    header, blob = wire.read(data, len(data))
    found = apply_segments(base, header.ops, wire.inline(header, blob, b"", None))
    assert found == new
    kept = {id(s) for s in base}
    assert any(id(s) in kept for s in found) or not any(isinstance(o, Keep) for o in ops)


def test_raw_records_are_not_compressed() -> None:
    data = b"x" * 1000
    assert isolated.pack([data], compress=False) == b"\x00" + data
    assert len(isolated.pack([data])) < 100  # compressed by default


def test_what_does_not_fit_is_refused() -> None:
    base = [HEAD, b"a", b"b"]
    with pytest.raises(EditError, match="keeps segments 1 to 5 of a base of 3"):
        apply_segments(base, [Keep(1, 5)], [])
    with pytest.raises(EditError, match="names a piece"):
        apply_segments(base, [Named(b"p" * 16)], [])
    with pytest.raises(EditError, match="do not match"):
        apply_segments(base, [3], [b"ab"])


def test_the_base_is_read_from_the_first_bytes_only_as_senders_write_it() -> None:
    ref = "tb_" + "a" * 26
    assert base_of(b'{"v":2,"b":"' + ref.encode() + b'","o":[[0,1]],"n":0}\n') == ref
    assert base_of(b'{"v":2,"b":null,"o":[5],"n":5}\nxxxxx') is None
    assert base_of(b'{"b":"' + ref.encode() + b'","v":2}\n') is None  # written otherwise: whole
    assert base_of(b"not an edit") is None


def test_held_requests_are_bounded_by_their_bytes() -> None:
    one = weight(HeldRequest("tb_" + "0" * 26, [HEAD, b"x" * 30]))
    held = HeldRequests(3 * one)
    for n in range(5):
        held.keep(AppliedEdit(HEAD, b"x" * 30, f"tb_{n:026d}", [HEAD, b"x" * 30]))
    assert held.get("tb_" + "4".zfill(26)) is not None
    assert held.get("tb_" + "0".zfill(26)) is None  # dropped, least recently used first
    nothing = HeldRequests(0)
    nothing.keep(AppliedEdit(HEAD, b"x", "tb_" + "a" * 26, [HEAD, b"x"]))
    assert nothing.get("tb_" + "a" * 26) is None


def test_a_held_request_of_many_tiny_segments_weighs_what_it_takes() -> None:
    """Each segment costs its object's overhead beside its bytes: 50,000 one-byte segments
    weigh over 3 MB, not 50 KB (such requests held 8-40x the bound before)."""
    tiny = HeldRequest("tb_" + "1" * 26, [HEAD, *[b"x"] * 50_000])
    assert weight(tiny) >= 50_000 * (1 + SEGMENT_OVERHEAD)
    held = HeldRequests(1_000_000)
    held.keep(AppliedEdit(HEAD, b"x" * 50_000, tiny.ref, tiny.segments))
    assert held.get(tiny.ref) is None  # past the bound on its own: not held


def test_an_answer_keeping_a_base_the_client_does_not_hold_is_unexpected() -> None:
    client = AsyncRegistryClient("http://registry.test")
    ref = recipe_ref([entry_of(HEAD)])
    data = wire.encode_isolated(ref, [Keep(0, 1), Inline(b"new")], compress=False)
    with pytest.raises(UnexpectedResponseError, match="which this client does not hold"):
        client._applied(data, "tb_" + "c" * 26, None)
    held = HeldRequest(ref, [HEAD])
    applied = client._applied(data, "tb_" + "c" * 26, held)
    assert (applied.head, applied.body, list(applied.segments)) == (HEAD, b"new", [HEAD, b"new"])
