"""Each class of input that once cost more than linear time or memory, at the largest size
the service under test allows, sent in a loop by one client while another sends small
requests: the attack gets its answer, and the small requests stay prompt, measured as a
ratio against the same small requests sent alone.

The service runs as its own process (the event loop under test is not the test's). Its body
limit is set to 2 MiB here so the suite stays quick: every cost involved is linear in the
input, so a larger limit scales the attack's time, not the ratio (`make bench` shows the
per-MB costs at two sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from loadtests import adversarial, attacks

BODY_LIMIT = 2 << 20
INFLATED_LIMIT = 16 << 20
# Small requests share the one CPU-bound process with the attack: the GIL is handed over
# every millisecond, so each small request waits a few switch intervals, never a whole attack.
RATIO = 10.0


@pytest.fixture(scope="module")
def service(engine_url: str) -> Iterator[adversarial.Service]:
    env = {
        "TOOLREF_MAX_BODY_BYTES": str(BODY_LIMIT),
        "TOOLREF_MAX_DECOMPRESSED_BYTES": str(INFLATED_LIMIT),
    }
    with adversarial.service(engine_url, env) as svc:
        yield svc


def _largest(factory: Callable[[int], attacks.Attack]) -> attacks.Attack:
    """The attack at the largest input the limits allow: the inflated limit for compressed
    bodies, else the largest size whose body fits the body limit."""
    if factory in (attacks.msgpack_arrays, attacks.json_arrays):
        return factory(INFLATED_LIMIT - (64 << 10))
    size = BODY_LIMIT
    while True:
        attack = factory(size)
        body = max(
            [len(attack.build(0, [_FAKE_ANSWER]).body)] + [len(s.body) for s in attack.setup]
        )
        if body <= BODY_LIMIT:
            return attack
        size = int(size * BODY_LIMIT / body * 0.98)


_FAKE_ANSWER = {"refs": [{"ref": "tr_" + "a" * 26}]}


@pytest.mark.latency
@pytest.mark.parametrize("factory", attacks.ALL, ids=lambda f: f.__name__)
def test_the_attack_is_answered_and_small_requests_stay_prompt(
    service: adversarial.Service, factory: Callable[[int], attacks.Attack]
) -> None:
    attack = _largest(factory)
    found = adversarial.promptness(service.url, attack, count=30)
    assert found.statuses, "no attack request was answered while the small ones ran"
    assert set(found.statuses) <= attack.expect, (attack.name, found.statuses)
    assert found.ratio <= RATIO, (
        f"{attack.name}: a small request took {found.during * 1000:.1f} ms (median) during "
        f"the attack against {found.alone * 1000:.1f} ms alone ({found.ratio:.1f}x); the "
        f"slowest took {found.worst * 1000:.1f} ms"
    )
