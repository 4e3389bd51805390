"""How the agent CLIs added after the first ones are pointed at a base URL, offline and
without a login (tests/support/agents.py's `command` calls these):

- the Continue CLI (npm `@continuedev/cli`, `cn`): a config.yaml of one model of its
  `openai` provider at the base URL (Chat Completions), run headless (`-p`) in its auto
  mode (every tool allowed), its metrics off;
- pi (npm `@mariozechner/pi-coding-agent`): a provider of its own in `~/.pi/agent/
  models.json`, of the `anthropic-messages` API (Anthropic Messages), startup network off
  (`PI_OFFLINE`: no update check, no install ping), no session kept;
- mini-swe-agent (PyPI, through litellm): its `bash` tool calls on Chat Completions
  (`OPENAI_API_BASE`), the first-run setup and its confirmations off, litellm's price map
  read from the package; it ends on a command printing COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
  (the script's `finish`), then exits at once.
"""

from __future__ import annotations

import json
from pathlib import Path

# mini-swe-agent ends when a command's output starts with this line (the rest its answer).
MINI_FINISH = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def continue_command(
    binary: Path, base_url: str, home: Path, prompt: str, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The Continue CLI on `base_url` (the provider's `/v1`)."""
    config = home / ".continue" / "e2e.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(continue_config(base_url))
    # Its metrics off (its check for a newer version, at start, fails quietly offline).
    env |= {"CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0"}
    return [str(binary), "-p", "--auto", "--config", str(config), prompt], env


def continue_config(base_url: str) -> str:
    """One model of its `openai` provider (Chat Completions at `apiBase`), in every role."""
    return f"""\
name: e2e
version: 1.0.0
schema: v1
models:
  - name: fake
    provider: openai
    model: fake-model
    apiBase: {json.dumps(base_url)}
    apiKey: e2e-fake-key
    roles: [chat, edit, apply]
"""


def pi_command(
    binary: Path, base: str, home: Path, prompt: str, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """pi on `base` (the provider's root: its Anthropic client adds `/v1/messages`)."""
    models = home / ".pi" / "agent" / "models.json"
    models.parent.mkdir(parents=True, exist_ok=True)
    models.write_text(json.dumps(pi_models(base)))
    env |= {"PI_OFFLINE": "1", "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"}
    argv = [str(binary), "-p", "--no-session", "--provider", "fake"]
    return [*argv, "--model", "claude-sonnet-4-5", prompt], env


def pi_models(base: str) -> dict[str, object]:
    return {
        "providers": {
            "fake": {
                "baseUrl": base,
                "api": "anthropic-messages",
                "apiKey": "e2e-fake-key",
                "models": [{"id": "claude-sonnet-4-5", "reasoning": False}],
            }
        }
    }


def mini_command(
    binary: Path, base_url: str, home: Path, prompt: str, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """mini-swe-agent on `base_url` (the provider's `/v1`), its model `openai/fake-model`."""
    env |= {
        "OPENAI_API_KEY": "e2e-fake-key",
        "OPENAI_API_BASE": base_url,
        "MSWEA_CONFIGURED": "true",  # else it asks for a default model first
        "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mini-swe-agent"),
        "MSWEA_COST_TRACKING": "ignore_errors",  # litellm prices no fake-model
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "COLUMNS": "200",  # rich wraps its output at the terminal's width
    }
    argv = [str(binary), "-m", "openai/fake-model", "--yolo", "--exit-immediately"]
    return [*argv, "--cost-limit", "0", "-t", prompt], env
