"""The docs say what the code does: the README opens with the two commands; docs/api.md
lists every setting with its default, every problem type and every route."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from toolref.wire import errors
from toolref.wire.canonical import canonical_json
from toolref_server.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
API = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()


def test_readme_opens_with_the_two_commands() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make serve", "make test"]


def test_every_setting_is_documented_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(TOOLREF_[A-Z_]+)` \| ([^|]+) \|", API, re.MULTILINE))
    fields = Settings.model_fields
    assert set(rows) == {f"TOOLREF_{name.upper()}" for name in fields}
    for name, field in fields.items():
        shown = rows[f"TOOLREF_{name.upper()}"].strip()
        if field.default in (None, ""):
            assert shown in ("unset", "empty"), name
        else:
            assert shown == f"`{field.default}`", name


def test_every_problem_type_is_documented() -> None:
    for name in dir(errors):
        cls = getattr(errors, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, errors.ToolrefError)
            and cls.status < 500
            and cls.slug not in ("bad-request", "limit-exceeded", "conflict")  # abstract bases
        ):
            assert f"`{cls.slug}`" in API, cls.slug


SDK_DOC = (Path(__file__).resolve().parents[2] / "docs" / "sdk.md").read_text()


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def _code_lines(block: str) -> list[str]:
    """The lines of `block` that do something: neither blank nor an import."""
    lines = [line for line in block.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(("import ", "from "))]


def test_sdk_doc_integrations_are_ten_lines_and_compile() -> None:
    """README says "ten lines each": the client and the backend, imports aside."""
    client, backend, *_ = _python_blocks(SDK_DOC)
    for block in (client, backend):
        assert len(_code_lines(block)) <= 10, block
        compile(block, "docs/sdk.md", "exec")
    assert "ToolReferenceManager" in client
    assert "ToolRefMiddleware" in backend


async def test_sdk_doc_backend_runs_as_written() -> None:
    """Nothing supplied: it defines what it calls (before, `call_llm` was undefined, and
    this test supplied one)."""
    import httpx

    _, backend, *_ = _python_blocks(SDK_DOC)
    namespace: dict[str, object] = {}
    exec(compile(backend, "docs/sdk.md", "exec"), namespace)
    app = namespace["app"]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
        base_url="http://backend",
    ) as http:
        reply = await http.post("/chat", json={"messages": [{"role": "user", "content": "hi"}]})
    assert reply.json() == {
        "messages": [{"role": "assistant", "content": "read 1 messages, in full"}]
    }


def _curl_example() -> tuple[list[str], str]:
    """docs/api.md's curl example: its arguments, and the answer it documents."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", API, re.DOTALL) if "curl " in b)
    command, _, answer = block.replace("\\\n", " ").partition("\n# ")
    return shlex.split(command), answer.strip()


async def test_readme_curl_example_answers_as_documented() -> None:
    import fakeredis
    import httpx

    from toolref_server.app import create_app

    args, documented = _curl_example()
    assert args[:2] == ["curl", "-s"], args
    url, headers, body = "", {}, None
    rest = iter(args[2:])
    for arg in rest:
        if arg == "-H":
            name, _, value = next(rest).partition(":")
            headers[name] = value.strip()
        elif arg == "-d":
            body = next(rest)
        else:
            assert not arg.startswith("-"), f"the test does not know curl's {arg}"
            url = arg
    host, _, path = url.partition("/")
    assert host == "localhost:8750", host  # the default port (TOOLREF_PORT)
    app = create_app(Settings(), redis=fakeredis.FakeAsyncRedis())
    async with (
        app.router.lifespan_context(app),
        # The README's own Host: a service without keys answers no other (DNS rebinding).
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=f"http://{host}"
        ) as http,
    ):
        answer = await http.request(
            "POST" if body is not None else "GET", "/" + path, headers=headers, content=body
        )
    assert answer.status_code == 200, answer.text
    # The exact bytes: the ref and the size are content-addressed, so they never vary.
    assert answer.text == documented, (
        f"docs/api.md documents {documented}, the service answers {answer.text}"
    )
    # `size` is the length of the invocation's canonical JSON (isError defaults to false).
    [registered] = answer.json()["refs"]
    assert registered["size"] == len(
        canonical_json({**json.loads(body or "")["invocations"][0], "isError": False})
    )


