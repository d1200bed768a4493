"""MariaDB's exact read view, read by the native reader: connectorx runs ``START TRANSACTION WITH CONSISTENT
SNAPSHOT`` and reads the view's binlog point on the very connection that then SELECTs the chunk
(``native_read/session.py``), so the rows come as Arrow from the wire with their exact HW and stream out."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunks.key_sql import plan_predicate
from airflow_provider_mysqlcdc.engine.model.arrow_batches import snapshot_data_batch
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.snapshot.native_read import choice as reader_choice
from airflow_provider_mysqlcdc.engine.snapshot.native_read import columns as native_columns
from airflow_provider_mysqlcdc.engine.snapshot.native_read import date_guard
from airflow_provider_mysqlcdc.engine.snapshot.native_read import session as native_session
from airflow_provider_mysqlcdc.engine.snapshot.native_read.select import NativeReadFailed, NativeSelect
from airflow_provider_mysqlcdc.engine.snapshot.read_errors import (
    COLUMNS_CHANGED,
    DDL_REREADS,
    TableChangedDuringRead,
)
from airflow_provider_mysqlcdc.engine.snapshot.read_modes.consistent_snapshot import ConsistentSnapshotRead
from airflow_provider_mysqlcdc.engine.source.limits import RateLimiter

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead


def native_view_opened(position: BinlogPosition) -> BinlogPosition:
    """The native read's view is open at ``position`` (its first rows arrived). A named step, as
    ``read_view.open_consistent_snapshot`` is for the pure-Python reader: the conformance suite writes
    here."""
    return position


class NativeConsistentRead:
    """A chunk in MariaDB's consistent snapshot, read by connectorx."""

    def __init__(self, read: ChunkRead) -> None:
        self.read = read

    def batches(self, conn: Any, info: Any, started: float, planned: list[native_columns.NativeColumn],
                binlog_file: str) -> Iterator[pa.RecordBatch]:
        """``_views``; if its dates were read as they are and one is unfit for connectorx, the
        table's dates are guarded from now on, and the chunk read again with the guard when nothing was handed
        out yet (else ``ZeroDateSeen``: the consumer reads it again,
        ``date_guard.read_again_if_zero_date``)."""
        read = self.read
        try:
            yield from self._views(conn, info, started, planned, binlog_file)
        except date_guard.UnfitDate as unfit:
            what = f"{read.schema.table} chunk {read.chunk.chunk_id}"
            date_guard.guard(str(read.schema.table), str(unfit))
            if read.result.rows:
                raise date_guard.ZeroDateSeen(
                    f"{what}: {unfit} after {read.result.rows} rows were handed out; the table's dates are "
                    "guarded from now on: read the chunk again") from None
            guarded, why = read.plan_native()
            if guarded is None:
                reader_choice.say_once(read.schema.table, why or "")
                yield from ConsistentSnapshotRead(read).batches(conn, started)
                return
            yield from self._views(conn, info, started, guarded, binlog_file)

    def _views(self, conn: Any, info: Any, started: float, planned: list[native_columns.NativeColumn],
               binlog_file: str) -> Iterator[pa.RecordBatch]:
        """As ``ConsistentSnapshotRead``, with connectorx reading the rows in a read view it opens itself. The
        view's point (HW) is known when the first rows arrive: the columns are checked then, before anything
        is yielded (the running SELECT holds DDL off from there on). An empty chunk carries no point: it is
        read again by the pure-Python reader in a fresh view. ``binlog_file``: any binlog file name of the
        server (the base of the names the view's point is unpacked into)."""
        read = self.read
        stale = False
        for attempt in range(DDL_REREADS + 1):
            if stale:
                read.adopt(conn)
                stale = False
                replanned = self._replanned()
                if replanned is None:
                    yield from ConsistentSnapshotRead(read).batches(conn, started)
                    return
                planned = replanned
            select = self._select(conn, info, planned, binlog_file)
            unguarded = any(c.unguarded_date for c in planned)
            try:
                first = self._open(select, unguarded)
                if first is None:
                    select.close(conn)
                    yield from ConsistentSnapshotRead(read).batches(conn, started)
                    return
                position = native_view_opened(first.position)
                read.result.reader = "native"
                read.result.low_watermark = read.result.high_watermark = position
                if read.adopt(conn):
                    select.close(conn)
                    read.count_reread(attempt, COLUMNS_CHANGED)
                    replanned = self._replanned()
                    if replanned is None:
                        yield from ConsistentSnapshotRead(read).batches(conn, started)
                        return
                    planned = replanned
                    continue
                limiter = RateLimiter(read.options.limits.per_read_rows_per_second)
                batch: pa.RecordBatch | None = first.batch
                rest = select.rest()
                while batch is not None:
                    data = native_columns.to_canonical(read.schema, planned, batch, 0)
                    read.result.rows += data.num_rows
                    yield snapshot_data_batch(read.schema, data, position, read.chunk.chunk_id,
                                              read.plan.generation)
                    limiter.take(data.num_rows)
                    batch = self._next(rest, unguarded)
                break
            except TableChangedDuringRead:
                if read.result.rows or attempt == DDL_REREADS:
                    raise
                read.count_reread(attempt, "after the read view opened")
                stale = True
            finally:
                select.close(conn)
        read.result.timings["read_s"] = time.monotonic() - started

    def _replanned(self) -> list[native_columns.NativeColumn] | None:
        """The native columns of the table's new schema, or None: the pure-Python reader reads (said once)."""
        replanned, why = self.read.plan_native()
        if replanned is None:
            reader_choice.say_once(self.read.schema.table, why or "")
        return replanned

    def _select(self, conn: Any, info: Any, planned: list[native_columns.NativeColumn],
                binlog_file: str) -> NativeSelect:
        read = self.read
        where, params = plan_predicate(read.plan, read.schema, read.chunk)
        # the predicate's values escaped by pymysql, exactly as the Python reader sends them
        with conn.cursor() as cur:
            where_sql = cur.mogrify(where, params)
        sql = (f"SELECT {native_session.hw_column()}, {native_columns.select_list(planned)} "
               f"FROM {read.schema.table.quoted} WHERE {where_sql}")
        statements = native_session.read_view_statements(info.flavor, info.server_id,
                                                         read.options.limits.query_timeout_s)
        return NativeSelect(read.settings, sql, statements, read.options.batch_rows, binlog_file)

    def _open(self, select: NativeSelect, unguarded: bool) -> Any:
        read = self.read
        try:
            return select.open()
        except NativeReadFailed as exc:
            raise read.native_error(exc, unguarded) from None

    def _next(self, rest: Iterator[pa.RecordBatch], unguarded: bool) -> pa.RecordBatch | None:
        read = self.read
        try:
            return next(rest, None)
        except NativeReadFailed as exc:
            raise read.native_error(exc, unguarded) from None
