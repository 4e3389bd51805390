"""Checks of the options a caller gives toolref's classes: the shared ones (counts, keys,
the name a misspelt one most likely meant).

The manager's are in `toolref.sending.manager` and `toolref.sending.request_checks`, the
middleware's in `toolref.receiving.middleware_options`, the relay's in
`toolref_relay.config`, the service's settings' in `toolref_server.settings`.

Each raises where the mistake is made (the constructor, or the call), with a message that
names the value and the fix, instead of the mistake surfacing later as a silent no-op, a
`KeyError`, or a 422 answered to every client.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping


def check_count(name: str, value: object, minimum: int, fix: str = "") -> None:
    """`value` is an int of at least `minimum`; TypeError or ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not a {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}" + (f"; {fix}" if fix else ""))


def check_seconds(name: str, value: object, default: float, meaning: str) -> float:
    """`value` is a finite number of seconds above 0 (not a bool), as a float; TypeError or
    ValueError naming `name`, an example (`default`) and what the option does (`meaning`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds, not {value!r}: give one such as "
            f"{default:g} (the default)"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{name} is {value!r}; give a number of seconds above 0, such as {default:g} "
            f"(the default): {meaning}"
        )
    return float(value)


def check_key(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} is the non-empty str key of the messages, not {value!r}")


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` is most likely a misspelling of (difflib's closest, at least
    0.75 alike), or None. Linear in the known names (each compared once, names are short)."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return found[0] if found else None


def check_retired(owner: str, given: Iterable[str], retired: Mapping[str, str], takes: str) -> None:
    """`given` (keyword options no longer taken) is empty; otherwise a TypeError naming the
    first: retired (`retired` says why and what replaces it) or never known (naming the
    nearest option of `takes`, the comma-separated options `owner` takes)."""
    for name in given:
        why = retired.get(name)
        if why is not None:
            raise TypeError(f"{owner}'s option {name!r} was retired in 0.3: {why}")
        options = [o.strip() for o in takes.replace(" and ", ", ").split(",")]
        near = nearest(name, options)
        hint = f" (did you mean {near!r}?)" if near else ""
        raise TypeError(f"{owner} has no option {name!r}{hint}; it takes {takes}")
