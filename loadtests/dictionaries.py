"""The shipped zstd dictionaries: their neutral training corpus, training, and what they buy.

`python -m loadtests.dictionaries train [--commit REV]` writes the next dictionaries into
`client_sdk/toolref/wire/dictionaries/`; `python -m loadtests.dictionaries measure` compares
them on the shared traces with no dictionary, with one per tenant, and with one trained on
the traces themselves (an upper bound that can never ship).

The corpus is made, not recorded: this repository's own files at one commit (source code,
docs, its git history as diffs) dressed as the output coding agents see from their tools
(file reads, listings, grep hits, diffs, test runs, tracebacks), and JSON answers generated
from a seeded random source, each wrapped as a tool invocation in the shapes clients send
(arguments as an object or as the JSON text of one; results as text, content blocks or an
MCP result). The same seed and commit give the same corpus. It holds nothing of any tenant
and nothing of the shared traces: files that quote the traces (tests, the generated docs)
are left out, and `tests/unit/test_dictionaries.py` checks the shipped dictionaries share no
long run of bytes with them.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import redis
import zstandard

from loadtests.report import Section
from loadtests.traces import Trace, load
from toolref import formats
from toolref.formats import Format
from toolref.formats.source import Payload
from toolref.wire import dictionaries
from toolref.wire.canonical import digest_of, invocation_digest
from toolref.wire.encoding import dumps_json
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings
from toolref_server.storage import record

ROOT: Final = Path(__file__).resolve().parents[1]
OUT: Final = ROOT / "client_sdk" / "toolref" / "wire" / "dictionaries"
# Our own files only. Left out: tests (some quote the shared traces) and the docs that
# benchmarks regenerate from them.
SOURCES: Final = ("client_sdk/", "service/", "loadtests/", "examples/", "deploy/")
DOCS: Final = ("README.md", "docs/operations.md", "docs/edits.md", "docs/sdk.md")
TEXT: Final = (".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".json", ".sh", "")
DICT_SIZE: Final = 112_640  # zstd's default; larger ones gained little (see `measure`)
SAMPLES: Final = 6000
SEED: Final = 19
THRESHOLD: Final = Settings.model_fields["compress_threshold"].default
TRAINED_AT: Final = "b4c4b21"  # the commit dictionaries 1 were trained on
CREATED: Final = 1_750_000_000  # a fixed time, so the same commit gives the same corpus


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


@dataclass(frozen=True, slots=True)
class Source:
    files: dict[str, str]  # path -> text
    diffs: list[str]  # one commit's patch each
    log: list[str]  # one-line commit subjects


def source(commit: str = "HEAD") -> Source:
    """This repository's own text at `commit`."""
    files = {}
    for path in _git("ls-tree", "-r", "--name-only", commit).splitlines():
        wanted = path.startswith(SOURCES) or path in DOCS
        if not wanted or Path(path).suffix not in TEXT or path.startswith(OUT.name):
            continue
        if "/dictionaries/" in path and path.endswith(".zdict"):
            continue
        try:
            files[path] = _git("show", f"{commit}:{path}")
        except (subprocess.CalledProcessError, UnicodeDecodeError):
            continue
    patches = _git(
        "log",
        "-p",
        "--no-merges",
        "-n",
        "80",
        "--format=%x00commit %H%nAuthor: %an <%ae>%nDate:   %ad%n%n    %s%n",
        commit,
        "--",
        *SOURCES,
    )
    diffs = [p for p in patches.split("\0") if p.strip()]
    log = _git("log", "--format=%h %s", "-n", "400", commit).splitlines()
    return Source(files, diffs, log)


# --- tool output, made from the source ------------------------------------------------


_OWNERS: Final = ("root", "user", "dev", "runner", "app", "ubuntu")
_MONTHS: Final = (
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
)
_WORKDIRS: Final = ("/workspace/app", "/home/user/project", "/repo", "/src", "/opt/app", ".")


