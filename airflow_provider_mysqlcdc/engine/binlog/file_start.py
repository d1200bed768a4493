"""When a binlog file was started: the header time of its first event, read over the binlog dump protocol.

The server purges a binlog file once its *modification time* is older than its expiry setting, and a file is
last written when the server rotates to the next one: so a file's purge clock starts when the *next* file was
started. Neither ``SHOW BINARY LOGS`` nor ``SHOW BINLOG EVENTS`` gives a time, and the files sit on the
server's disk. Every event header carries the time it was written, and the first event of a file (its
FORMAT_DESCRIPTION) is written when the file is created; the binlog dump protocol sends it with its header.
So: one non-blocking dump from ``file:4`` that reads up to that event. It needs REPLICATION SLAVE only, which
the CDC user has on MariaDB and on Oracle MySQL alike; like every binlog reader it claims a ``server_id`` of
the configured range (``server_ids.claimed_server_id``), so it never kicks a running reader off the server.

A rotated file's start never changes: ``FileStarts`` remembers the answers (by server, file and size).
"""
from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any, ClassVar

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.source.connection import Connection, MySQLSettings

log = logging.getLogger(__name__)

_ROTATE_EVENT = 4
_EVENTS_LOOKED_AT = 4  # the artificial ROTATE the dump starts with, then the file's first event


def binlog_file_started(settings: MySQLSettings, file: str) -> datetime | None:
    """The header time (UTC) of the first event of ``file``, or None (no such file, an unreadable stream)."""
    from pymysqlreplication import BinLogStreamReader

    with claimed_server_id(settings.with_database(None)) as server_id:
        reader = BinLogStreamReader(
            connection_settings=settings.replication_kwargs(), server_id=server_id, log_file=file, log_pos=4,
            resume_stream=True, blocking=False, filter_non_implemented_events=False,
            pymysql_wrapper=Connection,  # bounded reads, as every session of ours
        )
        try:
            for _ in range(_EVENTS_LOOKED_AT):
                event: Any = reader.fetchone()
                if event is None:
                    return None
                packet = event.packet
                if packet.timestamp and packet.event_type != _ROTATE_EVENT:
                    return datetime.fromtimestamp(packet.timestamp, UTC)
        finally:
            reader.close()
    return None


class FileStarts:
    """``binlog_file_started`` for one server, remembered: called as ``starts(file, size)``."""

    # shared by all instances: a rotated file's start never changes
    _cache: ClassVar[dict[tuple[str, int, str, int], datetime]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, settings: MySQLSettings) -> None:
        self.settings = settings

    def __call__(self, file: str, size: int) -> datetime | None:
        key = (self.settings.host, self.settings.port, file, size)
        with self._lock:
            found = self._cache.get(key)
        if found is not None:
            return found
        try:
            started = binlog_file_started(self.settings, file)
        except (CdcError, pymysql.err.MySQLError, OSError) as exc:
            log.info("cannot read when binlog file %s was started (%s): headroom unknown", file, exc)
            return None
        if started is not None:
            with self._lock:
                if len(self._cache) > 1024:
                    self._cache.clear()
                self._cache[key] = started
        return started
