"""Transcripts: what `ToolReferenceManager` keeps of each conversation it has prepared, so
that preparing a turn costs work in proportion to the new messages, not to the history.

A chat client resends its whole conversation every turn, and the upload needs, for every
message, its JSON text (the byte count, the zstd dictionary), its tool invocations and the
refs of the complete ones (markers, chain form), and its chain head (which confirmed history
still fits). A `Transcript` keeps those per message. Each turn, every message is written
again with orjson only to be compared with the kept text: the longest unchanged prefix is
reused and the rest computed, so an edited, truncated, reordered or mutated-in-place history
is seen, never trusted. One exception: a call still waiting for its result. A result in a
later message changes the call's chain form, so the prefix reused ends before any call that
a new message could answer (`Transcript.cut`, `pending`).

Pure functions and frozen values; `Transcripts`, the bounded memory of the last ones, is the
only state. What these cannot compute (a message the stdlib cannot write, say), the manager
computes as it did without them, and fails on as before.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, overload

import orjson

from toolref import formats
from toolref.formats import Detection, Format, Scan
from toolref.formats.site import Path, to_marker, update_all
from toolref.history import DICTIONARY_LIMIT, H0
from toolref.wire.canonical import canonical_json, digest_of
from toolref.wire.encoding import dumps_json
from toolref.wire.models import FormatName

# What a kept message costs beyond its text: the other columns' entries (a head, ints,
# tuples) and the objects' headers, measured roughly; the bound is approximate by this much.
MESSAGE_OVERHEAD: Final = 512

# Types orjson writes but the stdlib does not, or writes differently (subclasses, whose
# `__str__` the stdlib may ignore), go to the fallback key instead.
_ORJSON: Final = functools.partial(
    orjson.dumps,
    option=orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS,
)


def key_of(message: Any) -> bytes:
    """What a message is compared by from turn to turn: its JSON text as orjson writes it
    (key order, number forms, every character), or, for what orjson refuses (integers past
    64 bits, lone surrogates, keys that are not strings, other types), a NUL and its repr,
    which no JSON text starts with. orjson writes NaN and infinities as `null` and a tuple as
    a list: a message changed in place only so (neither is JSON) keeps its key."""
    try:
        return _ORJSON(message)
    except orjson.JSONEncodeError:
        return b"\0" + repr(message).encode("utf-8", "surrogatepass")


def keys_of(messages: Sequence[Any]) -> tuple[bytes, ...]:
    try:
        return tuple(map(_ORJSON, messages))  # the loop in C: this runs over the whole history
    except orjson.JSONEncodeError:
        return tuple(map(key_of, messages))


@dataclass(frozen=True, slots=True)
class Mark:
    """One side of a complete invocation: where in its message, which payload members the
    marker replaces, and the invocation's ref."""

    path: Path  # inside the message
    members: tuple[str, ...]
    ref: str


@dataclass(frozen=True, slots=True)
class Call:
    """A call no result in the transcript answers yet: a later result may, by id or name."""

    message: int
    call_id: str | None
    name: str | None


@dataclass(frozen=True, slots=True)
class Transcript:
    """One conversation as prepared: a column per fact, an entry per message."""

    requested: FormatName | None  # the format asked for (None: detected)
    format: FormatName  # the format detected over these messages
    keys: tuple[bytes, ...]  # `key_of` each message
    texts: tuple[bytes, ...]  # `dumps_json` of each message (the key itself when equal)
    ends: tuple[int, ...]  # bytes of texts up to and including each message
    held: tuple[int, ...]  # bytes kept up to and including each message
    detections: tuple[Detection, ...]  # `formats.detect` after each message
    heads: tuple[bytes, ...]  # chain heads h_1 .. h_n
    refs: tuple[tuple[str, ...], ...]  # refs of the complete invocations each message calls
    marks: tuple[tuple[Mark, ...], ...]  # the sides of complete invocations in each message
    reach: tuple[int, ...]  # the last message answering a call made up to each message
    pending: tuple[Call, ...]  # calls without a result, oldest first

    @property
    def size(self) -> int:
        """Bytes this transcript holds, roughly (see `MESSAGE_OVERHEAD`)."""
        return self.held[-1] if self.held else 0

    @property
    def text_size(self) -> int:
        """`len(dumps_json(m))` summed over the messages."""
        return self.ends[-1] if self.ends else 0

    def common(self, keys: Sequence[bytes]) -> int:
        """How many first messages `keys` has in common with this transcript."""
        same = min(len(self.keys), len(keys))
        if self.keys[:same] == tuple(keys[:same]):  # the usual case: one comparison in C
            return same
        low, high = 0, same  # the first `low` are equal, the first `high` are not
        while high - low > 1:
            middle = (low + high) // 2
            if self.keys[:middle] == tuple(keys[:middle]):
                low = middle
            else:
                high = middle
        return low

    def cut(self, limit: int) -> int:
        """The longest prefix of at most `limit` messages whose answered calls are all
        answered inside it: a new message can then change no chain form before the cut,
        except by answering one of the `pending` calls (which `transcribe` checks)."""
        cut = limit
        while cut > 0 and self.reach[cut - 1] >= cut:
            cut -= 1
        return cut

    def dictionary(self, length: int) -> bytes:
        """`history.dictionary` of the first `length` messages, from their kept text."""
        total = self.ends[length - 1] if length else 0
        # From the last message that, with those after it, reaches the limit: none before
        # it would survive the cut to the last DICTIONARY_LIMIT bytes.
        first = bisect.bisect_right(self.ends, total - DICTIONARY_LIMIT, 0, length)
        return b"".join(self.texts[first:length])[-DICTIONARY_LIMIT:]

    def all_refs(self) -> Iterator[str]:
        """The ref of every complete invocation, in the order of their calls."""
        for refs in self.refs:
            yield from refs

    def outgoing(self, messages: list[Any], usable: Container[str]) -> Outgoing:
        return Outgoing(messages, self.marks, usable)