class Tools:
    """Tool invocations (name, arguments, output, error) in the kinds agents run most."""

    def __init__(self, src: Source, rng: random.Random) -> None:
        self.src, self.rng = src, rng
        self.paths = sorted(src.files)
        self.code = [p for p in self.paths if p.endswith(".py")]
        self.words = sorted(
            {w for text in src.files.values() for w in text.split() if w.isidentifier()}
        )

    def pick(self, seq: Any) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def root(self) -> str:
        return str(self.pick(_WORKDIRS))

    def lines(self, path: str) -> tuple[int, list[str]]:
        text = self.src.files[path].splitlines()
        if len(text) <= 60 or self.rng.random() < 0.25:
            return 1, text[:400]
        start = self.rng.randrange(len(text) - 20)
        return start + 1, text[start : start + self.rng.randrange(20, 160)]

    def read(self) -> tuple[str, dict[str, Any], str]:
        path = self.pick(self.paths)
        first, lines = self.lines(path)
        style = self.rng.random()
        if style < 0.4:
            body = "\n".join(f"{first + n:6d}\t{line}" for n, line in enumerate(lines))
        else:
            body = "\n".join(lines)
        full = f"{self.root()}/{path}"
        kind = self.rng.randrange(4)
        if kind == 0:
            return "read_file", {"path": full}, body
        if kind == 1:
            return "Read", {"file_path": full, "offset": first, "limit": len(lines)}, body
        if kind == 2:
            command = f"sed -n '{first},{first + len(lines) - 1}p' {path}"
            return "bash", {"command": command}, body
        return "bash", {"command": f"cat {path}"}, body

    def listing(self) -> tuple[str, dict[str, Any], str]:
        folder = str(Path(self.pick(self.paths)).parent)
        inside = sorted(
            {p[len(folder) + 1 :].split("/")[0] for p in self.paths if p.startswith(folder + "/")}
        )
        year = self.rng.choice(("2024", "2025"))
        rows = [f"total {self.rng.randrange(8, 400)}"]
        names = [".", "..", *inside]
        for name in names:
            is_dir = name in (".", "..") or "." not in name
            size = 4096 if is_dir else len(self.src.files.get(f"{folder}/{name}", "x" * 900))
            date = f"{self.pick(_MONTHS)} {self.rng.randrange(1, 29):2d}"
            when = f"{self.rng.randrange(24):02d}:{self.rng.randrange(60):02d}"
            mode = "drwxr-xr-x" if is_dir else "-rw-r--r--"
            owner = self.pick(_OWNERS)
            rows.append(
                f"{mode} {self.rng.randrange(1, 9):2d} {owner} {owner} {size:6d} {date} "
                f"{when if self.rng.random() < 0.7 else year} {name}"
            )
        kind = self.rng.randrange(4)
        if kind == 0:
            return "bash", {"command": f"ls -la {folder}"}, "\n".join(rows)
        if kind == 1:
            return "list_files", {"path": folder}, "\n".join(inside)
        if kind == 2:
            found = [f"./{p}" for p in self.paths if p.startswith(folder)][:60]
            pattern = f"find {folder} -name '*.py' | head -60"
            return "bash", {"command": pattern}, "\n".join(found)
        return (
            "Glob",
            {"pattern": f"{folder}/**/*.py"},
            "\n".join(f"{self.root()}/{p}" for p in self.paths if p.startswith(folder)),
        )

    def grep(self) -> tuple[str, dict[str, Any], str]:
        word = self.pick(self.words)
        folder = self.pick(SOURCES).rstrip("/")
        hits = []
        for path in self.paths:
            if not path.startswith(folder):
                continue
            for n, line in enumerate(self.src.files[path].splitlines(), 1):
                if word in line:
                    hits.append(f"{path}:{n}:{line}")
        hits = hits[: self.rng.randrange(3, 80)]
        if self.rng.random() < 0.5:
            return "bash", {"command": f'grep -rn "{word}" {folder}'}, "\n".join(hits)
        return "Grep", {"pattern": word, "path": folder, "output_mode": "content"}, "\n".join(hits)

    def diff(self) -> tuple[str, dict[str, Any], str]:
        patch = self.pick(self.src.diffs)
        if len(patch) > 12_000:
            start = self.rng.randrange(len(patch) - 6000)
            patch = patch[start : start + self.rng.randrange(1500, 6000)]
        command = self.pick(("git diff", "git show HEAD", "git log -p -1", "git diff --cached"))
        return "bash", {"command": command}, patch

    def edit(self) -> tuple[str, dict[str, Any], str]:
        path = self.pick(self.code)
        _, lines = self.lines(path)
        old = "\n".join(lines[: self.rng.randrange(1, 8)])
        new = old.replace("    ", "        ", 1) + "\n"
        full = f"{self.root()}/{path}"
        kind = self.rng.randrange(3)
        if kind == 0:
            args = {"file_path": full, "old_string": old, "new_string": new}
            return "Edit", args, f"The file {full} has been updated."
        if kind == 1:
            args = {"command": "str_replace", "path": full, "old_str": old, "new_str": new}
            return "str_replace_editor", args, f"Edited {full}:\n{new}"
        return (
            "write_file",
            {"path": full, "content": "\n".join(lines)},
            f"Wrote {len(lines)} lines",
        )

    def tests(self) -> tuple[str, dict[str, Any], str]:
        path = self.pick(self.code)
        names = [
            line.split("(")[0][4:].strip()
            for line in self.src.files[path].splitlines()
            if line.startswith(("def ", "async def "))
        ] or ["main"]
        passed = self.rng.randrange(1, 200)
        failed = self.rng.randrange(0, 3)
        version = f"3.{self.rng.randrange(9, 14)}.{self.rng.randrange(12)}"
        rows = [
            "============================= test session starts ==============================",
            f"platform linux -- Python {version}, pytest-8.{self.rng.randrange(5)}.0, pluggy-1.5.0",
            f"rootdir: {self.root()}",
            f"collected {passed + failed} items",
            "",
        ]
        rows += [f"tests/test_{Path(path).stem}.py " + "." * min(passed, 60) + "F" * failed]
        if failed:
            name = self.pick(names)
            first, lines = self.lines(path)
            rows += [
                "",
                "=================================== FAILURES ===================================",
                f"{'_' * 34} test_{name} {'_' * 34}",
                "",
                *[f"    {line}" for line in lines[:12]],
                f">       assert result == expected\nE       AssertionError: assert {first} == "
                f"{first + 1}",
                "",
                f"{path}:{first}: AssertionError",
                "=========================== short test summary info ============================",
                f"FAILED tests/test_{Path(path).stem}.py::test_{name} - AssertionError",
            ]
        seconds = self.rng.random() * 20
        tail = f"{failed} failed, {passed} passed" if failed else f"{passed} passed"
        rows.append(f"========================= {tail} in {seconds:.2f}s =========================")
        command = self.pick(("python -m pytest -q", "pytest", "pytest -x tests/"))
        return "bash", {"command": f"cd {self.root()} && {command}"}, "\n".join(rows)

    def traceback(self) -> tuple[str, dict[str, Any], str]:
        frames = []
        for _ in range(self.rng.randrange(1, 6)):
            path = self.pick(self.code)
            lines = self.src.files[path].splitlines() or [""]
            n = self.rng.randrange(len(lines))
            frames.append(
                f'  File "{self.root()}/{path}", line {n + 1}, in {self.pick(self.words)}\n'
                f"    {lines[n].strip()}"
            )
        error = self.pick(
            (
                "KeyError: 'name'",
                "TypeError: 'NoneType' object is not subscriptable",
                "ValueError: invalid literal for int() with base 10: ''",
                "AttributeError: 'dict' object has no attribute 'items_'",
                "ModuleNotFoundError: No module named 'yaml'",
                "FileNotFoundError: [Errno 2] No such file or directory: 'config.json'",
                "AssertionError",
            )
        )
        text = "Traceback (most recent call last):\n" + "\n".join(frames) + "\n" + error
        script = Path(self.pick(self.code)).name
        return "bash", {"command": f"python {script}"}, text

    def shell(self) -> tuple[str, dict[str, Any], str]:
        kind = self.rng.randrange(6)
        if kind == 0:
            return (
                "bash",
                {"command": "git status"},
                (
                    'On branch main\nChanges not staged for commit:\n  (use "git add <file>..." '
                    'to update what will be committed)\n  (use "git restore <file>..." to discard '
                    "changes in working directory)\n\tmodified:   "
                    + "\n\tmodified:   ".join(self.rng.sample(self.paths, 3))
                    + '\n\nno changes added to commit (use "git add" and/or "git commit -a")'
                ),
            )
        if kind == 1:
            start = self.rng.randrange(max(1, len(self.src.log) - 20))
            return (
                "bash",
                {"command": "git log --oneline -20"},
                "\n".join(self.src.log[start : start + 20]),
            )
        if kind == 2:
            return (
                "bash",
                {"command": f"cd {self.root()} && ls"},
                "  ".join(sorted({p.split("/")[0] for p in self.paths})),
            )
        if kind == 3:
            return (
                "bash",
                {"command": "wc -l " + " ".join(self.rng.sample(self.code, 4))},
                "\n".join(
                    f"{len(self.src.files[p].splitlines()):6d} {p}"
                    for p in self.rng.sample(self.code, 4)
                ),
            )
        if kind == 4:
            command = self.pick(("cd build && make", "mkdir -p out", "touch notes.txt"))
            return "bash", {"command": command}, ""
        command = self.pick(("python3 --version", "which python", "pip list | head"))
        return (
            "bash",
            {"command": command},
            self.pick(
                (
                    f"Python 3.{self.rng.randrange(9, 14)}.{self.rng.randrange(10)}",
                    "/usr/bin/python3",
                )
            ),
        )

    def doc(self) -> tuple[str, dict[str, Any], str]:
        path = self.pick([p for p in self.paths if p.endswith(".md")] or self.paths)
        _, lines = self.lines(path)
        url = f"https://example.com/docs/{Path(path).stem}"
        if self.rng.random() < 0.5:
            return "fetch", {"url": url}, "\n".join(lines)
        return (
            "Task",
            {"description": "Summarize the docs", "prompt": f"Read {path}"},
            "\n".join(lines),
        )

    def api(self) -> tuple[str, dict[str, Any], str]:
        value, name, args = generated_json(self.rng)
        if self.rng.random() < 0.5:
            return name, args, json.dumps(value)
        return name, args, json.dumps(value, indent=self.pick((None, 2)), ensure_ascii=False)

    def one(self) -> tuple[str, dict[str, Any], str, bool]:
        make: list[tuple[float, Callable[[], tuple[str, dict[str, Any], str]]]] = [
            (0.22, self.read),
            (0.1, self.listing),
            (0.1, self.grep),
            (0.08, self.diff),
            (0.1, self.edit),
            (0.08, self.tests),
            (0.06, self.traceback),
            (0.1, self.shell),
            (0.06, self.doc),
            (0.1, self.api),
        ]
        roll, total, action = self.rng.random(), 0.0, make[-1][1]
        for weight, candidate in make:
            total += weight
            if roll < total:
                action = candidate
                break
        name, args, output = action()
        return name, args, output, action == self.traceback and self.rng.random() < 0.3


