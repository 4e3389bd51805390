"""`InProcessRegistry`: the registry port (`toolref.registry.port.Registry`) for the gateway,
served by this process's own registry steps (`toolref_server.registry.hydrate.run`), one
tenant at a time.

The gateway's hydrator parsed the agent's body once; its messages (each one's value and
text) are handed to the registry's steps as they are: no request text is written or read
again, no middleware is entered a second time, no admission slot is taken twice. The
tenant's key was checked by the gateway; its request-rate quota is taken here, once per
hydrated request, and its stored-bytes quota by the store, as for any client.

The registry's history cache (`TOOLREF_HISTORY_CACHE_BYTES`) is the one place a history is
held in full (`holds_histories`): the whole conversation is answered as the cache's own
texts joined to the new ones, O(new) plus a list of references.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolref.receiving.budget import Budget
from toolref.registry.answers import AppliedEdit
from toolref.registry.port import Hydration, Messages
from toolref.wire.models import FormatName, HydrateRequest, ReturnMessages, validated
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server import documents
from toolref_server.registry import continuation, hydrate
from toolref_server.registry.edits import apply_edit
from toolref_server.services import Services

LOCATION = "this service's registry"


class InProcessRegistry:
    """The port for `tenant`, over `services` (see the module docstring)."""

    holds_histories = True
    location = LOCATION

    def __init__(self, services: Services, tenant: str, budget: Budget) -> None:
        self.services = services
        self.tenant = tenant
        self.budget = budget

    async def hydrate(
        self,
        messages: Messages,
        format: FormatName | None,
        *,
        history_ref: str | None,
        keep_history: bool,
        return_messages: ReturnMessages,
        checkpoint: bool,
    ) -> Hydration:
        """Always the whole conversation (`return_messages` is for a port that sends it
        over a wire): the cache's texts cost nothing to hand over."""
        services = self.services
        services.rate.admit(self.tenant)
        values, texts = messages.values, None
        if values is None:
            document = documents.decode_document(
                ('{"messages":' + messages.text + "}").encode(), "json", services.limits, "messages"
            )
            values, texts = document.value["messages"], document.texts
        decoded = documents.Decoded(
            {"messages": values},
            list(texts if texts is not None else messages.texts()),
            len(messages.text),
        )
        options: dict[str, object] = {"messages": [], "checkpoint": checkpoint}
        if format is not None:
            options["format"] = format
        if history_ref is not None:
            options["historyRef"] = history_ref
        body = validated(HydrateRequest, options)
        keep = keep_history or history_ref is not None
        ask = hydrate.Ask(self.tenant, PROTOCOL_REFS, body, decoded, keep, history_ref, None)
        done = await hydrate.run(services, ask)
        filled, kept = done.filled, done.kept
        answered: Sequence[str] = done.texts
        references = done.references()
        if filled.ahead is not None:
            answered = (*filled.ahead.texts, *answered)
            references = {**filled.ahead.references, **references}
        point = (kept.checkpoint, kept.checkpoint_length) if kept.checkpoint else None
        return Hydration(answered, "all", kept.head, point, references)

    async def history(self, ref: str, format: FormatName | None) -> Hydration:
        """History `ref` in full: from the history cache, or read whole from the store."""
        services = self.services
        cached = services.history_cache.get(self.tenant, ref)
        if cached is not None:
            return Hydration(cached.texts, "all", None, None, cached.references)
        loaded = await continuation.load(services, self.tenant, ref)
        texts = await services.workers.run(loaded.size, loaded.full_texts)
        return Hydration(texts, "all", None, None)

    async def apply_edit(self, data: bytes) -> AppliedEdit:
        """The edit applied by this process's registry steps, as `POST /v1/edits:apply`."""
        with self.budget.account() as account:
            applied = await apply_edit(self.services, self.tenant, data, None, account)
        return AppliedEdit(applied.head, applied.request.body, applied.ref)

    async def verify(self) -> str | None:
        return None  # the registry is this process: nothing to reach, no key to present
