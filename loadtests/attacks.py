"""The hostile inputs of the adversarial tests, `make bench` and the hostile loadtest user:
each class of request that once cost the service time or memory faster than its size, built
at any size, with the answer the service must give.

An attack is a few setup requests (run once) and a request to send in a loop; the request
may depend on the setup's answers (a ref) and on its index (a new `maxChars` each time, so
no cache answers it).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from toolref.handoff.commands import MAX_COMMAND_CHARS
from toolref.wire.encoding import BIGINT_EXT
from toolref.wire.headers import PROTOCOL_HEADER

JSON = {"content-type": "application/json", PROTOCOL_HEADER: "2"}
MSGPACK = {"content-type": "application/msgpack", PROTOCOL_HEADER: "2"}
_MERSENNE = 2**61 - 1  # CPython hashes an int modulo this: multiples of it all hash to 0


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    finding: str  # what it did before the fix
    size: int  # bytes of input the service works on (inflated, for compressed bodies)
    expect: frozenset[int]  # the statuses the service may answer
    build: Callable[[int, list[Any]], Request]  # (index, setup answers) -> request
    setup: tuple[Request, ...] = ()


def _json(method: str, path: str, value: Any) -> Request:
    return Request(method, path, json.dumps(value).encode(), JSON)


def shell_quote(size: int) -> Attack:
    """Shell commands with an open quote over many lines, each run twice (so the handoff
    classifies it), handed off: the classifier re-tokenized the chunk as it grew (80 KB:
    6.8 s of CPU). Each command is as long as the classifier parses."""
    line = "a b\n"
    body = line * ((MAX_COMMAND_CHARS - 20) // len(line))
    runs = max(1, size // (2 * len(body)))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run them"}]
    for n in range(2 * runs):
        command = f'echo {n % runs} "' + body
        call = {"name": "Bash", "arguments": json.dumps({"command": command})}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{n}", "type": "function", "function": call}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "ok"})
    request = _json("POST", "/v1/context:handoff", {"messages": messages})
    return Attack(
        "shell-quote",
        "80 KB: 6.8 s of CPU",
        len(request.body),
        frozenset({200}),
        lambda i, s: request,
    )


def msgpack_collisions(size: int) -> Attack:
    """A msgpack map whose keys are big integers equal in Python's hash: the dict was built
    (quadratic) before non-string keys were refused (860 KB: 9.4 s)."""
    keys = max(1, size // 24)
    packer = msgpack.Packer()
    head = b"\xdf" + keys.to_bytes(4, "big")  # map 32
    items = b"".join(
        packer.pack(msgpack.ExtType(BIGINT_EXT, str(k * _MERSENNE).encode())) + b"\x00"
        for k in range(1, keys + 1)
    )
    body = head + items
    request = Request("POST", "/v1/invocations", body, MSGPACK)
    return Attack(
        "msgpack-collisions",
        "860 KB: 9.4 s",
        len(body),
        frozenset({413, 422}),
        lambda i, s: request,
    )


def reverse_results(size: int) -> Attack:
    """Tool results in the reverse order of their calls (Anthropic blocks): pairing scanned
    the pending calls for each result (766 KB: 12 s)."""
    calls = max(1, size // 130)
    uses = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"n": i}}
        for i in range(calls)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "r"}
        for i in reversed(range(calls))
    ]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": uses},
        {"role": "user", "content": results},
    ]
    request = _json("POST", "/v1/messages:optimize", {"messages": messages})
    return Attack(
        "reverse-results", "766 KB: 12 s", len(request.body), frozenset({200}), lambda i, s: request
    )


def extractive_list(size: int) -> Attack:
    """A large result that is a JSON list, summarized at a new `maxChars` each time (6 MB:
    7 s of CPU per new value)."""
    items = [{"id": i, "name": f"item {i}", "tags": ["x", "y"]} for i in range(size // 48)]
    invocation = {"name": "search", "args": {"q": "all"}, "result": items}
    register = _json("POST", "/v1/invocations", {"invocations": [invocation]})

    def build(index: int, answers: list[Any]) -> Request:
        ref = answers[0]["refs"][0]["ref"]
        chars = 40 + index % 19_961
        return Request("GET", f"/v1/invocations/{ref}/summary?maxChars={chars}", b"", JSON)

    return Attack(
        "extractive-list",
        "6 MB: 7 s per maxChars",
        len(register.body),
        frozenset({200}),
        build,
        (register,),
    )


def many_markers(size: int) -> Attack:
    """One message with many markers, hydrated: each fill copied the container (20,000
    markers: 2.4 s)."""
    invocation = {"name": "read", "args": {"path": "a.py"}, "result": "x = 1\n"}
    register = _json("POST", "/v1/invocations", {"invocations": [invocation]})
    count = max(1, size // 130)

    def build(index: int, answers: list[Any]) -> Request:
        ref = answers[0]["refs"][0]["ref"]
        uses = [
            {"type": "tool_use", "id": f"t{i}", "name": "read", "toolRef": ref}
            for i in range(count)
        ]
        results = [
            {"type": "tool_result", "tool_use_id": f"t{i}", "toolRef": ref} for i in range(count)
        ]
        messages = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": uses},
            {"role": "user", "content": results},
        ]
        return _json("POST", "/v1/messages:hydrate", {"messages": messages})

    return Attack(
        "many-markers", "20,000 markers: 2.4 s", count * 130, frozenset({200}), build, (register,)
    )


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=9, mtime=0)


def msgpack_arrays(size: int) -> Attack:
    """A gzip'd msgpack body of empty arrays, 1,000 to a container: everything was unpacked,
    then every container pushed on a stack at once (64 KB gzip'd: 9.35 GB RSS, 60 s)."""
    inner = b"\xdc" + (1000).to_bytes(2, "big") + b"\x90" * 1000  # array 16 of 1,000 []
    groups = max(1, size // len(inner))
    body = b"\xdd" + groups.to_bytes(4, "big") + inner * groups  # array 32
    headers = {**MSGPACK, "content-encoding": "gzip"}
    request = Request("POST", "/v1/invocations", _gzip(body), headers)
    return Attack(
        "msgpack-arrays",
        "64 KB gzip: 9.35 GB RSS, 60 s",
        len(body),
        frozenset({413}),
        lambda i, s: request,
    )


def json_arrays(size: int) -> Attack:
    """`msgpack_arrays` in JSON: `[[],[],...]` gzip'd."""
    inner = b"[" + b",".join([b"[]"] * 1000) + b"]"
    groups = max(1, size // (len(inner) + 1))
    body = b"[" + b",".join([inner] * groups) + b"]"
    headers = {**JSON, "content-encoding": "gzip"}
    request = Request("POST", "/v1/invocations", _gzip(body), headers)
    return Attack(
        "json-arrays", "as msgpack-arrays", len(body), frozenset({413, 422}), lambda i, s: request
    )


ALL: tuple[Callable[[int], Attack], ...] = (
    shell_quote,
    msgpack_collisions,
    reverse_results,
    extractive_list,
    many_markers,
    msgpack_arrays,
    json_arrays,
)
