"""Numbers in text a client controls: a header, a query parameter, a stream field.

Python's `int()` reads at most 4300 digits and refuses digits `str.isdigit` accepts ('²'),
raising a ValueError after the text was judged a number: on the service that was a 500,
in the SDK an exception of the wrong type. Each case here was one of those.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
import msgpack
import pytest

from toolref.streaming.adapters.base import as_int
from toolref.streaming.adapters.gemini import json_path
from toolref.wire import errors
from toolref.wire.errors import ChunkSequenceError, ServiceUnavailableError
from toolref.wire.protocol import negotiate

from ..conftest import Api

pytestmark = pytest.mark.engine

HUGE = "9" * (sys.get_int_max_str_digits() + 1)  # 4301 digits: int() raises ValueError
LONG = "0" * 5000 + "1" * 20  # 20 significant digits: a number, but no version or budget
ODD = ["²", "１２", "٣", HUGE, LONG]
# Header values travel as bytes, read as latin-1: the ones latin-1 can carry.
ODD_HEADERS = ["²", "¹0", HUGE, LONG]


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"urn:toolref:problem:{slug}"
    return problem


@pytest.mark.parametrize("value", ODD_HEADERS)
async def test_protocol_header_of_odd_digits_is_a_400(make_api: Api, value: str) -> None:
    api = await make_api()
    response = await api.get(
        "/v1/capabilities", headers=[(b"Toolref-Protocol", value.encode("latin-1"))]
    )
    problem = assert_problem(response, 400, "invalid-protocol")
    assert "from 1 to 2" in problem["detail"]
    assert len(problem["detail"]) < 300  # the value is quoted by its head, not echoed whole
    assert response.headers["toolref-protocol"] == "1"


async def test_protocol_header_with_leading_zeros_is_still_a_version(make_api: Api) -> None:
    api = await make_api()
    response = await api.get("/v1/capabilities", headers={"Toolref-Protocol": "0" * 5000 + "2"})
    assert response.status_code == 200
    assert response.headers["toolref-protocol"] == "2"


@pytest.mark.parametrize("value", ODD)
async def test_max_chars_of_odd_digits_is_a_422(make_api: Api, value: str) -> None:
    api = await make_api()
    registered = await api.post(
        "/v1/invocations", json={"invocations": [{"name": "t", "args": {}, "result": "x" * 500}]}
    )
    ref = registered.json()["refs"][0]["ref"]
    response = await api.get(f"/v1/invocations/{ref}/summary", params={"maxChars": value})
    problem = assert_problem(response, 422, "validation-failed")
    assert "from 40 to 20000" in problem["detail"]


async def test_content_length_of_odd_digits_is_not_a_500(make_api: Api) -> None:
    # h11 refuses such a header before the app sees it; other servers may pass it on.
    api = await make_api()
    for value in ODD_HEADERS:
        response = await api.post(
            "/v1/invocations:findMissing",
            content=b'{"refs": []}',
            headers=[
                (b"Content-Type", b"application/json"),
                (b"Content-Length", value.encode("latin-1")),
            ],
        )
        assert response.status_code < 500, (value[:20], response.text)


async def test_max_chars_in_a_body_is_refused_by_validation(make_api: Api) -> None:
    api = await make_api()
    body = '{"messages": [{"role": "user", "content": "x"}], "mode": "summary", "maxChars": '
    response = await api.post(
        "/v1/messages:hydrate",
        content=(body + HUGE + "}").encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(response, 422, "unsupported-value")


@pytest.mark.parametrize("value", ODD)
def test_sdk_parsers_refuse_odd_digits_with_their_own_errors(value: str) -> None:
    with pytest.raises(errors.InvalidProtocolError):
        negotiate(value)
    with pytest.raises(ChunkSequenceError):
        as_int(value, "index")
    with pytest.raises(ChunkSequenceError):
        json_path(f"$.items[{HUGE}]")
    unavailable = ServiceUnavailableError.from_problem("busy", {}, {"retry-after": value})
    assert unavailable.retry_after == 1


@pytest.mark.parametrize("digits", [b"9" * 4301, b"-" + b"9" * 4301, b"1_000", b" 12", b"", b"12a"])
async def test_a_msgpack_big_integer_python_cannot_read_is_a_422(
    make_api: Api, digits: bytes
) -> None:
    api = await make_api()
    big = msgpack.ExtType(1, digits)
    body = msgpack.packb({"invocations": [{"name": "t", "args": {"n": big}, "result": "x"}]})
    response = await api.post(
        "/v1/invocations", content=body, headers={"Content-Type": "application/msgpack"}
    )
    problem = assert_problem(response, 422, "unsupported-value")
    assert "ext type 1" in problem["detail"]


async def test_a_msgpack_big_integer_within_the_limit_is_exact(make_api: Api) -> None:
    api = await make_api()
    number = -(10**4299)
    body = msgpack.packb(
        {"invocations": [{"name": "t", "args": {"n": number}, "result": "x"}]},
        default=lambda n: msgpack.ExtType(1, str(n).encode()),
    )
    response = await api.post(
        "/v1/invocations", content=body, headers={"Content-Type": "application/msgpack"}
    )
    assert response.status_code == 200, response.text
