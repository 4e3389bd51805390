"""Any valid JSON any writer writes reaches the provider byte for byte through the real relay
and gateway (issue 31 items 2 and 3): a property test over writers (compact, spaced, pretty,
ASCII-escaped, raw UTF-8, odd indentation), number spellings (`1e5`, `1E-7`, `-0`, `-0.0`,
`1e400`, integers past every machine type), duplicate keys and lone surrogate escapes, each
case a few turns of one conversation. Before edits, relay and gateway re-serialized: spaced
and pretty bodies reached the provider compacted, `1e5` became `100000.0`, a duplicate key
lost its first value, and a lone surrogate was a 500 for good.

Cases are drawn from a seeded generator (every run the same `CASES`, each reproducible by
its seed), not Hypothesis: each case is several requests over real sockets."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_relay_edits import TIMEOUT, assert_exact, post, relayed
from toolref.edits.wire import MEDIA_TYPE

pytestmark = pytest.mark.engine

CASES = 24
TURNS = 3
NUMBERS = (
    "1e5",
    "1E-7",
    "-0",
    "-0.0",
    "1e400",
    "-1e-400",
    "12345678901234567890123456789",
    "0.1000000000000000055511151231257827",
    "3.0",
    "2E+3",
)
STRINGS = (
    '"lone \\ud83d half"',
    '"\\udc00 low first"',
    '"\\u00e9t\\u00e9"',
    '"été 🙂"',
    '"tab\\tquote\\" slash\\/"',
    '"\\ud83d\\ude00 paired"',
)
SEPARATORS = ((",", ":"), (", ", ": "), (",\n  ", ": "), (" , ", " : "))


def _value(rng: random.Random, depth: int, sep: tuple[str, str]) -> str:
    """One JSON value written as some writer would, never through a parser."""
    kind = rng.randrange(6 if depth < 3 else 3)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice(STRINGS)
    if kind == 2:
        return json.dumps("text " * rng.randrange(1, 30), ensure_ascii=rng.random() < 0.5)
    if kind == 3:
        items = [_value(rng, depth + 1, sep) for _ in range(rng.randrange(0, 4))]
        return "[" + sep[0].join(items) + "]"
    keys = [rng.choice(("a", "b", "content", "n")) for _ in range(rng.randrange(1, 5))]
    members = [f'"{k}"{sep[1]}{_value(rng, depth + 1, sep)}' for k in keys]  # keys repeat
    return "{" + sep[0].join(members) + "}"


def _message(rng: random.Random, sep: tuple[str, str], role: str) -> str:
    text = json.dumps(f"message {rng.random()} " * 8, ensure_ascii=rng.random() < 0.5)
    extra = _value(rng, 1, sep)
    return (
        "{" + f'"role"{sep[1]}"{role}"{sep[0]}"content"{sep[1]}{text}{sep[0]}'
        f'"meta"{sep[1]}{extra}' + "}"
    )


def _body(messages: list[str], sep: tuple[str, str], rng: random.Random) -> bytes:
    head = f'"model"{sep[1]}"claude"{sep[0]}"max_tokens"{sep[1]}{rng.choice(NUMBERS[:4])}'
    listed = "[" + sep[0].join(messages) + "]"
    text = "{" + f'{head}{sep[0]}"messages"{sep[1]}{listed}' + "}"
    return (" " * rng.randrange(3) + text + "\n" * rng.randrange(2)).encode()


async def test_any_writer_s_json_reaches_the_provider_byte_for_byte(redis: Redis) -> None:
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for seed in range(CASES):
            rng = random.Random(seed)
            sep = rng.choice(SEPARATORS)
            messages = [_message(rng, sep, "user")]
            for _ in range(TURNS):
                body = _body(messages, sep, rng)
                json.loads(body)  # valid JSON (a lone surrogate escape included)
                await post(agent, stack, body)
                assert_exact(stack, body)  # the manager path (edits off) fails here
                messages += [_message(rng, sep, "assistant"), _message(rng, sep, "user")]


def _turns(kind: str, turns: int) -> list[bytes]:
    """A conversation of `turns` requests, each a tool call and its result more, holding
    `kind`'s unusual spelling in every tool input and result."""
    odd = ODD[kind]
    messages = [b'{"role":"user","content":"' + b"read the files, " * 30 + b'"}']
    bodies = []
    for turn in range(turns):
        use = b'{"type":"tool_use","id":"toolu_%d","name":"Read","input":{"v":%s}}' % (turn, odd)
        result = b'{"type":"tool_result","tool_use_id":"toolu_%d","content":[%s, %s]}' % (
            turn,
            odd,
            json.dumps("line\n" * 200).encode(),
        )
        messages += [b'{"role":"assistant","content":[%s]}' % use]
        messages += [b'{"role":"user","content":[%s]}' % result]
        listed = b",\r\n\t".join(messages)
        bodies.append(ENVELOPES[kind] % listed if kind in ENVELOPES else ENVELOPE % listed)
    return bodies


ENVELOPE = b'{"model":"claude","max_tokens":1024,"messages":[%s]}'
ODD = {
    "cesu-surrogate": b'"\\ud83d\xed\xb8\x80 raw low after an escaped high"',  # not UTF-8
    "invalid-utf-8": b'"a\xffb \xc0\xaf"',  # not UTF-8
    "bom": b'"a byte order mark first"',
    "top-level-array": b"1",
    "messages-not-a-list": b"2",
    "escapes": b'"\\u00E9\\u00e9\\u00c9\xc3\xa9\\/\\u0000 \\ud800 \\udc00x"',
    "numbers": b"[-0,1E400,1e-400,0.10,-0.0E+0,%s]" % (b"9" * 400),
    "whitespace": b'{ "a"\r\n:\t[ ]\r\n,\t"a" : { } , "" : "" }',
}
ENVELOPES = {
    "bom": b"\xef\xbb\xbf" + ENVELOPE,
    "top-level-array": b"[%s]",
    "messages-not-a-list": b'{"model":"claude","messages":{"list":[%s]}}',
    "whitespace": b"\r\n\t " + ENVELOPE + b"\t\r\n",
}


@pytest.mark.parametrize("kind", list(ODD))
async def test_unusual_and_invalid_bodies_reach_the_provider_byte_for_byte(
    redis: Redis, kind: str
) -> None:
    """Each turn of a tool-using conversation reaches the provider as the agent wrote it:
    uppercase and mixed escapes, `\\u0000`, lone surrogate escapes, numbers no double holds,
    repeated and empty keys, CRLF and tabs everywhere, messages that are no list (as edits);
    a UTF-8 byte order mark, bytes that are not UTF-8 in a string, a top-level array (not
    one JSON object in UTF-8: as they came, never changed and never refused)."""
    plain = kind in ("cesu-surrogate", "invalid-utf-8", "bom", "top-level-array")
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for body in _turns(kind, 3):
            await post(agent, stack, body)
            assert_exact(stack, body)
            sent = stack.balancer.requests[-1]
            assert (sent.headers["content-type"] != MEDIA_TYPE) == plain, kind
