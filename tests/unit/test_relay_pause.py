"""The relay's pause of edits while the gateway's store is down (`toolref_relay.as_edit`,
`toolref.sending.pause`): turns in flight at once that the gateway answers 503
`store-unavailable` together are one outage, a pause of 1 s, as one refusal is; before,
each doubled it (n turns at once: 2^(n-1) s, every turn sent whole meanwhile)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from toolref.sending.entries import Entries
from toolref.sending.pause import FIRST, Pause
from toolref_relay import as_edit
from toolref_relay.calls import Call


class Link(SimpleNamespace):
    """What `as_edit` reads of a `GatewayLink`."""

    async def takes_edits(self) -> bool:
        return True

    def extensions(self, call: Call, url: str) -> dict[str, Any]:
        return {}


async def test_turns_refused_together_pause_edits_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gate, all_in = asyncio.Event(), asyncio.Event()
    started = 0

    async def refused(*args: Any, **kwargs: Any) -> str:
        nonlocal started
        started += 1
        if started == 4:
            all_in.set()
        await gate.wait()  # every turn in flight before the first answer comes
        return as_edit.STORE_DOWN

    monkeypatch.setattr(as_edit, "send_edit", refused)
    lines: list[str] = []
    link = Link(
        paused=Pause(),
        entries=Entries(),
        capabilities=SimpleNamespace(version=5),
        config=SimpleNamespace(gateway="http://gateway", key=None, context_editing=None),
        report=lines.append,
    )
    call = Call("POST", "anthropic", "/v1/messages", "", [], "anthropic")
    client = SimpleNamespace(editor=SimpleNamespace(version=0))
    turns = [
        asyncio.create_task(
            as_edit.as_edit(
                link,  # type: ignore[arg-type]
                call,
                client,  # type: ignore[arg-type]
                url="http://gateway/llm/anthropic/v1/messages",
                body=b"{}",
                as_sent=False,
                moved=None,
                meter=None,  # type: ignore[arg-type]
            )
        )
        for _ in range(4)
    ]
    await asyncio.wait_for(all_in.wait(), 5)
    gate.set()
    assert await asyncio.gather(*turns) == [None] * 4  # each goes as it came
    assert link.paused.length == FIRST  # one outage: 1 s, not 8
    assert link.paused.begun == 1
