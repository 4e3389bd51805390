"""`AsyncTransport(channel_retry_max=...)`: the SDK's channel back-off cap
(`toolref.sending.backoff`), a constant 600 s before (review: limits as settings), as the
relay's `--channel-retry-max`; one that cannot work is refused where it is given."""

from __future__ import annotations

import math

import httpx
import pytest

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.backoff import FIRST, LONGEST
from toolref.sending.channel_transport import ChannelTransport
from toolref.sending.transport import AsyncTransport

ENDPOINT = "http://receiver.test/api/chat"


async def _channel(transport: AsyncTransport) -> ChannelTransport:
    """The channel `transport` makes for an edit to an endpoint that told of one."""
    channels = transport.channels
    assert channels is not None
    channels.paths[ENDPOINT] = "/v1/channel"
    inner = httpx.AsyncHTTPTransport()
    edit = httpx.Request("POST", ENDPOINT, headers={"content-type": MEDIA_TYPE}, content=b"x")
    found = await channels.sender(inner, edit)
    assert isinstance(found, ChannelTransport)
    await channels.aclose()
    await inner.aclose()
    return found


async def test_the_sdk_channel_back_off_cap_defaults_to_ten_minutes() -> None:
    backoff = (await _channel(AsyncTransport())).backoff
    assert (backoff.first, backoff.longest) == (FIRST, LONGEST) == (30.0, 600.0)


@pytest.mark.parametrize(("given", "first"), [(3600.0, 30.0), (5, 5.0)])
async def test_channel_retry_max_caps_the_sdk_channel_back_off(given: float, first: float) -> None:
    backoff = (await _channel(AsyncTransport(channel_retry_max=given))).backoff
    assert (backoff.first, backoff.longest) == (first, given)


@pytest.mark.parametrize("given", [0, -1.0, math.nan, math.inf])
def test_a_channel_retry_max_that_cannot_work_is_refused_where_given(given: float) -> None:
    with pytest.raises(ValueError, match=r"channel_retry_max is .*; give a number of seconds"):
        AsyncTransport(channel_retry_max=given)


@pytest.mark.parametrize("given", ["600", True, None])
def test_a_channel_retry_max_that_is_no_number_is_a_type_error(given: object) -> None:
    with pytest.raises(TypeError, match="channel_retry_max must be a number of seconds"):
        AsyncTransport(channel_retry_max=given)  # type: ignore[arg-type]
