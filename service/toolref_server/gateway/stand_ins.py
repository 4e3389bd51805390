"""What stands in for each replaced result of a request, as the store has it pinned: the
store decides which bytes a conversation sends for a result, on every replica and every
turn; what a process remembers of it (on the result's `Result`, in the remembered facts) is
a cache the store's pin overrides (`stand_ins`). The invocation each stand-in names and is
pinned under is read from the conversation (`invocations`), and made of its summary from
the summary cache (one per result, ever). Context editing's step
(`toolref_server.gateway.context_edits`) calls it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple, cast

from toolref import formats
from toolref.asgi.workers import Workers
from toolref.kit.payload import without_media
from toolref.kit.pending import Pending
from toolref.wire.canonical import Ref, invocation_digest
from toolref.wire.errors import CanonicalizationError, ToolrefError
from toolref_server.context.batches import Cleared
from toolref_server.context.facts import Call, Facts, Result, unmarked
from toolref_server.context.replacing import PINNED, as_json, escaped, stand_in
from toolref_server.registry.summary_cache import Slot, SummaryCache
from toolref_server.settings.context import Policy

_MEDIA_NOTE: Final = "cleared"  # what a media block is named with in a summary
# A pin held here is renewed (EXPIRE) once this share of the store's TTL went by since this
# process last renewed or wrote it: a pin lives at least three quarters of its lifetime
# past the last turn that sent it, and most turns renew none.
RENEWED: Final = 0.25
# The pins of a conversation whose stand-ins are all held here are read again once this
# many seconds went by since they were (each turn of an agent minutes apart reads them;
# turns back to back read them once a window): after a flush, replicas that remembered
# other bytes than another pinned agree within it.
READ_EVERY: Final = 10.0
clock = time.monotonic  # seconds, for the renewals and reads (a test moves it)
_Pin = tuple[Slot, float, float]  # a pin held: its slot, when renewed, when read


def sid_of(policy: Policy) -> str:
    """The id a policy's stand-ins are held and pinned by: its summarizer and budget."""
    return f"{policy.summarizer}:{policy.summary_chars}"


