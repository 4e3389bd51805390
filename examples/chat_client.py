"""A client app holding a 30-turn conversation with `chat_backend.py` through the SDK.

Each turn resends the whole history, as chat clients do. With the SDK, once the backend says
it reads edits, each request travels as an edit of the one before (only what changed);
without, everything travels in full. It prints the bytes uploaded both ways ("with refs":
through the SDK).

    python examples/chat_client.py --backend http://127.0.0.1:8000 --turns 30
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx

from toolref import ToolReferenceManager

REQUESTS = [
    "read client_sdk/toolref/wire/canonical.py",
    "list client_sdk/toolref",
    "read client_sdk/toolref/registry/client.py",
    "grep def in client_sdk/toolref/formats",
    "read client_sdk/toolref/sending/manager.py",
    "read service/toolref_server/storage/store.py",
    "list service/toolref_server",
    "read service/toolref_server/http/codec.py",
    "grep class in service/toolref_server",
    "read client_sdk/toolref/receiving/middleware.py",
]


def converse(
    http: httpx.Client, turns: int, manager: ToolReferenceManager | None
) -> tuple[list[dict[str, Any]], int]:
    """Hold the conversation; return its history and the request bytes uploaded."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a code reader."}]
    uploaded = 0
    for turn in range(turns):
        history.append({"role": "user", "content": REQUESTS[turn % len(REQUESTS)]})
        if manager is None:
            response = http.post("/chat", json={"messages": history})
            uploaded += len(response.request.content)
        else:
            sent_before = manager.savings.sent_bytes
            response = manager.post(http, "/chat", json={"messages": history})
            uploaded += manager.savings.sent_bytes - sent_before
        response.raise_for_status()
        history.extend(response.json()["messages"])
    return history, uploaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="http://127.0.0.1:8000")
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    with httpx.Client(base_url=args.backend, timeout=30) as http:
        _, without = converse(http, args.turns, None)
        manager = ToolReferenceManager()
        _, with_refs = converse(http, args.turns, manager)
    print(f"turns: {args.turns}")
    print(f"uploaded without refs: {without:,} bytes")
    print(f"uploaded with refs:    {with_refs:,} bytes")
    print(f"saving: {without / with_refs:.1f}x fewer bytes")


if __name__ == "__main__":
    main()
