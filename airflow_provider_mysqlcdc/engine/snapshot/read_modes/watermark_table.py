"""The DBLog watermark table (any server; Oracle MySQL without GTIDs): a marker row committed before the
chunk's SELECT (LW) and one after it (HW), found in the binlog, and the chunk buffered and corrected by the
events between them. It writes to the source (INSERT, UPDATE on the watermark table); a chunk without a
primary key is read by the pure-Python reader as a multiset and is at-least-once on Oracle MySQL
(``read_view.py``)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.changes import RowChange
from airflow_provider_mysqlcdc.engine.binlog.errors import ResnapshotRequired
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.records import INSERT, UPDATE_AFTER
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot import read_view
from airflow_provider_mysqlcdc.engine.snapshot.chunk_buffer import ArrowChunkBuffer, ChunkBuffer
from airflow_provider_mysqlcdc.engine.snapshot.native_read import choice as reader_choice
from airflow_provider_mysqlcdc.engine.snapshot.read_errors import (
    COLUMNS_CHANGED,
    DDL_REREADS,
    TableChangedDuringRead,
)
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import connect

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead


class WatermarkNotFound(CdcError):
    """The marker row never showed up in the binlog (binlog off for that table, or filtered by the server)."""


class WatermarkTableRead:
    """A chunk between two marker rows, corrected by the binlog events between them."""

    def __init__(self, read: ChunkRead) -> None:
        self.read = read

    def batches(self, conn: Any, info: Any, started: float, native: bool) -> Iterator[pa.RecordBatch]:
        """DBLog: a LW marker, the chunk's SELECT (``native``: by connectorx, into Arrow), a HW marker, then
        the binlog events between the markers applied to what was read. Nothing is yielded before the end."""
        read = self.read
        table = read.options.watermark_table
        assert table is not None
        stale = False  # the previous view was refused after DDL: reload the schema before the next one
        for attempt in range(DDL_REREADS + 1):
            if stale:
                read.adopt(conn)
                stale = False
            planned, why = read.plan_native() if native else (None, "")  # the schema may have changed since
            if planned is None:  # the table took a column the native reader cannot read exactly
                reader_choice.say_once(read.schema.table, why or "")
            low = read_view.write_marker(conn, info, table, read.options.marker_slot)
            try:
                if planned is not None:
                    buffer: ChunkBuffer | ArrowChunkBuffer = read.select_native_whole(conn, info, planned)
                else:
                    read_view.open_plain_snapshot(conn)
                    buffer = ChunkBuffer(read.schema)
                    for rows in read.select_rows(conn):
                        buffer.load(rows)
            except TableChangedDuringRead:
                if attempt == DDL_REREADS:
                    raise
                read.count_reread(attempt, "after the read view opened")
                stale = True
                continue
            finally:
                read.end_view(conn)
            high = read_view.write_marker(conn, info, table, read.options.marker_slot)
            # HW is fixed now (the high marker committed): DDL that committed after the schema was loaded and
            # before HW changed the table's columns as of HW without invalidating the view. Read again, from a
            # new LW marker, with the new columns (nothing has been yielded yet).
            if read.adopt(conn):
                read.count_reread(attempt, COLUMNS_CHANGED)
                continue
            read_done = time.monotonic()
            read.result.timings["read_s"] = read_done - started
            try:
                if read.options.skip_backfill:
                    # At-least-once: no binlog correction; the chunk counts as of its LW
                    # (found from the marker).
                    lw, _hw, _events = self._locate_markers(low, high, table, apply_to=None)
                    read.result.low_watermark = read.result.high_watermark = lw
                else:
                    lw, hw, events = self._locate_markers(low, high, table, apply_to=buffer)
                    read.result.low_watermark, read.result.high_watermark = lw, hw
                    read.result.backfill_events = events
            except ResnapshotRequired:
                # DDL between the watermarks changed rows without row events (TRUNCATE, a partition DROP):
                # the buffer cannot be corrected, so the chunk is read again after it
                if attempt == DDL_REREADS:
                    raise
                read.count_reread(attempt, "between its watermarks (TRUNCATE or a partition operation)")
                continue
            read.result.timings["backfill_s"] = time.monotonic() - read_done
            break
        hw_position = read.result.high_watermark
        assert hw_position is not None
        yield from read.emit_buffer(buffer, hw_position)

    def _locate_markers(
        self, low: Any, high: Any, table: TableId, apply_to: ChunkBuffer | ArrowChunkBuffer | None
    ) -> tuple[BinlogPosition, BinlogPosition, int]:
        """Scan the binlog from before the LW marker to the HW marker; apply chunk events in between."""
        from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id

        read = self.read

        with connect(read.settings) as conn:
            schemas = {read.schema.table: read.schema, table: load_schema(conn, table)}
        with contextlib.ExitStack() as stack:
            server_id = read.options.server_id or stack.enter_context(
                claimed_server_id(read.settings, prefer=read.options.marker_slot)
            )
            reader = BinlogReader(read.settings, server_id, {read.schema.table, table}, schemas)
            return self._scan_markers(reader, read.locator(), low, high, table, apply_to)

    def _scan_markers(
        self, reader: BinlogReader, locator: ChunkLocator, low: Any, high: Any, table: TableId,
        apply_to: ChunkBuffer | ArrowChunkBuffer | None,
    ) -> tuple[BinlogPosition, BinlogPosition, int]:
        read = self.read
        lw: BinlogPosition | None = None
        events = 0
        pending: list[RowChange] = []
        deadline = time.monotonic() + read.options.backfill_timeout
        for change in reader.read(BinlogOffset.at(low.written_after), end=None, blocking=True,
                                  timeout=read.options.backfill_timeout, sync_to_transaction=True):
            if time.monotonic() > deadline:
                break
            if not isinstance(change, RowChange):
                continue
            if change.table == table:
                # A marker is a one-row transaction: the row's offset_after is its commit's end, a transaction
                # boundary the stream can start from.
                end = change.offset_after.position
                token = change.values.get("token")
                if lw is None and token == low.token and change.op in (INSERT, UPDATE_AFTER):
                    lw = end
                elif lw is not None and token == high.token and change.op in (INSERT, UPDATE_AFTER):
                    if apply_to is not None:
                        events = apply_to.apply(pending, locator, read.chunk.chunk_id, read.plan.key_columns)
                    return lw, end, events
                continue
            if lw is not None and apply_to is not None:
                pending.append(change)
        raise WatermarkNotFound(
            f"the watermark markers for chunk {read.chunk.chunk_id} of {read.schema.table} did not appear in "
            f"the binlog within {read.options.backfill_timeout:.0f}s: check that the watermark table {table} "
            "is not excluded by binlog-ignore-db/replicate filters and that binlog_format=ROW"
        )
