"""Where each table stands: snapshot phase progress, stream position and lag, and mirror consistency.

What on-call engineers look at (``mysqlcdc status``, the Airflow UI): per table the plan generation, chunks
planned/running/committed/failed, snapshot rows, min/max HW, the stream position (the ``end_offset`` of the
table's latest committed changelog batch), the lag behind the server's binlog in bytes and files, and
``consistent_from``: the largest HW of the generation the mirror uses. Until the stream passes it the mirror
mixes chunk HWs; the status says so instead of letting readers assume one point in time.

Reads the chunk store and the output root; MySQL (optional) only for the server's binlog position.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import pymysql

from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch, read_stream_progress
from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, FAILED, PLANNED, RUNNING, ChunkStore, UnknownChunk
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorManifest, consistent_as_of, is_consistent, read_manifest
from airflow_provider_mysqlcdc.engine.model.position_text import position_of
from airflow_provider_mysqlcdc.engine.lake.layout import read_json, stream_owner_path
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.lake.schema_history import read_schema_history, schema_version
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

NOT_PLANNED, SNAPSHOT, SNAPSHOT_DONE, STREAM = "not planned", "snapshot", "snapshot done", "stream"


@dataclass(frozen=True)
class ServerBinlog:
    """The server's current binlog end, and its binlog files with sizes (None without REPLICATION CLIENT)."""

    position: BinlogPosition
    files: tuple[tuple[str, int], ...] | None

    def lag(self, behind: BinlogPosition) -> tuple[int | None, int]:
        """(bytes, files) from ``behind`` to the server's position; bytes None when a file size is unknown."""
        first, last = file_number(behind.file), file_number(self.position.file)
        if last < first or (last == first and self.position.pos <= behind.pos):
            return 0, 0
        if last == first:
            return self.position.pos - behind.pos, 0
        sizes = {file_number(name): size for name, size in (self.files or ())}
        if first not in sizes or any(n not in sizes for n in range(first + 1, last)):
            return None, last - first
        total = sizes[first] - behind.pos + sum(sizes[n] for n in range(first + 1, last)) + self.position.pos
        return max(total, 0), last - first


