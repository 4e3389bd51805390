"""The toolref relay: agents change their base URL to a loopback port, and their LLM
requests reach the provider through a toolref gateway as edits of what it holds. See
docs/relay.md, and `toolref_relay.app` for the behaviour.

The SDK does not depend on the relay's server parts: `toolref relay` (`toolref_relay.cli`)
needs the `relay` extra.
"""

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
