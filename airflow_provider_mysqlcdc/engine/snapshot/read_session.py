"""The MySQL session that chunk reads run their checks on, shared by the reads of one Spark task.

Every chunk read needs a session of its own kind (not connectorx's): it takes a read slot, sets the time
limit, checks the columns once the read view is open and asks the GTID position at HW. Opening it and
learning the server (version, id, which read view it offers) cost ~3 ms of the ~22 ms a 2,000-row chunk
takes (bench many-tables case, in one process), paid by every chunk when each read opened its own. A Spark
task reads its chunks one after another, so it keeps one ``ReadSession`` for all of them, whatever their
table, as long as they connect the same way.

A read that fails, or is left before its end, closes the session: what it leaves behind (an open
transaction, a lock, a killed connection) is unknown, and the next read gets a new session.
"""
from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.read_view import ReadViewMode, resolve_mode
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, server_info


class ReadSession:
    """One pymysql session and what it learned of its server, for chunk reads one after another."""

    def __init__(self, settings: MySQLSettings) -> None:
        self.settings = settings
        self._conn: Any = None
        self._info: ServerInfo | None = None
        self._modes: dict[tuple[str, TableId | None], ReadViewMode] = {}

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

    def close(self) -> None:
        conn, self._conn, self._info = self._conn, None, None
        self._modes.clear()
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a dead session is closed already
                pass

    def __enter__(self) -> "ReadSession":
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

    def __enter__(self) -> "ReadSessions":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
