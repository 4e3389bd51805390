"""docs/architecture.md's packages and the arrows allowed between them, held against every
import of the product code (read from the source, not run): an import that is not allowed
fails here, naming the module, what it imports and the rule it breaks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SOURCES: Final = {
    "toolref": ROOT / "client_sdk" / "toolref",
    "toolref_relay": ROOT / "client_sdk" / "toolref_relay",
    "toolref_server": ROOT / "service" / "toolref_server",
}
SDK_PARTS: Final = (
    "wire",
    "asgi",
    "registry",
    "sending",
    "receiving",
    "streaming",
    "acp",
    "handoff",
)
# The kit: the pure modules of `toolref.kit` and the pure packages beside it.
KIT: Final = frozenset({"kit", "formats", "edits", "websocket"})
SERVER_PARTS: Final = ("http", "routes", "registry", "storage", "gateway", "settings", "context")
ENTRY: Final = frozenset({"", "app", "cli", "export", "services"})  # the service assembled

# package -> the packages it may import (besides itself). docs/architecture.md draws these.
SDK: Final = {"wire", "asgi", "kit"}
ALLOWED: Final[dict[str, frozenset[str]]] = {
    "wire": frozenset(),
    "asgi": frozenset({"wire"}),  # ASGI plumbing shared by relay, middleware and gateway
    "kit": frozenset({"wire", "asgi"}),
    "streaming": frozenset(SDK),
    "handoff": frozenset(SDK),
    "acp": frozenset({*SDK, "streaming"}),
    "registry": frozenset(SDK),
    "sending": frozenset({*SDK, "registry"}),
    "receiving": frozenset({*SDK, "registry"}),
    "relay": frozenset({*SDK, "registry", "sending"}),  # a sender: never "receiving"
    # The service may use the SDK's kit, contract and receiving side, never its sending one.
    "server.settings": frozenset(SDK),
    "server.support": frozenset({*SDK, "receiving", "server.settings"}),
    "server.storage": frozenset({*SDK, "receiving", "server.settings", "server.support"}),
    # the registry's steps declare what they use (protocols), never the `Services` bag
    "server.registry": frozenset(
        {*SDK, "receiving", "server.settings", "server.support", "server.storage"}
    ),
    "server.http": frozenset({*SDK, "receiving", "server.settings", "server.support"}),
    "server.routes": frozenset(
        {
            *SDK,
            "receiving",
            "handoff",
            "server.settings",
            "server.support",
            "server.entry",
            "server.http",
            "server.registry",
            "server.storage",
        }
    ),
    # context editing's pure parts: the conversation's facts, the plan, the rewrite
    "server.context": frozenset({*SDK, "server.settings"}),
    "server.gateway": frozenset(
        {
            *SDK,
            "server.context",
            "receiving",
            "registry",
            "handoff",
            "server.settings",
            "server.support",
            "server.entry",
            "server.http",
            "server.registry",
        }
    ),
}


def package_of(module: str) -> str | None:
    """The package of the architecture a dotted module name belongs to (None: not ours)."""
    top, _, rest = module.partition(".")
    first = rest.partition(".")[0]
    if top == "toolref":
        if first in SDK_PARTS:
            return first
        return "kit" if first in KIT else None if first else "toolref"
    if top == "toolref_relay":
        return "relay"
    if top == "toolref_server":
        if first in SERVER_PARTS:
            return "server." + first
        return "server.entry" if first in ENTRY else "server.support"
    return None


def modules() -> Iterator[tuple[str, Path]]:
    for top, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            yield ".".join([top, *parts]).removesuffix(".__init__"), path


def imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if "." in node.module:  # `from toolref_server import x` names x, not the package
                yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_every_import_follows_an_allowed_arrow() -> None:
    broken = []
    for module, path in modules():
        if module == "toolref" or package_of(module) == "server.entry":
            continue  # the SDK's public face and the service's assembly import anything
        source = package_of(module)
        assert source is not None
        for imported in imports(path):
            target = package_of(imported)
            if target is None or target == source:
                continue
            if target not in ALLOWED[source]:
                broken.append(f"{module} imports {imported}: {source} may not import {target}")
    assert not broken, "\n".join(sorted(set(broken)))


def test_the_contract_imports_nothing_of_toolref() -> None:
    """`toolref.wire` is what every side agrees on: it depends on no other part."""
    for module, path in modules():
        if package_of(module) == "wire":
            ours = [i for i in imports(path) if package_of(i) not in (None, "wire")]
            assert not ours, f"{module} imports {ours}"


def test_every_package_of_the_rules_exists() -> None:
    """The rules name only packages there are (a rename must update them)."""
    seen = {package_of(module) for module, _ in modules()}
    assert set(ALLOWED) <= seen | {"server.settings"}


def test_every_sdk_module_stands_in_a_named_room() -> None:
    """No loose module beside the packages: a new pure module goes into `toolref.kit` (or
    a package docs/architecture.md names), not at the SDK's top level."""
    loose = [m for m, _ in modules() if m.startswith("toolref.") and package_of(m) is None]
    assert not loose, f"modules in no room of docs/architecture.md: {loose}"
