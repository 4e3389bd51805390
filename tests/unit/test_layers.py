"""Which code may import which: product code nothing of the tests, load tests or examples;
test support (tests/support) product code only; load tests and examples only test support
of the tests; so the tests may import the load tests (to test them) and the arrows between
the four go one way: tests -> loadtests, examples -> tests.support -> product code.

Found: loadtests/agents.py imported tests.e2e and tests.servers while the tests imported
loadtests, and LocalCluster and record.encode_values, used only by tests, were product code
(storage/redis.py, storage/record.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tests", "loadtests", "examples")


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """Every module `path` imports (relative imports made absolute), at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                yield ".".join([*base, node.module] if node.module else base)
            else:
                yield node.module or ""


def top(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def in_support(module: str) -> bool:
    return module == "tests.support" or module.startswith("tests.support.")


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def refused(paths: list[Path], allowed: Callable[[str], bool]) -> list[str]:
    assert paths, "no files found: the layout moved"
    return [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in paths
        for module in imports(path)
        if not allowed(module)
    ]


def test_product_code_imports_no_tests_load_tests_or_examples() -> None:
    paths = sources("client_sdk/toolref", "client_sdk/toolref_relay", "service/toolref_server")
    assert refused(paths, lambda m: top(m) not in PACKAGES) == []


def test_test_support_imports_only_product_code_and_itself() -> None:
    """Nor pytest: the load tests and the examples run it without the test runner."""

    def allowed(module: str) -> bool:
        if top(module) in PACKAGES:
            return in_support(module)
        return top(module) not in ("pytest", "_pytest")

    assert refused(sources("tests/support"), allowed) == []


@pytest.mark.parametrize("folder", ["loadtests", "examples"])
def test_load_tests_and_examples_import_only_the_test_support_of_the_tests(folder: str) -> None:
    def allowed(module: str) -> bool:
        if top(module) == "tests":
            return in_support(module)
        return folder == "loadtests" or top(module) != "loadtests"

    assert refused(sources(folder), allowed) == []


def test_relative_imports_resolve() -> None:
    """The check above sees relative imports as the modules they name."""
    path = ROOT / "tests" / "adversarial" / "test_llm_calls.py"
    assert "tests.adversarial.summarizer_app" in set(imports(path))
