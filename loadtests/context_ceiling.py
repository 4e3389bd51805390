"""The most context editing can save on a conversation: every tool result replaced by its
stand-in from the turn after it arrived (keep 0, no minimum size, no trigger, no batches,
no payback rule), each stand-in as long as the policy's allows. No policy saves more by
replacing results alone (issue 41's mechanism); what remains is the rest of the
conversation (the model's own messages, the user's, the system prompt and tools), which
context editing leaves as the client wrote it.

`python -m loadtests.context_ceiling` prints, for the traces the context bench judges, the
ceiling and the tokens / cost of a grid of policies around the defaults.

Pure and in process: the gateway's own `facts`, `plan` and `rewrite` over the bodies the
provider got without editing, a stand-in's summary taken as `summary_chars` characters
(the longest a summarizer writes) and its arguments as `{}` (so the ceiling is, if
anything, a little lower than a real run could reach).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from toolref.edits.scanner import shared as common_prefix
from toolref_server.context import facts as facts_module
from toolref_server.context.batches import plan
from toolref_server.context.replacing import as_json, rewritten, stand_in
from toolref_server.settings.context import Policy

READ, WRITE = 0.1, 1.25  # a cached and a written input token's price (context_bench's)
MOST: Final = replace(
    Policy(), mode="on", trigger_tokens=0, keep=0, min_tokens=0, clear_at_least=0,
    rewrite_weight=0.0,
)  # fmt: skip
_ID: Final = "ceiling"


@dataclass(frozen=True, slots=True)
class Ceiling:
    """Over a conversation: the tool results' share of its last body, and the input
    tokens and cache-priced cost of its bodies with every result replaced, over direct."""

    results_share: float
    tokens: float
    cost: float


def cost(bodies: Sequence[bytes]) -> float:
    """Each body priced as prompt caching prices it: what it shares from its start with the
    body before read from the cache, the rest written."""
    total, before = 0.0, b""
    for body in bodies:
        shared = common_prefix(before, body)
        total += READ * shared + WRITE * (len(body) - shared)
        before = body
    return total


def ceiling(bodies: Sequence[bytes], format_name: str, key: str) -> Ceiling | None:
    """The ceiling of `bodies` (one conversation's, in order, as the provider got them
    direct); None when the gateway does not read them (not of `format_name`)."""
    return replayed(bodies, format_name, key, MOST)


def replayed(bodies: Sequence[bytes], format_name: str, key: str, policy: Policy) -> Ceiling | None:
    """`bodies` as the gateway's plan under `policy` edits them (stand-ins as above)."""
    facts_module.forget()
    out: list[bytes] = []
    share = 0.0
    for body in bodies:
        found = facts_module.facts_of(body, "ceiling", format_name, key, policy.max_messages)
        if found is None:
            return None
        chosen = plan(found.messages, policy, found.replay)
        found.replay = chosen.checkpoint
        replaced: dict[int, list[tuple[int, str]]] = {}
        for item in chosen.cleared:
            result = found.messages[item.message].results[item.result]
            if _ID not in result.stand_in:
                summary = "s" * policy.summary_chars
                result.stand_in[_ID] = as_json(stand_in(item.name, "{}", result.size, summary))
            replaced.setdefault(item.message, []).append((item.result, result.stand_in[_ID]))
        out.append(rewritten(found, replaced) if replaced else body)
        results = sum(r.size for m in found.messages for r in m.results)
        share = results / len(body) if body else 0.0
    facts_module.forget()
    if not out:
        return None
    return Ceiling(share, sum(map(len, out)) / sum(map(len, bodies)), cost(out) / cost(bodies))


def main() -> int:
    """`python -m loadtests.context_ceiling`: over the shared traces the context bench
    judges, the ceiling, then tokens and cost under a grid of policies around the defaults
    (keep, clear_at_least, rewrite_weight), each over direct, in process."""
    from loadtests import traces
    from loadtests.bandwidth import turns_of
    from loadtests.context_bench import MIN_TURNS, PATHS, body_of

    conversations = []
    for trace in traces.load():
        fmt, messages, cuts = turns_of(trace)
        if fmt.name in PATHS and len(cuts) >= MIN_TURNS:
            bodies = [body_of(fmt.name, messages[:cut]) for cut in cuts]
            conversations.append((trace.name, fmt.name, bodies))
    if not conversations:
        print(f"no shared trace of {MIN_TURNS} turns or more", file=sys.stderr)
        return 2
    print("| policy | " + " | ".join(name for name, _, _ in conversations) + " |")
    print("|---|" + "---|" * len(conversations))
    grid = [("the most", MOST)] + [
        (f"keep {k}, clear_at_least {c}, rewrite_weight {w}", replace(Policy(), mode="on",
         keep=k, clear_at_least=c, rewrite_weight=w))
        for k in (3, 5) for c in (500, 2_000, 4_000) for w in (5.0, 11.5, 20.0)
    ]  # fmt: skip
    for name, policy in grid:
        cells = []
        for _, format_name, bodies in conversations:
            found = replayed(bodies, format_name, "messages", policy)
            cells.append("–" if found is None else f"{found.tokens:.2f} / {found.cost:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "context_ceiling")
    sys.exit(main())
