"""Whether an engine refuses Lua scripts: the one rule by which the store's reads and the
usage counters fall back to plain commands (an engine without scripting, a user the ACL
does not let run EVAL, scripting turned off by a managed service); and the store's scripts
(`store.Store.fetch` on one node)."""

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


# GET and EXPIRE of a batch of keys (one node: keys in any slot), the values returned.
READ_AND_TOUCH: Final = """
local values = {}
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value then redis.call('EXPIRE', key, ARGV[1]) end
  values[i] = value
end
return values
"""

# The same, counting for the stored-bytes quota (toolref_server.storage.quotas): the last key is the
# tenant's counter; a value is counted when its remaining lifetime (ms) is below ARGV[2].
READ_TOUCH_AND_COUNT: Final = """
local last = #KEYS - 1
local values = {}
local cost = 0
for i = 1, last do
  local key = KEYS[i]
  local left = redis.call('PTTL', key)
  local value = redis.call('GET', key)
  if value then
    if left < tonumber(ARGV[2]) then cost = cost + #value end
    redis.call('EXPIRE', key, ARGV[1])
  end
  values[i] = value
end
if cost > 0 then
  redis.call('INCRBY', KEYS[last + 1], cost)
  redis.call('EXPIRE', KEYS[last + 1], ARGV[3])
end
return values
"""
