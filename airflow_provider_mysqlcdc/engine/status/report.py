"""Where each table stands: snapshot phase progress, stream position and lag, and mirror consistency.

What on-call engineers look at (``mysqlcdc status``, the Airflow UI): per table the plan generation, chunks
planned/running/committed/failed, snapshot rows, min/max HW, the stream position (the ``end_offset`` of the
table's latest committed changelog batch), the lag behind the server's binlog in bytes, files and seconds, and
``consistent_from``: the largest HW of the generation the mirror uses. Until the stream passes it the mirror
mixes chunk HWs; the status says so instead of letting readers assume one point in time. Over all tables:
the stream's lag in seconds and the binlog headroom (``stream_health``), and the last batch's figures.

Reads the chunk store and the output root; MySQL (optional) for the server's binlog position, clock and
expiry, and (given its settings) when a binlog file was started. Inside: ``table_status`` (one table),
``stream_position`` (where the stream stands for a table), ``server_binlog`` (the server's end and the lag),
``stream_health`` (lag in seconds, headroom), ``text`` (how values read); here the report over all tables.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.file_start import FileStarts
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.gc.report import GcReport, read_gc_report
from airflow_provider_mysqlcdc.engine.lake.layout import read_json, stream_owner_path
from airflow_provider_mysqlcdc.engine.lake.stream_progress import StreamProgress, read_stream_progress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import primary_key_columns
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.progress import SnapshotProgress, snapshot_progress
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog, server_binlog
from airflow_provider_mysqlcdc.engine.status.stream_health import Needed, StreamHealth, stream_health
from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus, table_status
from airflow_provider_mysqlcdc.engine.status.text import (
    consistency_text,
    health_text,
    lag_seconds_text,
    lag_text,
    progress_text,
    value_text,
    verification_lines,
)


@dataclass(frozen=True)
class StatusReport:
    tables: tuple[TableStatus, ...]
    server_position: BinlogPosition | None
    collected_at: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    startup_mode: str | None = None  # of the stream writing the output root (engine.stream.startup)
    progress: SnapshotProgress = field(default_factory=SnapshotProgress)  # over all tables of the report
    gc: GcReport | None = None  # what garbage collection reclaimed (``_mysqlcdc_gc.json``), if it ran
    health: StreamHealth | None = None  # the stream's lag in seconds and the binlog headroom
    stream: StreamProgress | None = None  # the stream's progress record: its last batch's figures, totals

    def as_dict(self) -> dict[str, Any]:
        return {
            "collected_at": self.collected_at,
            "startup_mode": self.startup_mode,
            "server_position": None if self.server_position is None else str(self.server_position),
            "tables": [t.as_dict() for t in self.tables],
            "notes": list(self.notes),
            "progress": self.progress.as_dict(),
            "gc": None if self.gc is None else self.gc.as_dict(),
            "stream": self._stream_dict(),
        }

    def _stream_dict(self) -> dict[str, Any]:
        """The stream's lag and headroom, its last batch's figures and its totals."""
        batch = self.stream.batch if self.stream is not None else None
        totals = self.stream.totals if self.stream is not None else None
        return {
            **(self.health.as_dict() if self.health is not None else {}),
            "batch_id": self.stream.batch_id if self.stream is not None else None,
            "batch": None if batch is None else batch.to_dict(),
            "totals": None if totals is None else totals.to_dict(),
        }

    def render(self) -> str:
        """A fixed-width table, then one line per note (failures, mixed HWs, lag basis)."""
        header = (
            "TABLE",
            "PHASE",
            "GEN",
            "CHUNKS",
            "RUN",
            "FAIL",
            "ROWS",
            "MIN HW",
            "MAX HW",
            "STREAM",
            "LAG",
            "LAG S",
            "CONSISTENT",
            "SCHEMA",
        )
        rows = [header]
        for t in self.tables:
            rows.append(
                (
                    t.table,
                    t.phase,
                    value_text(t.generation),
                    f"{t.committed}/{t.chunks}" if t.chunks else "-",
                    str(t.running),
                    str(t.failed),
                    str(t.rows),
                    value_text(t.min_hw),
                    value_text(t.max_hw),
                    value_text(t.stream_position)
                    + ("" if t.stream_position is None or t.stream_position_exact else "~"),
                    lag_text(t),
                    "-" if t.lag_seconds is None else lag_seconds_text(t.lag_seconds),
                    consistency_text(t),
                    value_text(t.schema_version and f"v{t.schema_version}"),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        if self.progress.chunks:
            lines.append(f"snapshot: {progress_text(self.progress)}")
        if self.server_position is not None:
            lines.append(f"server binlog position: {self.server_position}")
        if self.health is not None and self.health.needed is not None:
            lines.append(health_text(self.health))
        for t in self.tables:
            lines.extend(f"{t.table}: {note}" for note in t.notes)
        for t in self.tables:
            lines.extend(verification_lines(t))
        lines.extend(self.notes)
        if self.gc is not None:
            lines.append(self.gc.describe())
        return "\n".join(lines)


def collect_status(
    store: ChunkStore,
    root: str | None = None,
    tables: Iterable[TableId | str] | None = None,
    conn_factory: Callable[[], pymysql.connections.Connection] | None = None,
    *,
    settings: MySQLSettings | None = None,
) -> StatusReport:
    """Status of the given tables (default: every table in the chunk store). ``settings`` (the CDC user's):
    the server is read with them (unless ``conn_factory`` is given), and so is when a binlog file was
    started, which the headroom of a rotated file needs."""
    names = [str(t) for t in tables] if tables is not None else store.tables()
    if conn_factory is None and settings is not None:
        conn_factory = functools.partial(connect, settings)
    server: ServerBinlog | None = None
    notes: list[str] = []
    schemas: dict[str, tuple[str, ...]] = {}
    progress = read_stream_progress(root) if root else None
    if conn_factory is not None:
        try:
            with contextlib.closing(conn_factory()) as conn:
                server = server_binlog(conn, [progress.end_offset.position] if progress is not None else [])
                schemas = _primary_keys(conn, names)
        except CdcError as exc:
            notes.append(f"server position unknown ({exc}): no lag")
        except pymysql.err.MySQLError as exc:
            notes.append(f"server position unknown ({exc.args[-1]}): no lag")
    statuses = tuple(table_status(store, n, root, server, schemas.get(n)) for n in names)
    startup = ((read_json(stream_owner_path(root)) or {}).get("startup") or {}) if root else {}
    mode = startup.get("mode")
    if mode:
        start = startup.get("start")
        where = (f"{start.get('file')}:{start.get('pos')}" if isinstance(start, dict)
                 else "the smallest chunk HW")
        notes.append(f"stream startup mode {mode}: began at {where}")
    gc = _gc_report(root, notes)  # before the notes are taken: an unreadable report adds one
    hws = [t.min_hw for t in statuses if t.min_hw is not None]
    streaming = [(t.stream_position, t.last_event_at) for t in statuses if t.stream_position is not None]
    needed = Needed.of(progress, min(hws) if hws else None, streaming)
    health = stream_health(server, needed, FileStarts(settings) if settings is not None else None)
    return StatusReport(
        statuses,
        server.position if server else None,
        datetime.now(UTC).isoformat(timespec="seconds"),
        tuple(notes),
        mode,
        snapshot_progress(statuses),
        gc,
        health,
        progress,
    )


def _gc_report(root: str | None, notes: list[str]) -> GcReport | None:
    """The garbage collection report of the output root; an unreadable one is a note, not a failure."""
    if not root:
        return None
    try:
        return read_gc_report(root)
    except (CdcError, OSError, ValueError) as exc:
        notes.append(f"garbage collection report unreadable ({exc})")
        return None


def _primary_keys(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, tuple[str, ...]]:
    """Primary key columns per table (an empty tuple: the table has none)."""
    with conn.cursor() as cur:
        return {name: primary_key_columns(cur, TableId.parse(name)) for name in names}
