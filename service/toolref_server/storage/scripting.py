"""Whether an engine refuses Lua scripts: the one rule by which the store's reads and the
usage counters fall back to plain commands (an engine without scripting, a user the ACL
does not let run EVAL, scripting turned off by a managed service)."""

from __future__ import annotations

import re
from typing import Final

from redis.exceptions import NoPermissionError, OutOfMemoryError, ResponseError

_EVAL: Final = re.compile(r"\beval(?:sha)?(?:_ro)?\b")


def refuses_scripts(error: ResponseError) -> bool:
    """Whether `error` is the engine refusing EVAL as a command (not there, not allowed to
    this user, turned off), not a failure of this call (memory, a lost replica, a script's
    own error). On the engine's own message: a pipeline's `raise_on_error=False` reply."""
    text = str(error).lower()
    if isinstance(error, NoPermissionError):  # the ACL: the command, not a key or channel
        return "command" in text
    if isinstance(error, OutOfMemoryError):  # "command not allowed when used memory > ..."
        return False
    if "unknown command" in text:
        return True
    return bool(_EVAL.search(text)) and any(
        word in text for word in ("disabled", "not allowed", "not supported")
    )
