"""The Redis keys: every key the service reads or writes is spelled here, and only here.

Each key is `tr:<tenant>:<kind>:<rest>`, so a tenant's keys share one prefix (what an export
of one tenant scans) and no two tenants share a key:

| kind | holds | rest |
| --- | --- | --- |
| `i` | an invocation record (`record`) | the ref's 26-character body (`Ref.key`) |
| `p` | a piece of an edited request (`recipes`) | the piece id (`digest_key` of 16 bytes) |
| `b` | a recipe's node (`recipe_nodes`) | the recipe ref's body (`tb_` dropped) |
| `k` | a chunk of recipe entries (`recipe_chunks`) | the chunk id (`digest_key` of 16 bytes) |
| `a` | the answer a recipe's request streamed (`answers`) | the recipe ref's body |
| `s` | a summary of an invocation | `<ref body>:<summarizer id>` |
| `d` | a summary of a handoff's dialogue | `<digest of the transcript>:<summarizer id>` |
| `q` | a stored-bytes counter (`quotas.StoredBytes`) | the window (epoch seconds // TTL) |
| `c` | a model-call counter (`counters.ModelCallCounters`) | the minute (epoch seconds // 60) |
| `u` | a minute's gateway usage (`usage.UsageCounters`), `<upstream>:<field>` | the minute |

A usage hash also holds `@<writer>` per worker that added to it: the number of the last
batch it added (`usage_writer`), so that a batch sent again is added once.

A summary's single-flight lock (and its failure mark, the same key holding `failed`) is its
summary's key followed by `:lock`. Exports carry the kinds in `EXPORTED`, never locks or
counters (nor pieces and recipes: a client whose base is gone sends its request whole
again, by itself). Pure functions; the tenant is taken as given (the HTTP layer checks its
grammar, `settings.TENANT_RE`).
"""

from __future__ import annotations

import hashlib
from typing import Final, NamedTuple

from toolref.wire.canonical import Ref, digest_key

_LOCK: Final = ":lock"

RECORD: Final = "i"
EDIT_PIECE: Final = "p"
RECIPE_NODE: Final = "b"
RECIPE_CHUNK: Final = "k"
ANSWER: Final = "a"
SUMMARY: Final = "s"
DIALOGUE_SUMMARY: Final = "d"
STORED_BYTES: Final = "q"
MODEL_CALLS: Final = "c"
USAGE: Final = "u"

EXPORTED: Final = frozenset({RECORD, SUMMARY, DIALOGUE_SUMMARY})
SHAPE: Final = "tr:<tenant>:<kind>:..."  # for messages that name the grammar


def _key(tenant: str, kind: str, rest: str) -> str:
    return f"tr:{tenant}:{kind}:{rest}"


def record(tenant: str, ref: Ref) -> str:
    return _key(tenant, RECORD, ref.key)


def edit_piece(tenant: str, piece_id: bytes) -> str:
    """A piece of an edited request (`toolref.edits.recipe`), under its 16-byte id."""
    return _key(tenant, EDIT_PIECE, digest_key(piece_id))


def recipe_node(tenant: str, ref: str) -> str:
    """The node of recipe `ref` (`tb_` and its body)."""
    return _key(tenant, RECIPE_NODE, ref[3:])


def answer(tenant: str, ref: str) -> str:
    """The answer recipe `ref`'s request streamed (`tb_` and its body)."""
    return _key(tenant, ANSWER, ref[3:])


def recipe_chunk(tenant: str, chunk_id: bytes) -> str:
    """A chunk of recipe entries, under its 16-byte id."""
    return _key(tenant, RECIPE_CHUNK, digest_key(chunk_id))


def summary(tenant: str, ref: Ref, summarizer_id: str) -> str:
    return _key(tenant, SUMMARY, f"{ref.key}:{summarizer_id}")


def dialogue_summary(tenant: str, transcript: str, summarizer_id: str) -> str:
    """A handoff dialogue's summary, under the SHA-256 of its transcript (linear in it)."""
    digest = hashlib.sha256(transcript.encode("utf-8", "surrogatepass")).digest()
    return _key(tenant, DIALOGUE_SUMMARY, f"{digest_key(digest)}:{summarizer_id}")


def summary_lock(summary_key: str) -> str:
    """The single-flight lock (or failure mark) of the summary under `summary_key`."""
    return summary_key + _LOCK


def is_lock(key: str) -> bool:
    return key.endswith(_LOCK)


def stored_bytes(tenant: str, window: int) -> str:
    return _key(tenant, STORED_BYTES, str(window))


def model_calls(tenant: str, minute: int) -> str:
    return _key(tenant, MODEL_CALLS, str(minute))


def usage(tenant: str, minute: int) -> str:
    return _key(tenant, USAGE, str(minute))


def usage_field(upstream: str, name: str) -> str:
    """A field of a usage hash: the upstream (`toolref.wire.endpoints.is_upstream_name`: no
    colon) and what it counts."""
    return f"{upstream}:{name}"


def usage_writer(writer: str) -> str:
    """The field of a usage hash holding the last batch `writer` (hex: no colon) added."""
    return f"@{writer}"


def usage_fields(field: bytes | str) -> tuple[str, str]:
    """(upstream, what it counts) of a usage hash's field."""
    text = field.decode() if isinstance(field, bytes) else field
    upstream, _, name = text.rpartition(":")
    return upstream, name


def scan_pattern(tenant: str | None) -> str:
    """The SCAN pattern of one tenant's keys, or of all tenants' (`None`). The tenant is
    matched as a glob: the caller refuses names outside the tenant grammar first."""
    return "tr:*" if tenant is None else f"tr:{tenant}:*"


class Parsed(NamedTuple):
    tenant: str
    kind: str
    rest: str


def parse(key: str) -> Parsed | None:
    """The parts of a key of this service's shape (`SHAPE`); None for any other key. The
    tenant and the rest are not checked here."""
    if not key.startswith("tr:"):
        return None
    parts = key.split(":", 3)
    if len(parts) != 4:
        return None
    return Parsed(parts[1], parts[2], parts[3])


def exported(key: bytes) -> bool:
    """Is this key one an export carries? (Not a lock, a failure mark or a counter.)"""
    parts = key.split(b":", 3)
    return (
        len(parts) == 4
        and parts[2].decode("ascii", "replace") in EXPORTED
        and not key.endswith(_LOCK.encode())
    )
