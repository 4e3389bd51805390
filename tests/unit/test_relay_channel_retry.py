"""`--channel-retry-max`: the relay's channel back-off cap (`toolref.sending.backoff`), a
constant 600 s before (review: limits as settings). The n-th failure in a row to have a
channel waits 30 s x 2^(n-1), at most this; one below 30 s is every wait."""

from __future__ import annotations

import pytest

from toolref.sending.backoff import FIRST, LONGEST
from toolref.sending.channel_transport import ChannelTransport
from toolref_relay import Relay
from toolref_relay.cli import config_of, main, parser

ARGS = ["relay", "--gateway", "http://127.0.0.1:9"]


def _pool(*extra: str) -> ChannelTransport:
    pool = Relay(config_of(parser().parse_args([*ARGS, *extra]))).pool
    assert isinstance(pool, ChannelTransport)
    return pool


def test_the_channel_back_off_cap_defaults_to_ten_minutes() -> None:
    backoff = _pool().backoff
    assert (backoff.first, backoff.longest) == (FIRST, LONGEST) == (30.0, 600.0)


@pytest.mark.parametrize(("given", "first", "longest"), [("3600", 30.0, 3600.0), ("5", 5.0, 5.0)])
def test_channel_retry_max_caps_the_relays_channel_back_off(
    given: str, first: float, longest: float
) -> None:
    backoff = _pool("--channel-retry-max", given).backoff
    assert (backoff.first, backoff.longest) == (first, longest)
    backoff.random = lambda: 1.0  # the whole wait, no jitter
    waits = [backoff.failed(0.0) for _ in range(10)]
    assert max(waits) == longest
    assert waits[0] == first


@pytest.mark.parametrize("given", ["0", "-1", "nan", "inf"])
def test_a_channel_retry_max_that_cannot_work_is_one_line_at_start(given: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*ARGS, "--channel-retry-max", given])
    message = str(stopped.value.code)
    assert "\n" not in message
    assert message.startswith(f"toolref relay: --channel-retry-max is {float(given)}")
    assert "give a number of seconds above 0, such as 600 (the default)" in message
