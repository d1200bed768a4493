"""MariaDB's (and Percona's) exact read view, read by the pure-Python reader: ``START TRANSACTION WITH
CONSISTENT SNAPSHOT`` and the view's own binlog point (``Binlog_snapshot_position``) as LW == HW; no binlog is
read, and the rows stream out as they come, in bounded memory."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.snapshot import read_view
from airflow_provider_mysqlcdc.engine.snapshot.read_errors import (
    COLUMNS_CHANGED,
    DDL_REREADS,
    TableChangedDuringRead,
)

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead

class ConsistentSnapshotRead:
    """A chunk in MariaDB's consistent snapshot, read by pymysql."""

    def __init__(self, read: ChunkRead) -> None:
        self.read = read

    def batches(self, conn: Any, started: float) -> Iterator[pa.RecordBatch]:
        read = self.read
        read.result.reader = "python"
        stale = False  # the previous view was refused after DDL: reload the schema before the next one
        for attempt in range(DDL_REREADS + 1):
            if stale:
                read.adopt(conn)
                stale = False
            position = read_view.open_consistent_snapshot(conn)
            read.result.low_watermark = read.result.high_watermark = position
            try:
                # HW is fixed now: it is this view's binlog point. DDL that committed after the schema was
                # loaded and before HW changed the columns of the table as of HW, without invalidating the
                # view (instant ADD/DROP/RENAME COLUMN, widening MODIFY): read again with the new columns. DDL
                # after HW but before the SELECT is seen here too (a harmless extra reread) or, if it dropped
                # or renamed a column, fails the SELECT (BAD_FIELD); once the SELECT runs, its metadata lock
                # holds DDL off until the view ends. Nothing is yielded before this check.
                if read.adopt(conn):
                    read.count_reread(attempt, COLUMNS_CHANGED)
                    continue
                for rows in read.select_rows(conn):
                    read.result.rows += len(rows)
                    yield read.snapshot_rows(rows, position)
                break
            except TableChangedDuringRead:
                # DDL that rebuilt the table (or dropped a column the SELECT names) committed after the read
                # view opened: the server refuses the SELECT before any row is sent, so the chunk is read
                # again in a fresh view (a later HW).
                if read.result.rows or attempt == DDL_REREADS:
                    raise
                read.count_reread(attempt, "after the read view opened")
                stale = True
            finally:
                read.end_view(conn)
        read.result.timings["read_s"] = time.monotonic() - started
