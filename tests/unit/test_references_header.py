"""The `Toolref-References` header as every toolref backend writes it: JSON in ASCII (`\\u`
escapes), so any call id fits a header, and both SDKs read it back with a JSON parser.

The JS helper (`client_sdk/js/src/backend.ts`, pinned by its vitest "Toolref-References:
any call id, in ASCII") writes `HEADER` for these references; the Python middleware writes
the same bytes, which a JSON parser reads back (a ref-marker client confirms its refs by
them; the Python SDK's manager sends edits since 0.3 and reads none). These pass
before and after issue 28's fix of the JS helper: they pin the side it now agrees with."""

from __future__ import annotations

import json

from toolref.receiving.middleware import _with_references_header

REF = "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"
HEADER = '{"call_\\u20ac":"tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"}'


def test_the_middleware_writes_the_header_in_ascii() -> None:
    start = _with_references_header({"headers": []}, {"call_€": REF})
    assert start["headers"] == [(b"toolref-references", HEADER.encode("ascii"))]


def test_a_json_parser_reads_the_header_back() -> None:
    assert json.loads(HEADER) == {"call_€": REF}
