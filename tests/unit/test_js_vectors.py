"""The TypeScript SDK's test vectors (client_sdk/js/test/vectors.json) are what the Python
SDK computes now: a change to canonical JSON, refs, markers or edits that is not
carried to the vectors (`python -m tests.js_vectors --write`) fails here, and the JS suite
then checks the TypeScript SDK against the new ones."""

from __future__ import annotations

import json
import re

from tests import js_vectors
from tests.js_edit_vectors import JS_VERSION
from toolref.edits import wire


def test_committed_vectors_are_current() -> None:
    assert js_vectors.VECTORS.exists(), "run `python -m tests.js_vectors --write`"
    committed = js_vectors.VECTORS.read_text()
    assert committed == js_vectors.render(), (
        "client_sdk/js/test/vectors.json is stale: run `python -m tests.js_vectors --write` "
        "and `make js-test`"
    )


def test_vectors_cover_the_cases_the_contract_names() -> None:
    vectors = json.loads(js_vectors.render())
    names = {case["name"] for case in vectors["canonical"]}
    assert {"astral", "escapes", "controls", "floats", "deep nesting", "utf-16 key order"} <= names
    floats = next(case for case in vectors["canonical"] if case["name"] == "floats")["canonical"]
    for text in ("1e+21", "1e-7", "5e-324", "1.7976931348623157e+308"):
        assert text in floats
    assert {case["exact"] for case in vectors["bigIntegers"]} == {True, False}
    assert {case["format"] for case in vectors["conversations"]} == {
        "ai-sdk-v5",
        "ai-sdk-v4",
        "openai-chat",
        "anthropic",
        "openai-responses",
    }
    edits = vectors["edits"]
    assert {"lone surrogates and escapes", "duplicate keys", "numbers of any length"} <= {
        case["name"] for case in edits["cuts"]
    }
    assert any(case["cut"] is None for case in edits["cuts"])  # JSON Python sends as it is
    assert any(len(case["cut"]["secrets"]) > 1 for case in edits["cuts"] if case["cut"])
    assert any("tp_" in json.dumps(case["ops"]) for case in edits["diffs"])  # a piece named
    attempts = [step["attempt"] for case in edits["editors"] for step in case["steps"]]
    assert any(a is not None and a["base"] is not None for a in attempts)  # edits of a base
    assert any(a is None for a in attempts)  # a miss the editor does not resend on
    assert len(vectors["errors"]) >= 3  # lone surrogates: Python refuses them
    # Every conversation has at least one marker, and its refs are the markers' refs.
    for case in vectors["conversations"][:4]:
        text = json.dumps(case["optimized"])
        assert case["toolReferences"]
        assert all(ref in text for ref in case["toolReferences"].values())


def test_the_js_version_is_the_one_its_wire_writes() -> None:
    """The vectors' Python side writes what the JS SDK writes (`JS_VERSION`): its wire.ts
    says the same version, and its `WRITTEN` is the one whose bytes that version writes."""
    wire_ts = (js_vectors.ROOT / "client_sdk" / "js" / "src" / "edits" / "wire.ts").read_text()
    version = re.search(r"export const VERSION = (\d+);", wire_ts)
    written = re.search(r"export const WRITTEN = (\d+);", wire_ts)
    assert version is not None
    assert written is not None
    assert int(version[1]) == JS_VERSION
    assert int(written[1]) == wire.written_as(JS_VERSION)
