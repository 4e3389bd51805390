"""The toolref relay: agents change their base URL to a loopback port, and their LLM
requests reach the provider through a toolref gateway as edits of what it holds. See
docs/relay.md, and `toolref_relay.app` for the behaviour.

The SDK does not depend on the relay's server parts: `toolref relay` (`toolref_relay.cli`)
needs the `relay` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolref.kit.lazy import exports

if TYPE_CHECKING:
    from toolref.wire.headers import KEY_HEADER, SAVINGS_HEADER, SWITCH_HEADER, SWITCHED_FROM_HEADER
    from toolref.wire.shapes import ErrorReply, Provider, error_reply, provider_of
    from toolref_relay.app import Relay
    from toolref_relay.calls import Call
    from toolref_relay.config import RelayConfig
    from toolref_relay.ledger import (
        Tally,
        Totals,
        Upload,
        Who,
        savings_header,
        size,
        summary,
        turn_line,
        who,
    )
    from toolref_relay.switch import Switchboard, conversation_of

# Each name: the module it is read from, at its first use (`__getattr__`).
_LAZY: dict[str, str] = {
    "KEY_HEADER": "toolref.wire.headers",
    "SAVINGS_HEADER": "toolref.wire.headers",
    "SWITCH_HEADER": "toolref.wire.headers",
    "SWITCHED_FROM_HEADER": "toolref.wire.headers",
    "ErrorReply": "toolref.wire.shapes",
    "Provider": "toolref.wire.shapes",
    "error_reply": "toolref.wire.shapes",
    "provider_of": "toolref.wire.shapes",
    "Relay": "toolref_relay.app",
    "Call": "toolref_relay.calls",
    "RelayConfig": "toolref_relay.config",
    "Tally": "toolref_relay.ledger",
    "Totals": "toolref_relay.ledger",
    "Upload": "toolref_relay.ledger",
    "Who": "toolref_relay.ledger",
    "savings_header": "toolref_relay.ledger",
    "size": "toolref_relay.ledger",
    "summary": "toolref_relay.ledger",
    "turn_line": "toolref_relay.ledger",
    "who": "toolref_relay.ledger",
    "Switchboard": "toolref_relay.switch",
    "conversation_of": "toolref_relay.switch",
}

__all__ = [
    "KEY_HEADER",
    "SAVINGS_HEADER",
    "SWITCHED_FROM_HEADER",
    "SWITCH_HEADER",
    "Call",
    "ErrorReply",
    "Provider",
    "Relay",
    "RelayConfig",
    "Switchboard",
    "Tally",
    "Totals",
    "Upload",
    "Who",
    "conversation_of",
    "error_reply",
    "provider_of",
    "savings_header",
    "size",
    "summary",
    "turn_line",
    "who",
]


if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error
    __getattr__, __dir__ = exports(__name__, _LAZY, globals())