_FIRST: Final = ("Ada", "Grace", "Alan", "Linus", "Ken", "Barbara", "Edsger", "Donald", "Frances")
_LAST: Final = ("Lovelace", "Hopper", "Turing", "Torvalds", "Thompson", "Liskov", "Knuth", "Allen")
_CITIES: Final = ("Lyon", "Osaka", "Denver", "Porto", "Leeds", "Austin", "Graz", "Perth")
_STATUS: Final = ("open", "closed", "pending", "active", "shipped", "cancelled", "draft")


def generated_json(rng: random.Random) -> tuple[Any, str, dict[str, Any]]:
    """A JSON answer of a made-up API (users, orders, issues, metrics), its tool and args."""

    def person() -> dict[str, Any]:
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        return {
            "id": f"{first.lower()}_{last.lower()}_{rng.randrange(10_000)}",
            "name": {"first_name": first, "last_name": last},
            "email": f"{first.lower()}.{last.lower()}{rng.randrange(100)}@example.org",
            "city": rng.choice(_CITIES),
            "created_at": f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T"
            f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z",
        }

    kind = rng.randrange(4)
    if kind == 0:
        value = person()
        return value, "get_user", {"user_id": value["id"]}
    if kind == 1:
        items: list[dict[str, Any]] = [
            {
                "sku": f"SKU-{rng.randrange(10**5):05d}",
                "quantity": rng.randrange(1, 5),
                "price": round(rng.random() * 200, 2),
            }
            for _ in range(rng.randrange(1, 6))
        ]
        order = {
            "order_id": f"#{rng.randrange(10**6)}",
            "status": rng.choice(_STATUS),
            "customer": person(),
            "items": items,
            "total": round(sum(i["price"] for i in items), 2),
        }
        return order, "get_order", {"order_id": order["order_id"]}
    if kind == 2:
        issues = [
            {
                "number": rng.randrange(1, 5000),
                "title": f"{rng.choice(_STATUS)} state not saved",
                "state": rng.choice(("open", "closed")),
                "labels": rng.sample(["bug", "docs", "ui", "api"], 2),
                "user": {"login": person()["id"]},
                "comments": rng.randrange(20),
            }
            for _ in range(rng.randrange(1, 8))
        ]
        return issues, "list_issues", {"repo": "example/app", "state": "all"}
    points = [
        {"t": 1_700_000_000 + 60 * n, "value": round(rng.random() * 100, 3)}
        for n in range(rng.randrange(5, 60))
    ]
    return {"metric": "latency_ms", "points": points}, "query_metrics", {"metric": "latency_ms"}


