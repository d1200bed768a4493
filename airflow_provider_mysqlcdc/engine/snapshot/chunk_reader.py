"""Reading one chunk: low watermark, a fresh read view, the rows in Arrow batches, high watermark, backfill.

The result reflects the table exactly as of the chunk's high watermark (HW), and is emitted as snapshot
records (``+I``) at HW. ``ChunkRead`` takes the session and the read slot, picks the way of reading by the
source's read view mode and the reader (one file each in ``read_modes/``: MariaDB's consistent snapshot, LW ==
HW, no binlog read; Oracle MySQL's executed-GTID window, a few events applied; the watermark table, the events
between two markers applied), and gives them what they share. ``skip_backfill`` gives an at-least-once chunk
filtered at its LW instead.

DDL during a chunk read makes the chunk be read again in a fresh read view (at most ``DDL_REREADS`` times):
DDL that rebuilt the table after the view opened (the server refuses the view), and DDL that changed the
table's columns after the schema the read uses was loaded but before HW (an instant ADD/DROP/RENAME COLUMN
leaves the view valid, so only comparing the columns after HW is fixed finds it: ``schema_changed``). So a
chunk's records always have the table's columns as of HW (or later), and their values. DDL that changed the
primary key or the chunk key fails the chunk (``ChunkKeyChanged``): the table must be re-planned.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pymysql.cursors

from airflow_provider_mysqlcdc.engine.binlog.changes import RowChange
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.key_sql import plan_predicate
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ServerUnavailable
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import snapshot_batch, snapshot_data_batch
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.chunk_buffer import ArrowChunkBuffer, ChunkBuffer
from airflow_provider_mysqlcdc.engine.snapshot.native_read import choice as reader_choice
from airflow_provider_mysqlcdc.engine.snapshot.native_read import columns as native_columns
from airflow_provider_mysqlcdc.engine.snapshot.native_read import date_guard
from airflow_provider_mysqlcdc.engine.snapshot.native_read import session as native_session
from airflow_provider_mysqlcdc.engine.snapshot.native_read.select import NativeReadFailed, NativeSelect
from airflow_provider_mysqlcdc.engine.snapshot.read_errors import (
    DDL_REREADS,
    ChunkKeyChanged,
    TableChangedDuringRead,
)
from airflow_provider_mysqlcdc.engine.snapshot.read_modes.consistent_snapshot import ConsistentSnapshotRead
from airflow_provider_mysqlcdc.engine.snapshot.read_modes.consistent_snapshot_native import (
    NativeConsistentRead,
)
from airflow_provider_mysqlcdc.engine.snapshot.read_modes.gtid_executed import GtidExecutedRead
from airflow_provider_mysqlcdc.engine.snapshot.read_modes.watermark_table import WatermarkTableRead
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSession
from airflow_provider_mysqlcdc.engine.snapshot.read_view import (
    ReadViewMode,
)
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import LOST_CONNECTION_ERRORS, MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.identity import ServerIdentity
from airflow_provider_mysqlcdc.engine.source.limits import (
    QUERY_TIMEOUT_ERRORS,
    RateLimiter,
    SourceLimits,
    read_slot,
)

log = logging.getLogger(__name__)
DEFAULT_BATCH_ROWS = 4096
TABLE_DEF_CHANGED = 1412  # "Table definition has changed, please retry transaction"
BAD_FIELD = 1054  # "Unknown column": a column the SELECT names was dropped or renamed since the schema loaded
# lost connection, server gone away, connection KILLed, server shutting down


def _close_unbuffered(cur: Any) -> None:
    """Close a streaming cursor. On a dead connection pymysql cannot drain the rest of the result and would
    retry from its finalizers; mark the result finished so nothing does."""
    try:
        cur.close()
    except Exception:  # noqa: BLE001 - the read's own error is the one that matters
        result = getattr(cur, "_result", None)
        if result is not None:
            result.unbuffered_active = False
        cur.connection = None


def _end_read_view(conn: Any) -> None:
    """Close the read view; on a connection that died mid-read there is none left (the read's error tells)."""
    with contextlib.suppress(pymysql.err.MySQLError):
        conn.rollback()


def source_read_view(options: ChunkReadOptions, settings: MySQLSettings) -> ChunkReadOptions:
    """The read view the source's settings ask for (``read_view_mode``/``watermark_table`` of its URL or
    connection) where the read's own options leave it open (``auto``, no table)."""
    mode = options.mode if options.mode != "auto" else settings.read_view_mode
    table = options.watermark_table or (TableId.parse(settings.watermark_table) if settings.watermark_table
                                        else None)
    if (mode, table) == (options.mode, options.watermark_table):
        return options
    return dataclasses.replace(options, mode=cast(ReadViewMode, mode), watermark_table=table)


@dataclass
class ChunkReadOptions:
    mode: ReadViewMode = "auto"
    watermark_table: TableId | None = None
    skip_backfill: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    server_id: int | None = None  # binlog reader id for the backfill (from the configured range)
    marker_slot: int = 0  # row id in the watermark table: one per concurrent reader
    backfill_timeout: float = 120.0
    limits: SourceLimits = field(default_factory=SourceLimits)  # what the read may ask of the server


@dataclass
class ChunkReadResult:
    table: str
    generation: int
    chunk_id: int
    mode: str
    rows: int = 0
    low_watermark: BinlogPosition | None = None
    high_watermark: BinlogPosition | None = None
    backfill_events: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    hw_server: str | None = None  # whose binlog the watermarks name (``ServerIdentity.token``)
    hw_gtid_position: str | None = None  # the GTID position at the HW on that server (MariaDB)
    reader: str = "python"  # which reader read the rows: native (connectorx) or python (pymysql)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "generation": self.generation,
            "chunk_id": self.chunk_id,
            "mode": self.mode,
            "rows": self.rows,
            "low_watermark": str(self.low_watermark) if self.low_watermark else None,
            "high_watermark": str(self.high_watermark) if self.high_watermark else None,
            "backfill_events": self.backfill_events,
            "timings": dict(self.timings),
            "hw_server": self.hw_server,
            "hw_gtid_position": self.hw_gtid_position,
            "reader": self.reader,
        }


