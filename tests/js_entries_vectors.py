"""`entries` vectors for the TypeScript SDK (client_sdk/js/test/entries-vectors.test.ts): the
most entries a sender puts in an edit to a receiver after its 413 `too-many-items` refusals,
replayed through the Python rule (`toolref.sending.entries.Entries`). Each case is a sequence
of refusals `(sent, limit, at)` (the entries of the edit refused, the problem's `limit` member
as JSON carries it, the clock), each with what `refused` returned and `most(now)` at several
clock readings after it. Readings are in seconds, Python's unit; JS's `Entries` takes
milliseconds, so the JS test multiplies each by 1000 (every reading here is a multiple of
1/4 s, exact in both). Relay, Python SDK and JS SDK must learn the same limit from the same
refusals, or one of them sends a refused edit every turn. `refusals` holds answers to an
edit (status, problem read) and whether the pure rule `toolref.sending.entries.too_many_items`
takes each as a receiver's too-many-items refusal: a gateway's 413, and a middleware's 415
naming its registry's (`cause`), never any other 415 (which pauses edits): JS's
`tooManyItems` must tell them apart alike. Written into vectors.json by `tests.js_vectors`.
"""

from __future__ import annotations

import random
from typing import Any, Final

from toolref.edits.wire import DEFAULT_MAX_ENTRIES
from toolref.sending.entries import KEPT, LARGEST, Entries, too_many_items

# A refusal: the edit's entries, the problem's `limit` (any JSON value, None: absent), when.
Refusal = tuple[int, Any, float]

CASES: Final[dict[str, list[Refusal]]] = {
    "the limit named, below the entries sent": [(300, 200, 0.0)],
    "no limit named: one below the entries sent": [(300, None, 0.0)],
    "a limit at or above the entries sent: something else, nothing learnt": [
        (300, 300, 0.0),
        (300, 100_000, 1.0),
    ],
    "not a whole number from 1: none named": [
        (300, 0, 0.0),
        (290, -5, 1.0),
        (280, 150.5, 2.0),
        (270, "200", 3.0),
        (260, True, 4.0),
        (250, [200], 5.0),
        (240, {"limit": 200}, 6.0),
    ],
    "a whole float is JSON's integer": [(300, 200.0, 0.0)],
    "past JavaScript's exact integers: none named": [(300, LARGEST + 1, 0.0), (299, 1e300, 1.0)],
    "the largest exact integer: at or above the entries, nothing learnt": [(300, LARGEST, 0.0)],
    "the same limit again: not said again, its time renewed": [
        (300, 200, 0.0),
        (250, 200, KEPT - 1.0),
        (250, 200, 2 * KEPT - 2.0),
    ],
    "a lower limit said: kept; a higher one after it: not": [
        (300, 200, 0.0),
        (250, 100, 10.0),
        (250, 200, 20.0),
    ],
    "expired: a higher limit learnt, said, and the one before said again": [
        (300, 100, 0.0),
        (300, 200, KEPT),
        (300, 100, KEPT + 5.0),
    ],
    "one entry: nothing below it": [(1, None, 0.0), (1, 1, 1.0)],
    "a large clock": [(300, 200, 1_000_000.0), (300, 150, 1_000_000.25 + KEPT)],
}


_TOO_MANY = "urn:toolref:problem:too-many-items"
_UNSUPPORTED = "urn:toolref:problem:unsupported-media-type"
# An answer to an edit: its status and its problem (None: none read).
REFUSALS: Final[list[tuple[int, Any]]] = [
    (413, {"type": _TOO_MANY, "status": 413, "limit": 200}),
    (413, {"type": _TOO_MANY}),
    (413, {"type": "urn:toolref:problem:decompressed-too-large", "limit": 200}),
    (413, {"type": _UNSUPPORTED, "cause": _TOO_MANY}),
    (413, None),
    (415, {"type": _UNSUPPORTED, "status": 415, "cause": _TOO_MANY, "limit": 200}),
    (415, {"type": _UNSUPPORTED, "cause": _TOO_MANY}),
    (415, {"type": _UNSUPPORTED, "cause": "urn:toolref:problem:registry-unreachable"}),
    (415, {"type": _UNSUPPORTED, "cause": "urn:toolref:problem:overloaded"}),
    (415, {"type": _UNSUPPORTED}),
    (415, {"type": _TOO_MANY, "limit": 200}),
    (415, {"type": "about:blank", "cause": _TOO_MANY}),
    (415, {"type": _UNSUPPORTED, "cause": [_TOO_MANY]}),
    (415, None),
    (400, {"type": _UNSUPPORTED, "cause": _TOO_MANY}),
    (503, {"type": _UNSUPPORTED, "cause": _TOO_MANY}),
    (200, {"type": _TOO_MANY}),
]


def _readings(at: float) -> list[float]:
    return [at, at + 1.0, at + KEPT - 0.25, at + KEPT, at + 2 * KEPT]


def _replay(refusals: list[Refusal]) -> list[dict[str, Any]]:
    entries = Entries()
    steps: list[dict[str, Any]] = []
    for sent, limit, at in refusals:
        returned = entries.refused(sent, limit, at)
        most = [[now, entries.most(now)] for now in _readings(at)]
        steps.append({"sent": sent, "limit": limit, "at": at, "returned": returned, "most": most})
    return steps


def _random_refusals(rng: random.Random, count: int) -> list[Refusal]:
    """Refusals at gaps around KEPT, limits absent, named below, at and above the entries."""
    refusals: list[Refusal] = []
    at = 0.0
    for _ in range(count):
        at += rng.choice((0.0, 0.25, 1.0, 600.0, KEPT - 0.25, KEPT, KEPT + 1.0))
        sent = rng.choice((1, 16, 200, 201, 300, 5000, DEFAULT_MAX_ENTRIES))
        limit = rng.choice((None, 0, 16, 100, 200, 300, 5000, 60_000, 150.0, "x"))
        refusals.append((sent, limit, at))
    return refusals


def build() -> dict[str, Any]:
    rng = random.Random(58)
    cases = [{"name": name, "steps": _replay(events)} for name, events in CASES.items()]
    for n in range(4):
        cases.append({"name": f"random {n}", "steps": _replay(_random_refusals(rng, 40))})
    refusals = [
        {"status": status, "problem": problem, "tooMany": too_many_items(status, problem)}
        for status, problem in REFUSALS
    ]
    return {
        "keptSeconds": KEPT,
        "defaultMost": DEFAULT_MAX_ENTRIES,
        "cases": cases,
        "refusals": refusals,
    }
