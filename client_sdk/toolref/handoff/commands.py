"""Does a shell command change anything? The handoff keeps every command that does.

A command line is read as a shell would (`toolref.handoff.shell`: quotes, comments,
heredoc bodies skipped) and split into its simple commands (at `|`, `&&`, `||`, `;`, `&`
and new lines); it has side effects when any of them does:

- an output redirection to a file (`>`, `>>`, `&>`, `2>`; not to `/dev/null` or a stream);
- a file operation (`rm`, `mv`, `cp`, `mkdir`, `touch`, `chmod`, `ln`, `tar -x`, `unzip`,
  `find -delete`, ...), or a project scaffold (`cargo init`, `npm init`, ...);
- an in-place edit (`sed -i`, `perl -pi`), or `tee` to a file;
- a git command that writes (`commit`, `add`, `push`, `checkout`, `reset`, `stash`, ...);
- a package install or removal (`pip install`, `npm install`, `apt-get install`, ...);
- an HTTP write or download (`curl -X POST`, `curl -d`, `curl -o FILE`, `wget`, `http PUT`);
- process and service control (`kill`, `systemctl start`, `docker run`, ...);
- a script piped into a shell (`curl ... | sh`), or `bash -c` with any of the above.

Reading, listing, searching, building and testing are not side effects: the same command
run twice only needs its last output.
"""

from __future__ import annotations

import re
from typing import Final

from toolref.handoff.shell import (
    REDIRECTS,
    SEPARATORS,
    Operator,
    logical_lines,
    split_commands,
    unwrap,
)

