"""Whether the stream has passed a binlog position: the lake can know a table at a position only then.

The stream's progress record (``engine/lake/changelog``) says where its last committed batch ended. A stream
at the binlog's end rests a little before it: before a binlog checkpoint written after the last commit, at
the end of a file the server rotated from, or before the watermark markers of a chunk read (rows of another
table). So a position counts as passed when nothing between the stream's offset and it changes the table:
``SHOW BINLOG EVENTS`` (the CDC user's REPLICATION SLAVE grant) lists the events in between.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect

_NO_DATA_EVENTS = {"Binlog_checkpoint", "Gtid_list", "Format_desc", "Previous_gtids", "Rotate", "Stop",
                   "Heartbeat"}
_TRANSACTION_EVENTS = {"Gtid", "Anonymous_Gtid", "Xid", "Annotate_rows", "Rows_query", "Write_rows",
                       "Update_rows", "Delete_rows", "Write_rows_v1", "Update_rows_v1", "Delete_rows_v1"}
_QUIET_EVENTS = 500  # events looked at per file; more than that counts as "something happened"
POLL_S = 0.25


@dataclass(frozen=True)
class StreamReach:
    settings: MySQLSettings
    root: str

    def wait(self, table: TableId, position: BinlogPosition, wait_s: float) -> BinlogPosition | None:
        """Wait up to ``wait_s`` until the stream has passed ``position`` for ``table``; the position it
        reached (``position`` itself once passed; None: no stream has committed the table)."""
        deadline = time.monotonic() + wait_s
        reached = None
        while True:
            progress = read_stream_progress(self.root)
            if progress is not None and progress.covers(table):
                reached = progress.end_offset.ordered_position
                if reached >= position or self.quiet_between(table, progress.end_offset.position, position):
                    return position
            if time.monotonic() >= deadline:
                return reached
            time.sleep(POLL_S)

    def quiet_between(self, table: TableId, reached: BinlogPosition, position: BinlogPosition) -> bool:
        """Whether nothing between ``reached`` and ``position`` changes ``table``."""
        if reached > position:
            return False
        with connect(self.settings) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [str(r[0]) for r in cur.fetchall()]
            low, high = file_number(reached.file), file_number(position.file)
            between = [f for f in files if low <= file_number(f) <= high] if reached.file in files else []
            if not between or between[-1] != position.file:
                return False
            for file in between:
                start = reached.pos if file == reached.file else 4
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT {_QUIET_EVENTS}", (file,))
                events = cur.fetchall()
                for event in events:
                    if file == position.file and int(event[1]) >= position.pos:
                        return True
                    if not _leaves_alone(str(event[2]), str(event[5] or ""), table):
                        return False
                if len(events) == _QUIET_EVENTS:
                    return False
        return True


def _leaves_alone(kind: str, info: str, table: TableId) -> bool:
    """Whether a binlog event (as ``SHOW BINLOG EVENTS`` lists it) provably changes nothing of ``table``: its
    rows events follow a TABLE_MAP naming it, and any statement other than a transaction's bracket may be
    DDL."""
    if kind in _NO_DATA_EVENTS or kind in _TRANSACTION_EVENTS:
        return True
    if kind == "Table_map":
        return f"({table.database}.{table.table})" not in info
    if kind == "Query":
        return info.strip().upper() in ("BEGIN", "COMMIT", "ROLLBACK")
    return False
