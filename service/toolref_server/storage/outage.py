"""What the service says when its store fails it: the detail of a 503 store-unavailable
problem (`Store.guard`), and what the engine said when it answered but refused the
credentials of TOOLREF_REDIS_URL (a wrong password, NOAUTH, an ACL user without a
command: NOPERM). That one never clears by itself, unlike an engine that is down, so
`/readyz`, the start log, the 503s and `toolref-server cache` name it as what it is
(`refused`, `credentials`) instead of "unreachable". Pure: wording only."""

from __future__ import annotations

from typing import Final

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    ResponseError,
)

from toolref.wire import redaction
from toolref.wire.errors import StoreUnavailableError

REFUSALS: Final = (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)
# How `toolref-server cache` begins the line of an engine that refused its credentials.
CLI_REFUSED: Final = "the engine refused the credentials"


def refused(exc: BaseException | None) -> str | None:
    """What the engine said when it refused the credentials (`exc` one of `REFUSALS`, or
    an error reply that begins NOPERM), or None: `exc` is another failure. A pipeline's
    note of the command that failed (its key, the start of its value) is left out; a URL
    in the text is masked. Linear in the text."""
    if exc is None:
        return None
    text = str(exc)
    if not (isinstance(exc, REFUSALS) or (isinstance(exc, ResponseError) and "NOPERM" in text)):
        return None
    said = text.rpartition(" caused error: ")[2].strip()  # redis-py's pipeline note
    return redaction.urls_in(said) or type(exc).__name__


def credentials(said: str, *, words: bool = False) -> str:
    """The fact and the fix, for `/readyz`, a 503's detail and (`words`: what the engine
    said, which names the ACL user and the command) the start log. `/readyz` needs no key:
    the engine's words stay in the operator's log."""
    what = said if words else _kind(said)
    return (
        f"TOOLREF_REDIS_URL's credentials were refused by the engine ({what}); fix the user "
        "or password in the URL, or the user's ACL permissions"
    )


def _kind(said: str) -> str:
    """The refusal's kind, without the engine's words."""
    if "permission" in said.lower() or "NOPERM" in said:
        return "NOPERM: the user may not run a command the service needs"
    return "the user or password is wrong, or the user is disabled"


def for_cli(said: str) -> str:
    """The same for `toolref-server cache`, whose engine is `--redis-url`."""
    return (
        f"{CLI_REFUSED} ({said}); fix the user or password in --redis-url "
        "(TOOLREF_REDIS_URL), or the user's ACL permissions"
    )


def unavailable(cause: str, retry_after: int, said: str | None) -> StoreUnavailableError:
    """The 503 of an operation that failed on the engine: `said`, when it refused the
    credentials (`refused`), else `cause` (the error's class)."""
    why = (
        f"the registry's store cannot be used: {credentials(said)}"
        if said is not None
        else f"the registry's store is unreachable ({cause})"
    )
    return StoreUnavailableError(
        f"{why}; retry after {retry_after}s, or send full payloads meanwhile",
        retry_after=retry_after,
    )


def skipped(failures: int, wait: int, said: str | None) -> StoreUnavailableError:
    """The 503 of an operation the open breaker skipped after `failures` in a row; `said`:
    what the engine said refusing the credentials the last time, if it did."""
    why = f" (the last: {credentials(said)})" if said is not None else ""
    return StoreUnavailableError(
        f"the registry's store failed {failures} times in a row{why}, so requests skip it "
        f"for now; retry after {wait}s, or send full payloads meanwhile",
        retry_after=wait,
    )
