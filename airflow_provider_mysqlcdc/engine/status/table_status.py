"""The status of one table: its phase, chunks, HWs, stream position, lag, consistency, and notes saying why.

``consistent_from`` is the largest HW of the generation the mirror uses. Until the stream passes it the mirror
mixes chunk HWs; the status says so instead of letting readers assume one point in time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from airflow_provider_mysqlcdc.engine.chunk_store import (
    COMMITTED,
    FAILED,
    PLANNED,
    RUNNING,
    ChunkState,
    ChunkStore,
    MirrorView,
    TableEntry,
    UnknownChunk,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import (
    MirrorManifest,
    consistent_as_of,
    is_consistent,
    read_manifest,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import latest_mirror_version
from airflow_provider_mysqlcdc.engine.lake.schema_history import read_schema_history, schema_version
from airflow_provider_mysqlcdc.engine.lake.table_format import changelog_table
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog
from airflow_provider_mysqlcdc.engine.status.stream_health import lag_seconds
from airflow_provider_mysqlcdc.engine.status.stream_position import TableStreamPosition, table_stream_position
from airflow_provider_mysqlcdc.engine.status.verification import VerificationStatus, verification_status

NOT_PLANNED, SNAPSHOT, SNAPSHOT_DONE, STREAM = "not planned", "snapshot", "snapshot done", "stream"


@dataclass(frozen=True)
class ChunkFailure:
    chunk_id: int
    attempts: int
    error: str


@dataclass(frozen=True)
class TableStatus:
    table: str
    phase: str
    generation: int | None = None  # latest plan generation
    mirror_generation: int | None = None  # latest fully committed generation (what the mirror is built from)
    chunks: int = 0
    planned: int = 0
    running: int = 0
    committed: int = 0
    failed: int = 0
    rerun_pending: int = 0
    rows: int = 0  # committed snapshot rows of the latest generation
    min_hw: BinlogPosition | None = None
    max_hw: BinlogPosition | None = None
    stream_batch: int | None = None  # latest committed stream batch that covered this table
    stream_position: BinlogPosition | None = None
    stream_position_exact: bool = False  # from a marker's end_offset (else estimated from mirror records)
    lag_from: str | None = None  # "stream" or "min_hw" (the stream has not started: where it will start)
    lag_bytes: int | None = None
    lag_files: int | None = None
    # seconds behind the server (0 at its end, however old the last change: idle is not lag); None: unknown
    lag_seconds: float | None = None
    last_event_at: datetime | None = None  # commit time of the last transaction the stream read for it
    consistent_from: BinlogPosition | None = None
    consistent: bool = False
    consistent_as_of: BinlogPosition | None = None
    primary_key: tuple[str, ...] | None = None  # None: unknown (no mirror yet, no MySQL connection)
    schema_version: int | None = None  # 1 + column DDL the stream followed (None: no output root given)
    last_ddl: str | None = None  # the latest DDL the stream followed: "position: statement"
    mirror: dict[str, Any] | None = None  # rows, through_batch, refreshed_at, consistent of the manifest
    failures: tuple[ChunkFailure, ...] = ()
    notes: tuple[str, ...] = ()
    row_estimate: int = 0  # the planner's estimate of the latest generation's rows
    first_started_at: datetime | None = None  # the latest generation's first chunk start (progress, rate)
    last_committed_at: datetime | None = None  # and its latest chunk commit
    # when each chunk of the latest generation was read: (latest attempt's start, its commit; None while it
    # runs), for the progress rate; left out of as_dict (one pair a chunk)
    read_spans: tuple[tuple[datetime, datetime | None], ...] = field(default=(), repr=False)
    # what ``mysqlcdc verify`` last found (None: the mirror's generation was never verified)
    verification: VerificationStatus | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name == "read_spans":
                continue
            value = getattr(self, name)
            if isinstance(value, (BinlogPosition, datetime)):
                value = str(value) if isinstance(value, BinlogPosition) else value.isoformat()
            elif name == "failures":
                value = [f.__dict__ for f in value]
            elif name == "verification":
                value = None if value is None else value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


def table_status(
    store: ChunkStore,
    table: TableId | str,
    root: str | None = None,
    server: ServerBinlog | None = None,
    primary_key: tuple[str, ...] | None = None,
) -> TableStatus:
    """The status of one table from the chunk store, the output root (if given) and the server position."""
    table = TableId.parse(table) if isinstance(table, str) else table
    name = str(table)
    try:
        chunks = _Chunks.read(store, name)
    except UnknownChunk:
        return TableStatus(name, NOT_PLANNED, notes=("not planned: run `mysqlcdc plan`",))
    notes = _removal_notes(store.table_entry(name))
    manifest = read_manifest(root, table) if root else None
    stream = table_stream_position(root, table, manifest, chunks.hws[0] if chunks.hws else None)
    min_hw, max_hw = chunks.mirror_hw_range()
    lag = _Lag.of(server, stream, chunks.hws)
    notes += chunks.notes()
    notes += _stream_notes(chunks, stream, lag)
    notes += _mirror_notes(chunks.view, manifest, stream.own_batch)
    schema = _Schema.read(root, table)
    notes += schema.notes
    pk = primary_key if primary_key is not None else (manifest.primary_key if manifest is not None else None)
    notes += _primary_key_notes(pk)
    verification, verification_notes = verification_status(store, name, chunks.view, chunks.pending_of_view)
    notes += verification_notes
    return TableStatus(
        table=name,
        phase=chunks.phase(stream.batch_id),
        generation=chunks.generation,
        mirror_generation=chunks.view.generation if chunks.view else None,
        chunks=len(chunks.states),
        planned=chunks.count(PLANNED),
        running=chunks.count(RUNNING),
        committed=chunks.count(COMMITTED),
        failed=chunks.count(FAILED),
        rerun_pending=len(chunks.pending),
        rows=sum(c.rows or 0 for c in chunks.states if c.committed),
        min_hw=min(chunks.hws) if chunks.hws else None,
        max_hw=max(chunks.hws) if chunks.hws else None,
        stream_batch=stream.batch_id,
        stream_position=stream.position,
        stream_position_exact=stream.exact,
        lag_from=lag.basis,
        lag_bytes=lag.bytes,
        lag_files=lag.files,
        lag_seconds=lag.seconds,
        last_event_at=stream.last_event_at,
        consistent_from=max_hw,
        consistent=is_consistent(min_hw, max_hw, stream.position),
        consistent_as_of=consistent_as_of(min_hw, max_hw, stream.position),
        primary_key=pk,
        schema_version=schema.version,
        last_ddl=schema.last_ddl,
        mirror=_mirror_summary(manifest, root, table),
        failures=chunks.failures,
        notes=tuple(notes),
        row_estimate=_row_estimate(store, name, chunks.generation),
        first_started_at=min((c.started_at for c in chunks.states if c.started_at), default=None),
        last_committed_at=max((c.committed_at for c in chunks.states if c.committed_at), default=None),
        read_spans=tuple((c.started_at, c.committed_at if c.status == COMMITTED else None)
                         for c in chunks.states if c.started_at and c.status in (COMMITTED, RUNNING)),
        verification=verification,
    )


def _row_estimate(store: ChunkStore, name: str, generation: int | None) -> int:
    """The planner's estimate of the generation's rows (the total of the snapshot's progress)."""
    return 0 if generation is None else int(store.plan(name, generation).plan.get("row_estimate") or 0)


@dataclass(frozen=True)
class _Chunks:
    """One table's chunks of its latest plan generation, and the generation the mirror is built from."""

    states: list[ChunkState]
    generation: int | None
    view: MirrorView | None

    @classmethod
    def read(cls, store: ChunkStore, name: str) -> _Chunks:
        """Raises ``UnknownChunk`` when the table was never planned."""
        states = store.chunks(name)
        generation = states[0].generation if states else store.latest_generation(name)
        return cls(states, generation, store.mirror_view(name))

    @property
    def hws(self) -> list[BinlogPosition]:
        return [c.hw for c in self.states if c.hw is not None]

    @property
    def pending(self) -> list[int]:
        return [c.chunk_id for c in self.states if c.rerun_pending]

    @property
    def pending_of_view(self) -> frozenset[int]:
        """Chunks of the mirror's generation with a rerun running."""
        same = self.view is not None and self.view.generation == self.generation
        return frozenset(self.pending) if same else frozenset()

    @property
    def failures(self) -> tuple[ChunkFailure, ...]:
        return tuple(
            ChunkFailure(c.chunk_id, c.attempts, (c.error or "").splitlines()[0][:200] if c.error else "")
            for c in self.states
            if c.status == FAILED
        )

    def count(self, status: str) -> int:
        return sum(1 for c in self.states if c.status == status)

    def mirror_hw_range(self) -> tuple[BinlogPosition | None, BinlogPosition | None]:
        """(min, max) HW of the chunks the mirror is built from."""
        view_hws = [c.hw for c in self.view.chunks] if self.view is not None else []
        return (min(view_hws), max(view_hws)) if view_hws else (None, None)

    def phase(self, stream_batch: int | None) -> str:
        all_committed = bool(self.states) and all(c.committed for c in self.states)
        return SNAPSHOT if not all_committed else (STREAM if stream_batch is not None else SNAPSHOT_DONE)

    def notes(self) -> list[str]:
        """Failed chunks, pending reruns, and which generation the mirror uses."""
        notes: list[str] = []
        failures, pending, view, generation = self.failures, self.pending, self.view, self.generation
        if failures:
            notes.append(
                "failed chunks "
                + ", ".join(f"{f.chunk_id} (attempt {f.attempts}: {f.error})" for f in failures)
                + ": clear their mapped snapshot tasks, or `mysqlcdc snapshot --chunks ...`"
            )
        if pending:
            notes.append(
                f"reruns pending for chunks {pending}: the mirror keeps their committed snapshot until the "
                "rerun commits"
            )
        if view is None and self.states:
            notes.append("no generation is fully committed yet: no mirror")
        elif view is not None and generation is not None and view.generation != generation:
            notes.append(
                f"the mirror uses generation {view.generation} until generation {generation} is committed"
            )
        return notes


class _Lag(NamedTuple):
    basis: str | None = None  # "stream", or "min_hw" (the stream has not started: where it will start)
    bytes: int | None = None
    files: int | None = None
    seconds: float | None = None  # only behind the stream's own position

    @classmethod
    def of(cls, server: ServerBinlog | None, stream: TableStreamPosition, hws: list[BinlogPosition]) -> _Lag:
        basis = stream.on_server if stream.on_server is not None else (min(hws) if hws else None)
        if server is None or basis is None:
            return cls()
        lag_bytes, lag_files = server.lag(basis)
        if stream.position is None:
            return cls("min_hw", lag_bytes, lag_files)
        return cls("stream", lag_bytes, lag_files, lag_seconds(server, basis, stream.last_event_at))


class _Schema(NamedTuple):
    version: int | None
    last_ddl: str | None
    notes: list[str]

    @classmethod
    def read(cls, root: str | None, table: TableId) -> _Schema:
        """The schema version and latest DDL the stream followed (nothing without an output root)."""
        if root is None:
            return cls(None, None, [])
        history = read_schema_history(root, table)
        version = schema_version(history)
        if not history:
            return cls(version, None, [])
        event = history[-1]
        note = f"schema version {version}: latest DDL followed {event.statement[:120]!r}" + (
            f" (snapshotted again: {event.resnapshot})" if event.resnapshot else ""
        )
        return cls(version, f"{event.position}: {event.statement[:200]}", [note])


def _removal_notes(entry: TableEntry | None) -> list[str]:
    if entry is None or entry.active:
        return []
    return [
        f"removed from the pipeline at {entry.removed_at:%Y-%m-%d %H:%M:%S} UTC"
        + (f" ({entry.removed_reason})" if entry.removed_reason else "")
        + ": the stream no longer captures it, its output stays as it was; plan it again by name to add it "
        "back"
    ]


def _stream_notes(chunks: _Chunks, stream: TableStreamPosition, lag: _Lag) -> list[str]:
    """Mixed chunk HWs in the mirror, the lag's basis, an estimated stream position."""
    notes: list[str] = []
    min_hw, max_hw = chunks.mirror_hw_range()
    position = stream.position
    if max_hw is not None and not is_consistent(min_hw, max_hw, position):
        where = f"the stream is at {position}" if position is not None else "the stream has not started"
        notes.append(
            f"mirror mixes chunk HWs {min_hw} .. {max_hw}: consistent once the stream passes {max_hw} "
            f"({where})"
        )
    if lag.basis == "min_hw":
        notes.append(f"stream not started: lag in parentheses counts from the smallest HW {min(chunks.hws)}")
    if position is not None and not stream.exact:
        notes.append(
            "stream position (~) estimated from the latest record: the batch markers carry no end_offset"
        )
    return notes


def _mirror_notes(view: MirrorView | None, manifest: MirrorManifest | None,
                  own_batch: int | None) -> list[str]:
    """Chunk snapshots and stream batches the mirror has not been refreshed with yet."""
    if manifest is None or manifest.generation != (view.generation if view else None):
        return []
    notes: list[str] = []
    entries = {c.chunk_id: c for c in manifest.chunks}
    stale = [
        c.chunk_id
        for c in view.chunks  # type: ignore[union-attr]
        if entries.get(c.chunk_id) is None or entries[c.chunk_id].snapshot_version != c.output_version
    ]
    if stale:
        notes.append(f"mirror not yet refreshed for the snapshots of chunks {stale}")
    if own_batch is not None and (manifest.through_batch is None or manifest.through_batch < own_batch):
        notes.append(f"mirror refreshed through batch {manifest.through_batch}, "
                     f"changelog at batch {own_batch}")
    return notes


def _primary_key_notes(pk: tuple[str, ...] | None) -> list[str]:
    if pk != ():
        return []
    return [
        (
            "no primary key: the mirror is a multiset of rows, exact for chunks read in an exact read-only "
            "view (MariaDB's consistent snapshot, Oracle MySQL's executed GTIDs); at-least-once for chunks "
            "read with the watermark table or skip_backfill"
        )
    ]


def _mirror_summary(manifest: MirrorManifest | None, root: str | None,
                    table: TableId) -> dict[str, Any] | None:
    """The manifest's figures, and where the Delta tables readers open stand: the mirror's current version
    (and the position it is exact at) and the last batch the changelog's Delta table holds."""
    if manifest is None or root is None:
        return None
    delta = latest_mirror_version(root, table)
    return {
        "delta_version": None if delta is None else delta.version,
        "delta_as_of": None if delta is None or delta.as_of is None else str(delta.as_of),
        "changelog_delta_batch": changelog_table(root, table).last_batch(),
        "rows": manifest.rows,
        "through_batch": manifest.through_batch,
        "refreshed_at": manifest.refreshed_at,
        "generation": manifest.generation,
        "consistent": manifest.consistent,
        "as_of": None if manifest.as_of is None else str(manifest.as_of),
        "files": len(manifest.files),
    }
