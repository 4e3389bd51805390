"""How each coding agent is pointed at the relay: the line `toolref relay` prints per agent
at start, with the relay's address and the gateway's upstream for the agent's API.

Which upstream serves which API is the operator's naming: an upstream whose name holds the
API's usual word (`anthropic`, `claude`; `openai`, `gpt`; `gemini`, `google`) is taken, else
the line says `NAME` and lists the names the gateway has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Api = Literal["anthropic", "openai", "gemini"]

_HINTS: Final[dict[Api, tuple[str, ...]]] = {
    "anthropic": ("anthropic", "claude"),
    "openai": ("openai", "gpt"),
    "gemini": ("gemini", "google"),
}


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent, the API it speaks, and its set-up with `{url}` for the upstream's URL
    at the relay (`/v1` already added where the agent wants it)."""

    name: str
    api: Api
    template: str
    v1: bool = False  # the agent wants the base URL with /v1


AGENTS: Final = (
    Agent("Claude Code", "anthropic", "ANTHROPIC_BASE_URL={url} claude"),
    Agent("Codex", "openai", 'openai_base_url = "{url}" in ~/.codex/config.toml', v1=True),
    Agent("Qwen Code", "openai", "OPENAI_BASE_URL={url} qwen", v1=True),
    Agent("Gemini CLI", "gemini", "GOOGLE_GEMINI_BASE_URL={url} gemini"),
    Agent(
        "opencode",
        "openai",
        'provider options "baseURL": "{url}" in ~/.config/opencode/opencode.json',
        v1=True,
    ),
    Agent("aider", "openai", "OPENAI_API_BASE={url} aider --model openai/MODEL", v1=True),
    Agent("Continue CLI", "openai", "apiBase: {url} for a model in its config.yaml", v1=True),
    Agent("pi", "anthropic", '"baseUrl": "{url}" for a provider in ~/.pi/agent/models.json'),
    Agent("mini-swe-agent", "openai", "OPENAI_API_BASE={url} mini -m openai/MODEL", v1=True),
)


def upstream_for(api: Api, upstreams: tuple[str, ...] | None) -> str | None:
    """The upstream whose name says it serves `api`, or None."""
    for name in upstreams or ():
        if any(hint in name.lower() for hint in _HINTS[api]):
            return name
    return None


def set_up_lines(relay: str, upstreams: tuple[str, ...] | None) -> list[str]:
    """One line per agent: how to point it at the relay at `relay` (http://HOST:PORT)."""
    width = max(len(agent.name) for agent in AGENTS)
    lines = ["toolref relay: point each agent at the relay (NAME: an upstream of the gateway):"]
    for agent in AGENTS:
        name = upstream_for(agent.api, upstreams)
        url = f"{relay}/llm/{name or 'NAME'}" + ("/v1" if agent.v1 else "")
        line = f"  {agent.name:<{width}}  {agent.template.format(url=url)}"
        if name is None:
            has = f"it has {', '.join(upstreams)}" if upstreams else "it lists none"
            line += f"  (NAME: the gateway's upstream for the {agent.api} API; {has})"
        lines.append(line)
    sdk = f"{relay}/llm/NAME"
    lines.append(f"  {'any SDK':<{width}}  base_url={sdk} (OpenAI's SDKs: {sdk}/v1)")
    return lines
