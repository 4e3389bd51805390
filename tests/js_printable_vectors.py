"""`printable` vectors for the TypeScript SDK (client_sdk/js/test/printable.test.ts): a
peer's text (a header, a problem's detail, a redirect's `Location`) as a console message or
an error message shows it, computed by the Python rule (`toolref.wire.redaction.printable`):
each character a terminal acts on as its escape, at most `most` characters kept and the rest
counted. Both SDKs show a receiver's request id and the like through it (Python's `Sender`
at most 200 characters of each), so a hostile or broken peer writes no escape sequence and
no megabytes into an app's log or error message, whichever SDK the app uses. Characters are
code points in both (an astral one is one, a lone surrogate is one). `endpoints` holds URLs
and the endpoint a warning names for each (`toolref.sending.sender.target_of`: origin and
path, as JS's `endpointShown` writes it; before, Python wrote `https://host:/path`, an empty
port, where JS wrote `https://host/path`). Written into vectors.json by `tests.js_vectors`.
"""

from __future__ import annotations

import random
from typing import Any, Final

import httpx

from toolref.sending.sender import target_of
from toolref.wire.redaction import printable

# (name, text, most): `most` is always given (Python's default is the relay's line length).
CASES: Final[list[tuple[str, str, int]]] = [
    ("plain", "req_0123456789abcdef", 200),
    ("empty", "", 200),
    ("escape sequences", "\x1b[2J\x1b[Hall clear\x1b]0;title\x07", 200),
    ("CR LF forging a line, tab kept", "id\r\ntoolref: forged\tline", 200),
    ("every C0 control", "".join(chr(code) for code in range(0x20)), 200),
    ("DEL and every C1 control, NBSP kept", "".join(chr(code) for code in range(0x7F, 0xA2)), 200),
    ("CSI of its own", "\x9b2J", 200),
    ("line and paragraph separators", "a\u2028b\u2029c", 200),
    (
        "bidirectional controls, their neighbours kept",
        "\u200d\u200e\u200f\u2010 \u2029\u202a\u202b\u202c\u202d\u202e\u202f"
        " \u2065\u2066\u2067\u2068\u2069\u206a",
        200,
    ),
    ("exactly most: nothing counted", "x" * 200, 200),
    ("one over most", "x" * 201, 200),
    ("cut before escaping: escapes do not count", "\x1b" * 250, 200),
    ("astral characters count one each", "\U0001f600" * 250, 200),
    ("an astral character at the cut", "x" * 199 + "\U0001f600\U0001f600y", 200),
    ("lone surrogates count one each, kept", "\ud800x\udc00\udbff" * 60, 200),
    ("most zero: all counted", "\x1bab", 0),
    ("a request id of 10,000 characters", "\x1b[31m" + "r" * 10_000, 200),
    ("a small most", "\u202egnp.exe\x1b[0m", 5),
]

# Characters a peer's text may hold: printable ones and each kind escaped, astral and lone
# surrogates (Python and JS count both as one). A high surrogate is never followed by a low
# one (`_random_text`): JSON (and so JS) reads the two as one astral character, Python's str
# holds them as two.
ALPHABET: Final = (
    "a",
    "Z",
    " ",
    "\t",
    "\x00",
    "\x1b",
    "\n",
    "\r",
    "\x7f",
    "\x85",
    "\x9b",
    "\xa0",
    "é",
    "\u2028",
    "\u200e",
    "\u202e",
    "\u2069",
    "\u206a",
    "\ue000",
    "\U0001f600",
    "\U0010ffff",
    "\ud800",
    "\udfff",
)


def _case(name: str, text: str, most: int) -> dict[str, Any]:
    return {"name": name, "text": text, "most": most, "shown": printable(text, most)}


def _random_text(rng: random.Random) -> str:
    chars: list[str] = []
    for _ in range(rng.randrange(0, 260)):
        char = rng.choice(ALPHABET)
        if not (chars and chars[-1] == "\ud800" and char == "\udfff"):
            chars.append(char)
    return "".join(chars)


def build() -> list[dict[str, Any]]:
    rng = random.Random(58)
    cases = [_case(name, text, most) for name, text, most in CASES]
    for n in range(40):
        cases.append(_case(f"random {n}", _random_text(rng), rng.choice((0, 1, 7, 200, 300))))
    return cases


# URLs an app sends its LLM requests to: the scheme's own port given or not, another port,
# IPv6, an IDN host, upper case, credentials, a query and a fragment (never shown), dot
# segments, characters a path percent-encodes, and one already encoded.
URLS: Final = [
    "https://llm.test/v1/chat/completions",
    "https://llm.test:443/v1/chat/completions",
    "http://llm.test:80/v1/chat/completions",
    "http://127.0.0.1:8750/llm/openai/v1/chat/completions",
    "https://Gateway.Example.COM:8443/v1/messages",
    "http://[::1]:8080/v1/messages",
    "https://münchen.example/v1/responses",
    "https://user:secret@llm.test/v1/chat/completions",
    "https://gw.test/v1beta/models/g:generateContent?key=AIzaSECRET#part",
    "http://llm.test/a/../v1/./chat/completions",
    "https://llm.test/api/a b/é/{x}`y|z^",
    "https://llm.test/api/a%2Fb/%7Euser",
    "https://llm.test",
]


def endpoints() -> list[dict[str, str]]:
    return [{"url": url, "shown": target_of(httpx.URL(url))} for url in URLS]
