"""What a client's requests cost on the wire, next to what the app handed over."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Savings:
    """What went over the wire (`sent_bytes`: every attempt's body), next to the bodies the
    app handed over (`full_bytes`, once per request); `resends`: attempts after a miss;
    `edits`: requests answered as edits (one refused 415 and sent as it is is not)."""

    requests: int = 0
    resends: int = 0
    edits: int = 0
    sent_bytes: int = 0
    full_bytes: int = 0

    @property
    def ratio(self) -> float:
        return self.full_bytes / self.sent_bytes if self.sent_bytes else 1.0

    def request(self, raw: int) -> None:
        """A request of the app's, `raw` bytes of body."""
        self.requests += 1
        self.full_bytes += raw

    def sent(self, wire: int, *, resend: bool) -> None:
        """An attempt of `wire` bytes of body (`resend`: after a miss)."""
        self.sent_bytes += wire
        self.resends += resend
