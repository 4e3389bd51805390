"""First-hour mistakes with the SDK fail at once, saying the bad value, the valid ones and the fix.

Each mistake here used to fail later (at the first request, or per request as a 422 to every
client), fail obscurely (`KeyError`, `AttributeError`), or not at all (`is_error` dropped, an
unknown format skipped). Lines marked `type: ignore[...]` are mistakes mypy catches too: under
`warn_unused_ignores` (mypy --strict) an ignore that is not needed fails `make lint`.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any, get_args

import httpx
import pytest

from toolref import (
    AsyncRegistryClient,
    AsyncTransport,
    BaseRegistryClient,
    FormatName,
    HydrateMode,
    RegistryClient,
    ToolReferenceManager,
    ToolrefError,
    ToolRefMiddleware,
    Transport,
    ValidationError,
    digest_of,
    formats,
    handoff,
)
from toolref.wire.errors import error_class_for

BASE = "http://registry.test"
MESSAGES: list[Any] = [
    {"role": "user", "content": "read a.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n"},
]
GOOD = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n"}


class Recorder:
    """Transports (sync and async) that count requests: a misuse must not cost one."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(500)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


async def app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that is never called."""
    raise AssertionError("not reached")


def names_all_formats(text: str) -> bool:
    return all(name in text for name in formats.NAMES)


# --- 1. format names and modes --------------------------------------------------------------


def test_the_literal_types_list_exactly_the_formats_and_modes() -> None:
    assert get_args(FormatName) == formats.NAMES
    assert get_args(HydrateMode) == ("full", "summary")


def test_an_unknown_format_is_a_value_error_the_service_can_render() -> None:
    with pytest.raises(ValidationError) as info:
        formats.get("openai")  # type: ignore[arg-type]
    error = info.value
    assert isinstance(error, ValueError)
    assert isinstance(error, ToolrefError)
    assert "unknown format 'openai' (did you mean 'openai-chat'?)" in error.detail
    assert names_all_formats(error.detail)
    # Rendered as before: a 422 validation-failed problem listing the formats.
    problem = error.to_problem()
    assert problem["status"] == 422
    assert problem["type"] == "urn:toolref:problem:validation-failed"
    assert problem["formats"] == list(formats.NAMES)
    assert error_class_for(problem["type"]) is ValidationError


@pytest.mark.parametrize("bad", ["openai", "claude", "", "OpenAI-Chat", 3, None])
def test_check_format_refuses_anything_but_a_format_name(bad: object) -> None:
    if bad is None:
        assert formats.is_format_name(bad) is False
    with pytest.raises(ValueError, match=re.escape(repr(bad))) as info:
        formats.check_format(bad)
    assert names_all_formats(str(info.value))
    assert formats.check_format("gemini") == "gemini"


def test_detect_refuses_an_unknown_name_whatever_the_messages() -> None:
    with pytest.raises(ValidationError, match="'anthropic-messages'"):
        formats.detect([], "anthropic-messages")  # type: ignore[arg-type]


def test_the_manager_refuses_a_format_it_no_longer_needs() -> None:
    # Edits are of the request's own bytes: no format to read them in.
    with pytest.raises(TypeError, match=r"'format' was retired in 0\.3: formats are not needed"):
        ToolReferenceManager(format="openai")


def test_the_middleware_refuses_an_unknown_format_when_made() -> None:
    # It used to answer 422 to every client request instead.
    registry = AsyncRegistryClient(BASE, transport=Recorder().transport())
    with pytest.raises(ValueError, match="unknown format 'gpt'") as info:
        ToolRefMiddleware(app, registry, format="gpt")  # type: ignore[arg-type]
    assert names_all_formats(str(info.value))


def test_registry_optimize_and_hydrate_check_format_and_mode_before_any_request() -> None:
    recorder = Recorder()
    with RegistryClient(BASE, transport=recorder.transport()) as registry:
        with pytest.raises(ValidationError, match="unknown format 'openai'") as info:
            registry.optimize(MESSAGES, format="openai")  # type: ignore[arg-type]
        assert names_all_formats(str(info.value))
        with pytest.raises(ValidationError, match="unknown format 'anthropics'"):
            registry.hydrate(MESSAGES, format="anthropics")  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="unknown mode 'summarize'") as info:
            registry.hydrate(MESSAGES, mode="summarize")  # type: ignore[arg-type]
        assert "full, summary" in str(info.value)
        with pytest.raises(ValidationError, match="`messages` is a dict"):
            registry.optimize({"messages": MESSAGES})  # type: ignore[arg-type]
    assert recorder.requests == []


async def test_the_async_client_checks_them_before_negotiating() -> None:
    recorder = Recorder()
    async with AsyncRegistryClient(BASE, transport=recorder.transport()) as registry:
        with pytest.raises(ValidationError, match="unknown format 'openai'"):
            await registry.optimize(MESSAGES, format="openai")  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="unknown mode 'FULL'"):
            await registry.hydrate(MESSAGES, mode="FULL")  # type: ignore[arg-type]
    assert recorder.requests == []


def test_handoff_entry_points_refuse_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format 'openai'") as info:
        handoff.build(MESSAGES, "openai")  # type: ignore[arg-type]
    assert names_all_formats(str(info.value))
    with pytest.raises(ValueError, match="unknown format 'gemini-v1'"):
        handoff.prepend(MESSAGES, "block", "gemini-v1")  # type: ignore[arg-type]
    assert handoff.build(MESSAGES, "openai-chat").tool_calls == 1


# --- 2. invocation mappings -----------------------------------------------------------------


KEYS = "an invocation mapping has the keys name, args, result and optionally isError"


@pytest.mark.parametrize(
    ("invocation", "says", "fix"),
    [
        ({**GOOD, "is_error": True}, "unknown key 'is_error' (did you mean 'isError'?)", KEYS),
        ({**GOOD, "arguments": {}}, "unknown key 'arguments'", KEYS),
        ({"name": "read_file", "args": {}}, "has no 'result' (its keys: name, args)", KEYS),
        ({"name": "read_file", "result": "x"}, "has no 'args'", KEYS),
        ({**GOOD, "isError": "false"}, "isError that is a str ('false')", "True or False"),
        ({**GOOD, "name": None}, "name that is a NoneType (None)", "a tool name is a str"),
    ],
)
def test_a_wrong_invocation_mapping_is_refused_naming_the_key(
    invocation: dict[str, Any], says: str, fix: str
) -> None:
    recorder = Recorder()
    registry = RegistryClient(BASE, transport=recorder.transport())
    with pytest.raises(ValidationError) as info:
        registry.register([GOOD, invocation])
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith("invocation 1 ")
    assert says in message
    assert fix in message
    assert recorder.requests == []
    # The same mapping given to digest_of: the same error, not a silent digest or a KeyError.
    with pytest.raises(ValidationError, match=re.escape(says)):
        digest_of(invocation)


def test_is_error_counts_only_when_spelt_iserror() -> None:
    assert digest_of({**GOOD, "isError": True}) != digest_of(GOOD)
    assert digest_of({**GOOD, "isError": False}) == digest_of(GOOD)


async def test_the_async_register_checks_before_negotiating() -> None:
    recorder = Recorder()
    async with AsyncRegistryClient(BASE, transport=recorder.transport()) as registry:
        with pytest.raises(ValidationError, match="invocation 0 has an unknown key 'is_error'"):
            await registry.register([{**GOOD, "is_error": False}])
    assert recorder.requests == []


def test_one_invocation_or_one_ref_where_a_list_is_expected_is_refused() -> None:
    recorder = Recorder()
    with RegistryClient(BASE, transport=recorder.transport()) as registry:
        with pytest.raises(ValidationError, match=r"wrap it in a list: register\(\[invocation\]\)"):
            registry.register(GOOD)  # type: ignore[arg-type]
        ref = str(digest_of(GOOD).ref)
        with pytest.raises(ValidationError, match=f"one string \\('{ref}'\\)"):
            registry.find_missing(ref)
        with pytest.raises(ValidationError, match="wrap it in a list"):
            registry.resolve(ref)
    assert recorder.requests == []


# --- 3. registry client options -------------------------------------------------------------


@pytest.mark.parametrize("client", [RegistryClient, AsyncRegistryClient])
def test_a_misspelt_client_option_is_a_type_error_at_once(client: type[BaseRegistryClient]) -> None:
    with pytest.raises(TypeError, match="timout"):
        client(BASE, timout=3)  # type: ignore[call-arg]


def test_every_option_is_a_typed_keyword_with_its_default() -> None:
    base = inspect.signature(BaseRegistryClient)
    options = [p for p in base.parameters.values() if p.name != "base_url"]
    assert [p.name for p in options] == [
        "transport",
        "api_key",
        "timeout",
        "retries",
        "backoff",
        "max_backoff",
        "breaker",
        "encoding",
        "compress_threshold",
        "headers",
        "rng",
    ]
    for option in options:
        assert option.kind is inspect.Parameter.KEYWORD_ONLY
        assert option.default is not inspect.Parameter.empty
        assert option.annotation is not inspect.Parameter.empty
    # The two clients take exactly those: nothing swallowed by **options.
    assert inspect.signature(RegistryClient) == base
    assert inspect.signature(AsyncRegistryClient) == base
    registry = RegistryClient(BASE, timeout=3, retries=0, encoding="json")
    assert (registry.timeout, registry.retries, registry.encoding) == (3, 0, "json")
    registry.close()


def test_a_transport_of_the_wrong_kind_is_refused_naming_the_right_client() -> None:
    with pytest.raises(TypeError, match="ASGITransport is an async transport: use AsyncRegistry"):
        RegistryClient(BASE, transport=httpx.ASGITransport(app))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="HTTPTransport is a sync transport: use RegistryClient"):
        AsyncRegistryClient(BASE, transport=httpx.HTTPTransport())  # type: ignore[arg-type]


# --- 4. other first-hour mistakes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "says"),
    [
        ("127.0.0.1:8750", "does not start with http:// or https://; use 'http://127.0.0.1:8750'"),
        ("localhost:8750", "use 'http://localhost:8750'"),
        ("ftp://registry.test", "use 'http://registry.test'"),
        ("", "use 'http://127.0.0.1:8750'"),
        ("http://", "has no host; use the registry's, such as 'http://127.0.0.1:8750'"),
        ("http://registry.test/?key=1", "has a query or fragment"),
    ],
)
def test_a_base_url_that_is_not_an_http_url_is_refused(base_url: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(base_url))) as info:
        RegistryClient(base_url)
    assert says in str(info.value)


def test_a_base_url_keeps_working_with_a_trailing_slash_or_https() -> None:
    assert BaseRegistryClient("https://registry.test/").base_url == "https://registry.test"
    assert BaseRegistryClient("http://10.0.0.1:8750/prefix").base_url.endswith("/prefix")


@pytest.mark.parametrize(
    ("api_key", "says"),
    [
        ("trk_secret\n", r"'\n' at index 10 of 11"),
        (" trk_secret", "' ' at index 0"),
        ("Bearer trk_secret", "starts with 'Bearer '; pass the key alone"),
        ("", "api_key is empty; pass api_key=None"),
    ],
)
def test_an_api_key_with_whitespace_is_refused_without_echoing_it(api_key: str, says: str) -> None:
    with pytest.raises(ValueError, match="api_key") as info:
        AsyncRegistryClient(BASE, api_key=api_key)
    assert says in str(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("timeout", 0, "timeout must be > 0, got 0: it is seconds per request"),
        ("timeout", -1.5, "timeout must be > 0, got -1.5"),
        ("timeout", float("nan"), "timeout must be > 0, got nan"),
        ("retries", -1, "retries must be >= 0, got -1: it is retries after a failed attempt; 0"),
        ("backoff", -0.1, "backoff must be >= 0, got -0.1"),
        ("max_backoff", -2, "max_backoff must be >= 0, got -2"),
        ("compress_threshold", -1, "compress_threshold must be >= 0, got -1: it is bytes from"),
        ("timeout", float("inf"), "timeout must be finite, got inf: it is seconds per request"),
        ("retries", float("inf"), "retries must be finite, got inf: it is retries after"),
        ("max_backoff", float("inf"), "max_backoff must be finite, got inf"),
        ("encoding", "xml", "unknown encoding 'xml'; use one of auto, json, msgpack"),
    ],
)
def test_client_options_that_cannot_work_are_refused(option: str, value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        RegistryClient(BASE, **{option: value})


def test_client_options_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(TypeError, match=re.escape("timeout is a number, not a str ('5')")):
        RegistryClient(BASE, timeout="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"base_url is a str such as 'http://127\.0\.0\.1:8750'"):
        RegistryClient(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"max_recipes": -5}, ValueError, "max_recipes must be >= 1, got -5"),
        ({"max_recipes": 0}, ValueError, "max_recipes must be >= 1, got 0"),
        ({"messages_key": ""}, TypeError, "messages_key is the non-empty str key"),
        ({"messages_key": None}, TypeError, "not None"),
        ({"max_recipes": "100"}, TypeError, "max_recipes is an int, not a str ('100')"),
        ({"max_recipe_bytes": 1.5}, TypeError, "max_recipe_bytes is an int, not a float"),
        ({"size_guard": "yes"}, TypeError, "size_guard must be True or False, not 'yes'"),
        ({"max_refs": 10}, TypeError, "'max_refs' was retired in 0.3: refs inside messages"),
        ({"history_refs": False}, TypeError, "'history_refs' was retired in 0.3"),
        ({"max_transcripts": 1}, TypeError, "transcripts were retired: use max_recipes"),
        ({"max_recipe": 1}, TypeError, "no option 'max_recipe' (did you mean 'max_recipes'?)"),
    ],
)
def test_manager_options_that_cannot_work_are_refused(
    options: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=re.escape(says)):
        ToolReferenceManager(**options)


def post_with(body: Any, **options: Any) -> list[httpx.Request]:
    recorder = Recorder()
    with httpx.Client(transport=recorder.transport(), base_url="http://chat.test") as http:
        ToolReferenceManager(**options).post(http, "/chat", json=body)
    return recorder.requests


@pytest.mark.parametrize(
    ("body", "options", "says"),
    [
        (
            {"model": "m", "input": MESSAGES},
            {},
            "the request body has no 'messages' key (its keys: 'model', 'input'); put the "
            "messages under 'messages', or make the manager with messages_key='input'",
        ),
        ({}, {"messages_key": "contents"}, "no 'contents' key (its keys: none)"),
        ({"messages": "hi"}, {}, "'messages' is a str, not a list of messages"),
        ({"messages": {"role": "user"}}, {}, "'messages' is a dict, not a list"),
        (MESSAGES, {}, "not a list: post(client, url, json={'messages': messages})"),
    ],
)
def test_a_post_body_without_its_messages_is_refused_before_sending(
    body: Any, options: dict[str, Any], says: str
) -> None:
    # A missing key used to be a KeyError; messages that are not a list went out unread.
    with pytest.raises(ValidationError) as info:
        post_with(body, **options)
    assert says in str(info.value)


async def test_apost_checks_the_body_too() -> None:
    recorder = Recorder()
    async with httpx.AsyncClient(transport=recorder.transport(), base_url="http://c.t") as http:
        with pytest.raises(ValidationError, match="no 'messages' key"):
            await ToolReferenceManager().apost(http, "/chat", json={"input": []})
    assert recorder.requests == []


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        (
            {"messages_keys": "messages"},
            TypeError,
            "messages_keys is the str 'messages', which would be read as one key per "
            "character; pass a sequence: messages_keys=('messages',)",
        ),
        ({"messages_keys": ()}, ValueError, "messages_keys is empty"),
        ({"messages_keys": ["messages", 3]}, TypeError, "each of messages_keys is the non-empty"),
        (
            {"paths": "/chat"},
            TypeError,
            "paths is the str '/chat', which would match every path that is a substring of it; "
            "pass a collection: paths={'/chat'}",
        ),
        ({"max_body_bytes": 0}, ValueError, "max_body_bytes must be >= 1, got 0"),
        # retired in 0.3 (edits are restored through the registry): the CHANGELOG says so;
        # the signature stays exact, so that `app.add_middleware` type-checks
        ({"recent_histories": 8}, TypeError, "unexpected keyword argument 'recent_histories'"),
    ],
)
def test_middleware_options_that_cannot_work_are_refused(
    options: dict[str, Any], error: type[Exception], says: str
) -> None:
    registry = AsyncRegistryClient(BASE, transport=Recorder().transport())
    with pytest.raises(error) as info:
        ToolRefMiddleware(app, registry, **options)
    assert says in str(info.value)


def test_the_middleware_refuses_a_blocking_registry_client() -> None:
    # It used to fail on each request: a MessagesResult cannot be awaited.
    blocking = RegistryClient(BASE, transport=Recorder().transport())
    with pytest.raises(TypeError, match="needs an AsyncRegistryClient, not a RegistryClient"):
        ToolRefMiddleware(app, blocking)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="registry is an AsyncRegistryClient, not a str"):
        ToolRefMiddleware(app, "http://registry.test")  # type: ignore[arg-type]


def test_valid_options_still_make_a_middleware() -> None:
    registry = AsyncRegistryClient(BASE, transport=Recorder().transport())
    middleware = ToolRefMiddleware(
        app, registry, messages_keys=["input"], format="anthropic", paths={"/chat"}
    )
    assert middleware.hydrator.messages_keys == ("input",)


@pytest.mark.parametrize("made", [Transport, AsyncTransport])
@pytest.mark.parametrize("bad", ["no", 0, None])
def test_a_transport_wants_shape_problems_as_a_bool(made: Any, bad: object) -> None:
    with pytest.raises(TypeError, match=f"shape_problems must be True or False, not {bad!r}"):
        made(shape_problems=bad)
    assert made(shape_problems=False).shape_problems is False


def test_a_transport_given_the_wrong_inner_kind_or_a_client_says_so_when_made() -> None:
    """An async inner transport to `Transport` (or a sync one to `AsyncTransport`, or a
    client) failed only at the first request, with an AttributeError naming no fix."""
    with pytest.raises(TypeError, match=r"async transport .*pass inner=httpx.HTTPTransport\(\)"):
        Transport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"sync transport .*inner=httpx.AsyncHTTPTransport\(\)"):
        AsyncTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with httpx.Client() as client, pytest.raises(TypeError, match="inner is a client"):
        Transport(client)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="manager must be a ToolReferenceManager"):
        Transport(manager={"messages_key": "input"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inner must be an httpx transport"):
        AsyncTransport(ToolReferenceManager())  # type: ignore[arg-type]
    assert Transport(httpx.MockTransport(lambda r: httpx.Response(200))).inner is not None


def test_an_async_transport_used_on_a_second_event_loop_says_the_fix() -> None:
    """Its connections and channels belong to the loop of its first request: a second
    `asyncio.run` with a client made at import failed deep in the pool (or hung on a
    channel's lock) instead of saying so."""
    transport = AsyncTransport(httpx.MockTransport(lambda r: httpx.Response(204)))

    async def one() -> int:
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            return (await client.get("/healthz")).status_code

    assert asyncio.run(one()) == 204
    with pytest.raises(RuntimeError, match=r"another event loop.*one client per event loop"):
        asyncio.run(one())
