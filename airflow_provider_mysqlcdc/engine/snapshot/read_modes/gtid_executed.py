"""Oracle MySQL's read-only exact read view (``read_view_mode=gtid_executed``; the window and why it is exact:
``snapshot/gtid_window.py``). No write to the source; the chunk's HW is the binlog end read right
after its read view opened.

The pure-Python reader reads the window's events before the chunk's rows (the view is open, its SELECT not yet
run), so a chunk no event of the window touched streams out as read, in bounded memory, as in MariaDB's
consistent snapshot. A chunk with a primary key that an event touched is buffered and corrected by them; a
chunk without one is read again in a fresh view when an uncertain transaction touched it (at most
``CONFLICT_REREADS`` times). The native reader (connectorx, chunks with a primary key) runs its SELECT in the
statement's own view after the window's start, is read whole, and corrected by the events up to the binlog end
read after its rows came, as in watermark-table mode.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.errors import ResnapshotRequired
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.snapshot import gtid_window, read_view
from airflow_provider_mysqlcdc.engine.snapshot.chunk_buffer import ArrowChunkBuffer, ChunkBuffer, chunk_images
from airflow_provider_mysqlcdc.engine.snapshot.native_read import choice as reader_choice
from airflow_provider_mysqlcdc.engine.snapshot.read_errors import COLUMNS_CHANGED, TableChangedDuringRead

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead

log = logging.getLogger(__name__)
CONFLICT_REREADS = 12  # fresh views for a chunk without a primary key that writes keep touching as it opens
CONFLICT = "an uncertain transaction touched the chunk"


class KeylessChunkKeptChanging(CdcError):
    """Every read view of a chunk without a primary key opened while a transaction touching it committed."""


class GtidExecutedRead:
    """The ``gtid_executed`` way of reading one chunk (``ChunkRead``: the session, slot and columns)."""

    def __init__(self, read: ChunkRead) -> None:
        self.read = read

    def batches(self, conn: Any, info: Any, started: float, native: bool) -> Iterator[pa.RecordBatch]:
        read = self.read
        gtid_window.check_gtid_mode(info)
        conflicts = attempt = 0
        stale = False  # the previous view was refused after DDL: reload the schema before the next one
        while True:
            if stale:
                read.adopt(conn)
                stale = False
            planned, why = read.plan_native() if native else (None, "")
            if native and planned is None:
                reader_choice.say_once(read.schema.table, why or "")
            start = gtid_window.start_window(conn, info, read.options.backfill_timeout)
            try:
                outcome = (self._native(conn, info, start, planned) if planned is not None
                           else self._python(conn, info, start))
                # the SELECT runs by the first batch: a view the server refuses after DDL fails here, before
                # anything is handed out
                first = next(outcome) if not isinstance(outcome, str) else None
            except TableChangedDuringRead:
                read.count_reread(attempt, "after the read view opened")
                attempt, stale = attempt + 1, True
                continue
            except ResnapshotRequired:
                read.count_reread(attempt, "in its read view's window (TRUNCATE or a partition operation)")
                attempt += 1
                continue
            if outcome == COLUMNS_CHANGED:
                read.count_reread(attempt, COLUMNS_CHANGED)
                attempt += 1
                continue
            if outcome == CONFLICT:
                conflicts += 1
                if conflicts > CONFLICT_REREADS:
                    raise KeylessChunkKeptChanging(
                        f"{read.what}: the table has no primary key, so its chunk is exact on Oracle MySQL "
                        "only in a read view that no uncertain transaction touching the chunk committed "
                        f"around; writes to the chunk kept coming as {conflicts} read views opened. Nothing "
                        "of the chunk was committed: rerun it when the table is quieter, give the table a "
                        "primary key, or read it at-least-once (skip_backfill)")
                # a short random pause, so the next view does not open in step with the writer's next commit
                time.sleep(random.uniform(0.001, 0.01 * conflicts))
                continue
            break
        assert first is not None and not isinstance(outcome, str)
        try:
            yield first
            yield from outcome
        finally:
            outcome.close()  # a consumer that stops early ends the view now, not when it is collected
        read.result.timings["read_s"] = time.monotonic() - started

    # -- pure-Python reader: the window first, then the rows ------------------------------------------------

    def _python(self, conn: Any, info: Any, start: gtid_window.WindowStart) -> Any:
        """What the view gives: the batches to hand out, or ``COLUMNS_CHANGED``/``CONFLICT``."""
        read = self.read
        read.result.reader = "python"
        read_view.open_plain_snapshot(conn)
        try:
            view_at = gtid_window.view_end(conn, info)
            read.result.low_watermark, read.result.high_watermark = start.scan_from, view_at
            # HW is fixed: a column change before it is seen here (as in consistent-snapshot mode)
            if read.adopt(conn):
                read.end_view(conn)
                return COLUMNS_CHANGED
            if read.options.skip_backfill:
                read.result.high_watermark = start.scan_from  # at-least-once: counted at the window's start
                return self._stream(conn)
            touched = self._touched(conn, start, view_at)
            if not touched:
                return self._stream(conn)
            if not read.schema.primary_key:
                held = gtid_window.held_by_view(start, touched)
                if not all(held):
                    read.end_view(conn)
                    log.info("%s: a transaction touching the chunk committed as its read view opened (no "
                             "primary key): reading it again in a fresh view", read.what)
                    return CONFLICT
                return self._stream(conn)  # every touching transaction is in the view already
            buffer = ChunkBuffer(read.schema)
            for rows in read.select_rows(conn):
                buffer.load(rows)
            read.end_view(conn)
            read.result.backfill_events = buffer.apply(
                [c for t in touched for c in t.changes], read.locator(), read.chunk.chunk_id,
                read.plan.key_columns)
            return read.emit_buffer(buffer, view_at)
        except BaseException:
            read.end_view(conn)
            raise

    def _stream(self, conn: Any) -> Iterator[pa.RecordBatch]:
        """The view's rows as they come (the view ends with the last of them)."""
        read = self.read
        hw = read.result.high_watermark
        assert hw is not None
        try:
            for rows in read.select_rows(conn):
                read.result.rows += len(rows)
                yield read.snapshot_rows(rows, hw)
            if not read.result.rows:
                yield read.snapshot_rows([], hw)
        finally:
            read.end_view(conn)

    def _touched(self, conn: Any, start: gtid_window.WindowStart,
                 view_at: BinlogPosition) -> list[gtid_window.WindowTransaction]:
        """The window's transactions with an image in this chunk (only their changes of the chunk's table)."""
        read = self.read
        if start.scan_from.key >= view_at.key:
            read.result.hw_gtid_position = gtid_window.set_at_view(start, [])
            return []
        scan_started = time.monotonic()
        gtids: list[str] = []
        changes = read.scan_window(start.scan_from, view_at, gtids)
        read.result.hw_gtid_position = gtid_window.set_at_view(start, gtids)
        locator = read.locator() if changes else None
        touched = []
        for txn in gtid_window.window_transactions(changes):
            assert locator is not None
            if any(True for _ in chunk_images(read.schema, txn.changes, locator, read.chunk.chunk_id,
                                              read.plan.key_columns)):
                touched.append(txn)
        read.result.timings["backfill_s"] = time.monotonic() - scan_started
        return touched

    # -- native reader: the rows whole, then the window up to the binlog end after them ----------------------

    def _native(self, conn: Any, info: Any, start: gtid_window.WindowStart, planned: Any) -> Any:
        read = self.read
        buffer: ArrowChunkBuffer = read.select_native_whole(conn, info, planned)
        view_at = gtid_window.view_end(conn, info)  # the SELECT's view opened before its rows came
        read.result.low_watermark, read.result.high_watermark = start.scan_from, view_at
        if read.adopt(conn):
            return COLUMNS_CHANGED
        if read.options.skip_backfill:
            read.result.high_watermark = start.scan_from
        elif start.scan_from.key >= view_at.key:
            read.result.hw_gtid_position = gtid_window.set_at_view(start, [])
        else:
            scan_started = time.monotonic()
            gtids: list[str] = []
            changes = read.scan_window(start.scan_from, view_at, gtids)
            read.result.hw_gtid_position = gtid_window.set_at_view(start, gtids)
            if changes:
                read.result.backfill_events = buffer.apply(changes, read.locator(), read.chunk.chunk_id,
                                                           read.plan.key_columns)
            read.result.timings["backfill_s"] = time.monotonic() - scan_started
        hw = read.result.high_watermark
        assert hw is not None
        return read.emit_buffer(buffer, hw)
