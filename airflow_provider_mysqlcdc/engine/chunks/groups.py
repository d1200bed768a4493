"""Chunk groups: the unit of work one Spark application (one mapped Airflow task) snapshots.

A chunk is the unit of *consistency* (its own read view and watermarks); a chunk group is the unit of
*scheduling*. Every ``spark-submit`` costs ~25 s of start-up here, so a group bundles enough chunks to
amortise it, and the chunks of a group run in parallel on the executors, in one Spark action. Small tables
share groups (``pack_groups``), so 500 small tables are one application, not 500: a table smaller than
``chunks_per_group`` chunks is whole in one group, a bigger one has groups of its own. Each table's part of a
group is consecutive chunk ids of one plan generation, so a group's name says which key ranges an on-call
engineer reruns.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.text import split_commas

# ~4M rows at the default chunk size: Spark start-up (~25 s) stays a small share
DEFAULT_CHUNKS_PER_GROUP = 512
NAME_LENGTH = 200  # a longer group name is shortened (Airflow keeps 250 characters of a rendered map index)


@dataclass(frozen=True)
class TableChunks:
    """One table's part of a chunk group: some chunk ids of one plan generation."""

    table: str
    generation: int
    chunk_ids: tuple[int, ...]

    @property
    def name(self) -> str:
        return group_label(self.table, self.generation, self.chunk_ids)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "generation": self.generation, "chunk_ids": list(self.chunk_ids)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableChunks:
        return cls(str(data["table"]), int(data["generation"]), tuple(int(c) for c in data["chunk_ids"]))


@dataclass(frozen=True)
class ChunkGroup:
    """The chunks one Spark application snapshots: one part per table, in plan order."""

    parts: tuple[TableChunks, ...]

    @classmethod
    def of(cls, table: str, generation: int, chunk_ids: Iterable[int]) -> ChunkGroup:
        """A group of one table's chunks."""
        return cls((TableChunks(table, generation, tuple(chunk_ids)),))

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(p.table for p in self.parts)

    @property
    def chunk_count(self) -> int:
        return sum(len(p.chunk_ids) for p in self.parts)

    @property
    def name(self) -> str:
        """Readable, stable label (Airflow map index name, Spark job description): every part while that
        stays short, else the first and last table and the counts."""
        full = "; ".join(p.name for p in self.parts)
        if len(self.parts) == 1 or len(full) <= NAME_LENGTH:
            return full
        generations = sorted({p.generation for p in self.parts})
        spelled = (f"plan generation {generations[0]}" if len(generations) == 1 else
                   f"plan generations {format_chunk_ids(generations)}")
        return (f"{len(self.parts)} tables {self.parts[0].table} .. {self.parts[-1].table}, "
                f"{self.chunk_count} chunks ({spelled})")

    @property
    def redo_value(self) -> str:
        """The group as a ``redo_chunks`` value: ``shop.a=0-3; shop.b=0``."""
        return "; ".join(f"{p.table}={format_chunk_ids(p.chunk_ids)}" for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"parts": [p.to_dict() for p in self.parts], "name": self.name}
        if len(self.parts) == 1:  # the one-table form earlier releases wrote and read
            data.update(self.parts[0].to_dict())
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkGroup:
        if "parts" in data:
            return cls(tuple(TableChunks.from_dict(dict(p)) for p in data["parts"]))
        return cls((TableChunks.from_dict(data),))


def group_label(table: str, generation: int, chunk_ids: Iterable[int]) -> str:
    """``shop.orders chunks 8-15 (plan generation 1)``: the chunk ids first, as on-call engineers rerun by
    them; the generation spelled out (a bare "g1" read as "group 1")."""
    return f"{table} chunks {format_chunk_ids(chunk_ids)} (plan generation {generation})"


def chunk_groups(plan: ChunkPlan, chunks_per_group: int = DEFAULT_CHUNKS_PER_GROUP) -> list[ChunkGroup]:
    """The groups of one plan: consecutive chunk ids, at
    most ``chunks_per_group`` per group, sizes balanced."""
    return split_table(TableChunks(str(plan.table), plan.generation, tuple(c.chunk_id for c in plan.chunks)),
                       chunks_per_group)


def split_table(part: TableChunks, chunks_per_group: int = DEFAULT_CHUNKS_PER_GROUP) -> list[ChunkGroup]:
    """One table's chunks in as few groups of at most ``chunks_per_group`` as possible, sizes balanced."""
    if chunks_per_group < 1:
        raise ConfigurationError(f"chunks per group must be at least 1, got {chunks_per_group}")
    ids = part.chunk_ids
    if not ids:
        return []
    count = -(-len(ids) // chunks_per_group)
    size, extra = divmod(len(ids), count)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        groups.append(ChunkGroup((TableChunks(part.table, part.generation, ids[start:end]),)))
        start = end
    return groups


def pack_groups(parts: Sequence[TableChunks],
                chunks_per_group: int = DEFAULT_CHUNKS_PER_GROUP) -> list[ChunkGroup]:
    """Groups of at most ``chunks_per_group`` chunks, in table order: a table with more chunks than that has
    groups of its own (``split_table``); smaller tables share groups, each whole in one group."""
    if chunks_per_group < 1:
        raise ConfigurationError(f"chunks per group must be at least 1, got {chunks_per_group}")
    groups: list[ChunkGroup] = []
    shared: list[TableChunks] = []
    for part in parts:
        if not part.chunk_ids:
            continue
        if len(part.chunk_ids) > chunks_per_group:
            groups += split_table(part, chunks_per_group)
            continue
        if sum(len(p.chunk_ids) for p in shared) + len(part.chunk_ids) > chunks_per_group:
            groups.append(ChunkGroup(tuple(shared)))
            shared = []
        shared.append(part)
    if shared:
        groups.append(ChunkGroup(tuple(shared)))
    return groups


def format_chunk_ids(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    parts: list[str] = []
    ordered = sorted(set(ids))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


MAX_CHUNK_IDS = 1_000_000  # ids one spec may name: "0-99999999999" must fail, not fill the memory


def parse_chunk_ids(text: str) -> tuple[int, ...]:
    """``"3,7"`` or ``"0-2,5"`` -> sorted unique chunk ids (at most ``MAX_CHUNK_IDS``)."""
    ids: set[int] = set()
    for part in split_commas(text):
        low, sep, high = part.partition("-")
        try:
            if not (low.strip().isascii() and (high.strip().isascii() or not sep)):
                raise ValueError(part)
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ConfigurationError(f"chunk ids must look like 3,7 or 0-15, got {text!r}") from None
        if first < 0 or last < first:
            raise ConfigurationError(f"invalid chunk id range {part!r} in {text!r}")
        if len(ids) + (last - first + 1) > MAX_CHUNK_IDS:
            raise ConfigurationError(f"chunk ids {text!r} name more than {MAX_CHUNK_IDS:,} chunks")
        ids.update(range(first, last + 1))
    if not ids:
        raise ConfigurationError(f"no chunk ids in {text!r}")
    return tuple(sorted(ids))
