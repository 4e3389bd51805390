"""Settings of what each process remembers to spare the store: records it has verified, and
recently kept histories in full."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CacheSettings(BaseModel):
    """Sizes of the per-process caches of verified records and of histories."""

    verified_records: int = Field(
        default=100_000,
        ge=0,
        description="Records each process keeps decoded once checked, so reading the same "
        "bytes again hashes them instead of checking and decoding them; 0 checks every read "
        "in full.",
    )
    verified_chars: int = Field(
        default=32 * 2**20,
        ge=0,
        description="At most this many characters of tool names and payloads in those "
        "records (LRU).",
    )
    edit_cache_bytes: int = Field(
        default=64 * 2**20,
        ge=0,
        description="Bytes of edited requests' pieces and recipes each process holds, so the "
        "next turn it serves of a conversation reads neither from the store again; 0 keeps "
        "none (every turn reads the store: a few batched reads).",
    )
    answer_cache_bytes: int = Field(
        default=16 * 2**20,
        ge=0,
        description="Bytes of streamed answers each process holds (each the dictionary of "
        "the next edit of its conversation: issue 39), so that the next turn it serves "
        "reads none from the store; 0 keeps none (each such turn reads one key).",
    )
