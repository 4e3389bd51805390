"""Settings of what the store keeps and how: lifetimes of records and of edited requests'
recipes, when keeping a recipe refreshes them, and the zstd compression and dictionaries of
records and of recipes' literals."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from toolref.wire import dictionaries
from toolref.wire.dictionaries import Kind


class RecordSettings(BaseModel):
    """Lifetimes (TTLs and their refresh) and compression of what is stored."""

    ttl_seconds: int = Field(default=86_400, ge=1, description="Sliding lifetime of a ref.")
    edit_superseded_ttl: int = Field(
        default=600,
        ge=1,
        description="Seconds an edited request's chunk keeps once a newer snapshot no longer "
        "holds it (at most the TTL).",
    )
    edit_refresh_seconds: int = Field(
        default=3600,
        ge=1,
        description="Keeping an edited request's recipe extends everything it needs (its "
        "group's nodes, chunks and pieces) once this long has passed since the last time; in "
        "between only what it writes or names anew. At most the TTL.",
    )
    edit_snapshot_every: int = Field(
        default=8,
        ge=1,
        le=64,
        description="An edited request's recipe is kept as a snapshot (slices of chunks shared "
        "between snapshots) once in this many edits, else as its own edit and the ids of the "
        "deltas back to its snapshot; a snapshot and its deltas compress their literals "
        "together, and loading a recipe reads at most this many of them.",
    )
    compress_threshold: int = Field(
        default=64,
        ge=0,
        description="Records at least this large are stored zstd-compressed (when that is "
        "smaller; with a dictionary even small ones shrink).",
    )
    compress_level: int = Field(
        default=3,
        ge=1,
        le=22,
        description="zstd level of stored records and recipes: higher stores fewer "
        "bytes for more CPU on every payload a request carries in full.",
    )
    record_dictionary: int = Field(
        default=1,
        ge=0,
        description="Shipped zstd dictionary new records are compressed with (0: none); "
        "records written with any shipped one stay readable.",
    )
    message_dictionary: int = Field(
        default=1,
        ge=0,
        description="Shipped zstd dictionary new recipes' literals are compressed with (0: none).",
    )

    @field_validator("record_dictionary", "message_dictionary")
    @classmethod
    def _check_dictionary(cls, value: int, info: ValidationInfo) -> int:
        kind: Kind = "records" if info.field_name == "record_dictionary" else "messages"
        shipped = dictionaries.numbers(kind)
        if value and value not in shipped:
            raise ValueError(
                f"no {kind} dictionary {value} ships with this version; use one of "
                f"{', '.join(map(str, shipped))}, or 0 to write without one"
            )
        return value
