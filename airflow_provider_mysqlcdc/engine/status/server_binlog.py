"""The server's binlog end and file sizes, and how far a position lags behind it (bytes and files)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

log = logging.getLogger(__name__)


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
        files = tuple(binary_logs(conn))
    except pymysql.err.MySQLError as exc:
        log.info("SHOW BINARY LOGS failed (%s): lag across binlog files is reported in files only", exc)
        files = None
    return ServerBinlog(BinlogPosition(status.file, status.position), files)
