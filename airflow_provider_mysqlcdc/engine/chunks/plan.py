"""Plan types: a chunk is the half-open range ``[start, end)`` of its chunk key; a plan is one table's chunks.

First chunk ``(-inf, x)``, last ``[y, +inf)``; every row belongs to exactly one chunk, NULL keys to the first.
Plans carry a generation: a re-plan never mixes old and new boundaries.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.engine.chunks.key_codec import Key, decode_key, encode_key
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId


@dataclass(frozen=True)
class Chunk:
    """Rows whose chunk key lies in ``[start, end)``; ``None`` is -inf (start) or +inf (end)."""

    chunk_id: int
    start: Key | None
    end: Key | None

    @property
    def is_first(self) -> bool:
        return self.start is None

    @property
    def is_last(self) -> bool:
        return self.end is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "start": encode_key(self.start) if self.start is not None else None,
            "end": encode_key(self.end) if self.end is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(
            int(data["chunk_id"]),
            decode_key(data["start"]) if data.get("start") is not None else None,
            decode_key(data["end"]) if data.get("end") is not None else None,
        )


@dataclass(frozen=True)
class ChunkPlan:
    """All chunks of one table for one generation, in key order (chunk ids 0..n-1)."""

    VERSION: ClassVar[int] = 1

    table: TableId
    generation: int
    key_columns: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    split: str  # "even" | "uneven"
    chunk_size: int
    row_estimate: int
    # The binlog end when the plan was made: DDL of the table before it (a TRUNCATE, a RENAME) is covered by
    # this plan's snapshot, so the stream may pass it (engine/binlog/ddl.py). None for plans made before 0.x.
    planned_at: BinlogPosition | None = None
    # How the lake writes zero dates of this table (``values.ZERO_DATE_MODES``): read by the snapshot and the
    # stream alike, so their files agree.
    zero_dates: str = "keep"
    # Whose binlog ``planned_at`` names (``ServerIdentity.token``);
    # None for plans made before it was recorded.
    planned_on: str | None = None

    def chunk(self, chunk_id: int) -> Chunk:
        for c in self.chunks:
            if c.chunk_id == chunk_id:
                return c
        raise KeyError(f"table {self.table} generation {self.generation} has no chunk {chunk_id}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (keys through the KeyCodec); ``version`` lets later releases read today's plans."""
        return {
            "version": self.VERSION,
            "table": {"database": self.table.database, "table": self.table.table},
            "generation": self.generation,
            "key_columns": list(self.key_columns),
            "split": self.split,
            "chunk_size": self.chunk_size,
            "row_estimate": self.row_estimate,
            "chunks": [c.to_dict() for c in self.chunks],
            **({"planned_at": self.planned_at.to_dict()} if self.planned_at is not None else {}),
            **({"zero_dates": self.zero_dates} if self.zero_dates != "keep" else {}),
            **({"planned_on": self.planned_on} if self.planned_on is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkPlan:
        version = data.get("version")
        if version != cls.VERSION:
            raise CdcError(
                f"chunk plan format version {version!r} is not supported (this release reads version "
                f"{cls.VERSION}): upgrade the provider, or re-plan the table"
            )
        table = data["table"]
        return cls(
            table=TableId(str(table["database"]), str(table["table"])),
            generation=int(data["generation"]),
            key_columns=tuple(str(c) for c in data["key_columns"]),
            chunks=tuple(Chunk.from_dict(c) for c in data["chunks"]),
            split=str(data["split"]),
            chunk_size=int(data["chunk_size"]),
            row_estimate=int(data["row_estimate"]),
            planned_at=BinlogPosition.from_dict(data["planned_at"]) if data.get("planned_at") else None,
            zero_dates=str(data.get("zero_dates") or "keep"),
            planned_on=str(data["planned_on"]) if data.get("planned_on") else None,
        )


def chunks_from_boundaries(boundaries: Sequence[Key]) -> tuple[Chunk, ...]:
    """``(-inf, b1), [b1, b2), ..., [bn, +inf)``; no boundaries gives the single chunk ``(-inf, +inf)``."""
    edges: list[Key | None] = [None, *boundaries, None]
    return tuple(Chunk(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1))
