"""A URL as it may be shown: its credentials masked. The one home for every log line,
printed line and error message that names a URL (the service's Redis and upstream URLs,
the summarizer's LLM URL, the relay's gateway and fallback, and any URL a library logs).

A URL carries secrets in two places: its userinfo (`redis://:PASSWORD@host`,
`https://user:PASSWORD@host`, `https://TOKEN@host`, `https://sk_KEY:@host`) and its query
(`https://generativelanguage.googleapis.com/v1beta?key=AIza...`); a fragment may too.
`url` masks the userinfo whole (`[redacted]@host`: its user may be the key itself), every
query value (the names stay, to say what was there) and the fragment, and keeps the rest,
so the line still says which host and path it was, and that credentials were given. The
userinfo is taken to end at the URL's last `@`, wherever it is: a password holding an
unescaped `/`, `?`, `#` or `@` is masked whole, at the price of masking more of a URL whose
path or query holds an `@` (a log line then says less, never a secret); in running text,
a URL runs to the next space or quote, so punctuation after one (`key=...).`) is masked
with the value it may belong to. `urls_in` does the same for each URL in a text;
`targets_in` masks the query values of each request target in a text (`/path?key=...`,
as a server logs it); `LogRedactor` does both for each log record a handler writes. Pure,
linear in the text, never raising.

A line printed on a terminal or written to a log may also quote text a peer chose (an
upstream name a gateway lists, a header it sends, a problem's detail): `printable` shows
each character a terminal acts on as its escape (`\x1b`, `\r\n`, `\u009b`), so no escape
sequence runs and no CR LF forges a line, and keeps at most `MAX_SHOWN` characters of it;
`shown` is a line as the relay prints it (`urls_in`, then `printable`), and `LogRedactor`
applies `printable` too.
"""

from __future__ import annotations

import logging
import re
from typing import Final

MASK: Final = "[redacted]"
MAX_SHOWN: Final = 4096  # characters of one printed line or log message; the rest counted
# What a terminal acts on rather than shows: C0 controls but tab, DEL, C1 controls (U+009B
# is a CSI of its own), the line and paragraph separators, and the bidirectional controls
# that reorder what follows them.
UNPRINTABLE: Final = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
# A URL in running text: a scheme, `://`, then up to whitespace or a quote. Or (group 1
# empty) a run of scheme characters holding a `+`, `.` or `-` with no `://` after it, taken
# (and left as it is) by one match: each later start within it (after that `+`, `.` or `-`)
# scanned it again to fail alike, quadratic in the run (`a+a+a+...`). A plain word matches
# neither, so costs no call. Linear: each character is read once or twice.
_URL: Final = re.compile(
    r"\b[A-Za-z][A-Za-z0-9]*+"
    r"(?:(?:[+.-][A-Za-z0-9+.-]*+)?(://)[^\s'\"<>`]+|[+.-][A-Za-z0-9+.-]*+)"
)


def url(text: str) -> str:
    """`text`, a URL, with its userinfo, query values and fragment masked; text that is no
    URL (`scheme://...`) as it is."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    _, at, rest = rest.rpartition("@")
    rest, hashed, fragment = rest.partition("#")
    rest, asked, query = rest.partition("?")
    if at:
        rest = f"{MASK}@{rest}"
    if asked:
        rest += "?" + "&".join(_masked(pair) for pair in query.split("&"))
    if hashed:
        rest += "#" + (MASK if fragment else "")
    return f"{scheme}://{rest}"


def _masked(pair: str) -> str:
    name, equals, value = pair.partition("=")
    if equals:
        return f"{name}={MASK}" if value else pair
    return MASK if pair else pair


def urls_in(text: str) -> str:
    """`text` with every URL in it as `url` shows it."""
    if "://" not in text:
        return text
    return _URL.sub(_url_masked, text)


def _url_masked(found: re.Match[str]) -> str:
    shown = found.group()
    return url(shown) if found.group(1) else shown  # a word, not a URL: as it is


def targets_in(text: str) -> str:
    """`text` with the query values of every request target in it masked, as `url` masks a
    URL's: a path at the start of the text or after a space, quote or parenthesis, then
    `?` (`"WebSocket /llm/gemini/x?key=AIza..."`, as uvicorn logs an upgrade)."""
    if "?" not in text:
        return text
    return _TARGET.sub(_target_masked, text)


# A request target in running text: `/path?query`, up to a space, quote or fragment, at the
# start of the text or after a space, quote or parenthesis. Or (group 2 None) a path holding
# a `(` with no query, taken (and left as it is) by one match: each later start within it
# (after that `(`) scanned it again to fail alike, quadratic in the path (`(/(/(/...`). A
# plain path matches neither, so costs no call. Linear: each character is read once or twice.
_TARGET: Final = re.compile(
    r"/(?<![^\s'\"(]/)"
    r"(?:([^\s'\"<>`?#]*+)\?([^\s'\"<>`#]*+)|[^\s'\"<>`?#(]*+\([^\s'\"<>`?#]*+)"
)


def _target_masked(found: re.Match[str]) -> str:
    query = found.group(2)
    if query is None:
        return found.group()  # a path with no query (and a `(`): as it is
    return f"/{found.group(1)}?" + "&".join(_masked(pair) for pair in query.split("&"))


def printable(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` as a terminal or a log may show it: each character a terminal acts on as its
    escape (`\x1b`, `\n`, `\u202e`; tab as it is), at most `limit` characters of `text`
    kept and the rest counted (`... (N more characters)`). Mask secrets before: a cut could
    leave a URL's password without the `@` that marks it. Linear in `text`."""
    cut = text[:limit]
    more = len(text) - len(cut)
    kept = UNPRINTABLE.sub(_escaped, cut)
    return f"{kept}... ({more} more characters)" if more else kept


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(line: str) -> str:
    """`line` as it may be printed: its URLs' credentials masked (`urls_in`), then
    `printable`. The relay's printed lines and exit messages go through it."""
    return printable(urls_in(line))


class LogRedactor(logging.Filter):
    """A handler's filter: each record's message with its URLs and request targets masked
    (`urls_in`, `targets_in`), before any formatter sees it, whoever logged it (httpx logs
    each request's URL, query included, at INFO; uvicorn each WebSocket upgrade's path and
    query), and then `printable` (a reason phrase, a header or a name a peer chose)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = printable(targets_in(urls_in(message)))
        if shown != message:
            record.msg, record.args = shown, None
        return True
