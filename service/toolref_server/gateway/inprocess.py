"""`InProcessRegistry`: the registry port (`toolref.registry.port.Registry`) for the gateway,
served by this process's own registry steps (`toolref_server.registry.hydrate.run`), one
tenant at a time.

The gateway's hydrator parsed the agent's body once; its messages (each one's value and
text) are handed to the registry's steps as they are: no request text is written or read
again, no middleware is entered a second time, no admission slot is taken twice. The
tenant's key was checked by the gateway; its request-rate quota is taken here, once per
hydrated request, and its stored-bytes quota by the store, as for any client.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolref.asgi.budget import Budget
from toolref.edits import wire as edit_wire
from toolref.registry.answers import AppliedEdit, HeldRequest, Reserve
from toolref.registry.port import Hydration, Messages
from toolref.wire.models import FormatName, HydrateRequest, validated
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server import documents
from toolref_server.registry import hydrate
from toolref_server.registry.edits import apply_edit
from toolref_server.services import Services

LOCATION = "this service's registry"


class InProcessRegistry:
    """The port for `tenant`, over `services` (see the module docstring)."""

    location = LOCATION

    def __init__(self, services: Services, tenant: str, budget: Budget) -> None:
        self.services = services
        self.tenant = tenant
        self.budget = budget

    async def hydrate(self, messages: Messages, format: FormatName | None) -> Hydration:
        """`messages` hydrated by this process's registry steps."""
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
            services.workers.weigh(messages.text),  # its objects and arrays too
        )
        options: dict[str, object] = {"messages": []}
        if format is not None:
            options["format"] = format
        body = validated(HydrateRequest, options)
        done = await hydrate.run(services, hydrate.Ask(self.tenant, PROTOCOL_REFS, body, decoded))
        answered: Sequence[str] = done.texts
        return Hydration(answered, done.references())

    async def apply_edit(
        self,
        data: bytes,
        *,
        segments: bool = False,
        held: HeldRequest | None = None,
        reserve: Reserve | None = None,
    ) -> AppliedEdit:
        """The edit applied by this process's registry steps, as `POST /v1/edits:apply`
        (in process the segments cost nothing to hand over: `held` is not needed). The
        body is built under this process's budget, `reserve` told its bytes then."""
        with self.budget.account(self.tenant) as account:
            applied = await apply_edit(self.services, self.tenant, data, None, account)
        if reserve is not None:
            reserve(len(applied.request.body))
        found = applied.segments if segments else ()
        return AppliedEdit(applied.head, applied.request.body, applied.ref, found)

    async def keep_answer(self, ref: str, answer: bytes) -> None:
        """Kept by this process's store (`storage.answers`), as the gateway keeps its own."""
        await self.services.answers.keep(self.tenant, ref, answer)

    async def verify(self) -> str | None:
        return None  # the registry is this process: nothing to reach, no key to present

    async def edits(self) -> int:
        return edit_wire.VERSION  # the registry is this process: the same release
