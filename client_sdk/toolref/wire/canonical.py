"""Canonical JSON, digests and refs: what client and server must agree on bit for bit.

Canonical bytes are RFC 8785 (JCS) with one extension: integers with |n| >= 2**53, which
JCS refuses but tool payloads carry (snowflake ids), are written as their exact digits.

Two paths give the same bytes. Values with no floats and no object keys at or above U+D800
(where code-point order and JCS's UTF-16 order part ways) go through orjson, sorting keys;
the rest, and what orjson refuses (integers past 64 bits, nesting past 255 levels), go
through a Python serializer that writes each string through orjson and floats as ECMAScript
does. Both are property-tested against the `rfc8785` package.

Both SDKs refuse the same values, with a `CanonicalizationError`: NaN and infinities, lone
surrogates, arrays and objects nested past `MAX_DEPTH` levels, integers of more than 4300
digits (what the service reads).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import orjson

from toolref.wire.errors import (
    CanonicalizationError,
    InvalidRefError,
    NonFiniteNumberError,
    ValidationError,
)

JSONValue: TypeAlias = dict[str, Any] | list[Any] | str | int | float | bool | None

REF_PREFIX: Final = "tr_"
REF_DIGEST_BYTES: Final = 16
REF_LENGTH: Final = len(REF_PREFIX) + 26
# Arrays and objects nested deeper than this are refused, here as in the JS SDK (canonical.ts):
# the same values have refs on both sides whatever the caller's stack (the service reads at
# most 512 levels).
MAX_DEPTH: Final = 1000
# Arrays and objects the orjson path looks at before it leaves a value to the serializer.
_FAST_CONTAINERS: Final = 1_000_000
_END: Final = object()

_SURROGATE_START: Final = "\ud800"
# Characters of a string orjson escapes at once; longer ones in slices (`_string`), and a
# value holding one is not given to orjson whole (memory: its buffer is sized for the worst).
_SLICE: Final = 1 << 15
# Sorted by code point, as orjson sorts keys, equals JCS's UTF-16 order below U+D800.
_SORTED: Final = orjson.OPT_SORT_KEYS


def _orjson_ok(value: object) -> bool:
    """True when orjson's output is canonical for `value`, and its memory bounded: no floats
    (orjson writes 1e16, JCS 10000000000000000), no key at or above U+D800, no string past
    `_SLICE`; exact dicts, lists, strings, ints, bools and None. A big integer or a lone
    surrogate still fails in orjson (`canonical_json` then takes the serializer). O(values),
    with no copy; past `_FAST_CONTAINERS` arrays and objects, False (a value that contains
    itself would be walked for ever: the serializer refuses it at `MAX_DEPTH`)."""
    stack = [value]
    pop = stack.pop
    push = stack.extend
    containers = 0
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if len(item) > _SLICE:  # type: ignore[arg-type]
                return False
            continue
        if kind is int or kind is bool or item is None:
            continue
        if kind is dict or kind is list:
            containers += 1
            if containers > _FAST_CONTAINERS:
                return False
        if kind is dict:
            for key in item:  # type: ignore[attr-defined]
                if type(key) is not str or (not key.isascii() and max(key) >= _SURROGATE_START):
                    return False
            push(item.values())  # type: ignore[attr-defined]
        elif kind is list:
            push(item)  # type: ignore[arg-type]
        else:
            return False
    return True


def _string(text: str) -> bytes:
    """A string's canonical bytes. orjson escapes as JCS does (the short escapes, other
    controls as lowercase \\u00xx, everything else as it is: checked against Python's
    encoder for every code point), and several times faster than it on the long outputs
    and file contents tool results carry."""
    try:
        if len(text) <= _SLICE:
            return orjson.dumps(text)
        # In slices: orjson reserves room for the worst escaping of what it is given (seen:
        # 7x the output for a long string), so a long one costs a slice's worth of that.
        # An escape never spans two slices (each is whole code points).
        parts = [b'"']
        parts += [orjson.dumps(text[at : at + _SLICE])[1:-1] for at in range(0, len(text), _SLICE)]
        parts.append(b'"')
        return b"".join(parts)
    except TypeError:  # a lone surrogate: named by the encoding's error
        _encode_utf8(text)
        raise


def format_float(number: float) -> str:
    """ECMAScript Number.prototype.toString of a finite float, as RFC 8785 3.2.2.3 requires."""
    if not math.isfinite(number):
        raise NonFiniteNumberError(
            f"{number!r} has no JSON form; send a finite number, or a string such as "
            f'"{number!r}" if the value must be kept',
            value=repr(number),
        )
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    text = repr(abs(number))
    mantissa, _, exp_text = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    trailing = len(digits) - len(digits.rstrip("0"))
    digits = digits.rstrip("0")
    k = len(digits)
    # value = 0.digits * 10**n
    n = k + (int(exp_text) if exp_text else 0) - len(fraction) + trailing
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        exponent = n - 1
        exp_sign = "+" if exponent >= 0 else "-"
        lead = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{lead}e{exp_sign}{abs(exponent)}"
    return sign + body


def _utf16_key(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be", "surrogatepass")


def _scalar(value: object, kind: type) -> bytes:
    """The canonical bytes of a value that is no array or object."""
    if kind is str:
        return _string(value)  # type: ignore[arg-type]
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    if kind is int:
        try:
            return str(value).encode()
        except ValueError:  # past sys.get_int_max_str_digits() (4300 by default)
            raise CanonicalizationError(
                f"an integer of more than {sys.get_int_max_str_digits()} digits has no "
                "canonical form here (the service reads no longer number); send it as a string",
                value="integer",
            ) from None
    if kind is float:
        return format_float(value).encode()  # type: ignore[arg-type]
    raise CanonicalizationError(
        f"a {kind.__name__} has no JSON form; use str, int, float, bool, None, list or dict",
        value=kind.__name__,
    )


def _sorted_items(value: dict[Any, Any]) -> list[tuple[str, Any]]:
    items: list[tuple[Any, Any]] = list(value.items())
    for key, _ in items:
        if type(key) is not str:
            raise CanonicalizationError(
                f"object key {key!r} is a {type(key).__name__}; JSON object keys are strings",
                value=repr(key),
            )
    items.sort(key=_utf16_key)
    return items


def _serialize(value: object, out: list[bytes]) -> None:
    """Appends the canonical bytes of `value` to `out`. With a stack of its own (at most
    `MAX_DEPTH` open arrays and objects), not Python's: how deep a value may be does not
    depend on how deep the caller's stack already is."""
    append = out.append
    # Open arrays and objects: (iterator of their members, whether it is an object).
    open_: list[tuple[Iterator[Any], bool]] = []
    node: Any = value
    while True:
        kind = type(node)
        if kind is dict or kind is list or kind is tuple:
            if len(open_) >= MAX_DEPTH:
                raise CanonicalizationError(
                    f"value is nested too deeply to canonicalize (over {MAX_DEPTH} levels of "
                    "arrays and objects, or it contains itself); flatten it",
                    limit=MAX_DEPTH,
                )
            if kind is dict:
                append(b"{")
                open_.append((iter(_sorted_items(node)), True))
            else:
                append(b"[")
                open_.append((iter(node), False))
            first = True
        else:
            append(_scalar(node, kind))
            first = False
        while open_:  # the next member to write, closing what has none left
            members, is_object = open_[-1]
            member: Any = next(members, _END)
            if member is _END:
                append(b"}" if is_object else b"]")
                open_.pop()
                first = False
                continue
            if not first:
                append(b",")
            if is_object:
                append(_string(member[0]))
                append(b":")
                member = member[1]
            node = member
            break
        else:
            return


