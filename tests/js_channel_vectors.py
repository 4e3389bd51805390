"""Channel frame vectors for the TypeScript SDK (client_sdk/js/test/channel-frames.test.ts):
the frames Python's sender writes for a channel's turns (`toolref.websocket.channel.Sender`:
only what changed since the last turn in the meta, non-ASCII header text escaped as
`json.dumps` escapes it; an edit's base named by stream where a head named it,
`toolref.websocket.bases`), its cancel and credit frames, the answer frames a receiver writes
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
from toolref.edits import wire
from toolref.edits.edit import Inline, Keep, Op
from toolref.edits.recipe import recipe_ref_of
from toolref.websocket import bases as bases_module
from toolref.websocket import channel as frames
from toolref.websocket.bases import MOST, SenderBases
from toolref.wire.headers import HISTORY_HEADER

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


def _edit(base: int, tail: bytes) -> bytes:
    """A compact edit (version 8) of base `tb_` + `base`'s id keeping 3 entries, then `tail`."""
    ops: list[Op] = [Inline(b""), Keep(0, 3), Inline(tail)]
    return wire.encode_isolated(_ref(base), ops, version=8)


def _ref(n: int) -> str:
    return recipe_ref_of(n.to_bytes(16, "big"))


def bases() -> list[dict[str, Any]]:
    """Bases named by stream (`toolref.websocket.bases`): heads that came (each naming the
    recipe its turn made, or none), then turns whose frames name their base by stream
    where a head within `MOST` streams named it, as Python's sender writes them."""
    sender = frames.Sender(SenderBases())
    events: list[dict[str, Any]] = []

    def head(stream: int, status: int, headers: list[tuple[str, str]]) -> None:
        sender.made(stream, status, headers)
        events.append({"head": [stream, status, [list(pair) for pair in headers]]})

    def turn(stream: int, headers: list[tuple[str, str]], body: bytes) -> None:
        frame = sender.turn(stream, "/v1/messages", headers, body)
        events.append(
            {"turn": [stream, [list(p) for p in headers], _hex(body)], "frame": _hex(frame)}
        )

    history = HISTORY_HEADER
    turn(0, [_EDIT, _KEY], _edit(1, b"first"))  # no head yet: by its id
    head(0, 200, [("content-type", "text/event-stream"), (history, _ref(1))])
    turn(1, [_EDIT, _KEY], _edit(1, b"second turn"))  # one back
    head(1, 409, [(history, _ref(2))])  # refused: made nothing
    turn(2, [_EDIT, _KEY], _edit(2, b"a base no head of 200 named"))
    head(2, 200, [(history.upper(), _ref(3))])  # any case of the name
    turn(3, [("Content-Type", "application/vnd.toolref.edit; charset=x"), _KEY], _edit(3, b"x"))
    turn(4, [("content-type", "application/json"), _KEY], _edit(3, b"not an edit"))
    turn(4 + MOST, [_EDIT, _KEY], _edit(3, b"too far back"))
    head(300, 200, [(history, _ref(1))])  # the latest stream that made it
    turn(301, [_EDIT, _KEY], _edit(1, b"named by the stream that made it last"))
    turn(302, [_EDIT, _KEY], b'{"model":"m"}')  # not compact: as it is
    return events


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
        "bases": bases(),
        "basesHeader": [bases_module.HEADER, bases_module.OFFER],
    }
    return json.dumps(vectors, indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    return written(VECTORS, render(), __doc__)


if __name__ == "__main__":
    sys.exit(main())
