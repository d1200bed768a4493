"""The MySQL session that chunk reads run their checks on, shared by the reads of one Spark task.

Every chunk read needs a session of its own kind (not connectorx's): it takes a read slot, sets the time
limit, checks the columns once the read view is open and asks the GTID position at HW. Opening it and
learning the server (version, id, which read view it offers) cost ~3 ms of the ~22 ms a 2,000-row chunk
takes (bench many-tables case, in one process), paid by every chunk when each read opened its own. A Spark
task reads its chunks one after another, so it keeps one ``ReadSession`` for all of them, whatever their
table, as long as they connect the same way.

What a session learns of its server stays with it: the time limit it set, a binlog file name (the native
read needs the base of the names) and the GTID position at the last HW. ``BINLOG_GTID_POS`` reads the binlog
file from its start up to the HW (~4 ms a chunk in the bench, more in a large file); a server without writes
between two reads gives them the same HW, and the answer for a position never changes on one server.

A read that fails, or is left before its end, closes the session: what it leaves behind (an open
transaction, a lock, a killed connection) is unknown, and the next read gets a new session, which learns
everything again.
"""
from __future__ import annotations

from typing import Any, Self

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.hw_server import HwServer, hw_server
from airflow_provider_mysqlcdc.engine.snapshot.read_view import ReadViewMode, resolve_mode
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.limits import set_query_timeout
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, current_binlog_status, server_info


class ReadSession:
    """One pymysql session and what it learned of its server, for chunk reads one after another."""

    def __init__(self, settings: MySQLSettings) -> None:
        self.settings = settings
        self._conn: Any = None
        self._info: ServerInfo | None = None
        self._modes: dict[tuple[str, TableId | None], ReadViewMode] = {}
        self._timeout: tuple[float | None] | None = None  # the time limit set on the session, if any
        self._binlog_file: str | None = None
        self._last_hw: tuple[BinlogPosition, HwServer] | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def open(self) -> tuple[Any, ServerInfo]:
        """The session (connected now if it is not) and its server."""
        if self._conn is None:
            conn = connect(self.settings)
            try:
                self._info = server_info(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        assert self._info is not None
        return self._conn, self._info

    def mode(self, requested: ReadViewMode, watermark_table: TableId | None) -> ReadViewMode:
        """The read view mode ``requested`` resolves to on this server (asked once per session)."""
        key = (requested, watermark_table)
        if key not in self._modes:
            conn, info = self.open()
            self._modes[key] = resolve_mode(conn, info, requested, watermark_table)
        return self._modes[key]

    def query_timeout(self, seconds: float | None) -> None:
        """The session's per-statement time limit (``set_query_timeout``), set unless it is already."""
        conn, info = self.open()
        if self._timeout != (seconds,):
            set_query_timeout(conn, info.flavor, seconds)
            self._timeout = (seconds,)

    def binlog_file(self) -> str:
        """A binlog file name of the session's server (the
        native read takes the base of the names from it)."""
        if self._binlog_file is None:
            conn, info = self.open()
            self._binlog_file = current_binlog_status(conn, info).file
        return self._binlog_file

    def hw_server(self, hw: BinlogPosition) -> HwServer:
        """``hw_server`` for ``hw`` on this session's server; the last answer is kept for the next read."""
        if self._last_hw is None or self._last_hw[0] != hw:
            conn, info = self.open()
            self._last_hw = (hw, hw_server(conn, info, hw))
        return self._last_hw[1]

    def close(self) -> None:
        conn, self._conn, self._info = self._conn, None, None
        self._modes.clear()
        self._timeout = self._binlog_file = self._last_hw = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001, S110 - a dead session is closed already
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadSessions:
    """The sessions of one Spark task: one per way of connecting (chunks of several tables may share one)."""

    def __init__(self) -> None:
        self._sessions: list[ReadSession] = []

    def for_settings(self, settings: MySQLSettings) -> ReadSession:
        for session in self._sessions:
            if session.settings == settings:
                return session
        session = ReadSession(settings)
        self._sessions.append(session)
        return session

    def close(self) -> None:
        for session in self._sessions:
            session.close()
        self._sessions.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
