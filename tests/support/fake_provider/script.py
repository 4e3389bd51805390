"""The scripted agent session: a model for the fake provider that has an agent run real
tool calls.

The script is stateless: it counts the tool results already in the request (k of them) and
answers tool call k while k < `calls`, then a final text. A resent or retried request
therefore gets the same answer. Tool calls alternate between a shell tool (`echo
e2e-out-$((1000+k)) | tee step-kk.txt`: the output is computed by the shell, so it proves
the command really ran) and a read tool (the file the previous step wrote), using the names
and argument shapes of the tools the request offers (`Bash`/`Read` for Claude Code,
`shell`/`exec_command` for Codex, `run_shell_command`/`read_file` for Qwen Code and Gemini
CLI, `bash`/`read` for opencode, `Bash`/`Read` for the Continue CLI, `bash` alone for
mini-swe-agent, its reads `cat`); for an agent that refuses `$((...))` (Gemini CLI) the
shell prints the marker with printf's `%d`. Requests without tools (titles, summaries,
quota probes) get plain text, or the least JSON of the schema a Gemini request asks for.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fake_provider.reading import offered_tools, tool_results
from tests.support.fake_provider.wire import Api, Call, Reply

FINAL_TEXT = "E2E-DONE: the scripted session is complete."
SIDE_TEXT = "Scripted side answer."
SHELL_TOOLS = (
    *("Bash", "run_shell_command", "shell_command", "exec_command", "shell", "bash"),
    "exec",  # the latest Codex's default model: JavaScript calling tools.exec_command
)
READ_TOOLS = ("Read", "read_file", "ReadFile", "read")


def marker(k: int) -> str:
    """What step k's shell command prints (the shell computes it: the command's text
    does not contain it)."""
    return f"e2e-out-{1000 + k}"


def step_file(workdir: Path, k: int) -> Path:
    return workdir / f"step-{k:02d}.txt"


@dataclass(frozen=True, slots=True)
class Script:
    """`calls` tool calls in `workdir`, the kinds cycling through `kinds` ("shell" or
    "read"; a read needs the file the step before wrote, so step 0 is always a shell
    call), the tools found by the first of `shell`/`read` names the request offers.
    `settle`: for an agent that may lose the output of a command that exits at once."""

    calls: int
    workdir: Path
    kinds: tuple[str, ...] = ("shell", "read")
    shell: tuple[str, ...] = SHELL_TOOLS
    read: tuple[str, ...] = READ_TOOLS
    settle: float = 0.0  # seconds each shell command sleeps after its output
    # `$((...))` in the command (False: printf's `%d`, for an agent that refuses command
    # substitution, as Gemini CLI does)
    arithmetic: bool = True
    # For an agent that ends on a command, not on a text (mini-swe-agent: a command whose
    # output's first line is this word), the last answer is a shell call printing it, then
    # the final text (the answer's kind "finish")
    finish: str | None = None

    def __call__(self, api: Api, body: dict[str, Any]) -> Reply:
        """The answer to a request (a `Model`)."""
        tools = offered_tools(api, body)
        k = len(tool_results(api, body))
        if not tools:
            return Reply(text=side_text(api, body), index=k, kind="side")
        if k >= self.calls:
            final = f"{FINAL_TEXT} ({k} tool calls)"
            if self.finish is None:
                return Reply(text=final, index=k)
            return self.finishing(k, final, tools)
        try:
            call = self.step(k, tools)
        except LookupError as exc:
            return Reply(text=f"E2E-ERROR: {exc}", index=k, kind=f"error: {exc}")
        return Reply(call=call, index=k)

    def finishing(self, k: int, final: str, tools: dict[str, dict[str, Any]]) -> Reply:
        """The shell call that ends the session, printing `finish` then `final`."""
        name = _first(self.shell, tools)
        if name is None or self.finish is None:
            return Reply(text=final, index=k)
        command = f"echo {shlex.quote(self.finish)} && echo {shlex.quote(final)}"
        call = Call(name, shell_arguments(tools[name], command, self.workdir), final)
        return Reply(text=final, call=call, index=k, kind="finish")

    def kind(self, k: int) -> str:
        return "shell" if k == 0 else self.kinds[k % len(self.kinds)]

    def expected(self, k: int) -> str:
        """The text tool result k must contain."""
        return marker(k) if self.kind(k) == "shell" else marker(k - 1)

    def step(self, k: int, tools: dict[str, dict[str, Any]]) -> Call:
        """Tool call k, with tools (name -> JSON schema of its arguments) from the request."""
        if self.kind(k) == "read":
            name = _first(self.read, tools)
            if name is not None:
                path = str(step_file(self.workdir, k - 1))
                return Call(name, read_arguments(tools[name], path), marker(k - 1))
            command = f"cat {shlex.quote(str(step_file(self.workdir, k - 1)))}"
            expect = marker(k - 1)
        else:
            target = shlex.quote(str(step_file(self.workdir, k)))
            printed = (
                f"echo e2e-out-$((1000+{k}))"
                if self.arithmetic
                else f"printf 'e2e-out-%d\\n' {1000 + k}"
            )
            command = f"{printed} | tee {target} && ls"
            expect = marker(k)
        if self.settle:
            command += f"; sleep {self.settle}"
        name = _first(self.shell, tools)
        if name is None:
            raise LookupError(f"no shell tool among {sorted(tools)} (looked for {self.shell})")
        if "x-custom" in tools[name]:
            return Call(name, {}, expect, input=exec_source(command, self.workdir))
        return Call(name, shell_arguments(tools[name], command, self.workdir), expect)


@dataclass(frozen=True, slots=True)
class LongScript(Script):
    """The scripted session with long results (context editing's): each shell step prints
    `lines` more lines after its marker and counts its runs in `runs-kk.txt`; step `again`
    (None: none) is step 0's call again, the same command, as a model that needs a result it
    no longer sees whole runs its tool again."""

    lines: int = 250
    again: int | None = None

    def step(self, k: int, tools: dict[str, dict[str, Any]]) -> Call:
        own = 0 if k == self.again else k
        call = Script.step(self, own, tools)
        if self.kind(own) != "shell":
            return call
        runs = self.workdir / f"runs-{own:02d}.txt"
        more = f" && seq 1 {self.lines} && echo ran >> {runs}"
        arguments = json.loads(json.dumps(call.arguments).replace(" && ls", more))
        source = call.input.replace(" && ls", more) if call.input is not None else None
        return Call(call.name, arguments, call.expect, input=source)

    def expected(self, k: int) -> str:
        return marker(0) if k == self.again else Script.expected(self, k)


def side_text(api: Api, body: dict[str, Any]) -> str:
    """The answer to a request without tools: SIDE_TEXT, or, when a Gemini request asks
    for JSON of a schema (Gemini CLI's model router and next-speaker check), the least
    JSON that schema takes."""
    config = body.get("generationConfig") if api == "gemini" else None
    if isinstance(config, dict):
        schema = config.get("responseJsonSchema", config.get("responseSchema"))
        if isinstance(schema, dict):
            return json.dumps(instance(schema))
    return SIDE_TEXT


def instance(schema: dict[str, Any], depth: int = 0) -> Any:
    """The least value of a JSON schema (Gemini's types in upper or lower case): an
    object of its required properties, an enum's first value, 1, false, a short string.
    Depth bounded at 8."""
    kind = str(schema.get("type", "object")).lower()
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "object" and depth < 8:
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)
        return {
            name: instance(props[name], depth + 1)
            for name in required
            if isinstance(props.get(name), dict)
        }
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return SIDE_TEXT


def _first(names: Sequence[str], tools: dict[str, dict[str, Any]]) -> str | None:
    return next((name for name in names if name in tools), None)


def shell_arguments(schema: dict[str, Any], command: str, workdir: Path) -> dict[str, Any]:
    """Arguments running `command` for a shell tool with this schema."""
    props: dict[str, Any] = schema.get("properties") or {}
    args: dict[str, Any] = {}
    if "cmd" in props and "command" not in props:
        args["cmd"] = command  # Codex's exec_command
    elif (props.get("command") or {}).get("type") == "array":
        args["command"] = ["bash", "-lc", command]  # Codex's shell
    else:
        args["command"] = command
    if "workdir" in props:
        args["workdir"] = str(workdir)
    required = set(schema.get("required") or ())
    if "description" in props:
        args["description"] = "scripted e2e step"
    if "is_background" in props and "is_background" in required:
        args["is_background"] = False
    return args


def exec_source(command: str, workdir: Path) -> str:
    """JavaScript for Codex's freeform `exec` tool running `command` through its nested
    `exec_command`, the result its output."""
    args = json.dumps({"cmd": command, "workdir": str(workdir)})
    return f"const result = await tools.exec_command({args});\ntext(result);\n"


def read_arguments(schema: dict[str, Any], path: str) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties") or {}
    names = ("file_path", "absolute_path", "filePath", "filepath", "path")
    key = next((k for k in names if k in props), "file_path")
    return {key: path}
