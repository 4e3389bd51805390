"""Portkey's AI gateway (Node), the gateway-speed bench's other gateway: a pinned npm install
under `.toolref/portkey`, and how to start it and call it against the bench's fake upstream.

Portkey speaks OpenAI Chat Completions: its `openai` provider with a custom host
(`x-portkey-custom-host`, the fake upstream's `/v1`) sends each request on there. The bench's
small request (`model`, `max_tokens`, one user message) is a valid Chat Completions body as
it is, so Portkey gets the same bytes as every other system, at `/v1/chat/completions`.

`@hono/node-server`, the HTTP server Portkey runs on under Node, is pinned beside it and
patched once installed (Portkey-AI/gateway#1389): after 1.14.2 its light `Response`, built
from another `Response` (as Portkey builds each streamed answer from the upstream's), keeps
that one's `Headers`, which are immutable, where the standard `Response` copies them; Portkey
then adds its headers, and every streamed answer fails ("TypeError: immutable", a 500). The
patch copies them, as the standard does, in that case only (plain answers work without it).

    python -m loadtests.portkey   # install (idempotent), then say what is installed
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Final

from loadtests.systems import AFTER, ROOT, Launcher, Proc, free_port

PACKAGE: Final = "@portkey-ai/gateway"
VERSION: Final = "1.15.2"
SERVER_PACKAGE: Final = "@hono/node-server"
SERVER_VERSION: Final = "1.19.19"  # what `npm install @portkey-ai/gateway@1.15.2` resolved
PREFIX: Final = ROOT / ".toolref" / "portkey"
START: Final = PREFIX / "node_modules" / PACKAGE / "build" / "start-server.js"
PATH: Final = "/v1/chat/completions"

# In each build of @hono/node-server's `Response` constructor (every dist/*.js and *.mjs
# bundles one): the headers of a `Response` given as `init` are copied, not shared.
_SHARED: Final = "headers || init?.headers]"
_COPIED: Final = (
    "headers || (init instanceof GlobalResponse ? new Headers(init.headers) : init?.headers)]"
)


class Unavailable(RuntimeError):
    """Portkey cannot be installed or run here (the message says why)."""


def headers(upstream: str) -> dict[str, str]:
    """A Chat Completions request's headers to Portkey, sent on to `upstream` (its URL)."""
    return {
        "content-type": "application/json",
        "authorization": "Bearer sk-bench",
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"{upstream}/v1",
    }


def _version(package: str) -> str | None:
    manifest = PREFIX / "node_modules" / package / "package.json"
    try:
        found = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return found if isinstance(found, str) else None


def install() -> str:
    """Install the pinned Portkey and `@hono/node-server` (nothing when they are there),
    patch the latter; what runs, for the report. Raises `Unavailable`."""
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        raise Unavailable("node or npm is not on PATH")
    pinned = {PACKAGE: VERSION, SERVER_PACKAGE: SERVER_VERSION}
    if any(_version(package) != version for package, version in pinned.items()):
        PREFIX.mkdir(parents=True, exist_ok=True)
        command = ["npm", "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund"]
        command += ["--loglevel=error", *(f"{p}@{v}" for p, v in pinned.items())]
        try:
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"npm install failed: {exc}") from exc
        wrong = [p for p, v in pinned.items() if _version(p) != v]
        if done.returncode != 0 or wrong:
            raise Unavailable(
                f"npm install {' '.join(command[-2:])} failed ({done.returncode}): "
                f"{done.stderr.strip()[-500:]}"
            )
    patched = patch()
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"`node --version` failed: {exc}") from exc
    return (
        f"`{PACKAGE}` {VERSION} on Node {version}, its `{SERVER_PACKAGE}` {SERVER_VERSION} "
        f"{'patched' if patched else 'NOT patched (its code changed)'} (Portkey-AI/gateway#1389: "
        "streamed answers fail unpatched; `loadtests/portkey.py`)"
    )


def patch() -> bool:
    """Copy the headers of a `Response` given as another's `init` in every build of
    `@hono/node-server` (idempotent); False when some build has neither form of the line."""
    dist = PREFIX / "node_modules" / SERVER_PACKAGE / "dist"
    builds = [*dist.glob("*.js"), *dist.glob("*.mjs")]
    done = True
    for build in builds:
        text = build.read_text()
        if _SHARED in text:
            build.write_text(text.replace(_SHARED, _COPIED))
        elif "class _Response" in text and _COPIED not in text:
            done = False
    return done and bool(builds)


def start(launcher: Launcher) -> Proc:
    """Portkey's server (installed): `node build/start-server.js --port=P --headless` (no
    browser console); `launcher.wait()` until it listens."""
    port = free_port()
    command = [shutil.which("node") or "node", str(START), f"--port={port}", "--headless"]
    return launcher.start("portkey", command, AFTER.env(), PREFIX, port=port)


def main() -> int:
    print(install())
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "portkey")
    raise SystemExit(main())