class Outgoing(Sequence[Any]):
    """The messages as sent: each complete invocation whose ref is `usable` as a marker, the
    way `rewriter.rewrite` makes them. Each message is made when read, so a turn that sends
    only its new messages makes only those."""

    def __init__(
        self, messages: list[Any], marks: Sequence[Sequence[Mark]], usable: Container[str]
    ) -> None:
        self._messages, self._marks, self._usable = messages, marks, usable

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._one(i) for i in range(*index.indices(len(self)))]
        return self._one(range(len(self))[index])

    def _one(self, index: int) -> Any:
        usable = self._usable
        return marked(self._messages[index], [m for m in self._marks[index] if m.ref in usable])


def marked(message: Any, marks: Sequence[Mark]) -> Any:
    """`message` with these sides as markers (the very object when there are none)."""
    if not marks:
        return message
    changes: dict[Path, Callable[[Any], Any]] = {}
    for mark in marks:

        def change(obj: dict[str, Any], mark: Mark = mark) -> dict[str, Any]:
            return to_marker(obj, mark.members, mark.ref)

        changes[(0, *mark.path)] = change
    return update_all([message], changes)[0]


def transcribe(
    messages: list[Any],
    keys: tuple[bytes, ...],
    requested: FormatName | None,
    kept: Transcript | None = None,
    common: int | None = None,
) -> Transcript:
    """The transcript of `messages` (whose `keys_of` are `keys`), reusing what `kept` holds
    for the `common` first messages they have in common (computed when None). Raises what
    detecting, scanning and writing them raise (`formats.detect`'s 422 for messages in no
    one format, say)."""
    if common is None:
        common = kept.common(keys) if kept is not None else 0
    detections = list(kept.detections[:common]) if kept is not None else []
    state = detections[-1] if detections else formats.detection((), requested)
    for index in range(common, len(messages)):
        state = formats.detection((messages[index],), None, state)
        detections.append(state)
    fmt = state.best()
    # A conversation detected as another format reads differently throughout.
    reused = kept if kept is not None and kept.format == fmt.name else None
    cut, waiting, found = _scanned(messages, fmt, reused, common)
    tail = _Tail.of(found, cut, waiting, len(messages) - cut)
    head = reused.heads[cut - 1] if reused is not None and cut else H0
    last = reused.reach[cut - 1] if reused is not None and cut else -1
    heads: list[bytes] = []
    reach: list[int] = []
    for t, message in enumerate(messages[cut:]):
        form = marked(message, tail.marks[t])
        head = hashlib.sha256(head + canonical_json(form)).digest()
        heads.append(head)
        last = max(last, tail.answers[t])
        reach.append(last)
    texts, ends, held = _written(messages, keys, kept, common)
    return Transcript(
        requested=requested,
        format=fmt.name,
        keys=(kept.keys[:common] if kept is not None else ()) + keys[common:],
        texts=texts,
        ends=ends,
        held=held,
        detections=tuple(detections),
        heads=(reused.heads[:cut] if reused else ()) + tuple(heads),
        refs=(reused.refs[:cut] if reused else ()) + tuple(map(tuple, tail.refs)),
        marks=(reused.marks[:cut] if reused else ()) + tuple(map(tuple, tail.marks)),
        reach=(reused.reach[:cut] if reused else ()) + tuple(reach),
        pending=tuple(tail.pending),
    )


def _scanned(
    messages: list[Any], fmt: Format, kept: Transcript | None, common: int
) -> tuple[int, list[Call], Scan]:
    """Where to start scanning again, the calls before it still waiting, and the scan of the
    messages from there. Scanning from a cut pairs as scanning from the start does, unless a
    result after the cut answers a call waiting before it: then the cut moves before that
    call, until none does."""
    if kept is None:
        return 0, [], formats.scan(messages, fmt)
    cut = kept.cut(common)
    while True:
        waiting = [call for call in kept.pending if call.message < cut]
        found = formats.scan(messages[cut:], fmt)
        answered = _answered(found, waiting)
        if answered is None:
            return cut, waiting, found
        cut = kept.cut(answered)