def test_no_doc_offers_toolref_from_a_package_index() -> None:
    # toolref is on no index: `pip install toolref` would fail, or fetch someone else's.
    root = Path(__file__).resolve().parents[2]
    docs = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "examples").glob("*.py")]
    by_name = re.compile(r"pip install (-e )?['\"]?toolref\b")
    offered = [f"{d.name}: {m[0]}" for d in docs for m in by_name.finditer(d.read_text())]
    assert offered == [], offered
    assert "pip install -e '.[server]'" in README


def test_the_api_table_lists_every_route_and_only_those() -> None:
    from starlette.routing import Route

    from toolref_server.app import create_app

    documented = set(re.findall(r"^\| `([A-Z]+ /\S*)` \|", API, re.MULTILINE))
    served = {
        f"{method} {route.path}"
        for route in create_app(Settings()).routes
        if isinstance(route, Route)
        for method in (route.methods or set()) - {"HEAD"}
    }
    assert documented == served


ROOT = Path(__file__).resolve().parents[2]
RELAY_DOC = (ROOT / "docs" / "relay.md").read_text()
_RUN = re.compile(
    r"(?:[A-Z_]+=\S+ +)*(?:(?:\.venv/bin/)?toolref(?:-server)? "
    r"(?:relay|doctor|serve|keygen|hash-key|cache)\b(?!:)|make serve\b)"
)
_PLACEHOLDERS = {"N": "2"}  # where an option wants a number


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """Each command `text` tells a person to run, in its `sh` blocks or code spans: for
    `toolref` or `toolref-server` (`.venv/bin/` or not, after any `NAME=value`), and
    `make serve ARGS="..."` (toolref-server serve); the program and its arguments. A span
    of a program and a command alone (`toolref relay`) names it, and is left out."""
    spans = [(span, False) for span in re.findall(r"`([^`\n]+)`", text)]
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        spans += [(line, True) for line in block.splitlines()]
    found = []
    for span, whole in spans:
        if not _RUN.match(span):
            continue
        words = shlex.split(span.split(" #")[0])
        while re.fullmatch(r"[A-Z_]+=.*", words[0]):
            words = words[1:]
        if words[:2] == ["make", "serve"]:
            extra = [w.removeprefix("ARGS=") for w in words[2:] if w.startswith("ARGS=")]
            found += [("toolref-server", ["serve", *shlex.split(a)]) for a in extra]
        elif whole or len(words) > 2:
            args = [_PLACEHOLDERS.get(word, word) for word in words[1:]]
            found.append((words[0].removeprefix(".venv/bin/"), args))
    return found


def test_the_commands_readme_and_the_relay_doc_give_are_ones_the_clis_take() -> None:
    """Every `toolref ...` and `toolref-server ...` they tell a person to run parses as the
    command line reads it (an option renamed, or made up, fails here)."""
    from toolref_relay.cli import parser as relay_parser
    from toolref_server.cli import _parser as server_parser

    parsers = {"toolref": relay_parser(), "toolref-server": server_parser()}
    commands = _commands(README) + _commands(RELAY_DOC)
    said = {" ".join([program, *args]) for program, args in commands}
    assert "toolref relay --gateway http://127.0.0.1:8750" in said  # the README's path
    assert "toolref-server serve --host 0.0.0.0" in said  # the service on another machine
    assert "toolref-server keygen alice" in said
    for program, args in commands:
        try:
            parsers[program].parse_args(args)
        except SystemExit:
            raise AssertionError(
                f"{program} {' '.join(args)}: not a command line it takes"
            ) from None


def test_make_serve_puts_the_toolref_command_in_the_venv_the_readme_names() -> None:
    """README's coding-agent path runs `.venv/bin/toolref relay` after `make serve`: the
    venv it makes, the `toolref` script, and the relay's needs within the server extra."""
    import tomllib

    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^VENV\s*:= \.venv$", makefile, re.MULTILINE)
    assert re.search(r"^serve: \$\(SERVER_STAMP\)$", makefile, re.MULTILINE)
    assert "pip install --quiet -e '.[server]'" in makefile
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["toolref"] == "toolref_relay.cli:main"
    extras = project["optional-dependencies"]

    def names(extra: str) -> set[str]:
        return {re.split(r"[<>=\[; ]", requirement, maxsplit=1)[0] for requirement in extras[extra]}

    assert names("relay") <= names("server")
    assert "`.venv/bin/toolref relay --gateway http://127.0.0.1:8750`" in README


