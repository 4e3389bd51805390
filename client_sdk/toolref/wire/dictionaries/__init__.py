"""The zstd dictionaries this version ships, for records and for history messages.

Small records compress poorly on their own: a dictionary trained on typical tool traffic
gives zstd the common strings (JSON envelopes, shell output, code) up front. Each dictionary
has a number within its kind and a zstd dictionary id (`kind base + number`, in zstd's
private range) that every frame compressed with it carries, so a reader always knows which
one to use, and a record written with any shipped dictionary stays readable after the
writers move on to a newer one.

The dictionaries are trained on a generated, neutral corpus (`python -m loadtests.dictionaries
train`, see docs/operations.md "Rolling out a new dictionary"): this repository's own files
dressed as tool output, and generated JSON. Never on any tenant's data, so a dictionary
cannot carry one tenant's bytes to another.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal

import zstandard

Kind = Literal["records", "messages"]
# zstd reserves ids below 32768 and from 2**31 for a future registrar: ours sit between.
BASES: Final[dict[Kind, int]] = {"records": 0x74720000, "messages": 0x746D0000}


@dataclass(frozen=True, slots=True)
class Shipped:
    kind: Kind
    number: int

    @property
    def dict_id(self) -> int:
        return BASES[self.kind] + self.number

    @property
    def file(self) -> str:
        return f"{self.kind}-{self.number}.zdict"


# Every dictionary ever shipped stays here (and in the package) while records written with
# it may live: removing one makes those records unreadable (read as missing, resent).
SHIPPED: Final = (Shipped("records", 1), Shipped("messages", 1))
BY_ID: Final = {d.dict_id: d for d in SHIPPED}

_lock = threading.Lock()
_loaded: dict[int, zstandard.ZstdCompressionDict] = {}


def numbers(kind: Kind) -> list[int]:
    """The dictionary numbers shipped for `kind`."""
    return [d.number for d in SHIPPED if d.kind == kind]


def data(shipped: Shipped) -> bytes:
    return resources.files(__name__).joinpath(shipped.file).read_bytes()


def by_id(dict_id: int) -> zstandard.ZstdCompressionDict | None:
    """The shipped dictionary with zstd id `dict_id` (loaded once), or None."""
    found = _loaded.get(dict_id)
    if found is not None:
        return found
    shipped = BY_ID.get(dict_id)
    if shipped is None:
        return None
    with _lock:
        found = _loaded.get(dict_id)
        if found is None:
            found = zstandard.ZstdCompressionDict(data(shipped))
            if found.dict_id() != dict_id:
                raise RuntimeError(
                    f"{shipped.file} has zstd dictionary id {found.dict_id()}, expected "
                    f"{dict_id}: the package is damaged; reinstall it"
                )
            _loaded[dict_id] = found
    return found


def lookup(kind: Kind, number: int) -> zstandard.ZstdCompressionDict:
    """Dictionary `number` of `kind`; `ValueError` naming the shipped ones if absent."""
    dictionary = by_id(BASES[kind] + number) if number in numbers(kind) else None
    if dictionary is None:
        raise ValueError(
            f"no {kind} dictionary {number} in this version (shipped: "
            f"{', '.join(map(str, numbers(kind)))}; 0 writes without one)"
        )
    return dictionary