def server_binlog(conn: pymysql.connections.Connection) -> ServerBinlog:
    status = current_binlog_status(conn, server_info(conn))
    files: tuple[tuple[str, int], ...] | None
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = tuple((str(r[0]), int(r[1])) for r in cur.fetchall())
    except pymysql.err.MySQLError as exc:
        log.info("SHOW BINARY LOGS failed (%s): lag across binlog files is reported in files only", exc)
        files = None
    return ServerBinlog(BinlogPosition(status.file, status.position), files)


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
    consistent_from: BinlogPosition | None = None
    consistent: bool = False
    consistent_as_of: BinlogPosition | None = None
    primary_key: tuple[str, ...] | None = None  # None: unknown (no mirror yet, no MySQL connection)
    schema_version: int | None = None  # 1 + column DDL the stream followed (None: no output root given)
    last_ddl: str | None = None  # the latest DDL the stream followed: "position: statement"
    mirror: dict[str, Any] | None = None  # rows, through_batch, refreshed_at, consistent of the manifest
    failures: tuple[ChunkFailure, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, BinlogPosition):
                value = str(value)
            elif name == "failures":
                value = [f.__dict__ for f in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


@dataclass(frozen=True)
class StatusReport:
    tables: tuple[TableStatus, ...]
    server_position: BinlogPosition | None
    collected_at: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    startup_mode: str | None = None  # of the stream writing the output root (engine.stream.startup)

    def as_dict(self) -> dict[str, Any]:
        return {
            "collected_at": self.collected_at,
            "startup_mode": self.startup_mode,
            "server_position": None if self.server_position is None else str(self.server_position),
            "tables": [t.as_dict() for t in self.tables],
            "notes": list(self.notes),
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
            "CONSISTENT",
            "SCHEMA",
        )
        rows = [header]
        for t in self.tables:
            rows.append(
                (
                    t.table,
                    t.phase,
                    _text(t.generation),
                    f"{t.committed}/{t.chunks}" if t.chunks else "-",
                    str(t.running),
                    str(t.failed),
                    str(t.rows),
                    _text(t.min_hw),
                    _text(t.max_hw),
                    _text(t.stream_position)
                    + ("" if t.stream_position is None or t.stream_position_exact else "~"),
                    lag_text(t),
                    _consistency_text(t),
                    _text(t.schema_version and f"v{t.schema_version}"),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        if self.server_position is not None:
            lines.append(f"server binlog position: {self.server_position}")
        for t in self.tables:
            lines.extend(f"{t.table}: {note}" for note in t.notes)
        lines.extend(self.notes)
        return "\n".join(lines)


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def lag_text(t: TableStatus) -> str:
    """Bytes/files behind the server; in parentheses when counted from the smallest HW (no stream yet)."""
    if t.lag_files is None:
        return "-"
    amount = "?" if t.lag_bytes is None else bytes_text(t.lag_bytes)
    text = f"{amount}/{t.lag_files} file{'s' if t.lag_files > 1 else ''}" if t.lag_files else amount
    return text if t.lag_from == "stream" else f"({text})"


def bytes_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _consistency_text(t: TableStatus) -> str:
    if t.consistent_from is None:
        return "no"
    if t.consistent:
        return f"yes, as of {t.consistent_as_of}"
    return f"from {t.consistent_from}"


# --- collection ---------------------------------------------------------------------------------------------


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
        states = store.chunks(name)
    except UnknownChunk:
        return TableStatus(name, NOT_PLANNED, notes=("not planned: run `mysqlcdc plan`",))
    generation = states[0].generation if states else store.latest_generation(name)
    counts = {s: sum(1 for c in states if c.status == s) for s in (PLANNED, RUNNING, COMMITTED, FAILED)}
    hws = [c.hw for c in states if c.hw is not None]
    view = store.mirror_view(name)
    view_hws = [c.hw for c in view.chunks] if view is not None else []
    notes: list[str] = []
    entry = store.table_entry(name)
    if entry is not None and not entry.active:
        notes.append(
            f"removed from the pipeline at {entry.removed_at:%Y-%m-%d %H:%M:%S} UTC"
            + (f" ({entry.removed_reason})" if entry.removed_reason else "")
            + ": the stream no longer captures it, its output stays as it was; plan it again by name to add it back"
        )

    manifest = read_manifest(root, table) if root else None
    batch_id, position, exact, own_batch, on_server = _stream_progress(
        root, table, manifest, hws[0] if hws else None
    )
    all_committed = bool(states) and all(c.committed for c in states)
    phase = SNAPSHOT if not all_committed else (STREAM if batch_id is not None else SNAPSHOT_DONE)

    min_hw, max_hw = (min(view_hws), max(view_hws)) if view_hws else (None, None)
    consistent = is_consistent(min_hw, max_hw, position)
    lag_from, lag_bytes, lag_files = None, None, None
    basis = on_server if on_server is not None else (min(hws) if hws else None)
    if server is not None and basis is not None:
        lag_from = "stream" if position is not None else "min_hw"
        lag_bytes, lag_files = server.lag(basis)

    pending = [c.chunk_id for c in states if c.rerun_pending]
    failures = tuple(
        ChunkFailure(c.chunk_id, c.attempts, (c.error or "").splitlines()[0][:200] if c.error else "")
        for c in states
        if c.status == FAILED
    )
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
    if view is None and states:
        notes.append("no generation is fully committed yet: no mirror")
    elif view is not None and generation is not None and view.generation != generation:
        notes.append(
            f"the mirror uses generation {view.generation} until generation {generation} is committed"
        )
    if max_hw is not None and not consistent:
        where = f"the stream is at {position}" if position is not None else "the stream has not started"
        notes.append(
            f"mirror mixes chunk HWs {min_hw} .. {max_hw}: consistent once the stream passes {max_hw} "
            f"({where})"
        )
    if lag_from == "min_hw":
        notes.append(f"stream not started: lag in parentheses counts from the smallest HW {min(hws)}")
    if position is not None and not exact:
        notes.append(
            "stream position (~) estimated from the latest record: the batch markers carry no end_offset"
        )
    if manifest is not None and manifest.generation == (view.generation if view else None):
        stale = [
            c.chunk_id
            for c, m in _pairs(view, manifest)
            if m is None or m.snapshot_version != c.output_version
        ]
        if stale:
            notes.append(f"mirror not yet refreshed for the snapshots of chunks {stale}")
        if own_batch is not None and (manifest.through_batch is None or manifest.through_batch < own_batch):
            notes.append(
                f"mirror refreshed through batch {manifest.through_batch}, changelog at batch {own_batch}"
            )
    version = last_ddl = None
    if root is not None:
        history = read_schema_history(root, table)
        version = schema_version(history)
        if history:
            event = history[-1]
            last_ddl = f"{event.position}: {event.statement[:200]}"
            notes.append(f"schema version {version}: latest DDL followed {event.statement[:120]!r}"
                         + (f" (snapshotted again: {event.resnapshot})" if event.resnapshot else ""))
    pk = primary_key if primary_key is not None else (manifest.primary_key if manifest is not None else None)
    if pk == ():
        notes.append(
            "no primary key: the mirror is a multiset of rows, exact only for chunks read with the "
            "consistent-snapshot read view (MariaDB); at-least-once otherwise"
        )
    return TableStatus(
        table=name,
        phase=phase,
        generation=generation,
        mirror_generation=view.generation if view else None,
        chunks=len(states),
        planned=counts[PLANNED],
        running=counts[RUNNING],
        committed=counts[COMMITTED],
        failed=counts[FAILED],
        rerun_pending=len(pending),
        rows=sum(c.rows or 0 for c in states if c.committed),
        min_hw=min(hws) if hws else None,
        max_hw=max(hws) if hws else None,
        stream_batch=batch_id,
        stream_position=position,
        stream_position_exact=exact,
        lag_from=lag_from,
        lag_bytes=lag_bytes,
        lag_files=lag_files,
        consistent_from=max_hw,
        consistent=consistent,
        consistent_as_of=consistent_as_of(min_hw, max_hw, position),
        primary_key=pk,
        schema_version=version,
        last_ddl=last_ddl,
        mirror=None
        if manifest is None
        else {
            "rows": manifest.rows,
            "through_batch": manifest.through_batch,
            "refreshed_at": manifest.refreshed_at,
            "generation": manifest.generation,
            "consistent": manifest.consistent,
            "as_of": None if manifest.as_of is None else str(manifest.as_of),
            "files": len(manifest.files),
        },
        failures=failures,
        notes=tuple(notes),
    )


def _pairs(view: Any, manifest: MirrorManifest) -> list[tuple[Any, Any]]:
    entries = {c.chunk_id: c for c in manifest.chunks}
    return [(c, entries.get(c.chunk_id)) for c in view.chunks]


def _stream_progress(
    root: str | None, table: TableId, manifest: MirrorManifest | None, like: BinlogPosition | None
) -> tuple[int | None, BinlogPosition | None, bool, int | None, BinlogPosition | None]:
    """(latest committed batch covering the table, stream position in the stream's order (what HWs compare
    with), exact?, latest batch with changes of the table, the position on the server now (for lag)). The
    position comes from the stream's progress file when the table has been idle since, else from the latest
    marker's ``end_offset``, else it is estimated from its ``last_position`` or the mirror. The two positions
    differ only after a failover (``BinlogOffset.ordered_position``)."""
    if not root:
        return None, None, False, None, None
    progress = read_stream_progress(root)
    if progress is not None and not progress.covers(table):
        progress = None
    ids = committed_batch_ids(root, table)
    own = ids[-1] if ids else None
    if progress is not None and (own is None or progress.batch_id >= own):
        end = progress.end_offset
        return progress.batch_id, end.ordered_position, True, own, end.position
    if own is None:
        return None, None, False, None, None
    latest = read_batch(root, table, own)
    if latest.end_offset is not None:
        end = latest.end_offset
        return own, end.ordered_position, True, own, end.position
    candidates: list[BinlogPosition] = []
    if latest.last_position and like is not None:
        candidates.append(position_of(latest.last_position, like))
    if manifest is not None and manifest.stream_position is not None:
        candidates.append(manifest.stream_position)
    estimate = max(candidates, default=None)
    return own, estimate, False, own, estimate


def collect_status(
    store: ChunkStore,
    root: str | None = None,
    tables: Iterable[TableId | str] | None = None,
    conn_factory: Callable[[], pymysql.connections.Connection] | None = None,
) -> StatusReport:
    """Status of the given tables (default: every table in the chunk store)."""
    names = [str(t) for t in tables] if tables is not None else store.tables()
    server = None
    notes: list[str] = []
    schemas: dict[str, tuple[str, ...]] = {}
    if conn_factory is not None:
        try:
            with contextlib.closing(conn_factory()) as conn:
                server = server_binlog(conn)
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
        where = f"{start.get('file')}:{start.get('pos')}" if isinstance(start, dict) else "the smallest chunk HW"
        notes.append(f"stream startup mode {mode}: began at {where}")
    return StatusReport(
        statuses,
        server.position if server else None,
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tuple(notes),
        mode,
    )


def _primary_keys(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, tuple[str, ...]]:
    """Primary key columns per table (an empty tuple: the table has none)."""
    out: dict[str, tuple[str, ...]] = {}
    with conn.cursor() as cur:
        for name in names:
            table = TableId.parse(name)
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s AND "
                "TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                (table.database, table.table),
            )
            out[name] = tuple(str(r[0]) for r in cur.fetchall())
    return out