def test_the_options_the_sdk_doc_says_are_refused_saying_why_are() -> None:
    """docs/sdk.md's table of mistakes: each `Class(option=...)` of its 0.2-options row is
    refused with a `TypeError` saying it was retired (a row naming a class that refuses them
    only as Python does, "unexpected keyword argument", would promise a fix it never says)."""
    import pytest

    from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    registry = AsyncRegistryClient("http://127.0.0.1:1")
    makers: dict[str, Callable[..., object]] = {
        "ToolReferenceManager": ToolReferenceManager,
        "ToolRefMiddleware": lambda **option: ToolRefMiddleware(app, registry, **option),
    }
    [row] = [line for line in SDK_DOC.splitlines() if line.startswith("| an option of 0.2 (")]
    named = re.findall(r"`(\w+)\((\w+)=[^`]*\)`", row)
    assert ("ToolReferenceManager", "history_refs") in named
    for owner, option in named:
        with pytest.raises(TypeError, match="retired"):
            makers[owner](**{option: 1})


JS_DOC = (ROOT / "docs" / "js.md").read_text()
# What the docs' TypeScript calls from the AI SDK (`ai`, `@ai-sdk/react`) and from the SDK.
_AI_SDK = {"streamText", "convertToModelMessages", "DefaultChatTransport", "useChat"}
_JS_EXPORTS = {"toolrefFetch", "withToolRef", "ToolReferenceManager", "forgetSharedState"}


def _ts_blocks(text: str) -> list[str]:
    return re.findall(r"```ts\n(.*?)```", text, re.DOTALL)


def test_the_js_doc_typescript_imports_what_it_calls() -> None:
    """A `ts` block that imports the SDK is a file a reader copies: each function it calls from the
    AI SDK or from `@toolref/client` is imported in it. Before, the backend helper's block
    called `streamText` and `convertToModelMessages` without importing them, and passed
    `convertToModelMessages(messages)` unawaited: in AI SDK 6 and 7 it returns a Promise,
    so `streamText` got no messages (tsc: TS2740) in two of the three majors the doc
    supports."""
    files = [block for block in _ts_blocks(JS_DOC) if '} from "@toolref/client";' in block]
    assert len(files) >= 3, "docs/js.md's importing ts blocks are gone: the pattern is stale"
    for block in files:
        imported = {
            name.strip().removeprefix("type ")
            for names in re.findall(r"^import \{([^}]*)\} from ", block, re.M)
            for name in names.split(",")
        } | set(re.findall(r"^import (\w+) from ", block, re.M))
        called = {
            name for name in _AI_SDK | _JS_EXPORTS if re.search(rf"(?<![\w.]){name}\(", block)
        }
        assert called <= imported, f"docs/js.md calls {called - imported} unimported:\n{block}"
        for call in re.finditer(r"(?<![\w.])convertToModelMessages\(", block):
            assert block[: call.start()].endswith("await "), "AI SDK 6 and 7 return a Promise"


def test_the_js_doc_install_runs_from_one_folder() -> None:
    """The install block's lines run one after the other in one shell: a `cd` the next line
    does not expect stays in a subshell (before, `cd client_sdk/js && npm ci` left the shell
    where `cd my-app` then failed)."""
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", JS_DOC, re.DOTALL) if "my-app" in b]
    lines = [line.split(" #")[0].strip() for line in block.strip().splitlines()]
    assert lines[0].startswith("(cd toolref/client_sdk/js && npm ci)"), lines
    assert lines[1] == "cd my-app && npm install ../toolref/client_sdk/js", lines


def test_the_js_doc_node_sdk_block_gives_the_provider_key() -> None:
    """`new OpenAI({...})` with no `apiKey` throws at construction unless `OPENAI_API_KEY`
    is set (openai's "Missing credentials"): the block says where the key comes from."""
    [block] = [b for b in _ts_blocks(JS_DOC) if "new OpenAI(" in b and "import" in b]
    assert "apiKey" in block
    assert "OPENAI_API_KEY" in block


def test_the_commands_the_operations_doc_gives_are_ones_the_clis_take() -> None:
    """docs/operations.md's `toolref-server ...` lines parse too (`--help` exits 0)."""
    from toolref_relay.cli import parser as relay_parser
    from toolref_server.cli import _parser as server_parser

    parsers = {"toolref": relay_parser(), "toolref-server": server_parser()}
    commands = _commands((ROOT / "docs" / "operations.md").read_text())
    assert ("toolref-server", ["serve", "--config", "toolref.toml"]) in commands
    for program, args in commands:
        try:
            parsers[program].parse_args(args)
        except SystemExit as stop:
            if stop.code != 0 or "--help" not in args:
                said = f"{program} {' '.join(args)}"
                raise AssertionError(f"{said}: not a command line it takes") from None
