"""Agent Client Protocol (v1) tool-call notifications that carry only what changed."""

from __future__ import annotations

from toolref.acp.builder import UpdateBuilder
from toolref.acp.content import diff_content, location, terminal_content, text_content
from toolref.acp.kind import ToolKind, tool_kind
from toolref.acp.plan import plan_entries
from toolref.acp.state import ToolCallState, ToolCallStatus
from toolref.acp.title import locations_for, title_for
from toolref.acp.tracker import Notification, ToolCallTracker, jsonrpc

__all__ = [
    "Notification",
    "ToolCallState",
    "ToolCallStatus",
    "ToolCallTracker",
    "ToolKind",
    "UpdateBuilder",
    "diff_content",
    "jsonrpc",
    "location",
    "locations_for",
    "plan_entries",
    "terminal_content",
    "text_content",
    "title_for",
    "tool_kind",
]