def _encode_utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode()
        raise CanonicalizationError(
            f"string contains a lone UTF-16 surrogate ({bad}), which is not valid Unicode; "
            "pair it or replace it with U+FFFD",
            value=bad,
        ) from None


def canonical_json(value: object) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of a JSON value (plus exact big integers)."""
    if _orjson_ok(value):
        try:
            return orjson.dumps(value, option=_SORTED)
        except TypeError:  # past 64-bit integers, 255 levels, a lone surrogate
            pass
    out: list[bytes] = []
    _serialize(value, out)
    return b"".join(out)


@dataclass(frozen=True, slots=True)
class Digest:
    """SHA-256 of canonical bytes plus their size; the size is part of the identity."""

    sha256: bytes
    size: int

    @classmethod
    def of(cls, data: bytes) -> Digest:
        return cls(hashlib.sha256(data).digest(), len(data))

    @property
    def hex(self) -> str:
        return self.sha256.hex()

    @property
    def ref(self) -> Ref:
        return Ref.from_digest(self.sha256)


def digest_key(digest: bytes) -> str:
    """The first 16 bytes of `digest` as lowercase unpadded base32 (26 characters): the body
    of tool refs, history refs and storage keys."""
    return base64.b32encode(digest[:REF_DIGEST_BYTES]).decode("ascii").rstrip("=").lower()


def key_digest(key: str) -> bytes:
    """The 16 bytes `digest_key` wrote as `key` (26 characters of a-z and 2-7, checked by the
    caller). int() reads base 32 in C; base64.b32decode is a Python loop, slow for 100s of
    refs a request."""
    number = int(key.translate(_B32_TO_INT_DIGITS), 32)
    return (number >> 2).to_bytes(REF_DIGEST_BYTES, "big")  # 130 bits: 2 padding bits


class Ref(str):
    """A tool ref: `tr_` + lowercase unpadded base32 of the first 16 digest bytes."""

    __slots__ = ()

    def __new__(cls, text: str) -> Ref:
        if type(text) is cls:
            return text
        if not isinstance(text, str):
            raise InvalidRefError(
                f"a ref is a string, not a {type(text).__name__}",
                value=repr(text),
            )
        _check_ref(text)
        return super().__new__(cls, text)

    @classmethod
    def parse(cls, text: str) -> Ref:
        """Validate `text` as a ref; raise `InvalidRefError` saying why it is not one."""
        return cls(text)

    @classmethod
    def from_digest(cls, sha256: bytes) -> Ref:
        if len(sha256) < REF_DIGEST_BYTES:
            raise InvalidRefError(
                f"a ref needs at least {REF_DIGEST_BYTES} digest bytes, got {len(sha256)}"
            )
        return str.__new__(cls, REF_PREFIX + digest_key(sha256))

    @property
    def key(self) -> str:
        """The 26-character body, used in storage keys."""
        return self[len(REF_PREFIX) :]

    @property
    def digest_prefix(self) -> bytes:
        """The 16 digest bytes the ref encodes."""
        return key_digest(self.key)

    def __repr__(self) -> str:
        return f"Ref({str(self)!r})"


# RFC 4648 base32 letters (a-z, 2-7) -> the digits int(text, 32) reads (0-9, a-v).
_B32_TO_INT_DIGITS: Final = str.maketrans(
    "abcdefghijklmnopqrstuvwxyz234567", "0123456789abcdefghijklmnopqrstuv"
)
_REF_RE: Final = re.compile(r"tr_[a-z2-7]{25}[aeimquy4]")


def _check_ref(text: str) -> None:
    if _REF_RE.fullmatch(text):
        return
    shown = text if len(text) <= 64 else text[:61] + "..."
    if not text.startswith(REF_PREFIX):
        why = f"it does not start with {REF_PREFIX!r}"
    elif len(text) != REF_LENGTH:
        why = f"it has {len(text)} characters, a ref has {REF_LENGTH}"
    elif not re.fullmatch(r"[a-z2-7]*", text[len(REF_PREFIX) :]):
        why = "after 'tr_' only lowercase base32 letters a-z and digits 2-7 may follow"
    else:
        why = "its last character sets padding bits, so no 16-byte digest encodes to it"
    raise InvalidRefError(
        f"{shown!r} is not a ref: {why}; use the ref exactly as the registry returned it",
        value=shown,
    )


def is_ref(text: object) -> bool:
    return isinstance(text, str) and _REF_RE.fullmatch(text) is not None


def invocation_object(name: str, args: Any, result: Any, is_error: bool) -> dict[str, Any]:
    """The four-member object whose canonical bytes identify an invocation."""
    return {"args": args, "isError": is_error, "name": name, "result": result}


def invocation_bytes(name: str, args: Any, result: Any, is_error: bool = False) -> bytes:
    return canonical_json(invocation_object(name, args, result, is_error))


def invocation_digest(name: str, args: Any, result: Any, is_error: bool = False) -> Digest:
    return Digest.of(invocation_bytes(name, args, result, is_error))


INVOCATION_KEYS: Final = ("name", "args", "result", "isError")
_REQUIRED_KEYS: Final = INVOCATION_KEYS[:3]
_KEYS_HELP: Final = "an invocation mapping has the keys name, args, result and optionally isError"


def invocation_members(invocation: object, where: str = "the invocation") -> dict[str, Any]:
    """The wire form of an invocation mapping (name, args, result, isError), checked: an
    unknown key (`is_error`), a missing one, a name that is not a str or an isError that is
    not a bool is a `ValidationError` (a `ValueError`) naming it, never silently dropped."""
    if not isinstance(invocation, Mapping):
        raise ValidationError(
            f"{where} is a {type(invocation).__name__}, not a mapping; {_KEYS_HELP}"
        )
    unknown = [key for key in invocation if key not in INVOCATION_KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), INVOCATION_KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValidationError(f"{where} has an unknown key {key!r}{hint}; {_KEYS_HELP}")
    missing = [key for key in _REQUIRED_KEYS if key not in invocation]
    if missing:
        raise ValidationError(
            f"{where} has no {missing[0]!r} (its keys: {', '.join(map(str, invocation))}); "
            f"{_KEYS_HELP}"
        )
    name, is_error = invocation["name"], invocation.get("isError", False)
    if not isinstance(name, str):
        raise ValidationError(
            f"{where} has a name that is a {type(name).__name__} ({name!r}); a tool name is a str"
        )
    if not isinstance(is_error, bool):
        raise ValidationError(
            f"{where} has an isError that is a {type(is_error).__name__} ({is_error!r}); "
            "isError is True or False"
        )
    return {
        "name": name,
        "args": invocation["args"],
        "result": invocation["result"],
        "isError": is_error,
    }


def digest_of(invocation: Mapping[str, Any]) -> Digest:
    """Digest of an invocation mapping with members name, args, result and optional isError
    (any other key, or a missing one, is a `ValidationError`)."""
    wire = invocation_members(invocation)
    return invocation_digest(wire["name"], wire["args"], wire["result"], wire["isError"])
