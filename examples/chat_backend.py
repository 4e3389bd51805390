"""A chat backend using `ToolRefMiddleware`, with a scripted stand-in for the LLM.

POST /chat takes `{"messages": [...]}` (OpenAI chat format) and answers `{"messages": [...]}`
with the turn's new messages: the "model" calls tools over real files (read_file, list_dir,
grep), the backend runs them, and the model answers. The middleware restores the edits (or
hydrates the refs) clients send, so this code only ever sees full messages. GET /seen lists
a digest of every conversation the backend received, so a test can check it saw the same
thing with the SDK and without.

    python examples/chat_backend.py --registry http://127.0.0.1:8750 --port 8000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from toolref import AsyncRegistryClient, ToolRefMiddleware, canonical_json

ROOT = Path(__file__).resolve().parents[1]


class Tools:
    """Real tools over a folder, as an agent would have them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, relative: str) -> Path:
        path = (self.root / relative).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"{relative} is outside the workspace")
        return path

    def read_file(self, path: str) -> str:
        return self._path(path).read_text(errors="replace")

    def list_dir(self, path: str) -> str:
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in self._path(path).iterdir())
        return "\n".join(entries)

    def grep(self, pattern: str, path: str) -> str:
        hits = []
        for file in sorted(self._path(path).rglob("*.py")):
            for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                if re.search(pattern, line):
                    hits.append(f"{file.relative_to(self.root)}:{number}: {line.strip()}")
        return "\n".join(hits[:200])

    def run(self, name: str, arguments: str) -> str:
        args = json.loads(arguments)
        try:
            result: str = getattr(self, name)(**args)
        except (OSError, ValueError) as exc:
            result = f"error: {exc}"
        return result


def scripted_model(request: str) -> tuple[str, dict[str, Any]]:
    """The tool call a model would make for a user request: `read X`, `list X`, `grep P in X`."""
    words = request.split()
    if words[0] == "read":
        return "read_file", {"path": words[1]}
    if words[0] == "list":
        return "list_dir", {"path": words[1]}
    return "grep", {"pattern": words[1], "path": words[3]}


def create_backend(registry: AsyncRegistryClient, workspace: Path = ROOT) -> Starlette:
    tools = Tools(workspace)
    seen: list[str] = []

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body["messages"]
        seen.append(hashlib.sha256(canonical_json(messages)).hexdigest())
        turn = sum(1 for m in messages if m.get("role") == "user")
        user = messages[-1]["content"]
        name, args = scripted_model(user)
        call_id = f"call_{turn:03d}"
        arguments = json.dumps(args)
        reply = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": tools.run(name, arguments)},
            {"role": "assistant", "content": f"Done: {name} for '{user}'."},
        ]
        return JSONResponse({"messages": reply})

    async def seen_digests(request: Request) -> JSONResponse:
        return JSONResponse({"seen": seen})

    app = Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/seen", seen_digests, methods=["GET"]),
        ]
    )
    app.add_middleware(ToolRefMiddleware, registry=registry)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registry", default=os.environ.get("TOOLREF_URL", "http://127.0.0.1:8750")
    )
    parser.add_argument("--api-key", default=os.environ.get("TOOLREF_KEY"))
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    import uvicorn

    registry = AsyncRegistryClient(args.registry, api_key=args.api_key)
    uvicorn.run(create_backend(registry), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
