"""Whole numbers read from text a peer sent: headers, query parameters, stream fields.

`int()` on such text fails in two ways that must not surface as a 500 or a crash: digits
that `str.isdigit` accepts but `int` refuses (`'²'`), and strings longer than Python
converts (`sys.get_int_max_str_digits()`, 4300 by default), a ValueError raised after the
text was judged a number. `whole_number` checks both before converting.
"""

from __future__ import annotations


def whole_number(text: str, max_digits: int = 18) -> int | None:
    """The value of `text` when it is ASCII digits with at most `max_digits` significant
    ones (leading zeros do not count), else None. Linear in `text`; never raises."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    significant = text.lstrip("0")
    if len(significant) > max_digits:
        return None
    return int(significant or "0")


def describe(text: str) -> str:
    """`text` as an error message may quote it: whole when short, else its head and length."""
    if len(text) <= 16:
        return repr(text)
    return f"{text[:13]!r}... ({len(text)} characters)"
