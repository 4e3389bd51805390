"""One fake LLM provider, for the end-to-end runs of real agent CLIs, the official SDKs,
the examples' LLM backend, the load tests and the adversarial LLM tests.

It answers as the providers do (`wire`: Anthropic Messages, OpenAI Chat Completions and
Responses, one JSON body or the provider's own server-sent events; Responses over its
WebSocket mode too, `sockets`), with what a model
(`app.Model`: a request's API and JSON body -> a `Reply`) says; the session a real agent
runs is one such model (`script.Script`; `edits.EditScript` for aider, which edits files
by text and runs a test command rather than calling tools). Two servers speak it:

- `app.FakeProvider`, an ASGI app (serve it with `tests.support.servers.serve`, uvicorn),
  that keeps every request (`reading.Recorded`: headers, the bytes as they came and
  decoded from `Content-Encoding`) and paces its streams;
- `raw.RawProvider`, a raw socket for what no well-behaved server sends (a body larger
  than declared, cut short, dripped, never ending), whose behaviours the adversarial tests
  write.

    python -m tests.support.fake_provider --port 8090 --calls 20 --workdir /tmp/work
"""

from tests.support.fake_provider.app import FakeProvider, Model
from tests.support.fake_provider.edits import TEST_SCRIPT, EditScript, edit_line, run_markers
from tests.support.fake_provider.reading import (
    Recorded,
    Turn,
    decode_body,
    last_turn,
    offered_tools,
    tool_results,
)
from tests.support.fake_provider.script import (
    FINAL_TEXT,
    SIDE_TEXT,
    LongScript,
    Script,
    marker,
    step_file,
)
from tests.support.fake_provider.sockets import SocketLog
from tests.support.fake_provider.wire import APIS, Api, Call, Reply

__all__ = [
    "APIS",
    "FINAL_TEXT",
    "SIDE_TEXT",
    "TEST_SCRIPT",
    "Api",
    "Call",
    "EditScript",
    "FakeProvider",
    "LongScript",
    "Model",
    "Recorded",
    "Reply",
    "Script",
    "SocketLog",
    "Turn",
    "decode_body",
    "edit_line",
    "last_turn",
    "marker",
    "offered_tools",
    "run_markers",
    "step_file",
    "tool_results",
]
