"""toolref_server: the Starlette registry service.

`create_app` and `Settings` load on first use, so that `toolref-server` (installed without
the `server` extra, say) can start and say what is missing instead of failing on import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolref_server.app import create_app
    from toolref_server.settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from toolref_server.app import create_app

        return create_app
    if name == "Settings":
        from toolref_server.settings import Settings

        return Settings
    raise AttributeError(f"module 'toolref_server' has no attribute {name!r}")