# --- as clients send them ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Writer:
    """How one client writes JSON: compact or with Python's spaces, keys as given or sorted
    (as Go's encoding/json writes maps, or `sort_keys=True`)."""

    spaced: bool
    sort_keys: bool

    def __call__(self, value: Any) -> str:
        separators = (", ", ": ") if self.spaced else (",", ":")
        return json.dumps(
            value, separators=separators, sort_keys=self.sort_keys, ensure_ascii=self.spaced
        )


def _writer(rng: random.Random) -> _Writer:
    return _Writer(spaced=rng.random() < 0.4, sort_keys=rng.random() < 0.35)


def payload(rng: random.Random, args: dict[str, Any], output: str) -> Payload:
    """The texts a client would write for these arguments and this output: arguments as an
    object or as the JSON text of one (OpenAI's `arguments`), written compact or as Python's
    `json.dumps` does; the output as a string, content blocks or an MCP result."""
    dump = _writer(rng).__call__
    args_text = dump(dump(args)) if rng.random() < 0.5 else dump(args)
    shape = rng.random()
    if shape < 0.6:
        result: Any = output
    elif shape < 0.85:
        result = [{"type": "text", "text": output}]
    else:
        result = {"content": [{"type": "text", "text": output}], "isError": False}
    return Payload(args_text, dump(result))