def _answered(found: Scan, waiting: list[Call]) -> int | None:
    """The earliest message of a waiting call that a result in `found` could answer, as
    `formats.scan` pairs them (by id, else by tool name); None when none could."""
    if not waiting:
        return None
    by_id: dict[str, int] = {}
    idless_by_name: dict[str | None, int] = {}
    by_name: dict[str | None, int] = {}
    for call in reversed(waiting):  # the earliest message wins
        by_name[call.name] = call.message
        if call.call_id is None:
            idless_by_name[call.name] = call.message
        else:
            by_id[call.call_id] = call.message
    hits = []
    for pair in found.pairs:
        site = pair.result
        if site is None or site is pair.call:
            continue
        if site.call_id is not None:
            hits += [by_id.get(site.call_id), idless_by_name.get(site.name)]
        else:
            hits.append(by_name.get(site.name))
    answered = [hit for hit in hits if hit is not None]
    return min(answered) if answered else None


@dataclass(frozen=True, slots=True)
class _Tail:
    """What the scan of the messages from a cut says about each (indexes from the cut)."""

    refs: list[list[str]]  # of the complete invocations each message calls
    marks: list[list[Mark]]
    answers: list[int]  # the last message (from the start) answering a call it makes; -1
    pending: list[Call]  # every call without a result, the waiting ones before the cut too

    @classmethod
    def of(cls, found: Scan, cut: int, waiting: list[Call], length: int) -> _Tail:
        tail = cls([[] for _ in range(length)], [[] for _ in range(length)], [-1] * length, [])
        tail.pending.extend(waiting)
        for pair in found.pairs:
            call = pair.call
            if call is None:
                continue  # a result no call in these messages answers: it stays as it is
            if pair.result is None:
                tail.pending.append(Call(cut + call.message, call.call_id, call.name))
                continue
            tail.answers[call.message] = max(tail.answers[call.message], cut + pair.result.message)
            if pair.complete:
                ref = str(digest_of(pair.invocation()).ref)
                tail.refs[call.message].append(ref)
                for site, _ in pair.sides:
                    tail.marks[site.message].append(Mark(site.path[1:], site.payload_keys, ref))
        return tail


def _written(
    messages: list[Any], keys: tuple[bytes, ...], kept: Transcript | None, common: int
) -> tuple[tuple[bytes, ...], tuple[int, ...], tuple[int, ...]]:
    """The texts (kept ones for the messages in common), and their running sizes."""
    texts = list(kept.texts[:common]) if kept is not None else []
    ends = list(kept.ends[:common]) if kept is not None else []
    held = list(kept.held[:common]) if kept is not None else []
    end = ends[-1] if ends else 0
    hold = held[-1] if held else 0
    for index in range(common, len(messages)):
        text, key = dumps_json(messages[index]), keys[index]
        if text == key:
            text = key  # one object for both: the usual case, when orjson writes alike
        texts.append(text)
        end += len(text)
        hold += len(text) + (0 if text is key else len(key)) + MESSAGE_OVERHEAD
        ends.append(end)
        held.append(hold)
    return tuple(texts), tuple(ends), tuple(held)


class Transcripts:
    """The transcripts of the conversations last prepared, told apart by their content: a
    turn continues the one it shares the most first messages with (the same first message,
    and the same format asked for). At most `conversations` of them, holding at most
    `size` bytes (roughly; one larger is not kept): the least recently used go first.

    A turn that continues a transcript, or differs from it only in its last message (a
    client rewriting the message it last sent), takes its place; one that differs earlier
    (an edit further back, a conversation forked from another) is kept beside it, so two
    branches of one conversation both stay cheap, and the stale one ages out."""

    def __init__(self, conversations: int, size: int) -> None:
        self.conversations, self.limit = conversations, size
        self._kept: OrderedDict[int, Transcript] = OrderedDict()
        self._serial = 0
        self._size = 0

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def size(self) -> int:
        return self._size

    def find(
        self, requested: FormatName | None, keys: Sequence[bytes]
    ) -> tuple[Transcript | None, int]:
        """The transcript sharing the most first messages with `keys` (if any shares one),
        and how many it shares."""
        best, best_common = None, 0
        if not keys:
            return None, 0
        for transcript in self._kept.values():
            if transcript.requested != requested or transcript.keys[:1] != (keys[0],):
                continue
            common = transcript.common(keys)
            if common > best_common:
                best, best_common = transcript, common
        return best, best_common

    def keep(self, transcript: Transcript, continued: Transcript | None) -> None:
        """Remember `transcript`, made from `continued` (what `find` gave)."""
        token = next((t for t, kept in self._kept.items() if kept is continued), None)
        if continued is not None and token is not None:
            common = continued.common(transcript.keys)
            if common == len(transcript.keys):
                self._kept.move_to_end(token)  # nothing new: a prefix of the one kept
                return
            if common >= len(continued.keys) - 1:
                self._size -= self._kept.pop(token).size
        self._serial += 1
        self._kept[self._serial] = transcript
        self._size += transcript.size
        while self._kept and (len(self._kept) > self.conversations or self._size > self.limit):
            _, dropped = self._kept.popitem(last=False)
            self._size -= dropped.size
