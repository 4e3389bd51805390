"""Edits vectors for the TypeScript SDK (`vectors.json`'s `edits`, written by tests/js_vectors.py):
what the Python reference computes, so that client_sdk/js/src/edits/ is held to the same bytes.

- `cuts`: requests (headers and a body) and their cut (`toolref.edits.request.cut`): the
  headers' segment, each body segment as its byte range in the body, the entries (framed,
  hex), the recipe's ref, the messages' segments and the credentials; null where Python sends
  the request as it is. Bodies are given as `[unit, times]` pairs (the body is their
  concatenation), to keep the file small: tricky JSON (whitespace, escapes, lone surrogates,
  duplicate keys, numbers of any length, NaN, cache marks and id members inside messages,
  values counted in characters, pieces of 16 KiB) and JSON Python refuses.
- `diffs`: a base request, a new one and the pieces held: the ops (as the wire lists them)
  and the version-2 edit with raw records (`wire.encode_isolated`, nothing compressed).
- `windowed`: cuts with the long window (`cut(..., window=True)`), each segment's message
  and the model's segments beside.
- `editors`: conversations through `toolref.sending.editor.Editor` step by step (prepare,
  confirm, a miss), with raw records and no long window (its runs are zstd frames, which
  tests/integration/test_js_parity.py compares on a Node with zstd): each attempt's header
  line, base, ref, sizes and the SHA-256 of its bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from toolref.edits import bodycut, isolated, wire
from toolref.edits.edit import Inline, Keep, Named, Op, diff
from toolref.edits.recipe import PIECE_MIN, framed, piece_ref
from toolref.edits.request import Cut, cut
from toolref.sending.editor import Edit, Editor

Spec = list[tuple[str, int]]  # a body as [unit, times] pairs


def _body(spec: Spec) -> bytes:
    return "".join(unit * times for unit, times in spec).encode("utf-8", "surrogatepass")


@contextmanager
def raw_records() -> Iterator[None]:
    """Every inline segment as it is (record 0x00): the bytes then depend on no compressor."""
    module = vars(isolated)  # `pack` reads the constant at each call
    saved = module["MIN_COMPRESSED"]
    module["MIN_COMPRESSED"] = 1 << 62
    try:
        yield
    finally:
        module["MIN_COMPRESSED"] = saved


# The edits version the JS SDK writes (client_sdk/js/src/edits/wire.ts `VERSION`): 6, whose
# bytes are version 5's. Version 7's records against the shipped dictionary are Python's
# alone for now (docs/js.md): Node's zlib loads a dictionary afresh for every frame.
JS_VERSION: Final = 6
HEADERS = [("Content-Type", "application/json"), ("Authorization", "Bearer sk-1")]
TOOLS = json.dumps([{"type": "function", "function": {"name": f"tool_{n}"}} for n in range(9)])
BIG: Spec = [("x = 1  # é😀\n", 1400)]  # over PIECE_MIN bytes once encoded: a piece


def _compact(spec: Spec) -> Spec:
    """`spec` with neighbouring single units joined (the same body, fewer pairs)."""
    out: Spec = []
    for unit, times in spec:
        if not unit or not times:
            continue
        if times == 1 and out and out[-1][1] == 1:
            out[-1] = (out[-1][0] + unit, 1)
        else:
            out.append((unit, times))
    return out


def _text(parts: Spec) -> Spec:
    """The JSON string of the concatenation of `parts` (escaping is per character)."""
    return [
        ('"', 1),
        *((json.dumps(unit, ensure_ascii=False)[1:-1], times) for unit, times in parts),
        ('"', 1),
    ]


def _message(role: str, parts: Spec | str, extra: str = "") -> Spec:
    text = [(parts, 1)] if isinstance(parts, str) else parts
    return [('{"role":' + json.dumps(role) + ',"content":', 1), *_text(text), (extra + "}", 1)]


def _chat(messages: list[Spec], extra: str = "", tools: str = TOOLS) -> Spec:
    spec: Spec = [('{"model":"m","tools":' + tools + ',"messages":[', 1)]
    for index, message in enumerate(messages):
        spec += [(",", 1)] * (index > 0) + message
    return _compact([*spec, ("]" + extra + "}", 1)])


def _cut_cases() -> list[tuple[str, list[tuple[str, str]], Spec | bytes, str | None]]:
    accents = "é" * 200  # 200 characters, 400 bytes: under LARGE (256 characters)
    return [
        ("empty object", HEADERS, [("{}", 1)], "messages"),
        (
            "whitespace everywhere",
            HEADERS,
            [
                (
                    ' \n{ "messages" :\t[ {"role" : "user" ,\r\n "content":"hi"} ,\n 7 ] ,'
                    ' "z" : 1 }\n ',
                    1,
                )
            ],
            "messages",
        ),
        (
            "escaped key names the messages",
            HEADERS,
            [('{"messag\\u0065s":[{"a":1},{"b":2}]}', 1)],
            "messages",
        ),
        (
            "lone surrogates and escapes",
            HEADERS,
            [
                (
                    '{"messages":[{"content":"\\ud800 \\udfff '
                    '\\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9"}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "duplicate keys",
            HEADERS,
            [('{"messages":[{"a":1}],"messages":[{"b":2},{"c":3}],"messages":"no"}', 1)],
            "messages",
        ),
        (
            "numbers of any length",
            HEADERS,
            [
                (
                    '{"n":'
                    + "9" * 500
                    + ',"messages":[{"x":-0.0e-00,"y":1E+400,"z":'
                    + "1" * 300
                    + ".5e-9}]}",
                    1,
                )
            ],
            "messages",
        ),
        (
            "NaN and Infinity",
            HEADERS,
            [('{"messages":[{"x":NaN,"y":[Infinity,-Infinity]}]}', 1)],
            "messages",
        ),
        (
            "cache marks at any depth",
            HEADERS,
            [
                (
                    '{"messages":[{"role":"user","content":[{"type":"text","text":"'
                    + "a" * 80
                    + '" ,\n "cache_control" : {"type":"ephemeral"}}]},'
                    '{"role":"assistant","cache_control":{"type":"ephemeral", "cache_control":1},'
                    '"content":"' + "b" * 70 + '"}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "id members first, inside and alone",
            HEADERS,
            [
                (
                    '{"messages":[{"id":"m1", "role":"user","content":"' + "c" * 90 + '"},'
                    '{"role":"user" , "id" : "m2","content":"' + "d" * 90 + '","id":"again"},'
                    '{"id":"only"},{"role":"tool","content":{"id":"nested stays"}}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "cache marks after a first id and after brackets",
            HEADERS,
            [
                (
                    '{"messages":[{"id":"m1" , "cache_control":{"type":"ephemeral"},"role":"user",'
                    '"content":"' + "e" * 80 + '"},{"id":"m2","cache_control":{}},'
                    '{"role":"user","content":[{"type":"tool_result","content":[{"type":"text",'
                    '"text":"' + "f" * 80 + '"}] ,\n "cache_control":{"type":"ephemeral"}}]},'
                    '{"role":"assistant","content":[{"input":{"a":[1]},"cache_control":{}}],'
                    '"id":"m3"}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "parallel tool results",
            HEADERS,
            [
                (
                    '{"messages":[{"role":"user","content":"go"},{"role":"user","content":['
                    '{"type":"tool_result","tool_use_id":"t1","content":"'
                    + ("é file " * 30)
                    + '"} ,\n '
                    '{"tool_use_id":"t2","type":"text","type":"tool_result","content":[{"type":'
                    '"text","text":"page","cache_control":{"type":"ephemeral"}}]},'
                    '{"type":"text","text":"and"}]},{"role":"user","content":[{"type":'
                    '"tool_result","content":"alone"},{"type":"tool_resul\\u0074","content":2},'
                    '{"type":["tool_result"]}, 7]}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "function responses",
            HEADERS,
            [
                (
                    '{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f"}}]},'
                    '{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"r":"'
                    + ("x" * 40)
                    + '"}}},{"function_response":{"name":"g"}},{"text":"ok"}]},'
                    '{"role":"user","parts":[{"functionResponse":{}}],"content":[]}]}',
                    1,
                )
            ],
            "contents",
        ),
        (
            "messages that are not objects",
            HEADERS,
            [('{"messages":["text",12,[1,2],null,true,{}],"tail":[]}', 1)],
            "messages",
        ),
        ("an empty list", HEADERS, [('{"messages":[] ,"after":{}}', 1)], "messages"),
        (
            "large values counted in characters",
            HEADERS,
            [('{"system":"' + accents + '","tools":' + TOOLS + ',"messages":[]}', 1)],
            "messages",
        ),
        (
            "values of 255 and 256 characters",
            HEADERS,
            [
                ('{"a":"', 1),
                ("é", 254),
                ('","b":"', 1),
                ("é", 253),
                ('","c":"', 1),
                ("c", 254),
                ('","d":"', 1),
                ("c", 253),
                ('"}', 1),
            ],
            "messages",
        ),
        (
            "the largest span counted in characters",
            HEADERS,
            [
                (
                    '{"messages":[{"a":"cccc","id":"x","b":"\u00e9\u00e9"},{"a":"cccc","id":"x","b":"éééé"}]}',
                    1,
                )
            ],
            "messages",
        ),
        (
            "a piece of 16 KiB",
            HEADERS,
            [('{"messages":[', 1), *_message("tool", BIG), ("]}", 1)],
            "messages",
        ),
        (
            "the Responses input key",
            HEADERS,
            [('{"input":[{"role":"user","content":"' + "e" * 80 + '"}],"messages":[1]}', 1)],
            "input",
        ),
        ("no messages key", HEADERS, [('{"messages":[{"a":1}],"tools":' + TOOLS + "}", 1)], None),
        (
            "credentials and hop headers",
            [
                ("Host", "api.test"),
                ("Content-Length", "12"),
                ("X-Api-Key", "k"),
                ("My-Token", "t"),
                ("Proxy-Foo", "1"),
                ("Proxy-Authorization", "p"),
                ("Accept", ""),
                ("anthropic-version", "2023-06-01"),
                ("Connection", "keep-alive"),
            ],
            [('{"messages":[]}', 1)],
            "messages",
        ),
        ("no headers at all", [], [('{"messages":[{"role":"user"}]}', 1)], "messages"),
        ("trailing comma", HEADERS, [('{"messages":[1,]}', 1)], "messages"),
        ("control character in a string", HEADERS, [('{"messages":["a\tb"]}', 1)], "messages"),
        ("byte order mark", HEADERS, [("\ufeff{}", 1)], "messages"),
        ("top-level array", HEADERS, [("[{}]", 1)], "messages"),
        ("trailing data", HEADERS, [('{"a":1} {}', 1)], "messages"),
        ("leading zero", HEADERS, [('{"a":01}', 1)], "messages"),
        ("a dot without digits", HEADERS, [('{"a":1.}', 1)], "messages"),
        ("a bad escape", HEADERS, [('{"a":"\\x"}', 1)], "messages"),
        ("a short unicode escape", HEADERS, [('{"a":"\\u12"}', 1)], "messages"),
        ("not UTF-8", HEADERS, b'{"a":"\xff"}', "messages"),
        ("a surrogate in UTF-8", HEADERS, b'{"a":"\xed\xa0\x80"}', "messages"),
    ]


def _entries(made: Cut) -> list[str]:
    return [framed(entry).hex() for entry in made.entries]


def _cut_record(made: Cut | None, body: bytes) -> dict[str, Any] | None:
    if made is None:
        return None
    ranges: list[list[int]] = []
    at = 0
    for segment in made.segments[1:]:
        assert body[at : at + len(segment)] == segment
        ranges.append([at, at + len(segment)])
        at += len(segment)
    assert at == len(body)
    return {
        "header": made.segments[0].decode("latin-1"),
        "segments": ranges,
        "entries": _entries(made),
        "ref": made.ref,
        "messages": list(made.messages),
        "secrets": [list(pair) for pair in made.secrets],
        "splits": [[index, list(offsets)] for index, offsets in sorted(made.splits.items())],
    }


def cut_cases() -> list[dict[str, Any]]:
    cases = []
    for name, headers, spec, key in _cut_cases():
        body = spec if isinstance(spec, bytes) else _body(spec)
        case: dict[str, Any] = {
            "name": name,
            "headers": [list(pair) for pair in headers],
            "messagesKey": key,
        }
        if isinstance(spec, bytes):
            case["bodyHex"] = spec.hex()
        else:
            case["body"] = spec
        case["cut"] = _cut_record(cut(headers, body, key), body)
        cases.append(case)
    return cases


def _listed(ops: Sequence[Op]) -> list[Any]:
    listed: list[Any] = []
    for op in ops:
        if isinstance(op, Keep):
            listed.append([op.start, op.end])
        elif isinstance(op, Named):
            listed.append(piece_ref(op.piece))
        else:
            assert isinstance(op, Inline)
            listed.append(len(op.data))
    return listed


def _bytes_record(data: bytes) -> dict[str, Any]:
    """An edit's bytes: its header (as a JSON line says it, `wire.described`), length,
    SHA-256, and the bytes themselves when short."""
    found: dict[str, Any] = {
        "header": wire.described(data),
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if len(data) <= 2048:
        found["hex"] = data.hex()
    return found


def diff_cases() -> list[dict[str, Any]]:
    one = [_message("system", [("You help.", 10)]), _message("user", [("read a.py ", 10)])]
    two = [
        *one,
        _message("assistant", [("here ", 20)]),
        _message("tool", BIG),
        _message("user", [("thanks ", 12)]),
    ]
    edited = [one[0], _message("user", [("read b.py ", 10)]), *two[2:]]
    reordered = [two[3], *two[:3], two[4]]
    pairs: list[tuple[str, Spec, Spec, bool]] = [
        ("a continuation", _chat(one), _chat(two), False),
        ("a message edited in the middle", _chat(two), _chat(edited), False),
        ("moved around, a piece named", _chat(one), _chat(reordered), True),
        (
            "nothing in common",
            _chat([_message("user", [("x", 40)])]),
            _chat(one, ',"stream":true'),
            False,
        ),
        ("the same request", _chat(two), _chat(two), False),
    ]
    cases = []
    with raw_records():
        for name, base_spec, new_spec, hold in pairs:
            base = cut(HEADERS, _body(base_spec), "messages")
            new = cut(HEADERS, _body(new_spec), "messages")
            assert base is not None
            assert new is not None
            held = {entry[1:] for entry in new.entries if entry[:1] == b"\x00"} if hold else set()
            ops = diff(base.entries, new.entries, new.segments, held)
            cases.append(
                {
                    "name": name,
                    "base": base_spec,
                    "new": new_spec,
                    "held": [piece_ref(piece) for piece in sorted(held)],
                    "baseRef": base.ref,
                    "ops": _listed(ops),
                    "edit": _bytes_record(wire.encode_isolated(base.ref, ops)),
                }
            )
    return cases


def _attempt(edit: Edit | None) -> dict[str, Any] | None:
    if edit is None:
        return None
    return {
        "ref": edit.ref,
        "base": edit.base,
        "kept": edit.kept,
        "inline": edit.inline,
        "resends": edit.resends,
        "headers": [list(pair) for pair in edit.headers],
        "bytes": _bytes_record(edit.body),
    }


def _conversation(tag: str, turns: int, *, marks: bool = False, ids: bool = False) -> list[Spec]:
    """A chat's requests, one per turn: each the one before and an answer, a tool result (a
    piece every third turn) and a question; a cache mark on the last message when `marks`,
    a new id on every message each turn when `ids` (Codex's way)."""
    bodies: list[Spec] = []
    messages: list[tuple[str, Spec]] = [("system", [(f"You are {tag}. ", 8)])]
    for turn in range(turns):
        messages.append(("user", [(f"{tag}: read file {turn} é😀 ", 4)]))
        shown = []
        for index, (role, text) in enumerate(messages):
            extra = ',"id":"' + f"{tag}{turn}_{index}" + '"' if ids else ""
            if marks and index == len(messages) - 1:
                extra += ',"cache_control":{"type":"ephemeral"}'
            shown.append(_message(role, text, extra))
        bodies.append(_chat(shown))
        messages.append(("assistant", [(f"{tag}: calling the tool for {turn} ", 3)]))
        result = [*BIG, (str(turn), 1)] if turn % 3 == 2 else [(f"{tag} line {turn}\n", 30)]
        messages.append(("tool", result))
    return bodies


Step = dict[str, Any]


def forget_cuts() -> None:
    """No body is cut on from one before (`toolref.edits.bodycut`) nor sent against the
    recipe of one (`Editor._resumed`): JS makes the pass over the whole request every turn,
    and its edits are the same (`tests/unit/edits/test_editor_resumed.py`), their `kept`
    bytes too."""
    bodycut.forget()


def _scenario(name: str, editor: Editor, steps: list[Step]) -> dict[str, Any]:
    """Run `steps` through `editor`: `send` prepares a body (its index in `bodies`; confirmed
    when `confirm`: true, the ref; a string, that history; absent: nothing), `miss` answers
    the last attempt with a problem."""
    recorded: list[Step] = []
    bodies: list[Spec] = []
    last: Edit | None = None
    for step in steps:
        if "send" in step:
            if step["send"] not in bodies:
                bodies.append(step["send"])
            forget_cuts()  # the pass over the whole request, as JS makes it (see `forget_cuts`)
            last = editor.prepare(HEADERS, _body(step["send"]), "messages")
            out: Step = {"send": bodies.index(step["send"]), "attempt": _attempt(last)}
            if "confirm" in step:
                assert last is not None
                history = last.ref if step["confirm"] is True else step["confirm"]
                out["confirm"] = step["confirm"]
                out["confirmed"] = editor.confirm(last, history)
            recorded.append(out)
        else:
            assert last is not None
            status, problem = step["miss"]
            following = editor.on_miss(last, status, problem)
            out = {"miss": [status, problem], "attempt": _attempt(following)}
            if following is not None:
                last = following
                if step.get("confirm"):
                    out["confirm"] = True
                    out["confirmed"] = editor.confirm(last, last.ref)
            recorded.append(out)
    return {
        "name": name,
        "maxRecipes": editor.recipes._recipes.count,
        "maxBytes": editor.recipes.max_bytes,
        "bodies": bodies,
        "steps": recorded,
        "recipes": list(editor.recipes),
    }


def _missing(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": f"urn:toolref:problem:{kind}", "status": 409, **extra}


def editor_cases() -> list[dict[str, Any]]:
    cases = []
    with raw_records():
        a = _conversation("alpha", 6)
        cases.append(
            _scenario(
                "a conversation",
                Editor(long_window=False, version=JS_VERSION),
                [{"send": body, "confirm": True} for body in a],
            )
        )
        b = _conversation("beta", 4, marks=True)
        c = _conversation("gamma", 4, ids=True)
        steps: list[Step] = []
        for left, right in zip(b, c, strict=True):
            steps += [{"send": left, "confirm": True}, {"send": right, "confirm": True}]
        cases.append(
            _scenario(
                "two conversations, moving marks and fresh ids",
                Editor(long_window=False, version=JS_VERSION),
                steps,
            )
        )
        d = _conversation("delta", 5)
        cases.append(
            _scenario(
                "bounded to two recipes, some unconfirmed",
                Editor(max_recipes=2, long_window=False, version=JS_VERSION),
                [
                    {"send": d[0], "confirm": True},
                    {"send": a[0], "confirm": True},
                    {"send": d[1], "confirm": "tb_aaaaaaaaaaaaaaaaaaaaaaaaaa"},
                    {"send": b[0], "confirm": True},
                    {"send": d[2], "confirm": True},
                    {"send": d[3]},
                    {"send": d[4], "confirm": True},
                ],
            )
        )
        talk = [
            _message("system", [("You compare. ", 9)]),
            _message("user", [("which is it? ", 9)]),
        ]
        longer = [
            *talk,
            _message("assistant", [("this one. ", 9)]),
            _message("user", [("why? ", 20)]),
        ]
        kits = [
            json.dumps([{"name": f"{kit}_{n}", "doc": "d" * 90} for n in range(20)])
            for kit in "pqr"
        ]
        cases.append(
            _scenario(
                "a tie goes to the most recently used",
                Editor(long_window=False, version=JS_VERSION),
                [
                    {"send": _chat(talk, tools=kits[0]), "confirm": True},
                    {"send": _chat(talk, tools=kits[1]), "confirm": True},  # its base is kept
                    {"send": _chat(longer, tools=kits[2])},  # as near to both: the newer
                    {"send": _chat(talk, tools=kits[0])},  # used again: now the newer
                    {"send": _chat(longer, tools=kits[2])},
                ],
            )
        )
        e = _conversation("epsilon", 6)
        piece = cut(HEADERS, _body(e[3]), "messages")
        assert piece is not None
        held = [piece_ref(entry[1:]) for entry in piece.entries if entry[:1] == b"\x00"]
        cases.append(
            _scenario(
                "misses: history, pieces, a mismatch, the last resend whole",
                Editor(long_window=False, version=JS_VERSION),
                [
                    *({"send": body, "confirm": True} for body in e[:4]),
                    {"send": e[4]},
                    {"miss": (409, _missing("missing-pieces", missingPieces=held[:1]))},
                    {"miss": (409, _missing("missing-history", missingHistory="x"))},
                    {"miss": (400, {"type": "urn:toolref:problem:dictionary-mismatch"})},
                    {"miss": (409, _missing("missing-history"))},
                    {"send": e[5]},
                    {"miss": (409, _missing("missing-history"))},
                    {"miss": (429, {"type": "urn:toolref:problem:rate-limited"})},
                    {"miss": (409, _missing("missing-history")), "confirm": True},
                ],
            )
        )
        said = [("please run the whole test suite again and tell me what failed ", 8)]
        shown = [_message("system", [("You test. ", 9)])]
        repeated: list[Spec] = []
        for turn in range(8):
            shown.append(_message("user", said))
            repeated.append(_chat(list(shown)))
            shown.append(_message("assistant", [(f"ran it, {turn} failed ", 2)]))
        undone = _chat([*shown[:6], _message("user", [("no, run only the slow ones ", 3)])])
        cases.append(
            _scenario(
                "a message said again each turn, then an undo",
                Editor(long_window=False, version=JS_VERSION),
                [
                    *({"send": body, "confirm": True} for body in repeated),
                    {"send": undone, "confirm": True},
                ],
            )
        )
        cases.append(
            _scenario(
                "a byte bound that keeps one recipe",
                Editor(max_bytes=PIECE_MIN * 3, long_window=False, version=JS_VERSION),
                [{"send": body, "confirm": True} for body in e],
            )
        )
    return cases


def _lines(unit: str, count: int) -> str:
    """`count` distinct lines of `unit`, each ending in an escaped line end (JSON's `\\n`)."""
    return "".join(f"{unit} {n * 7919 % 10007}\n" for n in range(count))


def _windowed_cases() -> list[tuple[str, Spec]]:
    """Bodies the long window cuts: long messages of ASCII, of 2-, 3- and 4-byte characters
    (counted in characters), escaped backslashes before an n, lines longer than
    `WINDOW_MAX`, a message just under `WINDOW_LONG`, and the model's own messages."""
    code = _lines("    value = compute(item)  # step", 400)
    return [
        ("a long tool result", _chat([_message("user", "read it"), _message("tool", [(code, 1)])])),
        (
            "characters of every width",
            _chat([_message("user", [(_lines("é😀中 line", 300), 1)])]),
        ),
        ("escaped backslashes", _chat([_message("user", [("a\\nb " * 40 + "\n", 200)])])),
        ("one long line", _chat([_message("user", [("x" * 9000 + "\n" + "y" * 9000, 1)])])),
        ("just under the window", _chat([_message("user", [("z" * 4070, 1)])])),
        (
            "parallel tool results",
            _compact(
                [
                    ('{"messages":[{"role":"user","content":[{"type":"tool_result","content":', 1),
                    *_text([(code, 1)]),
                    ('},{"type":"tool_result","content":', 1),
                    *_text([(_lines("é😀中 page", 300), 1)]),
                    ("}]}]}", 1),
                ]
            ),
        ),
        (
            "the model's messages",
            _chat(
                [
                    _message("user", "go"),
                    _message("assistant", [(code, 1)]),
                    _message("model", "short"),
                    _message("user", [(code, 1)]),
                ]
            ),
        ),
        (
            "OpenAI Responses items of the model's (by type, a role of another's overriding)",
            _compact(
                [
                    ('{"messages":[{"type":"message","role":"user","content":"go"},', 1),
                    ('{"type":"reasoning","summary":[],"encrypted_content":', 1),
                    *_text([(code, 1)]),
                    ('},{"type":"function_call","name":"sh","arguments":"{}","call_id":"c"},', 1),
                    ('{"type":"function_call_output","call_id":"c","output":', 1),
                    *_text([(code, 1)]),
                    ('},{"type":"message","role":"assistant","content":[]},', 1),
                    ('{"role":"assistant","content":"x"},', 1),
                    ('{"type":"custom_tool_call","role":"user","input":"x"},', 1),
                    ('{"type":"shell_call","role":5,"call_id":"s"},', 1),
                    ('{"type":"reas\\u006fning","summary":[]},', 1),
                    ('{"type":"message","role":"model"},', 1),
                    ('{"type":"computer_call","role":null},{"type":["reasoning"]}]}', 1),
                ]
            ),
        ),
        (
            "OpenAI Responses hosted tools' items: a web or tool search the model's, no output",
            _compact(
                [
                    ('{"messages":[{"type":"message","role":"user","content":"go"},', 1),
                    ('{"type":"web_search_call","status":"completed","action":', 1),
                    ('{"type":"search","query":"q"}},', 1),
                    ('{"type":"mcp_call","name":"read","output":', 1),
                    *_text([(code, 1)]),
                    ('},{"type":"tool_search_call","call_id":"t","arguments":{}},', 1),
                    ('{"type":"tool_search_output","call_id":"t","tools":[]},', 1),
                    ('{"type":"file_search_call","results":[]},', 1),
                    ('{"type":"code_interpreter_call","outputs":[]},', 1),
                    ('{"type":"image_generation_call","result":"aVZC"},', 1),
                    ('{"type":"mcp_list_tools","tools":[]}]}', 1),
                ]
            ),
        ),
    ]


def windowed_cases() -> list[dict[str, Any]]:
    """Cuts with the long window (`cut(..., window=True)`): the cut, each segment's message
    (`owners`) and the model's segments (`answered`)."""
    cases = []
    for name, spec in _windowed_cases():
        body = _body(spec)
        made = cut(HEADERS, body, "messages", window=True)
        record = _cut_record(made, body)
        assert made is not None
        assert record is not None
        record["owners"] = list(made.owners)
        record["answered"] = sorted(made.answered)
        record["items"] = sorted(made.items)
        cases.append({"name": name, "body": _compact(spec), "cut": record})
    return cases


def build() -> dict[str, Any]:
    return {
        "cuts": cut_cases(),
        "windowed": windowed_cases(),
        "diffs": diff_cases(),
        "editors": editor_cases(),
    }
