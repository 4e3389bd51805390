"""History refs: a digest chain over a conversation, so a client can name the part of it the
server already holds instead of resending it.

`h_0` is fixed and `h_k = SHA-256(h_{k-1} || canonical(m_k))`, over the messages in *chain
form*: every complete tool invocation replaced by its ref marker. So a history covers tool
refs, not payloads, and its heads do not depend on which payloads a client happened to send in
full. A history ref is `th_` plus the encoding of tool refs (lowercase base32 of the first
16 bytes of a head). Pure functions: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from toolref import formats
from toolref.formats import Format
from toolref.wire.canonical import canonical_json, digest_key, digest_of
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import InvalidHistoryHeaderError, InvalidRefError, ValidationError
from toolref.wire.headers import DICTIONARY_HEADER, HISTORY_HEADER, KEEP_HISTORY

# A dictionary is the tail of the history's text: zstd at the levels clients use cannot
# reach further back than its window, and the bound caps what a server rebuilds per request.
DICTIONARY_LIMIT: Final = 1 << 20
DICTIONARY_LEVEL: Final = 6  # new messages are small: a higher level costs next to nothing
# A client compresses against this tail of the dictionary only: zstd indexes all of the
# dictionary it is given, each turn, so the whole would cost time that grows with the
# history. Offsets count back from the body, so the frame decodes with the whole dictionary.
COMPRESS_WINDOW: Final = 128 << 10
HISTORY_PREFIX: Final = "th_"
HISTORY_REF_LENGTH: Final = len(HISTORY_PREFIX) + 26
H0: Final = hashlib.sha256(b"toolref history v1").digest()
# Messages that come before a conversation's own (a system prompt in the messages) have
# these roles; a conversation is known by them and the message after them (`opening`).
_LEADING_ROLES: Final = frozenset({"system", "developer"})
# A mark an agent moves from turn to turn (Claude Code: on the newest user message's last
# block), which says nothing about which conversation a message belongs to.
CACHE_MARK: Final = "cache_control"
_HISTORY_RE: Final = re.compile(r"th_[a-z2-7]{25}[aeimquy4]")


def chain_form(
    messages: list[Any], fmt: Format, refs: Mapping[str, str] | None = None
) -> list[Any]:
    """`messages` with every complete invocation as a ref marker (markers already there
    stay). Messages with nothing to replace are the same objects, not copies. `refs`: the
    ref of every complete invocation by pair key, when the caller has computed them."""
    found = formats.scan(messages, fmt)
    if refs is None:
        refs = {pair.key: str(digest_of(pair.invocation()).ref) for pair in found.complete}
    return formats.replace(messages, found, refs) if refs else list(messages)


def message_digest(message: Any) -> bytes:
    return hashlib.sha256(canonical_json(message)).digest()


def heads(form: Sequence[Any], start: bytes = H0) -> list[bytes]:
    """`h_1 .. h_n` for messages already in chain form, continuing from `start`."""
    return chain(map(canonical_json, form), start)


def chain(encoded: Iterable[bytes], start: bytes = H0) -> list[bytes]:
    """`heads`, for messages already encoded as canonical JSON."""
    found, head = [], start
    for data in encoded:
        head = hashlib.sha256(head + data).digest()
        found.append(head)
    return found


def opening(messages: Sequence[Any], fmt: Format, chain: Sequence[bytes]) -> bytes:
    """Which conversation `messages` (chain heads `chain`) is: the chain head of its
    opening, that is its leading system or developer messages and the message after them
    (Claude Code's first user message, a Chat Completions system prompt and first user
    message), as if no block in it carried a cache mark: Claude Code's first turn marks
    its first message, its second does not. Linear in the opening; hashes it again only
    when a mark is there (a first turn)."""
    count = 1
    while count < len(messages) and _role(messages[count - 1]) in _LEADING_ROLES:
        count += 1
    head = messages[:count]
    if not any(map(_marked, head)):
        return chain[count - 1]
    return heads(chain_form([_unmarked(m) for m in head], fmt))[-1]


def _role(message: Any) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, list) else []


def _marked(message: Any) -> bool:
    return any(isinstance(b, Mapping) and CACHE_MARK in b for b in _blocks(message))


def _unmarked(message: Any) -> Any:
    """`message` without the cache marks on its blocks (a copy when it had any)."""
    if not _marked(message):
        return message
    blocks = [
        {k: v for k, v in b.items() if k != CACHE_MARK} if isinstance(b, Mapping) else b
        for b in _blocks(message)
    ]
    return {**message, "content": blocks}


def history_ref(head: bytes) -> str:
    return HISTORY_PREFIX + digest_key(head)


def is_history_ref(text: object) -> bool:
    return isinstance(text, str) and _HISTORY_RE.fullmatch(text) is not None


def check_history_ref(text: object) -> str:
    """`text` if it is a history ref; otherwise `InvalidRefError` saying what is wrong."""
    if is_history_ref(text):
        return str(text)
    shown = repr(text) if not isinstance(text, str) or len(text) <= 64 else repr(text[:61])
    raise InvalidRefError(
        f"{shown} is not a history ref (`th_` and 26 lowercase base32 characters); send the "
        "historyRef exactly as the server confirmed it, or the full messages",
        value=shown,
    )


def longest_confirmed(chain: Sequence[bytes], confirmed: Sequence[tuple[str, int]]) -> int:
    """Index into `confirmed` of the longest (ref, length) that is still a prefix of the
    conversation whose heads are `chain`; -1 when none is (the history was edited before
    every confirmed head, or is shorter than each)."""
    # Longest first, so that usually one ref is computed (the last turn's), not one each;
    # and once per length (several conversations may have a history of the same length).
    refs: dict[int, str] = {}
    for index in sorted(range(len(confirmed)), key=lambda i: confirmed[i][1], reverse=True):
        ref, length = confirmed[index]
        if not 0 < length <= len(chain):
            continue
        if length not in refs:
            refs[length] = history_ref(chain[length - 1])
        if refs[length] == ref:
            return index
    return -1


def dictionary(messages: Iterable[Any]) -> bytes:
    """The zstd raw-content dictionary a history stands for: its messages *in full*
    (payloads, not markers) as their client writes them (compact JSON here), concatenated,
    at most `DICTIONARY_LIMIT` bytes from the end. The server holds each message exactly as
    the client wrote it and rebuilds the same bytes; a body written the same way then
    matches the dictionary closely. A server whose bytes differ (a payload first registered
    in another key order) answers 400 `dictionary-mismatch`, and the client resends."""
    return dictionary_of(map(dumps_json, reversed(list(messages))), reverse=True)


def dictionary_of_texts(texts: Sequence[str]) -> bytes:
    """`dictionary` from each message's JSON text as its client wrote it (only the texts
    within the limit from the end are encoded)."""
    return dictionary_of((text.encode() for text in reversed(texts)), reverse=True)


def dictionary_of(encoded: Iterable[bytes], *, reverse: bool = False) -> bytes:
    """`dictionary` from messages already written as JSON (last first when `reverse`, so
    that only the tail within the limit is ever written)."""
    parts, size = [], 0
    for data in encoded:
        parts.append(data)
        size += len(data)
        if reverse and size >= DICTIONARY_LIMIT:
            break
    if reverse:
        parts.reverse()
    return b"".join(parts)[-DICTIONARY_LIMIT:]


def primed(dictionary: bytes, prior: bytes) -> bytes:
    """The dictionary `Toolref-Dictionary` names: a history's `dictionary` followed by the
    body (as sent, inflated) of the request its head was confirmed for, at most
    `DICTIONARY_LIMIT` bytes from the end. The members around the messages (`tools`, a
    system prompt), resent every turn, then cost a few bytes, and so does a conversation
    resent whole after a change to its last message (a moved `cache_control` mark)."""
    return (dictionary[-DICTIONARY_LIMIT:] + prior[-DICTIONARY_LIMIT:])[-DICTIONARY_LIMIT:]


def dictionary_header(value: str | None) -> str | None:
    """The history a request's `Toolref-Dictionary` header names (None without one)."""
    if value is None:
        return None
    text = value.strip()
    if is_history_ref(text):
        return text
    shown = text if len(text) <= 64 else text[:61] + "..."
    raise InvalidHistoryHeaderError(
        f"{DICTIONARY_HEADER}: {shown!r} is not a history ref; name a history the server "
        f"confirmed with a {DICTIONARY_HEADER} answer header, or leave the header out"
    )


