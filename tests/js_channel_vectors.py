"""Channel frame vectors for the TypeScript SDK (client_sdk/js/test/channel-frames.test.ts):
the frames Python's sender writes for a channel's turns (`toolref.websocket.channel.Sender`:
only what changed since the last turn in the meta, non-ASCII header text escaped as
`json.dumps` escapes it), its cancel and credit frames, the answer frames a receiver writes
and what reading them gives, and the windows a receiver grants and a sender keeps. JS must
write the same bytes and read the same answers, or a receiver reads a JS sender's turns
differently from a Python one's.

`python -m tests.js_channel_vectors --write` writes client_sdk/js/test/channel-vectors.json;
`tests/unit/test_js_channel_vectors.py` asserts the committed file is current.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from tests.js_vectors import ROOT, written
from toolref.websocket import channel as frames

VECTORS: Final = ROOT / "client_sdk" / "js" / "test" / "channel-vectors.json"

Turn = tuple[int, str, list[tuple[str, str]], bytes]

_KEY: Final = ("toolref-key", "tk_secret")
_EDIT: Final = ("content-type", "application/vnd.toolref.edit")
TURNS: Final[list[Turn]] = [
    (0, "/v1/chat/completions", [_EDIT, _KEY], b"\x06edit-bytes\x00\xff"),
    (1, "/v1/chat/completions", [_EDIT, _KEY], b"second"),  # nothing changed: empty meta
    (2, "/v1/chat/completions?beta=1", [_EDIT, _KEY], b""),  # the target alone, no body
    (3, "/v1/chat/completions?beta=1", [_EDIT, ("authorization", "Bearer sk-\xe9\x7f")], b"x"),
    (200, "/v1/messages", [_EDIT, ("x-note", 'quote " backslash \\ tab \t')], b"{}"),
    (16384, "/v1/messages", [], bytes(range(256))),
]


def _hex(data: bytes) -> str:
    return data.hex()


def turns() -> list[dict[str, Any]]:
    sender = frames.Sender()
    return [
        {
            "stream": stream,
            "target": target,
            "headers": [list(pair) for pair in headers],
            "body": _hex(body),
            "frame": _hex(sender.turn(stream, target, headers, body)),
        }
        for stream, target, headers, body in TURNS
    ]


def answers() -> list[dict[str, Any]]:
    cases = [
        frames.head(0, 200, [("content-type", "text/event-stream"), ("toolref-history", "tb_x")]),
        frames.head(300, 503, [frames.BUSY]),
        frames.piece(1, b"data: {}\n\n"),
        frames.piece(129, b""),
        frames.end(7),
        frames.broken(2, "upstream closed"),
    ]
    out = []
    for frame in cases:
        found = frames.answered(frame)
        head = found.head() if found.kind == frames.HEAD else None
        out.append(
            {
                "frame": _hex(frame),
                "stream": found.stream,
                "kind": found.kind,
                "data": _hex(found.data),
                "head": None if head is None else {"status": head[0], "headers": head[1]},
            }
        )
    return out


def render() -> str:
    asked = ["0", "1", "65536", "1048576", "99999999", "9999999999", "12345678901", "-1", "1e6", ""]
    kept = ["65536", "1048576", "16777216", "16777217", "1024", "01048576", "abc", ""]
    vectors = {
        "comment": "Written by `python -m tests.js_channel_vectors --write`; do not edit.",
        "turns": turns(),
        "cancel": [[s, _hex(frames.Sender.cancel(s))] for s in (0, 5, 300)],
        "credit": [[s, n, _hex(frames.Sender.credit(s, n))] for s, n in ((0, 524288), (70000, 1))],
        "answers": answers(),
        "notAnswers": [_hex(b""), _hex(b"\x00"), _hex(b"\x01\x04"), _hex(b"\x80")],
        "windowGranted": [[a, frames.window_granted(a)] for a in asked],
        "windowKept": [
            [k, frames.window_kept([(frames.WINDOW_HEADER.encode(), k.encode())])] for k in kept
        ],
        "drained": list(frames.DRAINED),
    }
    return json.dumps(vectors, indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    return written(VECTORS, render(), __doc__)


if __name__ == "__main__":
    sys.exit(main())
