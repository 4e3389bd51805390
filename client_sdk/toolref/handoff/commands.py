"""Does a shell command change anything? The handoff keeps every command that does.

A command line is split into its simple commands (at `|`, `&&`, `||`, `;`, `&` and new
lines, outside quotes); it has side effects when any of them does:

- an output redirection to a file (`>`, `>>`, `&>`, `1>`; not to `/dev/null` or a stream);
- a file operation (`rm`, `mv`, `cp`, `mkdir`, `touch`, `chmod`, `ln`, `tar -x`, `unzip`, ...);
- an in-place edit (`sed -i`, `perl -i`), or `tee`;
- a git command that writes (`commit`, `add`, `push`, `checkout`, `reset`, `stash`, ...);
- a package install or removal (`pip install`, `npm install`, `apt-get install`, ...);
- an HTTP write or download (`curl -X POST`, `curl -d`, `curl -o`, `wget`, `http PUT`);
- process and service control (`kill`, `systemctl start`, `docker run`, ...).

Reading, listing, searching, building and testing are not side effects: the same command
run twice only needs its last output.
"""

from __future__ import annotations

import re
import shlex
from typing import Final

_SPLIT: Final = re.compile(r"\|\||&&|[|;&\n]")
_REDIRECT: Final = re.compile(r"(?<![-=<>])(?:\d|&)?>>?(?![&=])\s*(\S+)?")
_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_WRAPPERS: Final = frozenset(
    {"sudo", "env", "time", "nohup", "nice", "timeout", "xargs", "command", "exec"}
)

_FILE_OPS: Final = frozenset(
    {
        "rm",
        "rmdir",
        "mv",
        "cp",
        "mkdir",
        "touch",
        "chmod",
        "chown",
        "chgrp",
        "ln",
        "install",
        "truncate",
        "dd",
        "rsync",
        "shred",
        "mkfifo",
        "unzip",
        "gunzip",
        "gzip",
        "bunzip2",
        "patch",
        "unlink",
        "split",
        "mktemp",
    }
)
_PROCESS_OPS: Final = frozenset({"kill", "pkill", "killall", "reboot", "shutdown", "crontab"})
_GIT_WRITES: Final = frozenset(
    {
        "add",
        "commit",
        "push",
        "pull",
        "merge",
        "rebase",
        "reset",
        "checkout",
        "switch",
        "restore",
        "stash",
        "cherry-pick",
        "revert",
        "tag",
        "clean",
        "rm",
        "mv",
        "apply",
        "am",
        "init",
        "clone",
        "fetch",
        "submodule",
        "worktree",
        "gc",
        "prune",
        "notes",
        "update-ref",
        "update-index",
        "bisect",
    }
)
_INSTALLERS: Final = {
    "pip": {"install", "uninstall", "download"},
    "pip3": {"install", "uninstall", "download"},
    "npm": {"install", "i", "ci", "uninstall", "remove", "rm", "add", "update", "link", "publish"},
    "yarn": {"add", "install", "remove", "upgrade", "publish"},
    "pnpm": {"add", "install", "i", "remove", "update", "publish"},
    "apt": {"install", "remove", "purge", "upgrade", "update"},
    "apt-get": {"install", "remove", "purge", "upgrade", "update"},
    "brew": {"install", "uninstall", "upgrade", "update"},
    "cargo": {"install", "add", "remove", "publish", "uninstall"},
    "go": {"get", "install"},
    "gem": {"install", "uninstall"},
    "poetry": {"add", "install", "remove", "update", "publish"},
    "conda": {"install", "remove", "update", "create"},
    "uv": {"add", "remove", "sync", "pip"},
    "dnf": {"install", "remove"},
    "yum": {"install", "remove"},
    "systemctl": {"start", "stop", "restart", "enable", "disable", "reload"},
    "service": {"start", "stop", "restart"},
    "docker": {
        "run",
        "rm",
        "rmi",
        "build",
        "push",
        "pull",
        "stop",
        "kill",
        "start",
        "exec",
        "compose",
    },
    "kubectl": {"apply", "delete", "create", "patch", "scale", "rollout", "edit", "replace"},
}
_HTTP_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def simple_commands(line: str) -> list[list[str]]:
    """The argv of each simple command in `line` (quotes respected where they parse)."""
    commands = []
    for part in _segments(line):
        try:
            argv = shlex.split(part, comments=True)
        except ValueError:
            argv = part.split()
        while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
            argv = argv[1:]  # VAR=value prefixes
        while argv and argv[0] in _WRAPPERS:
            argv = _unwrap(argv)
        if argv:
            commands.append(argv)
    return commands


def _unwrap(argv: list[str]) -> list[str]:
    rest = argv[1:]
    while rest and (rest[0].startswith("-") or re.fullmatch(r"\d+[smhd]?", rest[0])):
        rest = rest[1:]  # the wrapper's own options (timeout 10, nice -n 5, xargs -0)
    return rest


