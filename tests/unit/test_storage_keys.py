"""Only the storage layer names a Redis key: every key is spelled in `storage/keys.py`, the
spellings are the ones data already stored under, and no module outside `storage/` spells
or builds one, nor holds a Redis client."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from toolref.wire.canonical import digest_of
from toolref_server.storage import keys

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service" / "toolref_server"
STORAGE = SERVICE / "storage"
SDK = ROOT / "client_sdk"

# A key's prefix where a word does not end just before it ("str:" is no key).
SPELLED = re.compile(r"(?<![A-Za-z0-9_])tr:")
LOCK = ":lock"
# Storage methods that take or make raw keys: outside storage a key is never computed or read
# by its name (`keys.parse`, `keys.SHAPE`, `keys.is_lock` read the grammar; export checks with
# them).
BUILDERS = {"node_key", "message_key", "dialogue_key", "read_and_touch", "cost_of_writing"}
KEY_FUNCTIONS = {
    "record",
    "edit_piece",
    "recipe_node",
    "recipe_chunk",
    "summary",
    "dialogue_summary",
    "summary_lock",
    "stored_bytes",
    "model_calls",
    "usage",
    "scan_pattern",
}
# Outside storage, these build the Redis client the storage layer is handed: the service's
# wiring and the CLI (its `cache export|import` and `check` commands).
CLIENT_BUILDERS = {SERVICE / "app.py", SERVICE / "cli.py"}


def modules(*roots: Path) -> list[Path]:
    return sorted(path for root in roots for path in root.rglob("*.py"))


def outside_storage() -> list[Path]:
    return [p for p in modules(SERVICE, SDK) if STORAGE not in p.parents]


def literals(tree: ast.AST) -> list[str]:
    """The string literals of a module's code (f-strings' literal parts included), not its
    docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_the_spellings_are_those_stored_data_is_under() -> None:
    """A changed spelling would orphan every key an engine holds: pinned here."""
    ref = digest_of({"name": "read", "args": {}, "result": "x"}).ref
    body = str(ref)[3:]
    assert keys.record("acme", ref) == f"tr:acme:i:{body}"
    assert keys.edit_piece("acme", bytes(16)) == "tr:acme:p:" + "a" * 26  # base32
    assert keys.recipe_node("acme", "tb_" + "a" * 26) == "tr:acme:b:" + "a" * 26
    assert keys.recipe_chunk("acme", bytes(16)) == "tr:acme:k:" + "a" * 26
    assert keys.summary("acme", ref, "extractive:v1:200") == f"tr:acme:s:{body}:extractive:v1:200"
    dialogue = keys.dialogue_summary("acme", "transcript", "m:v1:300")
    assert re.fullmatch(r"tr:acme:d:[0-9a-z]{26}:m:v1:300", dialogue), dialogue
    assert keys.summary_lock("tr:acme:s:x:y") == "tr:acme:s:x:y:lock"
    assert keys.stored_bytes("acme", 100) == "tr:acme:q:100"
    assert keys.model_calls("acme", 7) == "tr:acme:c:7"
    assert keys.usage("acme", 29_000_000) == "tr:acme:u:29000000"
    assert keys.usage_field("anthropic", "raw") == "anthropic:raw"
    assert keys.usage_fields(b"open.ai-2:resends") == ("open.ai-2", "resends")
    assert keys.scan_pattern(None) == "tr:*"
    assert keys.scan_pattern("acme") == "tr:acme:*"


def test_exports_carry_values_never_locks_or_counters() -> None:
    ref = digest_of({"name": "read", "args": {}, "result": "x"}).ref
    summary = keys.summary("acme", ref, "extractive:v1:200")
    assert keys.exported(keys.record("acme", ref).encode())
    assert keys.exported(summary.encode())
    assert not keys.exported(keys.edit_piece("acme", bytes(16)).encode())
    assert not keys.exported(keys.recipe_node("acme", "tb_" + "a" * 26).encode())
    assert not keys.exported(keys.summary_lock(summary).encode())
    assert not keys.exported(keys.stored_bytes("acme", 1).encode())
    assert not keys.exported(keys.model_calls("acme", 1).encode())
    assert not keys.exported(keys.usage("acme", 1).encode())
    assert keys.parse(summary) == ("acme", "s", summary.split(":", 3)[3])
    assert keys.parse("session:42") is None


def builds(node: ast.AST) -> str | None:
    """The name of the key-making storage function `node` uses, if it does."""
    if not isinstance(node, ast.Attribute):
        return None
    if node.attr in BUILDERS:
        return node.attr
    if isinstance(node.value, ast.Name) and node.value.id == "keys" and node.attr in KEY_FUNCTIONS:
        return f"keys.{node.attr}"
    return None


def test_no_module_outside_storage_spells_a_key() -> None:
    """Fails on the code before issue 29: export.py, registry/summary_cache.py and
    registry/llm_quotas.py spelled `tr:` keys, summaries built its locks with `:lock`, and
    registry/continuation.py read a history node by its key (`node_key`, `read_and_touch`)."""
    found = []
    for path in outside_storage():
        text = path.read_text()
        shown = path.relative_to(ROOT)
        found += [f"{shown}: spells `tr:`" for _ in SPELLED.findall(text)[:1]]
        tree = ast.parse(text)
        if any(LOCK in s for s in literals(tree)):
            found.append(f"{shown}: builds a lock key (`{LOCK}`)")
        found += [f"{shown}: uses {name}" for node in ast.walk(tree) if (name := builds(node))]
    assert found == [], "only toolref_server.storage names Redis keys:\n" + "\n".join(found)


def test_storage_spells_keys_in_at_most_two_modules() -> None:
    spelling = [
        path.relative_to(ROOT)
        for path in modules(STORAGE)
        if any(SPELLED.search(s) for s in literals(ast.parse(path.read_text())))
    ]
    assert len(spelling) <= 2, spelling
    assert Path("service/toolref_server/storage/keys.py") in spelling


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_no_redis_client_outside_storage() -> None:
    """Fails on the code before issue 29: registry/summary_cache.py and registry/llm_quotas.py
    sent commands on the store's client (`store.redis`, a pipeline of it), export.py on the
    CLI's, and registry/summary_cache.py caught `RedisError`."""
    found = []
    for path in outside_storage():
        shown = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("redis", "pipeline"):
                found.append(f"{shown}:{node.lineno}: uses .{node.attr}")
            if path in CLIENT_BUILDERS:
                continue
            found += [
                f"{shown}: imports {name}"
                for name in imported(node)
                if name.split(".")[0] == "redis"
            ]
    assert found == [], "\n".join(found)
