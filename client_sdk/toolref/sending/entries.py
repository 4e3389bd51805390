"""`Entries`: the most entries of a recipe one receiver takes in an edit, learnt from its
413 `too-many-items`. Every sender's rule (the relay's `toolref_relay.as_edit`, the SDK's
`toolref.sending.sender.Sender`); JS's twin is `client_sdk/js/src/edits/entries.ts`.

A receiver refuses an edit whose recipe holds more entries than `TOOLREF_MAX_EDIT_ENTRIES`
(50,000 by default: no sender makes an edit of more, `editor.MAX_ENTRIES`) with 413
`too-many-items`, before anything is built. An operator may set it lower; then the edit
refused is sent again as it is (which the receiver forwards: its body limits are others),
and the limit is learnt (`refused`): the problem's `limit` when it is below the entries the
edit held, else (a problem naming none) one below them. A later request whose recipe would
hold more (`most`) goes as it is at once, no refused edit first. A `limit` at or above the
entries sent says the refusal was of something else (a JSON array's items): nothing learnt.

Behind a chat backend's middleware (`ToolRefMiddleware`, `withToolRef`) the registry's 413
is the middleware's 415 (`unsupported-media-type`, which every sender resends on), naming
it: `cause` `too-many-items` and its `limit`. That is the same refusal (`too_many_items`):
the same rule, and none of the pause a 415 begins (`toolref.sending.pause`).

A limit learnt holds for `KEPT` seconds (an hour), then edits are tried again: a receiver
whose limit was raised is sent edits again, at the cost of one refused edit an hour. The
lowest limit said within it holds (replicas of two limits behind one address: the lower).

Pure: the caller passes its clock's reading (`now`, seconds, monotonic). O(1) a call, one
limit a receiver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolref.edits.wire import DEFAULT_MAX_ENTRIES
from toolref.wire.errors import TooManyItemsError, UnsupportedMediaTypeError

KEPT: Final = 3600.0  # seconds a limit learnt holds
LARGEST: Final = (1 << 53) - 1  # a `limit` past it is none (JSON's exact integers, JS's too)
TOO_MANY_ITEMS: Final = TooManyItemsError.problem_type()
UNSUPPORTED_MEDIA_TYPE: Final = UnsupportedMediaTypeError.problem_type()


def too_many_items(status: int, problem: Mapping[str, Any] | None) -> bool:
    """The answer to an edit is the receiver's 413 `too-many-items`, or a middleware's 415
    standing for its registry's (`cause`; module docstring): `problem` read, and the caller
    checked it names no recipe. The edit not applied, the request goes as it is; the
    problem's `limit` is the receiver's."""
    if problem is None:
        return False
    if status == 413:
        return problem.get("type") == TOO_MANY_ITEMS
    return (
        status == 415
        and problem.get("type") == UNSUPPORTED_MEDIA_TYPE
        and problem.get("cause") == TOO_MANY_ITEMS
    )


class Entries:
    """The limit one receiver (an endpoint, a gateway) said, with when it last did."""

    __slots__ = ("_at", "_limit", "_told")

    def __init__(self) -> None:
        self._limit: int | None = None  # the lowest learnt within `KEPT`
        self._at = 0.0  # when it was learnt
        self._told: int | None = None  # the last limit `refused` returned (said once)

    def most(self, now: float) -> int:
        """The most entries an edit to this receiver holds: the limit learnt while it holds,
        else the default a receiver takes (`DEFAULT_MAX_ENTRIES`)."""
        if self._limit is None or now - self._at >= KEPT:
            return DEFAULT_MAX_ENTRIES
        return min(self._limit, DEFAULT_MAX_ENTRIES)

    def refused(self, sent: int, limit: object, now: float) -> int | None:
        """An edit whose recipe held `sent` entries was refused 413 `too-many-items` at
        `now`; `limit`: the problem's member (anything but a whole number from 1 to
        `LARGEST` names none). The limit learnt (module docstring) when it is news to say,
        one not returned before; None when it is not, or nothing was learnt."""
        if type(limit) is float and limit.is_integer():
            limit = int(limit)  # `200.0`: JSON's 200, as JavaScript reads it
        named = limit if type(limit) is int and 1 <= limit <= LARGEST else None
        if named is not None and named >= sent:
            return None  # not the recipe's entries: something else was too many
        learnt = named if named is not None else max(sent - 1, 0)
        if learnt > self.most(now):
            return None  # a lower limit holds (an edit sent before it was learnt)
        self._limit, self._at = learnt, now
        if learnt == self._told:
            return None
        self._told = learnt
        return learnt
