"""Real agent CLIs for the end-to-end tests: pinned npm (and PyPI) installs and offline runs.

Each CLI is installed with `npm install --prefix .toolref/e2e/<name> <package>@<version>`
(aider and mini-swe-agent: `pip install <package>==<version>` into the venv
`.toolref/e2e/<name>/venv`),
skipped when that version is already there, and run as /work/shared/notes/relay.md says:
a scratch HOME (and CODEX_HOME), an environment of its own (no proxies, no keys from the
machine), its base URL pointed at the fake provider or the relay, telemetry and updates
off, bounded by `timeout`.

    python -m tests.support.agents install [NAME ...]  # all of INSTALLABLE; `make e2e` runs it
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.support import IN_CI, more_agents
from tests.support.fake_provider import Api

ROOT = Path(__file__).resolve().parents[2]
INSTALLS = ROOT / ".toolref" / "e2e"
PROMPT = "Run the scripted steps, one tool call at a time, then report."
TIMEOUT = 300.0  # seconds for a whole session


@dataclass(frozen=True, slots=True)
class Cli:
    name: str
    package: str
    version: str
    api: Api  # the API it speaks
    bin: str
    registry: Literal["npm", "pypi"] = "npm"
    installs: str = ""  # the folder under INSTALLS, when another Cli's (default: name)

    @property
    def prefix(self) -> Path:
        return INSTALLS / (self.installs or self.name)

    @property
    def binary(self) -> Path:
        if self.registry == "pypi":
            return self.prefix / "venv" / "bin" / self.bin
        return self.prefix / "node_modules" / ".bin" / self.bin

    def installed_version(self) -> str | None:
        if self.registry == "pypi":
            stem = self.package.replace("-", "_")
            found = sorted(self.prefix.glob(f"venv/lib/python*/site-packages/{stem}-*.dist-info"))
            versions = [d.name.removeprefix(f"{stem}-").removesuffix(".dist-info") for d in found]
            return versions[-1] if versions and self.binary.exists() else None
        manifest = self.prefix / "node_modules" / self.package / "package.json"
        try:
            version = json.loads(manifest.read_text()).get("version")
        except (OSError, ValueError):
            return None
        return version if isinstance(version, str) and self.binary.exists() else None


CLIS: dict[str, Cli] = {
    cli.name: cli
    for cli in (
        Cli("claude", "@anthropic-ai/claude-code", "2.1.330", "messages", "claude"),
        Cli("codex", "@openai/codex", "0.169.0", "responses", "codex"),
        Cli("qwen", "@qwen-code/qwen-code", "0.24.4", "chat", "qwen"),
    )
}
# More agents through the same scripted session (tests/e2e/test_agents.py); `make bench`
# (loadtests/agents.py) times the three above.
MORE_CLIS: dict[str, Cli] = {
    cli.name: cli
    for cli in (
        Cli("gemini", "@google/gemini-cli", "0.61.0", "gemini", "gemini"),
        Cli("opencode", "opencode-ai", "1.18.33", "chat", "opencode"),
        Cli("continue", "@continuedev/cli", "1.5.47", "chat", "cn"),
        Cli("pi", "@mariozechner/pi-coding-agent", "0.73.1", "messages", "pi"),
        Cli("mini-swe-agent", "mini-swe-agent", "2.4.6", "chat", "mini", registry="pypi"),
    )
}
SESSION_CLIS: dict[str, Cli] = {**CLIS, **MORE_CLIS}


# The latest Codex on its built-in OpenAI provider (`openai_base_url`): it prefers the
# Responses WebSocket (tests/e2e/test_codex_websocket.py). Installed with the others.
CODEX_WS = Cli("codex-ws", "@openai/codex", "0.171.0", "responses", "codex")
# aider (PyPI, through litellm): its own session (edits and a test command, not tool
# calls; tests/e2e/test_aider.py).
# Its OpenAI path (`--openai-api-base`) and its Anthropic path (`ANTHROPIC_API_BASE`), one
# install.
AIDER = Cli("aider", "aider-chat", "0.86.2", "chat", "aider", registry="pypi")
AIDER_ANTHROPIC = Cli(
    "aider-anthropic", "aider-chat", "0.86.2", "messages", "aider", "pypi", installs="aider"
)
INSTALLABLE: dict[str, Cli] = {**SESSION_CLIS, CODEX_WS.name: CODEX_WS, AIDER.name: AIDER}


def missing_node() -> str | None:
    """Why the CLIs cannot be installed or run here, or None."""
    absent = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not on PATH" if absent else None


def install(cli: Cli) -> float | None:
    """Install `cli` at its pinned version; seconds taken, None when it already was."""
    if cli.installed_version() == cli.version:
        return None
    cli.prefix.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if cli.registry == "pypi":
        _pip_install(cli)
        return time.monotonic() - start
    done = subprocess.run(
        [
            "npm",
            "install",
            "--prefix",
            str(cli.prefix),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"{cli.package}@{cli.version}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or cli.installed_version() != cli.version:
        raise RuntimeError(
            f"npm install {cli.package}@{cli.version} failed ({done.returncode}): "
            f"{done.stderr.strip()[-2000:]}"
        )
    return time.monotonic() - start


def _pip_install(cli: Cli) -> None:
    """`cli` into a venv of its own (its dependencies never meet the project's)."""
    venv = cli.prefix / "venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [*pip, "--disable-pip-version-check", f"{cli.package}=={cli.version}"],
    ]
    for step in steps:
        done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(step[:4])} ... for {cli.package}=={cli.version} failed "
                f"({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
            )
    if cli.installed_version() != cli.version:
        raise RuntimeError(f"pip installed no {cli.package}=={cli.version} in {venv}")