_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
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
        "cherry-pick",
        "revert",
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
_GIT_VALUE_OPTIONS: Final = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_LISTINGS: Final = frozenset({"list", "show", "-l", "--list"})
_SUBCOMMANDS: Final = {
    "pip": {"install", "uninstall", "download"},
    "pip3": {"install", "uninstall", "download"},
    "npm": {
        "install",
        "i",
        "ci",
        "uninstall",
        "remove",
        "rm",
        "add",
        "update",
        "link",
        "publish",
        "init",
    },
    "yarn": {"add", "install", "remove", "upgrade", "publish", "init"},
    "pnpm": {"add", "install", "i", "remove", "update", "publish", "init"},
    "apt": {"install", "remove", "purge", "upgrade", "update"},
    "apt-get": {"install", "remove", "purge", "upgrade", "update"},
    "brew": {"install", "uninstall", "upgrade", "update"},
    "cargo": {"install", "add", "remove", "publish", "uninstall", "init", "new"},
    "go": {"get", "install"},
    "gem": {"install", "uninstall"},
    "poetry": {"add", "install", "remove", "update", "publish", "new", "init"},
    "conda": {"install", "remove", "update", "create"},
    "uv": {"add", "remove", "sync", "init"},
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

MAX_COMMAND_CHARS: Final = 16_384  # longer commands are not parsed: counted as side effects


def has_side_effects(line: str) -> bool:
    """Can running `line` change anything (files, processes, repositories, packages)?
    Linear in its length; a command over `MAX_COMMAND_CHARS` is not parsed and counts as
    yes (the conservative answer: it is kept in a handoff, never dropped as a duplicate)."""
    if len(line) > MAX_COMMAND_CHARS:
        return True
    lines = logical_lines(line)
    for tokens in lines:
        commands = split_commands(tokens)
        separators = [str(t) for t in tokens if isinstance(t, Operator) and t in SEPARATORS]
        for position, (words, redirects) in enumerate(commands):
            if any(_writes(op, target) for op, target in redirects):
                return True
            argv = unwrap(words)
            if not argv:
                continue
            before = separators[position - 1] if 0 < position <= len(separators) else ""
            piped_into = before in ("|", "|&")
            if piped_into and argv[0].rsplit("/", 1)[-1] in _SHELLS and "-c" not in argv:
                return True  # a script from stdin (curl ... | sh): it can do anything
            if _command_has_side_effects(argv):
                return True
    return False


def _writes(op: str, target: str) -> bool:
    if op not in REDIRECTS:
        return False
    return not (target.startswith("&") or target in _HARMLESS_TARGETS)


def _subcommand(
    args: list[str], value_options: frozenset[str] = frozenset()
) -> tuple[str, list[str]]:
    """The first word that is not an option (skipping option values), and what follows it."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in value_options:
            index += 2
        elif arg.startswith("-"):
            index += 1
        else:
            return arg, args[index + 1 :]
    return "", []


def _command_has_side_effects(argv: list[str]) -> bool:
    program = argv[0].rsplit("/", 1)[-1]
    args = argv[1:]
    if program in _FILE_OPS or program in _PROCESS_OPS:
        return True
    if program in _SHELLS:
        script = args[args.index("-c") + 1] if "-c" in args[:-1] else None
        return script is not None and has_side_effects(script)
    if program == "tee":
        return any(not a.startswith("-") and a not in _HARMLESS_TARGETS for a in args)
    if program in ("sed", "perl", "ruby"):
        return any(
            a.startswith("--in-place")  # `--in-place=.bak` too
            or (a.startswith("-") and not a.startswith("--") and "i" in a)
            for a in args
        )
    if program == "tar":
        return _tar_writes(args)
    if program == "unzip":
        return not any(a in ("-l", "-t", "-Z", "-v", "-p") for a in args)
    if program == "find":
        return _find_writes(args)
    if program == "git":
        return _git_writes(args)
    if program in ("python", "python3") and args[:2] == ["-m", "pip"]:
        sub, _ = _subcommand(args[2:])
        return sub in _SUBCOMMANDS["pip"]
    if program == "uv":
        sub, rest = _subcommand(args)
        if sub == "pip":
            return _subcommand(rest)[0] in {"install", "uninstall", "sync"}
        return sub in _SUBCOMMANDS["uv"]
    if program in _SUBCOMMANDS:
        return _subcommand(args)[0] in _SUBCOMMANDS[program]
    if program == "curl":
        return _curl_writes(args)
    if program == "wget":
        return _wget_writes(args)
    if program in ("http", "https", "xh"):
        method, _ = _subcommand(args)
        return method.upper() in _HTTP_METHODS
    return False


def _tar_writes(args: list[str]) -> bool:
    for position, arg in enumerate(args):
        if arg.startswith("--"):
            if arg in ("--extract", "--get", "--create", "--append", "--update", "--delete"):
                return True
        elif arg.startswith("-") or position == 0:  # an option cluster (`xzf` alone is one too)
            if set(arg.lstrip("-").split("=")[0]) & set("xcru"):
                return True
            if "f" in arg:
                return False  # the next word is the archive's name, not options
    return False


_FIND_ACTIONS: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_ENDS: Final = frozenset({";", "+", "\\;"})


def _find_writes(args: list[str]) -> bool:
    """`-delete`, or an `-exec` (`-execdir`, `-ok`...) command with side effects. One pass:
    each command ends at its terminator or at the next action (a `find` run by `-exec` has
    its own actions in the same words), so every word is judged once. Before, each action
    rescanned the words after it and a nested `find` recursed into them: `find -exec find
    -exec ...` took time exponential in its length."""
    if "-delete" in args:
        return True
    command: list[str] | None = None
    for arg in [*args, ";"]:
        if command is not None and (arg in _FIND_ENDS or arg in _FIND_ACTIONS):
            argv = unwrap(command) or command
            if argv and argv[0].rsplit("/", 1)[-1] != "find" and _command_has_side_effects(argv):
                return True
            command = None
        if arg in _FIND_ACTIONS:
            command = []
        elif command is not None:
            command.append(arg)
    return False


def _git_writes(args: list[str]) -> bool:
    sub, rest = _subcommand(args, _GIT_VALUE_OPTIONS)
    if sub == "branch":
        changes = {"-d", "-D", "-m", "-M", "-c", "-C", "--delete", "--move", "--copy"}
        if changes & set(rest):
            return True
        names = [a for a in rest if not a.startswith("-")]
        return bool(names) and not (_LISTINGS & set(rest))  # `git branch NAME` creates
    if sub == "stash":
        return not rest or rest[0] not in _LISTINGS
    if sub == "tag":
        return bool([a for a in rest if not a.startswith("-")]) and not (_LISTINGS & set(rest))
    if sub == "config":
        return not any(
            a in ("--get", "--list", "-l", "--get-all", "--get-regexp") for a in rest
        ) and (len([a for a in rest if not a.startswith("-")]) >= 2)
    return sub in _GIT_WRITES


_CURL_WRITE_OPTIONS: Final = frozenset({"-d", "-F", "-T", "-O", "--remote-name", "--json"})
_CURL_WRITE_PREFIXES: Final = ("--data", "--form", "--upload-file")


def _curl_writes(args: list[str]) -> bool:
    for index, arg in enumerate(args):
        following = args[index + 1] if index + 1 < len(args) else ""
        method = (
            following if arg in ("-X", "--request") else arg[2:] if arg.startswith("-X") else ""
        )
        if method.upper() in _HTTP_METHODS:
            return True
        if arg in _CURL_WRITE_OPTIONS or arg.startswith(_CURL_WRITE_PREFIXES):
            return True
        if arg == "--output" or (re.fullmatch(r"-[a-zA-Z]*o", arg) is not None):
            if following not in _HARMLESS_TARGETS:
                return True  # -o FILE (or -sSLo FILE): a download to a file
        elif re.fullmatch(r"-[a-zA-Z]*[dFTO][a-zA-Z]*", arg) and not arg.startswith("-X"):
            return True
    return False


def _wget_writes(args: list[str]) -> bool:
    if "--spider" in args:
        return False
    for index, arg in enumerate(args):
        if re.fullmatch(r"-[a-zA-Z]*O-", arg):
            return False  # -O- and -qO-: to stdout
        if arg in ("-O", "--output-document") or re.fullmatch(r"-[a-zA-Z]*O", arg):
            return (args[index + 1] if index + 1 < len(args) else "") not in _HARMLESS_TARGETS
        if arg.startswith("--output-document="):
            return arg.split("=", 1)[1] not in _HARMLESS_TARGETS
    return True


# Programs that print a file given as an operand: such a command is a file read.
_READERS: Final = frozenset({"cat", "head", "tail", "nl", "less", "more", "bat", "batcat", "sed"})


def touches_files(line: str) -> bool:
    """Does `line` read a file (`cat F`, `sed -n '1,9p' F`, `head F`, ...) or write one (a
    redirection, an in-place edit, `tee`, a file operation)? A handoff places such commands
    with the files read and changed, before other output. Linear in its length; a command
    over `MAX_COMMAND_CHARS` is not parsed and counts as no."""
    if len(line) > MAX_COMMAND_CHARS:
        return False
    for tokens in logical_lines(line):
        for words, redirects in split_commands(tokens):
            if any(_writes(op, target) for op, target in redirects):
                return True
            argv = unwrap(words)
            if argv and (_reads_file(argv) or _writes_file(argv)):
                return True
    return False


def _reads_file(argv: list[str]) -> bool:
    program = argv[0].rsplit("/", 1)[-1]
    if program not in _READERS:
        return False
    operands = [a for a in argv[1:] if not a.startswith("-")]
    if program == "sed":
        operands = operands[1:] if "-e" not in argv and "-f" not in argv else operands
    return any(a not in _HARMLESS_TARGETS for a in operands)


def _writes_file(argv: list[str]) -> bool:
    program = argv[0].rsplit("/", 1)[-1]
    if program in _FILE_OPS:
        return True
    if program in ("tee", "sed", "perl", "ruby"):
        return _command_has_side_effects(argv)
    return False
