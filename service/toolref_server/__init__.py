"""toolref_server: the Starlette registry service."""

from toolref_server.app import create_app
from toolref_server.settings import Settings

__all__ = ["Settings", "create_app"]
