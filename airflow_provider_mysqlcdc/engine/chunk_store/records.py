"""What the chunk store hands out: plain records of plans, chunks and tables, and the views the stream filter
and the mirror read; and how its rows become them."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, overload

from airflow_provider_mysqlcdc.engine.chunk_store.schema import JSON_VERSION
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

# --- records ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk of a new plan: ``[start_key, end_key)``, the planner's opaque key text (None = unbounded)."""

    chunk_id: int
    start_key: str | None
    end_key: str | None


@dataclass(frozen=True)
class PlanInfo:
    table: str
    generation: int
    key_columns: tuple[str, ...]
    split_kind: str | None
    chunk_size: int | None
    chunk_count: int
    created_at: datetime
    run_id: str | None
    plan: dict[str, Any]  # the planner's plan, as given to create_plan


@dataclass(frozen=True)
class TableEntry:
    """A table's membership in the pipeline (its ``mysqlcdc_tables`` row)."""

    table: str
    latest_generation: int
    added_generation: int | None  # the first generation that counts (None: all; a removed table planned
    # again starts over at the generation that re-added it)
    created_at: datetime
    updated_at: datetime
    removed_at: datetime | None
    removed_run_id: str | None
    removed_reason: str | None

    @property
    def active(self) -> bool:
        """In the pipeline: planned and not removed since."""
        return self.removed_at is None


@dataclass(frozen=True)
class ChunkState:
    table: str
    generation: int
    chunk_id: int
    start_key: str | None
    end_key: str | None
    status: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    run_id: str | None
    error: str | None
    rerun_pending: bool
    # committed result (None until the first commit)
    rows: int | None
    lw: BinlogPosition | None
    hw: BinlogPosition | None
    output_version: str | None
    committed_at: datetime | None
    committed_run_id: str | None
    timings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # whose binlog the HW names (``ServerIdentity.token``; None: a store of an earlier release) and the GTID
    # position at the HW where the server has one
    hw_server: str | None = None
    hw_gtid_position: str | None = None

    @property
    def committed(self) -> bool:
        """A committed snapshot exists (the mirror uses it), whatever the latest attempt is doing."""
        return self.hw is not None

    @property
    def effective_hw(self) -> BinlogPosition | None:
        """The HW the stream filter may use: None (-inf: emit all) until committed, and while rerunning."""
        return None if self.rerun_pending else self.hw


@dataclass(frozen=True)
class ChunkResult:
    """A chunk attempt's result to commit (``commit_chunks``): its rows, LW/HW and output version.

    ``hw_server``: whose binlog LW and HW name (``ServerIdentity.token`` of the server it was read from), with
    ``hw_gtid_position``, the GTID position at HW where that server has one. ``attempt``: the attempt that
    read it (None: whichever is current)."""

    chunk_id: int
    rows: int
    lw: BinlogPosition
    hw: BinlogPosition
    output_version: str | None
    attempt: int | None = None
    timings: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] | None = None
    hw_server: str | None = None
    hw_gtid_position: str | None = None


@dataclass(frozen=True)
class StreamChunk:
    chunk_id: int
    start_key: str | None
    end_key: str | None
    hw: BinlogPosition | None  # effective HW: None = -inf (not committed, or a rerun in progress)
    committed_hw: BinlogPosition | None  # the HW of the committed snapshot, even while a rerun runs
    status: str
    hw_server: str | None = None  # whose binlog ``committed_hw`` names (None: not recorded, an older store)
    hw_gtid_position: str | None = None  # the GTID position at ``committed_hw`` (MariaDB)


@dataclass(frozen=True)
class GenerationView:
    generation: int
    fully_committed: bool  # every chunk has a committed snapshot
    chunks: tuple[StreamChunk, ...]


@dataclass(frozen=True)
class TableView:
    """What the stream filter must respect for one table.

    ``generations`` holds the latest plan generation and, if it is not fully committed yet, also the latest
    fully committed older one (the mirror still uses it), newest first. Drop an event only if *every* listed
    generation
    has an effective HW at or after it for the chunk holding the event's key.
    """

    table: str
    latest_generation: int | None
    committed_generation: int | None  # latest fully committed generation (may equal latest_generation)
    generations: tuple[GenerationView, ...]
    min_hw: BinlogPosition | None  # min committed HW over all listed chunks: where the stream must start
    max_hw: BinlogPosition | None  # max committed HW: every event after it is emitted

    @property
    def complete(self) -> bool:
        """The latest generation is committed and no rerun is pending: the filter has an HW for every key."""
        return bool(self.generations) and self.generations[0].generation == self.latest_generation and all(
            c.hw is not None for c in self.generations[0].chunks
        )


@dataclass(frozen=True)
class MirrorChunk:
    chunk_id: int
    start_key: str | None
    end_key: str | None
    rows: int
    lw: BinlogPosition
    hw: BinlogPosition
    output_version: str | None
    committed_at: datetime | None


@dataclass(frozen=True)
class MirrorView:
    table: str
    generation: int
    chunks: tuple[MirrorChunk, ...]