def invocations(src: Source, count: int, seed: int = SEED) -> Iterator[tuple[str, bool, Payload]]:
    rng = random.Random(seed)
    tools = Tools(src, rng)
    for _ in range(count):
        name, args, output, error = tools.one()
        yield name, error, payload(rng, args, output)


def record_samples(src: Source, count: int = SAMPLES, seed: int = SEED) -> list[bytes]:
    """Record bodies (`record.body`) of generated invocations, what records compress."""
    return [
        record.body(name, error, p, len(p.args) + len(p.result) + 40, CREATED)
        for name, error, p in invocations(src, count, seed)
    ]


def _prose(tools: Tools) -> str:
    path = tools.pick([p for p in tools.paths if p.endswith(".md")])
    _, lines = tools.lines(path)
    text = " ".join(line for line in lines[: tools.rng.randrange(1, 12)] if line.strip())
    return text or "Let me look at that."


def conversation(src: Source, rng: random.Random, fmt: str, turns: int) -> list[Any]:
    """A made-up agent conversation in `fmt` (openai-chat or anthropic)."""
    tools = Tools(src, rng)
    messages: list[Any] = []
    if fmt == "openai-chat":
        messages.append({"role": "system", "content": _prose(tools)})
    messages.append({"role": "user", "content": _prose(tools)})
    for n in range(turns):
        name, args, output, error = tools.one()
        call = (
            f"call_{rng.getrandbits(96):024x}"
            if fmt == "openai-chat"
            else f"toolu_{rng.getrandbits(96):024x}"
        )
        thought = _prose(tools) if rng.random() < 0.7 else None
        if fmt == "openai-chat":
            messages.append(
                {
                    "role": "assistant",
                    "content": thought,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call, "content": output})
        else:
            blocks: list[Any] = [{"type": "text", "text": thought}] if thought else []
            blocks.append({"type": "tool_use", "id": call, "name": name, "input": args})
            messages.append({"role": "assistant", "content": blocks})
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call, "content": output}
            if error:
                result["is_error"] = True
            messages.append({"role": "user", "content": [result]})
        if n % 5 == 4:
            messages.append({"role": "assistant", "content": _prose(tools)})
            messages.append({"role": "user", "content": _prose(tools)})
    return messages