async def stand_ins(
    found: Facts,
    cleared: Sequence[Cleared],
    *,
    tenant: str,
    policy: Policy,
    summaries: SummaryCache,
    workers: Workers,
    changed: set[Cleared],
) -> None:
    """What stands in for each result of `cleared`, as the store has it, kept on its
    `Result`; `changed` gains the results whose stand-in this request sends in other bytes
    than the turns before (made at this request: sent for the first time, or again after
    the store lost it; or another replica's, pinned over the one this process held), or no
    longer sends (held, lost by the store, not kept again: past the stored-bytes quota).

    The store decides: each result's stand-in is pinned the first time any replica makes
    one (`SummaryStore.pin`: first writer wins), and the pins of every result of `cleared`
    are read on a request (their lifetimes renewed with it once a `RENEWED` share of the
    store's TTL went by since this process last did; not read where this process holds
    every one, read less than `READ_EVERY` before: turns back to back), those it holds too:
    what it holds is a cache of the pins' keys and bytes, which a pin read overrides.
    So every replica sends the same bytes for a result, even where its summary was a
    model's (another text each call) or the extractive fallback of a model that failed;
    after a flush (or a pin's expiry) the first replica to pin a result again, from its
    memory or made anew, decides for all. Where the store cannot be read, what this process
    holds stands (the caller sends it: the degraded path).

    Cost: one round trip on a request whose stand-ins are all pinned and held (one MGET of
    the pins, a GET each on a cluster; an EXPIRE of each pin due for renewal, pipelined,
    with a stored-bytes quota one more to count them the first time they are read in its
    window), O(cleared and their pins' bytes): an EXPIRE a pin a request was a command a
    pin, which doubled the gateway's CPU on late turns (`python -m loadtests.context_bench`,
    CPU growth 1.26 -> 1.74), a renewal every quarter lifetime costs nothing a turn. A request
    that makes or pins again adds the summaries of the missing (the summary cache: one per
    result, ever) and one write (`pin`), after the invocations of the results this process
    holds nothing of (each message parsed once, off the loop when large). A result whose
    invocation cannot be read is left as it is; so is one whose tool the model could not
    call again (`Invoked.runnable`) that has no stand-in pinned (one pinned before
    stays)."""
    sid = sid_of(policy)
    store = summaries.store
    slots: dict[Cleared, Slot] = {}
    renew: list[Slot] = []  # the pins held here whose lifetimes are renewed now
    now = clock()
    wanted = []
    fresh = True  # every pin held here read from the store within `READ_EVERY`
    for item in cleared:
        result = found.messages[item.message].results[item.result]
        pin = cast("_Pin | None", result.pins.get(sid))
        if pin is not None:
            slots[item] = pin[0]
            renew += [pin[0]] if now - pin[1] >= RENEWED * store.ttl else []
            fresh = fresh and now - pin[2] < READ_EVERY
        elif sid not in result.unmade:
            wanted.append(item)
    if fresh and not wanted and not renew:
        return  # held, and read moments ago: no round trip
    invocations: dict[Cleared, Invoked] = {}
    if wanted:
        # each message parsed once; off the loop when the messages are large
        size = workers.weigh(*(found.messages[c.message].text for c in wanted))
        invocations = await workers.run(size, invocations_of, found, wanted)
        for item, made in invocations.items():
            slots[item] = store.invocation(tenant, made.ref, PINNED + sid)
            renew.append(slots[item])
    if not slots:
        return
    pinned = await store.read(tenant, list(slots.values()), renew)
    renewed = set(renew)
    lost: list[Cleared] = []  # held here, gone from the store: pinned again as held
    texts: list[str] = []
    missing: list[Cleared] = []  # held nowhere: made
    for item, text in zip(slots, pinned, strict=True):
        result = found.messages[item.message].results[item.result]
        held = result.stand_in.get(sid)
        if text is not None:
            held_pin = cast("_Pin | None", result.pins.get(sid))
            at = now if slots[item] in renewed or held_pin is None else held_pin[1]
            _hold(result, item, sid=sid, pin=(slots[item], at, now), text=text, changed=changed)
        elif item not in invocations:
            if held is not None:  # (else a request beside this one dropped it meanwhile)
                lost.append(item)
                texts.append(held)
        elif not invocations[item].runnable:
            result.unmade.add(sid)  # the model could not call it again: left as it came
        else:
            missing.append(item)
    if missing:
        texts += await _made(
            found, missing, invocations, tenant=tenant, policy=policy, summaries=summaries
        )
    if not texts:
        return
    pinning = [*lost, *missing]
    kept = await store.pin(tenant, [slots[item] for item in pinning], texts)
    # None: not kept (the tenant past its stored-bytes quota). Another replica, or this one
    # once its memo is gone, would make its own, in other bytes where a model summarizes or
    # its summary fell back (the provider's cache broken on each such turn): the result
    # waits, as it came, for a turn that can keep its stand-in.
    for item, text in zip(pinning, kept, strict=True):
        new = item in invocations
        _kept(found, item, text, new, sid=sid, pin=(slots[item], now, now), changed=changed)


def _kept(
    found: Facts,
    item: Cleared,
    text: str | None,
    made: bool,
    *,
    sid: str,
    pin: _Pin,
    changed: set[Cleared],
) -> None:
    """`item`'s stand-in as the store kept it when pinned (`text`; None: not kept), `made`
    at this request or held here."""
    result = found.messages[item.message].results[item.result]
    if text is None:
        if result.stand_in.pop(sid, None) is not None:
            changed.add(item)  # held and sent before: now sent as it came
        result.pins.pop(sid, None)
    else:
        if made:
            changed.add(item)  # made at this request: no turn before sent it
        _hold(result, item, sid=sid, pin=pin, text=text, changed=changed)


def _hold(
    result: Result,
    item: Cleared,
    *,
    sid: str,
    pin: _Pin,
    text: str,
    changed: set[Cleared],
) -> None:
    """`result`'s stand-in is `text`, pinned in `pin`'s slot (its lifetime last renewed by
    this process, and the pin last read, at `pin`'s times, `clock`'s): held; `item` is
    `changed` when this process held other bytes (one it held none of was sent so by whoever
    pinned it)."""
    if result.stand_in.get(sid, text) != text:
        changed.add(item)
    result.stand_in[sid] = text
    result.pins[sid] = pin


