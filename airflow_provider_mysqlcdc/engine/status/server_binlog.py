"""The server's binlog end, file sizes, clock and expiry; how far a position lags behind it (bytes, files)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs, iter_events
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.status.binlog_expiry import BinlogExpiry, read_binlog_expiry

log = logging.getLogger(__name__)

# events a binlog file starts and ends with: none of them is a change a stream has still to read
BOOKKEEPING_EVENTS = frozenset({"Rotate", "Format_desc", "Previous_gtids", "Gtid_list", "Binlog_checkpoint",
                                "Stop", "Start_encryption", "Heartbeat"})
_LOOKED_AT = 32  # events looked at after a position before it is taken as behind


@dataclass(frozen=True)
class ServerBinlog:
    """The server's current binlog end, and its binlog files with sizes (None without REPLICATION CLIENT);
    its clock (binlog event times and its purges go by it, not by ours) and its binlog expiry."""

    position: BinlogPosition
    files: tuple[tuple[str, int], ...] | None
    now: datetime | None = None  # UTC, the server's clock when read
    expiry: BinlogExpiry | None = None
    # positions after which the binlog holds only file bookkeeping (a rotation, the next file's headers)
    quiet_after: frozenset[BinlogPosition] = field(default_factory=frozenset)

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

    def at_end(self, position: BinlogPosition) -> bool:
        """Nothing is left to read after ``position``: it is at (or past) the server's end, or only file
        bookkeeping follows it (a stream stays at its last transaction's end when the server rotates)."""
        return self.lag(position) == (0, 0) or position in self.quiet_after


def server_binlog(conn: pymysql.connections.Connection,
                  positions: Iterable[BinlogPosition] = ()) -> ServerBinlog:
    """The server's binlog now; of ``positions`` (where the stream stands), those after which only file
    bookkeeping follows (``SHOW BINLOG EVENTS``: a few event headers, read only for a position behind)."""
    status = current_binlog_status(conn, server_info(conn))
    files: tuple[tuple[str, int], ...] | None
    try:
        files = tuple(binary_logs(conn))
    except pymysql.err.MySQLError as exc:
        log.info("SHOW BINARY LOGS failed (%s): lag across binlog files is reported in files only", exc)
        files = None
    with conn.cursor() as cur:
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        now = cur.fetchone()[0]
    end = BinlogPosition(status.file, status.position)
    server = ServerBinlog(end, files, now.replace(tzinfo=UTC), read_binlog_expiry(conn))
    quiet = frozenset(p for p in set(positions)
                      if not server.at_end(p) and _only_bookkeeping(conn, server, p))
    return ServerBinlog(end, files, server.now, server.expiry, quiet)


def _only_bookkeeping(conn: pymysql.connections.Connection, server: ServerBinlog,
                      position: BinlogPosition) -> bool:
    names = [name for name, _ in server.files or ()]
    if position.file not in names:
        return False
    try:
        events = iter_events(conn, names, position.file, position.pos, page_events=_LOOKED_AT)
        for n, event in enumerate(events, start=1):
            if str(event.event_type) not in BOOKKEEPING_EVENTS or n >= _LOOKED_AT:
                return False
    except pymysql.err.MySQLError as exc:
        log.info("SHOW BINLOG EVENTS failed (%s): a stream after a rotation counts as behind", exc)
        return False
    return True