def chain_form(messages: list[Any], fmt: Format) -> list[Any]:
    """`messages` with every complete invocation as its ref marker: how recipes hold the
    messages a registry keeps (the payloads stored once, apart)."""
    found = formats.scan(messages, fmt)
    refs = {pair.key: str(digest_of(pair.invocation()).ref) for pair in found.complete}
    return formats.replace(messages, found, refs) if refs else list(messages)


def message_samples(src: Source, count: int = SAMPLES, seed: int = SEED) -> list[bytes]:
    """History messages in chain form (payloads as markers) as clients write them."""
    rng = random.Random(seed + 1)
    samples: list[bytes] = []
    while len(samples) < count:
        fmt = formats.get(rng.choice(("openai-chat", "anthropic")))
        messages = conversation(src, rng, fmt.name, rng.randrange(3, 25))
        form = chain_form(messages, fmt)
        write = _writer(rng)
        samples.extend(write(message).encode() for message in form)
    return samples[:count]


def train(samples: list[bytes], dict_id: int, size: int = DICT_SIZE) -> bytes:
    """A zstd dictionary with id `dict_id` (deterministic for the same samples)."""
    trained = zstandard.train_dictionary(
        size, list[Any](samples), dict_id=dict_id, k=1024, d=8, level=3, threads=1
    )
    return bytes(trained.as_bytes())


def _usage(url: str, values: list[bytes], kind: str) -> int:
    """Sum of Redis `MEMORY USAGE` over `values` stored as keys of `kind` with a lifetime."""
    client = redis.Redis.from_url(url)
    client.flushall()
    pipe = client.pipeline(transaction=False)
    keys = [f"tr:local:{kind}:{n:026d}" for n in range(len(values))]
    for key, value in zip(keys, values, strict=True):
        pipe.set(key, value, ex=86_400)
    pipe.execute()
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    used = sum(int(n or 0) for n in pipe.execute())
    client.flushall()
    client.close()
    return used


def _records(
    bodies: list[bytes], digests: list[bytes], compressor: Any, threshold: int = THRESHOLD
) -> list[bytes]:
    """Version 3 records of `bodies` as `record.encode` writes them."""
    out = []
    for body, digest in zip(bodies, digests, strict=True):
        packed, flags = body, 0
        if len(body) >= threshold and compressor is not None:
            candidate = compressor.compress(body)
            if len(candidate) < len(body):
                packed, flags = candidate, 1
        out.append(bytes((record.VERSION,)) + digest + bytes((flags,)) + packed)
    return out


def measure(found: list[Trace]) -> Section:
    """Redis bytes per payload byte of the traces' records, and of their history messages,
    with each dictionary choice, on a real engine."""
    from loadtests.memory import invocations

    src = source(TRAINED_AT)
    rows: list[list[str]] = []
    items = [item for group in invocations(found).values() for item in group]
    seen: dict[bytes, tuple[bytes, int, bytes]] = {}
    for item in items:
        digest = invocation_digest(
            item["name"], item["args"], item["result"], item.get("isError", False)
        )
        text = record.payload_of(item)
        body = record.body(
            item["name"], bool(item.get("isError", False)), text, digest.size, CREATED
        )
        seen.setdefault(digest.sha256, (body, digest.size, digest.sha256))
    bodies = [b for b, _, _ in seen.values()]
    digests = [d for _, _, d in seen.values()]
    payload = sum(size for _, size, _ in seen.values())
    neutral = zstandard.ZstdCompressionDict(train(record_samples(src), 0))
    upper = zstandard.ZstdCompressionDict(train(bodies, 0))
    messages = [dumps_json(m) for m in _history_messages(found)]
    message_bytes = sum(map(len, messages))
    neutral_messages = zstandard.ZstdCompressionDict(train(message_samples(src), 0))
    with tempfile.TemporaryDirectory(prefix="toolref-dict-") as folder:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        engine.start()
        try:
            for label, level, dictionary, threshold in (
                ("no dictionary (as before)", 3, None, 512),
                ("shipped dictionary", 3, neutral, 512),
                ("shipped dictionary", 3, neutral, THRESHOLD),
                ("shipped dictionary", 9, neutral, THRESHOLD),
                ("shipped dictionary", 19, neutral, THRESHOLD),
                ("trained on these traces (never shipped)", 3, upper, THRESHOLD),
            ):
                compressor = zstandard.ZstdCompressor(level=level, dict_data=dictionary)
                values = _records(bodies, digests, compressor, threshold)
                used = _usage(engine.url, values, "i")
                what = f"records, {label}, compressed from {threshold} bytes"
                rows.append(
                    [what, str(level), f"{payload:,}", f"{used:,}", f"{used / payload:.3f}"]
                )
            tenant_row = _per_tenant(engine.url, found, neutral)
            rows.extend(tenant_row)
            for label, dictionary in (
                ("history messages, no dictionary", None),
                ("history messages, shipped dictionary", neutral_messages),
            ):
                compressor = zstandard.ZstdCompressor(level=3, dict_data=dictionary)
                packed = [compressor.compress(m) for m in messages]
                used = _usage(engine.url, packed, "m")
                rows.append(
                    [label, "3", f"{message_bytes:,}", f"{used:,}", f"{used / message_bytes:.3f}"]
                )
        finally:
            engine.stop()
    return Section(
        title="Dictionaries",
        intro=(
            "Sum of Redis `MEMORY USAGE` per payload byte for the distinct invocations of the "
            "shared traces stored as version 3 records (and for their history messages in "
            "chain form, per byte of their text), with each zstd dictionary choice. The "
            f"shipped dictionaries are trained on the neutral corpus of commit {TRAINED_AT}; "
            "`per tenant` trains on the first half of a long trace's records and stores the "
            "second half (a dictionary per tenant, trained on its own earlier records)."
        ),
        header=["what", "level", "payload bytes", "Redis bytes", "per payload byte"],
        rows=rows,
    )


