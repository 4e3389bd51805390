"""The web-chat demo's tools over a made-up repository: deterministic, several KB each.

The demo must run offline and give the same bytes every time (the browser test and the
bench compare runs), so no tool touches the disk: a file's text, a directory listing and a
search's matches are generated from their arguments with a seeded `random.Random`. They
read like a real Python project's, so they compress like one.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

WORDS = (
    "request",
    "response",
    "cache",
    "store",
    "record",
    "digest",
    "history",
    "message",
    "payload",
    "stream",
    "chunk",
    "buffer",
    "index",
    "token",
    "session",
    "client",
    "server",
    "registry",
    "tenant",
    "quota",
    "limit",
    "window",
    "retry",
    "backoff",
    "circuit",
    "breaker",
    "encoder",
    "decoder",
    "parser",
    "writer",
    "reader",
    "schema",
    "marker",
    "ref",
)
PACKAGES = ("core", "api", "store", "wire", "util", "auth", "jobs", "web")


def _rng(*key: object) -> random.Random:
    seed = hashlib.sha256(repr(key).encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))  # noqa: S311 (made-up data)


def _name(rng: random.Random, parts: int = 2) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(parts))


def _function(rng: random.Random) -> list[str]:
    name, args = _name(rng), [_name(rng, 1) for _ in range(rng.randint(1, 3))]
    lines = [
        f"def {name}({', '.join(args)}):",
        f'    """{rng.choice(WORDS).capitalize()}s the'
        f' {rng.choice(WORDS)} of a {rng.choice(WORDS)}."""',
    ]
    for _ in range(rng.randint(3, 9)):
        target, source = _name(rng, 1), rng.choice(args)
        kind = rng.random()
        if kind < 0.4:
            lines.append(f"    {target} = {source}.{_name(rng)}({rng.randint(0, 4096)})")
        elif kind < 0.7:
            lines.append(f"    if {source} is None:")
            lines.append(f'        raise ValueError("{_name(rng)} is missing: pass {source}")')
        else:
            lines.append(f"    for {target} in {source}.{_name(rng, 1)}s:")
            lines.append(f"        yield {target}")
    lines.append(f"    return {rng.choice(args)}")
    return [*lines, "", ""]


def read_file(path: str) -> dict[str, Any]:
    rng = _rng("read_file", path)
    lines = ['"""' + f"{path}: the {_name(rng)} layer." + '"""', "", "import json", ""]
    while sum(len(line) + 1 for line in lines) < rng.randint(3500, 7000):
        lines += _function(rng)
    return {"path": path, "lines": len(lines), "content": "\n".join(lines)}


def list_dir(path: str) -> dict[str, Any]:
    rng = _rng("list_dir", path)
    entries = []
    for _ in range(rng.randint(40, 70)):
        is_dir = rng.random() < 0.15
        name = _name(rng) + ("" if is_dir else rng.choice((".py", ".md", ".json", ".toml")))
        entries.append(
            {
                "name": name,
                "type": "dir" if is_dir else "file",
                "size": 0 if is_dir else rng.randint(120, 48_000),
                "modified": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}",
            }
        )
    return {"path": path, "entries": entries}


def search(query: str) -> dict[str, Any]:
    rng = _rng("search", query)
    matches = []
    for _ in range(rng.randint(25, 45)):
        package, module = rng.choice(PACKAGES), _name(rng)
        text = f"{_name(rng, 1)} = {query}.{_name(rng)}({_name(rng, 1)}, {rng.randint(0, 99)})"
        matches.append(
            {"file": f"src/{package}/{module}.py", "line": rng.randint(1, 900), "text": text}
        )
    return {"query": query, "matches": matches, "truncated": len(matches) > 40}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "read_file": read_file,
    "list_dir": list_dir,
    "search": search,
}


def run(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return TOOLS[name](**args)
