"""`said` vectors for the TypeScript SDK (client_sdk/js/test/said-vectors.test.ts): which
edits version a sender writes from what its receiver said recently, replayed through the
Python rule (`toolref.sending.said.Said`). Each case is a sequence of events, `said(version,
at)` or `unreadable(version, at)` (with what `unreadable` returned), each followed by
`version(now)` at several clock readings. Readings are in seconds, Python's unit; JS's `Said`
takes milliseconds, so the JS test multiplies each by 1000 (every reading here is a multiple
of 1/4 s, exact in both). Relay, Python SDK and JS SDK must pick the same version from the
same answers, or replicas of 4 and 6 behind one address are sent edits one of them refuses.
`warnings` holds the warning a sender logs on such a step down
(`toolref.sending.said.unreadable_said`), for JS's `unreadableSaid` to write word for word:
the receiver's detail and request id escaped and cut alike (before, JS left the detail out).
Written into vectors.json by `tests.js_vectors`.
"""

from __future__ import annotations

import random
from typing import Any, Final

from tests.js_edit_vectors import JS_VERSION
from toolref.sending.said import RECENT, Said, unreadable_said

# Events: ("said" | "unreadable", version, at). Readings after each: the event's own time,
# just inside RECENT after it, at RECENT after it (expired: `now - at < RECENT` is strict).
Event = tuple[str, int | None, float]

CASES: Final[dict[str, list[Event]]] = {
    "nothing said: none": [("said", None, 0.0), ("said", 0, 1.0), ("said", -3, 2.0)],
    "one version below WRITTEN": [("said", 3, 0.0)],
    "replicas of 5 and 6: 6 kept (the same bytes)": [
        ("said", 6, 0.0),
        ("said", 5, 1.0),
        ("said", 6, 2.0),
        ("said", 5, 3.0),
    ],
    "replicas of 4 and 6: what both read": [
        ("said", 6, 0.0),
        ("said", 4, 1.0),
        ("said", 6, 2.0),
        ("said", 6, 2.0 + RECENT),  # 4 expired: rolled forward
    ],
    "versions below WRITTEN: the lowest recent": [
        ("said", 4, 0.0),
        ("said", 2, 10.0),
        ("said", 3, 20.0),
        ("said", 4, 10.0 + RECENT),  # 2 expired, 3 still recent
    ],
    "expired: the last said, not the highest": [
        ("said", 6, 0.0),
        ("said", 2, 5.0),
        ("said", 4, 1000.0),
    ],
    "said at one instant: the first said of the last": [
        ("said", 4, 0.0),
        ("said", 6, 0.0),
        ("said", 4, 0.5),
        ("said", 6, 0.5),
    ],
    "said again: the same entry, a new time": [
        ("said", 6, 0.0),
        ("said", 4, 1.0),
        ("said", 6, 2.0),
        ("said", 4, 3.0),
        ("said", 6, 3.0 + RECENT - 0.25),
    ],
    "above the highest: counts as the highest": [
        ("said", 7, 0.0),
        ("said", 99, 1.0),
        ("said", 5, 2.0),
    ],
    "unreadable 6 and 5: 4 said (5's bytes are refused)": [
        ("said", 6, 0.0),
        ("unreadable", 6, 1.0),
        ("said", 6, 2.0),
        ("unreadable", 5, 3.0),
    ],
    "unreadable down to the floor at 1": [
        ("unreadable", 7, 0.0),
        ("unreadable", 4, 1.0),
        ("unreadable", 3, 2.0),
        ("unreadable", 2, 3.0),
        ("unreadable", 1, 4.0),
        ("unreadable", 0, 5.0),
        ("unreadable", -1, 6.0),
    ],
    "unreadable at the floor first: nothing said": [("unreadable", 1, 0.0)],
    "a large clock": [
        ("said", 5, 1_000_000.0),
        ("said", 4, 1_000_000.25),
        ("said", 6, 1_000_000.25 + RECENT),
    ],
}


def _readings(at: float) -> list[float]:
    return [at, at + 1.0, at + RECENT - 0.25, at + RECENT, at + 2 * RECENT]


def _replay(events: list[Event]) -> list[dict[str, Any]]:
    said = Said(highest=JS_VERSION)
    steps: list[dict[str, Any]] = []
    for event, version, at in events:
        step: dict[str, Any] = {"event": event, "version": version, "at": at}
        if event == "said":
            said.said(version, at)
        else:
            assert version is not None
            step["returned"] = said.unreadable(version, at)
        step["versions"] = [[now, said.version(now)] for now in _readings(at)]
        steps.append(step)
    return steps


def _random_events(rng: random.Random, count: int) -> list[Event]:
    """Answers and refusals at gaps around RECENT, versions from none to above the highest."""
    events: list[Event] = []
    at = 0.0
    for _ in range(count):
        at += rng.choice((0.0, 0.25, 1.0, 150.0, RECENT - 0.25, RECENT, RECENT + 1.0))
        version = rng.choice((None, -1, 0, 1, 2, 3, 4, 5, 6, 7))
        if version is not None and rng.random() < 0.25:
            events.append(("unreadable", version, at))
        else:
            events.append(("said", version, at))
    return events


# (endpoint, version, written, detail: any JSON value, request id, status)
WARNINGS: Final[list[tuple[str, int, int | None, Any, str | None, int]]] = [
    ("https://llm.test/v1/chat/completions", 6, 4, "the edit could not be read", "req-1", 400),
    ("https://llm.test/v1/chat/completions", 1, None, "unknown op", "req-2", 400),
    ("/api/chat", 4, 3, None, None, 400),  # no detail, no request id
    ("/api/chat", 5, 3, 42, "", 400),  # a detail that is no text; an empty id
    ("/api/chat", 5, 4, {"why": "x"}, "r", 415),  # a middleware's 415 naming it
    (
        "https://gw.test/v1/messages",
        6,
        3,
        "\x1b[2J\x1b[Hall clear" + "x" * 500,
        "\u202e" * 300,
        400,
    ),
    ("https://gw.test/v1/messages", 3, 2, "\U0001f600" * 250, "id\r\nforged", 400),
]


def _warning(case: tuple[str, int, int | None, Any, str | None, int]) -> dict[str, Any]:
    endpoint, version, written, detail, request_id, status = case
    said = unreadable_said(endpoint, version, written, detail, request_id, status=status)
    return {
        "endpoint": endpoint,
        "version": version,
        "written": written,
        "detail": detail,
        "requestId": request_id,
        "status": status,
        "said": said,
    }


def build() -> dict[str, Any]:
    rng = random.Random(57)
    cases = [{"name": name, "steps": _replay(events)} for name, events in CASES.items()]
    for n in range(4):
        cases.append({"name": f"random {n}", "steps": _replay(_random_events(rng, 40))})
    warnings = [_warning(case) for case in WARNINGS]
    return {"recentSeconds": RECENT, "cases": cases, "warnings": warnings}