def _per_tenant(url: str, found: list[Trace], neutral: Any) -> list[list[str]]:
    """The second half of each long trace's records, with the shipped dictionary and with
    one trained on the first half (the same tenant's earlier records)."""
    from loadtests.memory import invocations

    totals = {"shipped": 0, "tenant": 0}
    payload = 0
    for group in invocations(found).values():
        distinct: dict[bytes, tuple[bytes, int]] = {}
        for item in group:
            digest = invocation_digest(
                item["name"], item["args"], item["result"], item.get("isError", False)
            )
            body = record.body(
                item["name"],
                bool(item.get("isError", False)),
                record.payload_of(item),
                digest.size,
                CREATED,
            )
            distinct.setdefault(digest.sha256, (body, digest.size))
        if len(distinct) < 40:
            continue
        entries = list(distinct.items())
        half = len(entries) // 2
        first = [body for _, (body, _) in entries[:half]]
        second = entries[half:]
        payload += sum(size for _, (_, size) in second)
        own = zstandard.ZstdCompressionDict(train(first, 0, 32_768))
        for label, dictionary in (("shipped", neutral), ("tenant", own)):
            compressor = zstandard.ZstdCompressor(level=3, dict_data=dictionary)
            values = _records([b for _, (b, _) in second], [d for d, _ in second], compressor)
            totals[label] += _usage(url, values, "i")
    return [
        [
            f"records, second halves of the long traces: {label} dictionary",
            "3",
            f"{payload:,}",
            f"{used:,}",
            f"{used / payload:.3f}",
        ]
        for label, used in (("shipped", totals["shipped"]), ("per-tenant", totals["tenant"]))
    ]


def _history_messages(found: list[Trace]) -> list[Any]:
    """The distinct messages of every trace in chain form, as a history stores them."""
    from loadtests.bandwidth import on_the_wire

    out: dict[bytes, Any] = {}
    for trace in found:
        fmt = formats.detect(trace.messages)
        for message in chain_form([on_the_wire(m, fmt.name) for m in trace.messages], fmt):
            out.setdefault(dumps_json(message), message)
    return list(out.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.dictionaries")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("train", help="write the next dictionaries into the package")
    make.add_argument("--commit", default="HEAD", help="the repository text to train on")
    make.add_argument("--number", type=int, required=True, help="the new dictionaries' number")
    sub.add_parser("measure", help="compare dictionaries on the shared traces")
    args = parser.parse_args(argv)
    if args.command == "train":
        src = source(args.commit)
        for kind, samples in (
            ("records", record_samples(src)),
            ("messages", message_samples(src)),
        ):
            shipped = dictionaries.Shipped(kind, args.number)  # type: ignore[arg-type]
            path = OUT / shipped.file
            path.write_bytes(train(samples, shipped.dict_id))
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size:,} bytes, id {shipped.dict_id}")
        return 0
    print(measure(load()).markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
