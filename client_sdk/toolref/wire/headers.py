"""Every header toolref speaks, named once. Names are as sent (HTTP compares them in any case;
ASGI hands them over lowercased: `asgi_name`).

Between a client and a backend or the registry:
- `Toolref-Protocol`: the version asked for and the version used (`toolref.wire.protocol`).
- `Toolref-History`: in the answer to an edit (`Content-Type: application/vnd.toolref.edit`,
  `toolref.edits.wire.MEDIA_TYPE`) or to a request offering edits, the recipe kept
  (`tb_...`): the base of the next edit. (As a request header, with `Toolref-Dictionary` and
  `Toolref-Checkpoint`, it was the history-ref protocol, retired in 0.3: `RETIRED_HEADERS`.)
- `Toolref-References`: the refs of the payloads a client sent in full (JSON, ASCII).
- `Toolref-Registration`: on a hydrate's answer, `skipped; quota=storedBytes` when the
  payloads it carried in full were not registered (the tenant's stored-bytes quota is
  used up): the messages are answered in full all the same, and those calls get no ref.
- `Toolref-Held`: on `POST /v1/edits:apply` asking for the request as an edit (`Accept:
  application/vnd.toolref.edit`), the recipe (`tb_...`) whose segments the caller holds:
  when it is the edit's base, the answer keeps ranges of it and carries only the rest.

Between a relay and a gateway:
- `Toolref-Key`: the tenant's toolref key (provider credentials keep their own headers).
- `Toolref-Switch`: switch the relay's upstream (needs the relay's control token).
- `Toolref-Switched-From`: `<previous upstream>[; at=<messages before the switch>]`.
- `Toolref-Savings`: `raw=<bytes>, wire=<bytes>, ratio=<raw/wire>` of the request answered.
- `Toolref-Edits`: on a request to an LLM endpoint sent as it is, `2`: the sender sends
  edits (`application/vnd.toolref.edit`, that version or lower) to a receiver that reads
  them; on the answer of a receiver that does, the highest version it reads. A sender that
  saw it sends that endpoint's later LLM requests as edits.
- `Toolref-Channel`: beside `Toolref-Edits` on the answer of a receiver that serves a
  channel (the gateway; a backend's `ToolRefMiddleware` given `channel_path`), the path of
  its WebSocket on the same origin (`/v1/channel`), on the answer to an offer and to
  every edit: the sender may send its turns there (`toolref.websocket.channel`) instead
  of one HTTP request each; a receiver's answer naming none says it serves none (any
  more). `busy` on a channel turn's 503: no room for the turn, nothing done with it.
- `Toolref-Frames`: on a WebSocket upgrade, the messages that follow are
  `toolref.websocket.frames`: `2`, each text message an edit of the one before it, its new
  segments each compressed alone (size-guarded); `1`, each compressed against the one before
  it (a gateway that reads no more, or a relay run with `--no-size-guard`).

Between any client and the gateway (context editing, docs/context-editing.md):
- `Toolref-Context-Editing`: on a request, `on` asks for old tool results to be replaced by
  their summaries, `off` refuses it (within the operator's policy; none: the policy's).
- `Toolref-Context`: on the answer of a request the gateway edited, `cleared=<results
  replaced>; batches=<n>; rewrote=<1 when this turn replaced new ones: the provider's prompt
  cache is written again>; tokens=<estimated input tokens as sent>; saved=<estimated
  tokens saved>`; the same `saved` is in `Toolref-Savings` as `tokens-saved=<n>`.
"""

from __future__ import annotations

from typing import Final

PROTOCOL_HEADER: Final = "Toolref-Protocol"
HISTORY_HEADER: Final = "Toolref-History"
REFERENCES_HEADER: Final = "Toolref-References"
REGISTRATION_HEADER: Final = "Toolref-Registration"
KEY_HEADER: Final = "Toolref-Key"
SWITCH_HEADER: Final = "Toolref-Switch"
SWITCHED_FROM_HEADER: Final = "Toolref-Switched-From"
SAVINGS_HEADER: Final = "Toolref-Savings"
EDITS_HEADER: Final = "Toolref-Edits"
CHANNEL_HEADER: Final = "Toolref-Channel"
HELD_HEADER: Final = "Toolref-Held"
FRAMES_HEADER: Final = "Toolref-Frames"
CONTEXT_EDITING_HEADER: Final = "Toolref-Context-Editing"
CONTEXT_HEADER: Final = "Toolref-Context"
FRAMES_VERSION: Final = "2"  # what a relay sends by default: size-guarded edits
FRAMES_VERSIONS: Final = ("1", "2")
# Request headers of the history-ref protocol, retired in 0.3 (edits replace it): a request
# sending one is refused (400 `history-refs-retired`) naming the upgrade.
RETIRED_HEADERS: Final = ("Toolref-History", "Toolref-Dictionary", "Toolref-Checkpoint")

TOOLREF_PREFIX: Final = "toolref-"  # every header above, lowercased, starts with it


def asgi_name(header: str) -> bytes:
    """`header` as ASGI hands it over: lowercase latin-1 bytes."""
    return header.lower().encode("latin-1")
