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
