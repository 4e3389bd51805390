"""The published contract, judged by schemathesis with every check it has.

`toolref-server serve` (API keys, the gateway in front of an upstream) is run as a user
runs it, and the schemathesis command (`schemathesis run --checks all`) is pointed at its
`/openapi.json`: every phase (the document's examples, its coverage: boundary values,
missing headers, methods the document does not declare; random valid and invalid requests;
stateful sequences), every check (status codes, media types, headers and bodies as
documented; schema-valid requests accepted, invalid ones refused with a 4xx; a missing
required header refused; a key left out refused with 401; an undeclared method answered
405 with `Allow`; a deleted resource gone), a bounded number of requests per operation and
a fixed seed, so a run takes seconds and a failure comes back the same.

What no schema can say of a conversation is judged by `tests.support.contract_checks`
instead (see there); everything else is held to the document. tests/service/test_openapi.py
drives the in-process app from the same document, check by check; this is the document as
a client downloads it, over the wire, the HTTP layer included.

Found by this run, and fixed: a `Toolref-Protocol` declared as any integer (the service
reads at most 9 digits), optional where the endpoint refuses protocol 1; 405 answers
without `Allow`, and the gateway's 400 to a method it does not forward; the gateway's
`path` and `Toolref-Switched-From` declared as any string, its `Toolref-Protocol` as an
integer it never judges; request members declared integer or boolean that took `"5"` or
`0`; a `Toolref-History` pattern schemathesis misread.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.processes import ROOT, Service
from tests.support.servers import serve
from toolref_server.embedded import free_port, valkey_server_binary
from toolref_server.http.auth import hash_key

from ..conftest import need

KEY = "contract-test-key"
SEED = 20261129  # any fixed seed: the same requests every run
EXAMPLES = 10  # per operation and phase: about 1,100 requests, 10-20 s
FORWARDED = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
CONFIG = f"""
# Written by {Path(__file__).name}.
hooks = "tests.support.contract_checks"

[generation]
database = "none"

[auth.openapi.bearer]
bearer = "{KEY}"

[auth.openapi.toolrefKey]
api_key = "{KEY}"

# Conversations: a schema-valid request may also be refused for what no schema says;
# tests.support.contract_checks holds those 400s and 422s to exactly that.
[[operations]]
include-path = ["/v1/messages:hydrate", "/v1/messages:optimize", "/v1/context:handoff"]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "422", "429", "5xx",
]

# An edit: bytes (`format: binary`; the gateway's `*/*` sent as an edit) that may be no
# edit; held to a 400 malformed-body there, and the gateway's other 400s to none.
[[operations]]
include-path = ["/v1/edits:apply", "/llm/{{name}}/{{path}}"]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx",
]
"""


async def upstream_answer(request: Request) -> Response:
    """An upstream LLM API as the gateway sees one: any method, any path, answered (the
    gateway forwards what it is sent). It holds nothing to delete: a DELETE is 404."""
    await request.body()
    if request.method == "DELETE":
        return JSONResponse({"error": {"message": "no such resource"}}, status_code=404)
    return JSONResponse({"upstream": True})


UPSTREAM = Starlette(routes=[Route("/{path:path}", upstream_answer, methods=list(FORWARDED))])


@pytest.fixture(autouse=True)
def engine_binary() -> None:
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")


def schemathesis_run(url: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """`schemathesis run --checks all` against `url`'s document, its JUnit report in
    `workdir` (where it writes anything else too)."""
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    command = Path(sys.executable).with_name("schemathesis")
    return subprocess.run(
        [
            str(command),
            "--config-file",
            str(config),
            "--no-color",
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--report",
            "junit",
            "--report-junit-path",
            str(workdir / "junit.xml"),
        ],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # the hooks module: tests.support
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
async def test_every_schemathesis_check_passes_against_the_published_document(
    tmp_path: Path,
) -> None:
    async with serve(UPSTREAM) as upstream:
        service = await asyncio.to_thread(
            Service,
            tmp_path / "data",
            free_port(),
            TOOLREF_API_KEYS=f"acme={hash_key(KEY)}",
            TOOLREF_UPSTREAMS=f"up={upstream}",
            # Requests as fast as one client sends them: no tenant's rate quota (a 429 is
            # documented, but would stand for answers the run never sees).
            TOOLREF_TENANT_REQUESTS_PER_SECOND="0",
        )
        try:
            async with httpx.AsyncClient() as client:
                document = (await client.get(f"{service.url}/openapi.json")).json()
            run = await asyncio.to_thread(schemathesis_run, service.url, tmp_path)
        finally:
            await asyncio.to_thread(service.stop)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20_000:]
    # Every operation of the document was tested (the gateway's too), none failed.
    operations = {
        f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
    }
    assert {f"{method} /llm/{{name}}/{{path}}" for method in FORWARDED} <= operations
    tested = operations - {"GET /openapi.json"}  # schemathesis leaves the document's own out
    assert f"Tested: {len(tested)}" in output, output[-5000:]
    report = ET.parse(tmp_path / "junit.xml").getroot()
    cases = {case.get("name"): case for case in report.iter("testcase")}
    assert set(cases) == tested | {"Stateful tests"}
    for name, case in cases.items():
        for outcome in ("failure", "error", "skipped"):
            assert case.find(outcome) is None, (name, outcome)
    # Each phase ran (the examples phase has none to run: the document gives no examples).
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅ {phase}\b", output), (phase, output[-3000:])
