"""The two httpx packages an HTTP client may be of: `httpx`, and `httpx2`, its maintained
successor, which openai 3 and anthropic 2 are built on (openai also takes an `httpx`
client). Each package checks and raises its own classes only: a transport or a stream
must subclass the client's, and an `httpx2` response not yet read raises
`httpx2.ResponseNotRead`, which no `except httpx.ResponseNotRead` catches. So code that
serves both names both, from here.

Without httpx2 installed, its names are stand-ins that nothing is an instance of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import httpx

if TYPE_CHECKING:
    from httpx2 import AsyncBaseTransport as AsyncBaseTransport2
    from httpx2 import AsyncByteStream as AsyncByteStream2
    from httpx2 import BaseTransport as BaseTransport2
    from httpx2 import ResponseNotRead as ResponseNotRead2
    from httpx2 import SyncByteStream as SyncByteStream2
else:
    try:
        from httpx2 import AsyncBaseTransport as AsyncBaseTransport2
        from httpx2 import AsyncByteStream as AsyncByteStream2
        from httpx2 import BaseTransport as BaseTransport2
        from httpx2 import ResponseNotRead as ResponseNotRead2
        from httpx2 import SyncByteStream as SyncByteStream2
    except ImportError:

        class BaseTransport2: ...

        class AsyncBaseTransport2: ...

        class SyncByteStream2: ...

        class AsyncByteStream2: ...

        class ResponseNotRead2(Exception): ...


PACKAGES: Final = ("httpx", "httpx2")
# What either package raises for the body of a response not read yet (`response.content`).
NOT_READ: Final = (httpx.ResponseNotRead, ResponseNotRead2)

__all__ = [
    "NOT_READ",
    "PACKAGES",
    "AsyncBaseTransport2",
    "AsyncByteStream2",
    "BaseTransport2",
    "SyncByteStream2",
    "packages_of",
]


def packages_of(value: object) -> set[str]:
    """The httpx packages `value`'s class comes from ("httpx", "httpx2", or both)."""
    return {
        top for cls in type(value).__mro__ if (top := cls.__module__.partition(".")[0]) in PACKAGES
    }