def _column_signature(name: Any, column_type: Any, nullable: bool, collation: Any, key: bool) -> tuple:
    return (str(name), str(column_type), bool(nullable), None if collation is None else str(collation), key)


def schema_changed(conn: Any, schema: TableSchema) -> TableSchema | None:
    """The table's schema now if its columns differ from ``schema``, else None.

    Compares, in column order, name, COLUMN_TYPE (length, precision, unsigned, enum values), nullability,
    collation and primary key membership: one information_schema query when nothing changed (the usual case),
    the full ``load_schema`` only when something did. information_schema is not versioned by the read view: it
    shows the table's definition now, i.e. at or after any watermark taken before this call.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLLATION_NAME, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (schema.table.database, schema.table.table),
        )
        now = [_column_signature(name, type_, nullable == "YES", collation, key == "PRI")
               for name, type_, nullable, collation, key in cur.fetchall()]
    primary = set(schema.primary_key)
    loaded = [_column_signature(c.name, c.column_type, c.nullable, c.collation, c.name in primary)
              for c in schema.columns]
    if now == loaded:
        return None
    # COLUMN_KEY may say PRI for a NOT NULL unique key of a table without a primary key:
    # load and compare whole.
    current = load_schema(conn, schema.table)
    if current.columns == schema.columns and current.primary_key == schema.primary_key:
        return None
    return current


class ChunkRead:
    """One chunk read. Iterate ``batches()`` once; ``result`` is complete when the iterator is exhausted."""

    def __init__(
        self, settings: MySQLSettings, schema: TableSchema, plan: ChunkPlan, chunk: Chunk,
        options: ChunkReadOptions | None = None, session: ReadSession | None = None,
    ) -> None:
        """``session``: the session to run the read's checks on, shared with the reads before and after it
        (``read_session.py``); None: one of its own, closed after the read."""
        self.settings, self.schema, self.plan, self.chunk = settings, schema, plan, chunk
        self.session = session
        # ``self.schema`` is what the read uses: reloaded when DDL changed the table
        self._given_schema = schema
        self.options = source_read_view(options or ChunkReadOptions(), settings)
        self.result = ChunkReadResult(str(schema.table), plan.generation, chunk.chunk_id,
                                      mode=self.options.mode)
        self._used = False
        self._key_order: KeyOrder | None = None
        self._locator: ChunkLocator | None = None

    # -- what every way of reading a chunk shares (``read_modes/``) ------------------------------------------

    @property
    def what(self) -> str:
        return f"{self.schema.table} chunk {self.chunk.chunk_id}"

    def adopt(self, conn: Any) -> bool:
        """Read with the table's columns as they are now if DDL changed them (True), failing if its keys
        changed (``_adopt``)."""
        return self._adopt(schema_changed(conn, self.schema))

    def plan_native(self) -> tuple[list[native_columns.NativeColumn], None] | tuple[None, str]:
        return self._plan_native()

    def count_reread(self, attempt: int, why: str) -> None:
        self._reread(attempt, why)

    @staticmethod
    def end_view(conn: Any) -> None:
        _end_read_view(conn)

    def select_rows(self, conn: Any) -> Iterator[list[tuple]]:
        """The chunk's rows in the session's read view, in batches of Python rows."""
        return self._select(conn)

    def select_native_whole(self, conn: Any, info: Any,
                            planned: list[native_columns.NativeColumn]) -> ArrowChunkBuffer:
        return self._select_native_whole(conn, info, planned)

    def snapshot_rows(self, rows: list[tuple], hw: BinlogPosition) -> pa.RecordBatch:
        return snapshot_batch(self.schema, rows, hw, self.chunk.chunk_id, self.plan.generation)

    def locator(self) -> ChunkLocator:
        """Which chunk holds a key, in the server's order (one per read, closed with it)."""
        if self._locator is None:
            self._key_order = KeyOrder(lambda: connect(self.settings), self.schema, self.plan.key_columns)
            self._locator = ChunkLocator(self.plan, self._key_order)
        return self._locator

    def scan_window(self, start: BinlogPosition, end: BinlogPosition,
                    gtids: list[str] | None = None) -> list[RowChange]:
        """The row changes of the chunk's table in the binlog between two transaction ends, in order;
        ``gtids`` gets the GTID of every transaction there, of any table."""
        from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id

        changes: list[RowChange] = []
        with contextlib.ExitStack() as stack:
            server_id = self.options.server_id or stack.enter_context(
                claimed_server_id(self.settings, prefer=self.options.marker_slot))
            table = self.schema.table
            reader = BinlogReader(self.settings, server_id, {table}, {table: self.schema})
            for item in reader.read_with_heartbeats(BinlogOffset.at(start), end=end, blocking=True,
                                                    timeout=self.options.backfill_timeout):
                if isinstance(item, RowChange):
                    if item.table == table:
                        changes.append(item)
                    ended = item.offset_after if item.offset_after.at_boundary else None
                else:
                    ended = item.offset
                if gtids is not None and ended is not None and ended.gtid:
                    gtids.append(ended.gtid)
        return changes

    def emit_buffer(self, buffer: ChunkBuffer | ArrowChunkBuffer,
                    hw_position: BinlogPosition) -> Iterator[pa.RecordBatch]:
        """A corrected chunk's rows as snapshot batches at its HW (at least one batch, maybe empty)."""
        if isinstance(buffer, ArrowChunkBuffer):
            self.result.reader = "native"
            data = buffer.batches() or [values.to_arrow_batch(self.schema, [])]
            self.result.rows = sum(b.num_rows for b in data)
            for batch in data:
                yield snapshot_data_batch(self.schema, batch, hw_position, self.chunk.chunk_id,
                                          self.plan.generation)
            return
        self.result.reader = "python"
        rows = buffer.rows()
        self.result.rows = len(rows)
        for start in range(0, max(len(rows), 1), self.options.batch_rows):
            part = rows[start : start + self.options.batch_rows]
            if part or start == 0:
                yield self.snapshot_rows(part, hw_position)

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._used:
            raise RuntimeError("a chunk read runs once: each read opens its own read view and watermarks")
        self._used = True
        started = time.monotonic()
        session = self.session or ReadSession(self.settings)
        what = f"{self.schema.table} chunk {self.chunk.chunk_id}"
        ended = False
        try:
            conn, info = session.open()
            mode = session.mode(self.options.mode, self.options.watermark_table)
            self.result.mode = mode
            with read_slot(conn, self.options.limits, what):
                waited = time.monotonic()
                self.result.timings["slot_wait_s"] = waited - started
                session.query_timeout(self.options.limits.query_timeout_s)
                native = self._native_columns(info, mode)
                if mode == "gtid_executed":
                    yield from GtidExecutedRead(self).batches(conn, info, waited, native is not None)
                elif mode == "watermark_table":
                    yield from WatermarkTableRead(self).batches(conn, info, waited, native is not None)
                elif native is not None:
                    yield from NativeConsistentRead(self).batches(conn, info, waited, native,
                                                                  session.binlog_file())
                else:
                    yield from ConsistentSnapshotRead(self).batches(conn, waited)
                assert self.result.high_watermark is not None
                if self.result.hw_gtid_position is not None:  # the read knew it (gtid_executed's window)
                    self.result.hw_server = ServerIdentity.of(info).token
                else:
                    server = session.hw_server(self.result.high_watermark)  # the session that fixed the HW
                    self.result.hw_server, self.result.hw_gtid_position = server.server, server.gtid_position
            ended = True
        finally:
            if self._key_order is not None:
                self._key_order.close()
                self._key_order = self._locator = None
            if self.session is None or not ended:  # a shared session is reused only after a read that ended
                session.close()
        self.result.timings["total_s"] = time.monotonic() - started

    # -- the native reader's columns, the SELECT, its errors ------------------------------------------------

    def _native_columns(self, info: Any, mode: str) -> list[native_columns.NativeColumn] | None:
        """The native reader's column plan for this read, or None: the pure-Python reader reads
        (said once)."""
        rate_limited = bool(self.options.limits.per_read_rows_per_second)
        why = reader_choice.why_not_native(self.settings, mode, info.flavor, rate_limited)
        if why is None and mode != "consistent_snapshot" and not self.schema.primary_key:
            why = (f"{mode} mode corrects a chunk without a primary key as a multiset of whole rows, "
                   "which only the pure-Python reader does")
        planned = None
        if why is None:
            planned, why = self._plan_native()
        if planned is None:
            reader_choice.say_once(self.schema.table, why or "")
        return planned

    def _plan_native(self) -> tuple[list[native_columns.NativeColumn], None] | tuple[None, str]:
        """The columns' expressions, the dates guarded once the table showed a zero date (``date_guard``)."""
        guard_dates = date_guard.guarded(str(self.schema.table))
        return native_columns.plan_columns(self.schema, guard_dates=guard_dates)

    def native_error(self, exc: NativeReadFailed, unguarded: bool) -> Exception:
        """connectorx's failure; with unguarded dates, one that is no MySQL error and no lost connection is
        taken for a date it cannot return (``date_guard``: the read goes again with the guard, which also
        shows whether it was)."""
        if unguarded and exc.code is None and not exc.lost:
            return date_guard.UnfitDate(f"connectorx could not read a date as it is ({exc.text})")
        error = self._select_error(exc.code, exc.text, exc.lost, native=True)
        assert error is not None
        return error

    def _adopt(self, current: TableSchema | None) -> bool:
        """Read with ``current`` from now on (if the table changed); fail if its keys changed (re-plan)."""
        if current is None:
            return False
        planned = self._given_schema
        keys = list(dict.fromkeys([*planned.primary_key, *self.plan.key_columns]))

        def key_type(schema: TableSchema, name: str) -> tuple | None:
            c = schema.column_by_name.get(name)
            return None if c is None else (c.column_type, c.nullable, c.collation)

        changed = [k for k in keys if key_type(current, k) != key_type(planned, k)]
        if changed or current.primary_key != planned.primary_key:
            what = (f"key column(s) {changed} were dropped, renamed or changed type" if changed else
                    f"the primary key changed from {list(planned.primary_key)} to "
                    f"{list(current.primary_key)}")
            raise ChunkKeyChanged(
                f"{self.schema.table} chunk {self.chunk.chunk_id}: DDL changed the table's chunk key or "
                f"primary key while the chunk was read ({what}); the chunk boundaries of plan generation "
                f"{self.plan.generation} no longer apply and nothing of this chunk was committed: the table "
                "must be re-planned (run `mysqlcdc plan` for it again, or rerun the plan task) and then "
                "snapshotted"
            )
        log.info("%s chunk %s: the table's columns changed (DDL): now %s", self.schema.table,
                 self.chunk.chunk_id, [f"{c.name} {c.column_type}" for c in current.columns])
        self.schema = current
        return True

    def _reread(self, attempt: int, why: str) -> None:
        """Count one reread against DDL_REREADS; fail clearly when DDL keeps coming."""
        if attempt == DDL_REREADS:
            raise TableChangedDuringRead(
                f"{self.schema.table} chunk {self.chunk.chunk_id}: DDL changed the table while the chunk was "
                f"read ({why}) and kept changing it over {DDL_REREADS + 1} read views; nothing of this chunk "
                "was committed: rerun it once the schema change is done"
            )
        log.warning("%s chunk %s: the table's definition changed %s; reading the chunk again in a new "
                    "read view", self.schema.table, self.chunk.chunk_id, why)

    def _select(self, conn: Any) -> Iterator[list[tuple]]:
        where, params = plan_predicate(self.plan, self.schema, self.chunk)
        sql = f"SELECT {values.select_list(self.schema)} FROM {self.schema.table.quoted} WHERE {where}"
        normalize = values.snapshot_normalizer(self.schema)
        limiter = RateLimiter(self.options.limits.per_read_rows_per_second)
        cur = conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(sql, params)
            while True:
                rows = cur.fetchmany(self.options.batch_rows)
                if not rows:
                    return
                yield [normalize(r) for r in rows]
                limiter.take(len(rows))
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            error = self._select_error(code, str(exc.args[-1]), code in LOST_CONNECTION_ERRORS)
            if error is None:
                raise
            raise error from None
        finally:
            _close_unbuffered(cur)

    def _select_error(self, code: int | None, message: str, lost: bool,
                      native: bool = False) -> Exception | None:
        """What a failed chunk SELECT means to the user (both readers); None: the driver's error as it is."""
        what = f"{self.schema.table} chunk {self.chunk.chunk_id}"
        if code in QUERY_TIMEOUT_ERRORS:
            return CdcError(
                f"{what}: the SELECT ran longer than the per-query time limit "
                f"({self.options.limits.query_timeout_s:g}s, query_timeout) and the server stopped it; "
                "nothing of this chunk was written. Raise query_timeout, or plan smaller chunks "
                "(chunk_size), then rerun the chunk"
            )
        if code in (TABLE_DEF_CHANGED, BAD_FIELD):
            # BAD_FIELD: a column the SELECT names was dropped or renamed (DDL after the schema check)
            return TableChangedDuringRead(
                f"{what}: DDL changed the table while the chunk was read ({message}) and kept changing it "
                f"over {DDL_REREADS + 1} read views; nothing of this chunk was committed: rerun it once the "
                "schema change is done"
            )
        if lost:
            return ServerUnavailable(
                f"{what}: the connection to MySQL was lost during the read ({message}); nothing of this "
                "chunk was committed: rerun it (a retry reads it again in a new read view)"
            )
        if native:  # connectorx's error is text: say what failed and the way out
            return CdcError(
                f"{what}: the native chunk reader (connectorx) failed: {message}; nothing of this chunk was "
                f"committed: rerun it, and if it fails again set {CHUNK_READER_ENV}=python (and report it)"
            )
        return None

    def _select_native_whole(self, conn: Any, info: Any,
                             planned: list[native_columns.NativeColumn]) -> ArrowChunkBuffer:
        """The chunk's SELECT between the markers by connectorx, whole, in canonical Arrow. Dates unfit for
        connectorx (``date_guard``) make the table guarded and the SELECT run again: still between the
        markers, and nothing was handed out."""
        try:
            return self._select_native_once(conn, info, planned)
        except date_guard.UnfitDate as unfit:
            date_guard.guard(str(self.schema.table), str(unfit))
            guarded, _ = self._plan_native()
            assert guarded is not None  # the same columns, their dates guarded
            return self._select_native_once(conn, info, guarded)

    def _select_native_once(self, conn: Any, info: Any,
                            planned: list[native_columns.NativeColumn]) -> ArrowChunkBuffer:
        where, params = plan_predicate(self.plan, self.schema, self.chunk)
        # the predicate's values escaped by pymysql, exactly as the Python reader sends them
        with conn.cursor() as cur:
            where_sql = cur.mogrify(where, params)
        sql = (f"SELECT {native_session.statement_hint(info.flavor)}{native_columns.select_list(planned)} "
               f"FROM {self.schema.table.quoted} WHERE {where_sql}")
        statements = native_session.session_statements(info.flavor, self.options.limits.query_timeout_s)
        select = NativeSelect(self.settings, sql, statements, self.options.batch_rows, "")
        try:
            batches = select.read_all()
        except NativeReadFailed as exc:
            raise self.native_error(exc, any(c.unguarded_date for c in planned)) from None
        finally:
            select.close(conn)
        return ArrowChunkBuffer(self.schema, [native_columns.to_canonical(self.schema, planned, b, 0)
                                              for b in batches])
