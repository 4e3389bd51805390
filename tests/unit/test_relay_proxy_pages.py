"""A proxy's own error page in front of the gateway, told in the agent's shape
(`toolref_relay.problems.proxy_error`), and what is never taken for one: an answer the
channel carried (the provider's own error, forwarded by the gateway, passes as it came)
or one the gateway sent over HTTP (it carries `X-Request-Id`)."""

from __future__ import annotations

import asyncio

import httpx

from toolref.sending.channel_link import CARRIED
from toolref_relay.calls import Call
from toolref_relay.problems import proxy_error

PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
CALL = Call("POST", "anthropic", "/v1/messages", "", [], "anthropic")


def _answer(status: int = 502, **extra: str) -> httpx.Response:
    headers = {"content-type": "text/html", "content-length": str(len(PAGE)), **extra}
    return httpx.Response(status, headers=headers, content=PAGE)


def test_a_proxys_page_is_told_naming_the_proxy_and_the_fix() -> None:
    reply = asyncio.run(proxy_error(_answer(server="nginx/1.22.1"), CALL, "http://gw"))
    assert reply is not None
    assert reply.status == 502
    text = reply.body.decode()
    assert "nginx/1.22.1" in text
    assert "502 Bad Gateway" in text
    assert "start toolref-server" in text


def test_the_providers_page_over_the_channel_passes_as_it_came() -> None:
    """Found in review: a channel's answers carry no `X-Request-Id` (the gateway's access
    layer is HTTP's), so a provider's own HTML error over the channel was taken for a
    proxy's between relay and gateway, and its text replaced."""
    carried = _answer(503)
    carried.extensions[CARRIED] = True
    assert asyncio.run(proxy_error(carried, CALL, "http://gw")) is None


def test_the_gateways_answer_over_http_is_no_proxy_page() -> None:
    answered = _answer(503, **{"x-request-id": "r1"})
    assert asyncio.run(proxy_error(answered, CALL, "http://gw")) is None