@dataclass(frozen=True)
class ChunkEvent:
    table: str
    generation: int
    chunk_id: int
    attempt: int
    event: str
    at: datetime
    run_id: str | None
    rows: int | None
    hw: BinlogPosition | None
    output_version: str | None
    detail: str | None



@overload
def aware_utc(value: datetime) -> datetime: ...
@overload
def aware_utc(value: None) -> None: ...
def aware_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def binlog_position_of(file: str | None, pos: int | None) -> BinlogPosition | None:
    return None if file is None or pos is None else BinlogPosition(file, int(pos))


def table_name_of(table: Any) -> str:
    name = str(table)
    database, sep, rest = name.partition(".")
    if not sep or not database or not rest:
        raise ConfigurationError(f"table {name!r} must be written as database.table")
    return name


def dump_versioned(data: Mapping[str, Any] | None) -> str | None:
    if not data:
        return None
    if "v" in data:
        raise ValueError("the key 'v' is reserved for the format version")
    return json.dumps({"v": JSON_VERSION, **data}, sort_keys=True, default=str)


def load_versioned(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    data = dict(json.loads(text))
    data.pop("v", None)  # version 1 is the only format so far; later formats convert here
    return data


def bound_text(chunk_id: int, bound: Any) -> str | None:
    """A bound as stored: the key codec's JSON text as given, or its JSON-safe value (``encode_key``)
    dumped to JSON text."""
    if bound is None or isinstance(bound, str):
        return bound
    try:
        return json.dumps(bound, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"chunk {chunk_id}: bound {bound!r} is not the key codec's JSON ({exc})") from None


def chunk_spec_of(item: Any) -> ChunkSpec:
    """``ChunkSpec``, ``(chunk_id, start, end)``, a mapping (``start_key``/``end_key``, or the planner's
    ``Chunk.to_dict()`` with ``start``/``end``) or an object with ``chunk_id``, ``start_key``, ``end_key``."""
    if isinstance(item, ChunkSpec):
        chunk_id, start, end = item.chunk_id, item.start_key, item.end_key
    elif isinstance(item, Mapping):
        chunk_id = item["chunk_id"]
        start = item["start_key"] if "start_key" in item else item.get("start")
        end = item["end_key"] if "end_key" in item else item.get("end")
    elif isinstance(item, (tuple, list)):
        chunk_id, start, end = item
    else:
        chunk_id, start, end = item.chunk_id, item.start_key, item.end_key
    chunk_id = int(chunk_id)
    return ChunkSpec(chunk_id, bound_text(chunk_id, start), bound_text(chunk_id, end))



def table_entry_of(row: RowMapping) -> TableEntry:
    added = row["added_generation"]
    return TableEntry(
        table=row["table_name"], latest_generation=int(row["latest_generation"]),
        added_generation=None if added is None else int(added), created_at=aware_utc(row["created_at"]),
        updated_at=aware_utc(row["updated_at"]), removed_at=aware_utc(row["removed_at"]),
        removed_run_id=row["removed_run_id"], removed_reason=row["removed_reason"],
    )


def chunk_state_of(row: RowMapping) -> ChunkState:
    return ChunkState(
        table=row["table_name"], generation=row["generation"], chunk_id=row["chunk_id"],
        start_key=row["start_key"], end_key=row["end_key"], status=row["status"], attempts=row["attempts"],
        started_at=aware_utc(row["started_at"]), finished_at=aware_utc(row["finished_at"]),
        run_id=row["run_id"], error=row["error"], rerun_pending=bool(row["rerun_pending"]),
        rows=row["row_count"],
        lw=binlog_position_of(row["lw_file"], row["lw_pos"]),
        hw=binlog_position_of(row["hw_file"], row["hw_pos"]),
        output_version=row["output_version"], committed_at=aware_utc(row["committed_at"]),
        committed_run_id=row["committed_run_id"], timings=load_versioned(row["timings_json"]),
        extra=load_versioned(row["extra_json"]), hw_server=row["hw_server"],
        hw_gtid_position=row["hw_gtid_position"],
    )


def table_view_of(table: str, latest: int | None, committed: int | None,
                chunks: dict[int, list[ChunkState]]) -> TableView:
    generations: list[GenerationView] = []
    for generation in sorted({g for g in (latest, committed) if g is not None}, reverse=True):
        states = chunks.get(generation, [])
        generations.append(GenerationView(
            generation=generation,
            fully_committed=bool(states) and all(s.committed for s in states),
            chunks=tuple(StreamChunk(s.chunk_id, s.start_key, s.end_key, s.effective_hw, s.hw, s.status,
                                     s.hw_server, s.hw_gtid_position)
                         for s in states),
        ))
    committed_hws = [c.committed_hw for g in generations for c in g.chunks if c.committed_hw is not None]
    return TableView(
        table=table, latest_generation=latest, committed_generation=committed, generations=tuple(generations),
        min_hw=min(committed_hws) if committed_hws else None,
        max_hw=max(committed_hws) if committed_hws else None,
    )