def history_header(value: str | None) -> tuple[bool, str | None]:
    """(keep, continues) from a request's `Toolref-History` header: `?1` asks the server to
    keep the conversation as a history; a history ref also says the body continues that
    history (and that a zstd body was compressed with its dictionary); `?0` or no header
    asks for nothing."""
    if value is None:
        return False, None
    text = value.strip()
    if text == "?0":
        return False, None
    if text == KEEP_HISTORY:
        return True, None
    if is_history_ref(text):
        return True, text
    shown = text if len(text) <= 64 else text[:61] + "..."
    raise InvalidHistoryHeaderError(
        f"{HISTORY_HEADER}: {shown!r} is neither `{KEEP_HISTORY}` (keep this conversation as a "
        "history) nor a history ref the server confirmed (`th_` and 26 base32 characters); "
        "send one of those, or leave the header out"
    )


def continued_ref(member: object, header: str | None) -> str | None:
    """The history a request continues: its body's `historyRef` (checked) or the ref its
    `Toolref-History` header names; the two must agree when both are there."""
    if member is None:
        return header
    ref = check_history_ref(member)
    if header is not None and header != ref:
        raise ValidationError(
            f"`historyRef` is {ref} but the {HISTORY_HEADER} header says {header}; send one "
            "history ref (or the same in both)"
        )
    return ref
