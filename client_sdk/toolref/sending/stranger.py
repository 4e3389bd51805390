"""What a sender does with an answer to an edit from no receiver of edits: one naming
neither a recipe (`Toolref-History`) nor `Toolref-Edits` and holding no toolref problem
(a framework's own problem+json is none). Every receiver of edits (the gateway, a
backend's middleware) marks each answer to an edit so, the app's and the provider's
included; such an answer comes from something else: a backend rolled back, or a proxy,
load balancer or firewall in front of the receiver. Every sender's rule (the SDK's
`Sender`, the relay's `as_edit`; JS's twin is `client_sdk/js/src/stranger.ts`, shared
vectors: tests/js_stranger_vectors.py). The endpoint is forgotten in every case (its
requests go as they are, with the offer, until an answer says `Toolref-Edits`); then, by
the answer's status:

- a refusal of the body it could not read as an edit (`resent`: a 4xx but 413 and 429, the 415 of
  a framework that does not know the media type among them; a 500 or 501, an app whose
  `request.json()` threw): the request goes again as it is before the app sees anything,
  and edits to the endpoint pause 5 minutes, doubled while refused, at most an hour
  (`toolref.sending.pause`: the answers of a receiver behind a firewall that refuses the
  media type say `Toolref-Edits` again, so without a pause every turn cost a refused edit
  and a resend; with it, a few an hour);
- any other refusal (413: a proxy's body limit, which the request as it is, never smaller
  than its edit, passes no better; 429, 502 and above: a proxy's timeout or bad gateway,
  which may have forwarded the edit, so that the provider answered it; a rate limit): the
  app's, as it came, retried by the app as it would be without toolref (sent again, the
  provider would be called twice: a second model call the user pays for); edits pause 1 s,
  doubled, at most 30 s, as after a 415;
- any other answer (2xx, 3xx): the app's, no pause.

Pure: O(1) (`no_reader` reads a problem only when its answer was read whole).
"""

from __future__ import annotations

from typing import Any, Final

from toolref.sending.answers import problem_of
from toolref.sending.pause import FIRST, LONGEST, UNREADABLE_FIRST, UNREADABLE_LONGEST
from toolref.wire.errors import PROBLEM_BASE
from toolref.wire.headers import EDITS_HEADER, HISTORY_HEADER

# (first, longest) pause, seconds, after each kind of refusal
UNREAD_PAUSE: Final = (UNREADABLE_FIRST, UNREADABLE_LONGEST)
FAILED_PAUSE: Final = (FIRST, LONGEST)


def resent(status: int) -> bool:
    """An answer of `status` from no receiver of edits refused the edit's body unread: the
    request goes again as it is (the module docstring)."""
    return (400 <= status < 500 and status not in (413, 429)) or status in (500, 501)


def stranger_pause(status: int) -> tuple[float, float] | None:
    """The pause of edits (first, longest: seconds) after an answer of `status` from no
    receiver of edits; None for none (not a refusal)."""
    if status < 400:
        return None
    return UNREAD_PAUSE if resent(status) else FAILED_PAUSE


def no_reader(response: Any) -> bool:
    """`response` (an `httpx` or `httpx2` answer to an edit) comes from no receiver of
    edits: it names neither a recipe nor `Toolref-Edits`, and holds no toolref problem (its
    `type` under `urn:toolref:problem:`; a framework's own problem+json, Spring's
    `about:blank` or ASP.NET's RFC 9110 link, is none; a problem not read, a streamed one,
    neither)."""
    headers = response.headers
    if HISTORY_HEADER in headers or EDITS_HEADER in headers:
        return False
    problem = problem_of(response)
    kind = None if problem is None else problem.get("type")
    return not (isinstance(kind, str) and kind.startswith(PROBLEM_BASE))