# --- running one --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    cli: Cli
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _env(home: Path) -> dict[str, str]:
    """A clean environment: the CLI sees no proxy, key or config of the machine's."""
    node = shutil.which("node")
    path = [str(Path(node).parent)] if node else []
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    return {
        "PATH": os.pathsep.join([*path, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def command(
    cli: Cli, base: str, workdir: Path, home: Path, prompt: str, model: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """argv and environment running `cli` against `base` (the provider's root URL: the
    fake's, or the relay's `/llm/<name>`); files it needs are written under `home`.
    `model`: the model to ask for, where the CLI is told one (None: its default)."""
    env = _env(home)
    workdir.mkdir(parents=True, exist_ok=True)
    if cli.name == "claude":
        env |= {
            "ANTHROPIC_BASE_URL": base,
            "ANTHROPIC_API_KEY": "e2e-fake-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_MAX_RETRIES": "2",
        }
        argv = [
            str(cli.binary),
            "-p",
            prompt,
            "--model",
            "claude-sonnet-4-5",
            "--allowedTools",
            "Bash,Read",
            "--output-format",
            "json",
        ]
        return argv, env
    if cli.name == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(codex_config(base + "/v1"))
        env |= {"CODEX_HOME": str(codex_home), "FAKE_API_KEY": "e2e-fake-key"}
        return [str(cli.binary), "exec", "--skip-git-repo-check", prompt], env
    if cli.name == "codex-ws":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(codex_ws_config(base + "/v1", model))
        env |= {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "e2e-fake-key"}
        return [str(cli.binary), "exec", "--skip-git-repo-check", prompt], env
    if cli.name == "qwen":
        settings = home / ".qwen" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(QWEN_SETTINGS))
        env |= {
            "OPENAI_API_KEY": "e2e-fake-key",
            "OPENAI_BASE_URL": base + "/v1",
            "OPENAI_MODEL": "fake-model",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
        return [str(cli.binary), "-p", prompt, "--yolo"], env
    if cli.name == "gemini":
        settings = home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(GEMINI_SETTINGS))
        env |= {
            "GEMINI_API_KEY": "e2e-fake-key",
            "GOOGLE_GEMINI_BASE_URL": base,  # it adds /v1beta/models/...
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # else exit 55 in a folder not trusted
        }
        return [str(cli.binary), "-p", prompt, "--yolo"], env
    if cli.name == "opencode":
        config = home / ".config" / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(opencode_config(base + "/v1")))
        env |= {"OPENCODE_PERMISSION": json.dumps({"*": "allow"})}
        return [str(cli.binary), "run", prompt], env
    if cli.name in ("aider", "aider-anthropic"):
        return aider_command(cli, base, workdir, prompt, env)
    if cli.name == "continue":
        return more_agents.continue_command(cli.binary, base + "/v1", home, prompt, env)
    if cli.name == "pi":
        return more_agents.pi_command(cli.binary, base, home, prompt, env)
    if cli.name == "mini-swe-agent":
        return more_agents.mini_command(cli.binary, base + "/v1", home, prompt, env)
    raise ValueError(f"no such CLI {cli.name!r}")


def codex_config(base_url: str) -> str:
    return f"""\
model = "gpt-5-codex"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[features]
plugins = false

[analytics]
enabled = false

[model_providers.fake]
name = "fake"
base_url = {json.dumps(base_url)}
env_key = "FAKE_API_KEY"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1
"""


def codex_ws_config(base_url: str, model: str | None) -> str:
    """The built-in OpenAI provider at `base_url`: Codex opens the Responses WebSocket
    (`GET .../v1/responses` upgraded) and falls back to HTTP only when refused."""
    chosen = f"model = {json.dumps(model)}\n" if model else ""
    return f"""\
{chosen}openai_base_url = {json.dumps(base_url)}
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[features]
plugins = false

[analytics]
enabled = false
"""


QWEN_SETTINGS = {
    "security": {"auth": {"selectedType": "openai"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "model": {"name": "fake-model"},
}


# With GOOGLE_GEMINI_BASE_URL alone Gemini CLI 0.61.0 picks its "gateway" auth and says
# "Invalid auth method selected."; the API key's auth takes the base URL as well.
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}


def opencode_config(base_url: str) -> dict[str, Any]:
    """A provider of opencode's bundled `@ai-sdk/openai-compatible` at `base_url` (Chat
    Completions), its one model the default."""
    return {
        "model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base_url, "apiKey": "e2e-fake-key"},
                "models": {"fake-model": {}},
            }
        },
    }


def aider_command(
    cli: Cli, base: str, workdir: Path, prompt: str, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """aider on one message: no git, every question answered yes, its test command
    `sh check.sh` run after each edit (its failing output sent back: up to 3 times), nothing
    fetched that it can do without (litellm's price map read from the package)."""
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_CHECK_UPDATE": "false"}
    if cli.api == "messages":
        env |= {"ANTHROPIC_API_KEY": "e2e-fake-key", "ANTHROPIC_API_BASE": base}
        model = "anthropic/claude-sonnet-4-5"
    else:
        env |= {"OPENAI_API_KEY": "e2e-fake-key", "OPENAI_API_BASE": base + "/v1"}
        model = "openai/fake-model"
    quiet = ["--no-check-update", "--no-show-release-notes", "--analytics-disable"]
    quiet += ["--no-show-model-warnings", "--no-pretty", "--no-fancy-input", "--no-detect-urls"]
    argv = [str(cli.binary), "--model", model, "--no-git", "--yes-always", *quiet]
    argv += ["--map-tokens", "0", "--edit-format", "whole"]
    argv += ["--auto-test", "--test-cmd", "sh check.sh", "--message", prompt]
    return argv, env


async def run(
    cli: Cli,
    base: str,
    workdir: Path,
    home: Path,
    prompt: str = PROMPT,
    seconds: float = TIMEOUT,
    model: str | None = None,
) -> Run:
    """Run one session of `cli` in `workdir` (on this loop's terms: the fake provider may
    be served by the same event loop)."""
    argv, env = command(cli, base, workdir, home, prompt, model)
    argv = ["timeout", "-k", "5", str(int(seconds)), *argv]
    start = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), seconds + 15)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
    return Run(
        cli,
        argv,
        process.returncode if process.returncode is not None else -1,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        time.monotonic() - start,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "install":
        print(
            "usage: python -m tests.support.agents install [NAME ...] (of "
            f"{' '.join(INSTALLABLE)})",
            file=sys.stderr,
        )
        return 2
    reason = missing_node()
    if reason is not None:
        print(f"e2e: cannot install the agent CLIs: {reason}", file=sys.stderr)
        return 1 if IN_CI else 0  # locally the tests skip, saying why; CI fails here
    for name in args[1:] or list(INSTALLABLE):
        cli = INSTALLABLE[name]
        seconds = install(cli)
        state = "already installed" if seconds is None else f"installed in {seconds:.1f} s"
        print(f"e2e: {cli.package}@{cli.version} {state} ({cli.prefix})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
