"""The TypeScript SDK's channel frame vectors (client_sdk/js/test/channel-vectors.json) are
what Python's channel frames are now: a change to the framing not carried to the vectors
(`python -m tests.js_channel_vectors --write`) fails here, and the JS suite
(client_sdk/js/test/channel-frames.test.ts) then checks the TypeScript SDK against them."""

from __future__ import annotations

import json

from tests import js_channel_vectors


def test_committed_channel_vectors_are_current() -> None:
    assert js_channel_vectors.VECTORS.exists(), "run `python -m tests.js_channel_vectors --write`"
    assert js_channel_vectors.VECTORS.read_text() == js_channel_vectors.render(), (
        "client_sdk/js/test/channel-vectors.json is stale: run "
        "`python -m tests.js_channel_vectors --write`"
    )


def test_the_vectors_hold_the_cases_that_matter() -> None:
    vectors = json.loads(js_channel_vectors.render())
    frames = [bytes.fromhex(turn["frame"]) for turn in vectors["turns"]]
    assert frames[1][:2] == b"\x01\x00"  # a turn like the one before: no meta at all
    assert b"\\u00e9\\u007f" in frames[3]  # latin-1 header text escaped as json.dumps does
    assert any(answer["head"] for answer in vectors["answers"])
    assert None in [granted for _, granted in vectors["windowGranted"]]