def _segments(line: str) -> list[str]:
    """Split at control operators outside single and double quotes (and heredoc bodies)."""
    body_start = line.find("<<")
    if body_start >= 0 and "\n" in line[body_start:]:
        line = line[: line.index("\n", body_start)]  # the heredoc body is data, not commands
    parts, current, quote = [], [], ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"' and index + 1 < len(line):
                current.append(line[index + 1])
                index += 1
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == "\\" and index + 1 < len(line):
            current.append(line[index : index + 2])
            index += 1
        else:
            match = _SPLIT.match(line, index)
            if match and not _is_redirect_amp(line, index):
                parts.append("".join(current))
                current = []
                index = match.end()
                continue
            current.append(char)
        index += 1
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p]


def _is_redirect_amp(line: str, index: int) -> bool:
    """`&` that belongs to a redirection (`2>&1`, `&>file`, `>&2`), not a control operator."""
    if line[index] != "&":
        return False
    before = line[index - 1] if index > 0 else ""
    after = line[index + 1] if index + 1 < len(line) else ""
    return before == ">" or after == ">"


def has_side_effects(line: str) -> bool:
    if _writes_a_file(line):
        return True
    return any(_command_has_side_effects(argv) for argv in simple_commands(line))


def _writes_a_file(line: str) -> bool:
    for part in _segments(line):
        unquoted = re.sub(r"'[^']*'|\"(?:[^\"\\\\]|\\\\.)*\"", "''", part)
        for match in _REDIRECT.finditer(unquoted):
            target = match.group(1) or ""
            if target.startswith("&") or target in _HARMLESS_TARGETS:
                continue
            return True
    return False


def _command_has_side_effects(argv: list[str]) -> bool:
    program = argv[0].rsplit("/", 1)[-1]
    args = argv[1:]
    if program in _FILE_OPS or program in _PROCESS_OPS:
        return True
    if program == "tee":
        return any(not a.startswith("-") and a not in _HARMLESS_TARGETS for a in args)
    if program in ("sed", "perl", "ruby"):
        return any(a == "-i" or a.startswith(("-i", "--in-place")) for a in args)
    if program == "tar":
        return any(_tar_writes(a) for a in args[:2])
    if program == "git":
        sub = next((a for a in args if not a.startswith("-")), "")
        if sub == "branch":
            changes = {"-d", "-D", "-m", "-M", "-c", "-C", "--delete", "--move", "--copy"}
            names = [a for a in args if not a.startswith("-")]
            return bool(changes & set(args)) or len(names) > 1  # `git branch NAME` creates
        if sub == "config":
            return not any(a in ("--get", "--list", "-l", "--get-all") for a in args)
        return sub in _GIT_WRITES
    if program in ("python", "python3") and args[:2] == ["-m", "pip"]:
        return len(args) > 2 and args[2] in _INSTALLERS["pip"]
    if program in _INSTALLERS:
        sub = next((a for a in args if not a.startswith("-")), "")
        return sub in _INSTALLERS[program]
    if program == "curl":
        return _curl_writes(args)
    if program == "wget":
        return _wget_to_file(args)
    if program in ("http", "https", "xh"):
        return bool(args) and args[0].upper() in _HTTP_METHODS
    return False


_CURL_WRITE_OPTIONS: Final = frozenset(
    {"-d", "-F", "-T", "-o", "-O", "--output", "--remote-name", "--json"}
)
_CURL_WRITE_PREFIXES: Final = ("--data", "--form", "--upload-file")
_CURL_COMBINED: Final = re.compile(r"-[a-zA-Z]*[dFTOo][a-zA-Z]*")  # -sSLo and the like


def _curl_writes(args: list[str]) -> bool:
    for index, arg in enumerate(args):
        method = ""
        if arg in ("-X", "--request") and index + 1 < len(args):
            method = args[index + 1]
        elif arg.startswith("-X"):
            method = arg[2:]
        if method.upper() in _HTTP_METHODS:
            return True
        if arg in _CURL_WRITE_OPTIONS or arg.startswith(_CURL_WRITE_PREFIXES):
            return True
        if not arg.startswith("-X") and _CURL_COMBINED.fullmatch(arg):
            return True
    return False


def _tar_writes(arg: str) -> bool:
    if arg.startswith("--"):
        return arg in ("--extract", "--create", "--append", "--update", "--delete")
    return bool(set(arg.lstrip("-")) & set("xcru"))


def _wget_to_file(args: list[str]) -> bool:
    if "--spider" in args or "-O-" in args:
        return False
    for index, arg in enumerate(args):
        if arg in ("-O", "--output-document") and index + 1 < len(args):
            return args[index + 1] != "-"
    return True
