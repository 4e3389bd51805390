"""A shell command line read as a shell would: tokens (quotes, backslashes, comments and
heredoc bodies handled), logical lines, simple commands (split at `|`, `&&`, `||`, `;`, `&`
and new lines) with their redirections, and each one's argv without wrappers (`sudo`, `env`,
`timeout`, ...) or `VAR=value` prefixes. Linear in the line's length. `commands` judges what
the commands do.
"""

from __future__ import annotations

import re
from typing import Final

SEPARATORS: Final = frozenset({"|", "||", "&&", ";", "&", "|&", ";;"})
REDIRECTS: Final = frozenset({">", ">>", "&>", "&>>", ">|"})
_INPUTS: Final = frozenset({"<", "<<", "<<-", "<<<", "<&", ">&"})
# Wrappers run the command that follows them; the options listed take a value.
_WRAPPERS: Final = {
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-U"}),
    "env": frozenset({"-u", "-C", "-S"}),
    "time": frozenset({"-f", "-o"}),
    "nohup": frozenset(),
    "nice": frozenset({"-n"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "xargs": frozenset({"-n", "-I", "-L", "-P", "-d", "-s", "-E", "-a"}),
    "command": frozenset(),
    "exec": frozenset({"-a"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
}
_HEREDOC: Final = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")

_OPERATORS: Final = (
    "&>>",
    "<<<",
    "<<-",
    ">>",
    "&>",
    ">&",
    "<<",
    "||",
    "&&",
    "|&",
    ";;",
    ">|",
    "<&",
    "|",
    "&",
    ";",
    "<",
    ">",
    "(",
    ")",
)


class Operator(str):
    """An unquoted control or redirection operator; words are plain `str`."""

    __slots__ = ()


class _GluedOperator(Operator):
    """An operator with no space before it (`2>`: the 2 is a file descriptor)."""

    __slots__ = ()


Token = str  # a word, or an `Operator`
_PLAIN: Final = re.compile(r"[^ \t\n'\"\\|&;<>()]+")  # a run of ordinary word characters


def logical_lines(text: str) -> list[list[Token]]:
    """Token lists, one per logical line: shell words and operators, quotes and backslashes
    removed from words; a quote left open at the end of a line goes on over the next ones;
    heredoc bodies dropped. One pass over the text: linear in its length."""
    found: list[list[Token]] = []
    index, size = 0, len(text)
    while index < size:
        start = index
        tokens, index = _line(text, index)
        chunk = text[start:index]
        index += 1  # the newline ending the logical line
        heredoc = None if "<<<" in chunk else _HEREDOC.search(chunk)
        if heredoc is not None:
            end = heredoc.group(2)
            while index < size:
                stop = text.find("\n", index)
                stop = size if stop < 0 else stop
                line, index = text[index:stop], stop + 1
                if line.strip() == end:
                    break
        found.append(tokens)
    return found


def _line(text: str, index: int) -> tuple[list[Token], int]:
    """The tokens of the logical line starting at `index`, and where it ends (its newline,
    or the end of the text). A quote never closed makes the rest of the text one line of
    plain words."""
    tokens: list[Token] = []
    word: list[str] = []
    in_word = False
    start, size = index, len(text)

    def flush() -> None:
        nonlocal in_word
        if in_word:
            tokens.append("".join(word))
            word.clear()
            in_word = False

    while index < size:
        char = text[index]
        if char == "\n":
            break
        if char in " \t":
            flush()
            index += 1
        elif char == "#" and not in_word:
            stop = text.find("\n", index)  # a comment runs to the end of the line
            index = size if stop < 0 else stop
        elif char == "\\":
            following = text[index + 1 : index + 2]
            word.append("" if following == "\n" else following)
            in_word = True
            index += 1 if following == "\n" else 2
        elif char in "'\"":
            close = _closing(text, index)
            if close < 0:
                rest = text[start:].replace("'", " ").replace('"', " ")
                return rest.split(), size
            inner = text[index + 1 : close]
            word.append(inner if char == "'" else re.sub(r'\\([\\"$`])', r"\1", inner))
            in_word = True
            index = close + 1
        elif char in "|&;<>()":
            kind = _GluedOperator if in_word else Operator
            flush()
            operator = next(op for op in _OPERATORS if text.startswith(op, index))
            tokens.append(kind(operator))
            index += len(operator)
        else:
            run = _PLAIN.match(text, index)
            end = run.end() if run else index + 1  # no match: a lone '#' inside a word
            word.append(text[index:end])
            in_word = True
            index = end
    flush()
    return tokens, index


def _closing(text: str, start: int) -> int:
    """Where the quote at `start` closes (over newlines), or -1 when it never does."""
    quote = text[start]
    if quote == "'":
        return text.find("'", start + 1)
    index = start + 1
    while True:
        close = text.find('"', index)
        if close < 0:
            return -1
        backslashes = 0
        while text[close - 1 - backslashes] == "\\" and close - 1 - backslashes > start:
            backslashes += 1
        if backslashes % 2 == 0:
            return close
        index = close + 1


def split_commands(tokens: list[Token]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """(argv, redirections) of each simple command."""
    commands: list[tuple[list[str], list[tuple[str, str]]]] = []
    argv: list[str] = []
    redirects: list[tuple[str, str]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        operator = isinstance(token, Operator)
        if operator and token in SEPARATORS:
            commands.append((argv, redirects))
            argv, redirects = [], []
        elif operator and (token in REDIRECTS or token in _INPUTS):
            target = str(tokens[index + 1]) if index + 1 < len(tokens) else ""
            if isinstance(token, _GluedOperator) and argv and argv[-1].isdigit():
                argv.pop()  # the file descriptor of `2>`
            redirects.append((str(token), target))
            index += 1
        elif not operator:
            argv.append(str(token))
        index += 1
    commands.append((argv, redirects))
    return [(a, r) for a, r in commands if a or r]


def simple_commands(line: str) -> list[list[str]]:
    """The argv of each simple command in `line`: redirections, wrappers and `VAR=value`
    prefixes removed."""
    found = []
    for tokens in logical_lines(line):
        for words, _ in split_commands(tokens):
            argv = unwrap(words)
            if argv:
                found.append(argv)
    return found


def unwrap(argv: list[str]) -> list[str]:
    """The command `argv` runs: `VAR=value` prefixes and wrappers (`sudo -u bob`,
    `timeout 5`, `env`, `xargs -n 1`, ...) with their options taken off."""
    while True:
        while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
            argv = argv[1:]  # VAR=value prefixes
        if not argv or argv[0] not in _WRAPPERS:
            return argv
        takes_value = _WRAPPERS[argv[0]]
        rest = argv[1:]
        while rest and (
            rest[0].startswith("-") or (argv[0] == "timeout" and _is_duration(rest[0]))
        ):
            rest = rest[2:] if rest[0] in takes_value else rest[1:]
        if argv[0] == "timeout" and rest and _is_duration(rest[0]):
            rest = rest[1:]
        argv = rest


def _is_duration(text: str) -> bool:
    return re.fullmatch(r"\d+(?:\.\d+)?[smhd]?", text) is not None
