"""Chunk groups: the unit of work one Spark application (one mapped Airflow task) snapshots.

A chunk is the unit of *consistency* (its own read view and watermarks); a chunk group is the unit of
*scheduling*. Every ``spark-submit`` costs ~25 s of start-up here, so a group bundles enough chunks to
amortise it, and the chunks of a group run in parallel on the executors. Groups are consecutive chunk ids of
one table and one plan generation, so a group's name says which key range an on-call engineer reruns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.text import split_commas

DEFAULT_CHUNKS_PER_GROUP = 512  # ~4M rows at the default chunk size: Spark start-up (~25 s) stays a small share


@dataclass(frozen=True)
class ChunkGroup:
    table: str
    generation: int
    chunk_ids: tuple[int, ...]

    @property
    def name(self) -> str:
        """Readable, stable label (Airflow map index name, Spark job description)."""
        return group_label(self.table, self.generation, self.chunk_ids)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "generation": self.generation, "chunk_ids": list(self.chunk_ids),
                "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChunkGroup":
        return cls(str(data["table"]), int(data["generation"]), tuple(int(c) for c in data["chunk_ids"]))


def group_label(table: str, generation: int, chunk_ids: Iterable[int]) -> str:
    """``shop.orders chunks 8-15 (plan generation 1)``: the chunk ids first, as on-call engineers rerun by
    them; the generation spelled out (a bare "g1" read as "group 1")."""
    return f"{table} chunks {format_chunk_ids(chunk_ids)} (plan generation {generation})"


def chunk_groups(plan: ChunkPlan, chunks_per_group: int = DEFAULT_CHUNKS_PER_GROUP) -> list[ChunkGroup]:
    """Consecutive chunk ids of the plan, at most ``chunks_per_group`` per group, sizes balanced."""
    if chunks_per_group < 1:
        raise ConfigurationError(f"chunks per group must be at least 1, got {chunks_per_group}")
    ids = [c.chunk_id for c in plan.chunks]
    count = -(-len(ids) // chunks_per_group)
    size, extra = divmod(len(ids), count)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        groups.append(ChunkGroup(str(plan.table), plan.generation, tuple(ids[start:end])))
        start = end
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
