"""Which tool results a request has replaced by their summaries: a pure function of the
conversation it carries and the policy, so that every replica, every turn, makes the same
choice without stored state.

The plan replays the conversation's turns: a turn's request ended where the model's answer
began (each run of the model's messages), and the last turn is this request. At each turn
it counts the estimated tokens of the conversation's messages (bytes / `BYTES_PER_TOKEN`;
the system prompt, tools and settings, which no replacement touches and which a client may
change, are not counted: a turn's choice depends on the messages alone) less what earlier
batches freed; past `trigger_tokens`, it replaces a batch: the oldest results not
yet replaced, older than the last `keep` and read by the model already (before its last
message: a request never replaces a result it brings first), of `min_tokens` or more and of
no excluded tool,
all of them at once (the most a rewrite of the cache can free); when they free less than
`clear_at_least` tokens, no batch is made that turn. Nor is one made that would not pay for itself
were the conversation to go on for half as many turns again as it has had (`PAYBACK`): a
batch writes the
provider's cache again from its first result on, which costs `rewrite_weight` times what
reading a token from the cache does over what it saves (Anthropic's prices: writing 1.25,
reading 0.1, so (1.25 - 0.1) / 0.1 = 11.5), and saves reading what it frees on every
later turn. A result replaced stays replaced on every
later turn (the replay makes the same choice again), so the provider's prompt cache is
rewritten once per batch and hits again after, and a model that calls a tool again to see
a replaced result only adds a new result: no turn replaces less than the one before.

Linear: one step per message and per result; the batches' queue sees each result once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from toolref_server.context.facts import Message, Result
from toolref_server.settings.context import Policy

BYTES_PER_TOKEN: Final = 4  # the estimate of input tokens: bytes of JSON text / 4
PAYBACK: Final = 0.5  # the turns a batch must pay for itself in, over the turns so far
STAND_IN_BYTES: Final = 200  # what a stand-in adds beyond its summary, about (names, args)


@dataclass(frozen=True, slots=True)
class Cleared:
    """A result replaced: its message's index and its index among that message's results,
    its tool's name, and the bytes replacing it frees (estimated)."""

    message: int
    result: int
    name: str
    freed: int


@dataclass(frozen=True, slots=True)
class Plan:
    """The results this request has replaced (in conversation order), the batches that
    replaced them, whether the last batch was made at this request's own turn (`rewrote`:
    the provider's cache is written again from the first of that batch's results), and the
    request's estimated bytes before and after; `checkpoint`: where the next request
    of the conversation can go on from (`plan`'s `resume`); `newest`: where the last
    batch's results begin in `cleared`."""

    cleared: tuple[Cleared, ...]
    batches: int
    rewrote: bool
    size: int
    freed: int
    checkpoint: Checkpoint | None = None
    newest: int = 0

    @property
    def tokens(self) -> int:
        return self.size // BYTES_PER_TOKEN

    @property
    def tokens_saved(self) -> int:
        return self.freed // BYTES_PER_TOKEN


@dataclass(slots=True)
class _Replay:
    policy: Policy
    stand_in: int
    total: int  # bytes of the conversation's messages up to this turn
    freed: int = 0
    batches: int = 0
    last: int = -1  # the turn of the last batch
    newest: int = 0  # where the last batch's results begin in `cleared`
    frontier: int = 0  # results seen for the queue (older than the last `keep`, or not)
    queued_freed: int = 0
    seen: int = 0  # results before the last model message: the model has read them
    # each result: its message, its index there, the result, its tool, the bytes before it
    results: list[tuple[int, int, Result, str, int]] = field(default_factory=list)
    queue: deque[tuple[Cleared, int]] = field(default_factory=deque)
    cleared: list[Cleared] = field(default_factory=list)
    names: dict[str | None, str] = field(default_factory=dict)  # each call's tool, by id

    def copy(self) -> _Replay:
        """A copy to go on from: its lists copied (C speed), their items shared."""
        return _Replay(
            self.policy, self.stand_in, self.total, self.freed, self.batches, self.last,
            self.newest, self.frontier, self.queued_freed, self.seen, list(self.results),
            deque(self.queue), list(self.cleared), dict(self.names),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The replay after `last` (its messages, the same objects, up to it) before the turn
    its request ended with, `turn`."""

    last: Message
    count: int
    turn: int
    replay: _Replay


def plan(messages: Sequence[Message], policy: Policy, resume: Checkpoint | None = None) -> Plan:
    """The plan of a request whose messages are `messages` (see the module docstring).
    `resume`: a checkpoint of an earlier request of the conversation, gone on from when
    this one holds its messages (the same objects: `toolref_server.context.facts` reuses
    them) and the policy is the same: then only the messages after it are replayed, and
    the replay's lists copied."""
    if (
        resume is not None
        and resume.replay.policy == policy
        and resume.count <= len(messages)
        and messages[resume.count - 1] is resume.last
    ):
        replay, turn, start = resume.replay.copy(), resume.turn, resume.count
    else:
        replay = _Replay(policy, STAND_IN_BYTES + policy.summary_chars, 0)
        turn, start = 0, 0
    names = replay.names
    for index in range(start, len(messages)):
        message = messages[index]
        if message.model and index and not messages[index - 1].model:
            _turn(replay, turn)
            turn += 1
        if message.model:
            replay.seen = len(replay.results)
        before = replay.total
        replay.total += message.size
        for call in message.calls:
            names[call.call_id] = call.name
        for at, result in enumerate(message.results):
            name = result.name or names.get(result.call_id, "")
            replay.results.append((index, at, result, name, before))
    checkpoint = None
    if messages:
        checkpoint = Checkpoint(messages[-1], len(messages), turn, replay.copy())
    _turn(replay, turn)
    # batches take the queue in order, so `cleared` is in conversation order
    return Plan(
        tuple(replay.cleared),
        replay.batches,
        replay.last == turn,
        replay.total,
        replay.freed,
        checkpoint,
        replay.newest,
    )


def _turn(replay: _Replay, turn: int) -> None:
    """The turn whose request held the messages counted so far: its batch, if one is due."""
    policy = replay.policy
    # Older than the last `keep`, and read by the model already: a result in the request
    # that first brings it (after the last model message) is never replaced there.
    older = min(len(replay.results) - policy.keep, replay.seen)
    while replay.frontier < older:
        index, at, result, name, before = replay.results[replay.frontier]
        replay.frontier += 1
        freed = result.size - replay.stand_in
        if (
            freed > 0
            and result.size >= policy.min_tokens * BYTES_PER_TOKEN
            and name not in policy.exclude_tools
        ):
            replay.queue.append((Cleared(index, at, name, freed), before))
            replay.queued_freed += freed
    least = policy.clear_at_least * BYTES_PER_TOKEN
    over = replay.total - replay.freed > policy.trigger_tokens * BYTES_PER_TOKEN
    if not over or not replay.queue or replay.queued_freed < least:
        return
    freed = replay.queued_freed  # a batch replaces every result due: the most per rewrite
    # The cache written again: from the batch's first result to the end, less what it frees.
    # (What earlier batches freed lies before it, in the text as sent and as written.)
    rewritten = replay.total - replay.queue[0][1] - freed
    if policy.rewrite_weight * rewritten > freed * (turn + 1) * PAYBACK:
        return  # would not pay for itself were the conversation to go on as long again
    replay.newest = len(replay.cleared)
    replay.cleared.extend(cleared for cleared, _ in replay.queue)
    replay.queue.clear()
    replay.queued_freed = 0
    replay.freed += freed
    replay.batches += 1
    replay.last = turn
