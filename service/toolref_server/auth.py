"""API keys to tenants: `Authorization: Bearer <key>`, keys configured as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import HTTPConnection

from toolref.errors import AuthenticationError
from toolref_server.settings import LOCAL_TENANT, Settings


class Authenticator:
    """Maps a request to its tenant, or raises `AuthenticationError`."""

    def __init__(self, settings: Settings) -> None:
        self._hashes = [(bytes.fromhex(h), tenant) for h, tenant in settings.key_hashes.items()]
        self.open = not self._hashes  # loopback with no keys: one local tenant

    def tenant_for(self, request: HTTPConnection) -> str:
        if self.open:
            return LOCAL_TENANT
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthenticationError(
                "send `Authorization: Bearer <key>` with an API key of this registry"
            )
        presented = hashlib.sha256(key.strip().encode()).digest()
        found: str | None = None
        # Compare against every hash, without stopping early, so timing says nothing.
        for digest, tenant in self._hashes:
            if hmac.compare_digest(presented, digest):
                found = tenant
        if found is None:
            raise AuthenticationError(
                "the API key is not known to this registry; check the key, or ask the operator "
                "to add its hash to TOOLREF_API_KEYS",
                invalid_token=True,
            )
        return found


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as TOOLREF_API_KEYS holds it."""
    return hashlib.sha256(key.encode()).hexdigest()