async def _made(
    found: Facts,
    missing: Sequence[Cleared],
    invocations: Mapping[Cleared, Invoked],
    *,
    tenant: str,
    policy: Policy,
    summaries: SummaryCache,
) -> list[str]:
    """The stand-ins of `missing`, made of their summaries (the summary cache's)."""
    items = [(invocations[item].summarized, invocations[item].invocation) for item in missing]
    made = await summaries.many(tenant, items, policy.summarizer, policy.summary_chars)
    texts = []
    for item, summary in zip(missing, made, strict=True):
        result = found.messages[item.message].results[item.result]
        args = invocations[item].invocation["args"]
        shown = args if isinstance(args, str) else as_json(args)
        text = stand_in(item.name, shown, result.size, summary.text)
        # a result returned as text stays text; a format's own takes the format's form
        value = text if result.text is not None else _text_result(found.format, text)
        texts.append(as_json(value))
    return texts


def _text_result(format_name: str, text: str) -> Any:
    return formats.get(format_name).text_result(text)  # type: ignore[arg-type]


def invocations_of(found: Facts, wanted: Sequence[Cleared]) -> dict[Cleared, Invoked]:
    """The invocation (ref, wire form) of each result of `wanted`: its call paired as the
    SDK pairs them (`toolref.kit.pending.Pending`), both parsed from
    their messages' text. Every result of the format's own takes its call, wanted or not,
    so the pairing is the conversation's alone, the same on every turn; a second result
    for an answered call has none (as an orphan: its args `{}`). Each call's arguments are
    so read for one result at most: O(messages, calls and results) steps, plus each message
    parsed once."""
    unanswered: Pending[Call] = Pending()
    wanted_at = {(c.message, c.result): c for c in wanted}
    out: dict[Cleared, Invoked] = {}
    parsed: dict[int, Any] = {}

    def value_of(index: int) -> Any:
        if index not in parsed:
            parsed[index] = json.loads(found.messages[index].text)
        return parsed[index]

    for index, message in enumerate(found.messages):
        for call in message.calls:
            unanswered.add(call, call.call_id, call.name)
        for at, result in enumerate(message.results):
            paired = (
                unanswered.answered_by(result.call_id, result.name or "")
                if result.text is None
                else None
            )
            item = wanted_at.get((index, at))
            if item is None:
                continue
            try:
                out[item] = _invocation(value_of, item, result, paired)
            except (ValueError, KeyError, IndexError, TypeError, RecursionError, ToolrefError):
                continue  # left as it is: the plan counted it, the bytes stay the client's
    return out


def _invocation(
    value_of: Callable[[int], Any], item: Cleared, result: Result, call: Call | None
) -> Invoked:
    """The invocation of `result` (its call's arguments from its message, `value_of` its
    index; for a result returned as text, the arguments its text names), its ref made of
    its value less its cache marks; the summarizer reads each media block of its content
    named (`[image/png image: cleared]`), not its base64."""
    site = result.site
    value = unmarked(_member(value_of(item.message), site.path, site.result_key))
    args: Any = result.text if result.text is not None else {}
    if call is not None:
        args = _member(value_of(call.message), call.site.path, call.site.args_key)
    error = site.is_error
    try:
        ref = invocation_digest(item.name, args, value, error).ref
    except CanonicalizationError:  # a lone surrogate (`\ud800`): summarized as its escape
        args, value = escaped(args), escaped(value)
        ref = invocation_digest(item.name, args, value, error).ref
    # an image, a document or audio is named, not summarized as its base64 (`_MEDIA_NOTE`);
    # such a summary is kept under what it summarizes: the registry's summaries of `ref`
    # (hydrate's summary mode, GET .../summary) are of the whole result
    shown = without_media(value, _MEDIA_NOTE)
    summarized = ref if shown == value else invocation_digest(item.name, args, shown, error).ref
    invocation = {"name": item.name, "args": args, "result": shown, "isError": error}
    runnable = bool(item.name) and (call is None or call.direct)
    return Invoked(ref, summarized, invocation, runnable)


class Invoked(NamedTuple):
    """A replaced result's invocation: `ref`, its stand-in's (pinned); `summarized`, what
    its summary is kept under (`ref`, or the digest of `invocation` where media blocks were
    named in it); `invocation`, what the summarizer reads; `runnable`: the model can call
    its tool again as the stand-in says (False: its tool unknown, its call not in the
    conversation; or code made the call, a tool code alone may call): no new stand-in is
    made for it, one pinned before stays."""

    ref: Ref
    summarized: Ref
    invocation: dict[str, Any]
    runnable: bool = True


def _member(value: Any, path: Sequence[Any], key: str | None) -> Any:
    for step in path[1:]:
        value = value[step]
    return value[key]
