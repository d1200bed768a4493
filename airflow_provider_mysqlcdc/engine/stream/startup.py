"""Startup modes: where a pipeline's stream begins, and whether a snapshot comes first.

``initial`` (default) snapshots the tables, then streams from the smallest chunk HW; ``snapshot-only``
snapshots and stops. The other modes take no snapshot and stream every change of the tables from a point of
the binlog, always a transaction start (a stream never begins inside a transaction):

* ``latest-offset``: from now (the current end of the binlog);
* ``earliest-offset``: from the oldest binlog still on the server;
* ``specific-offset:<file>:<pos>``: from that position, rounded down to the start of the transaction that
  holds it (so none of that transaction is lost), or ``specific-offset:gtid=<set>``: from the first
  transaction the GTID set does not contain (MariaDB: a GTID position ``0-11-57,1-12-3``; Oracle MySQL: a
  GTID set ``uuid:1-57,uuid2:1-9``, with ``gtid_mode=ON``), which the server must have applied in full;
* ``timestamp:<ISO 8601 or epoch seconds>``: from the first transaction that began at or after that time.

Without a snapshot there is no mirror of the whole table: consumers read the changelog.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.boundaries import iter_boundaries
from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

INITIAL, SNAPSHOT_ONLY, LATEST, EARLIEST, SPECIFIC, TIMESTAMP = (
    "initial", "snapshot-only", "latest-offset", "earliest-offset", "specific-offset", "timestamp",
)
MODES = (INITIAL, SNAPSHOT_ONLY, LATEST, EARLIEST, SPECIFIC, TIMESTAMP)
_POSITION = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<pos>\d+)$")


class StartupError(CdcError):
    """The start point cannot be found on this server (purged, in the future, not in this binlog)."""


@dataclass(frozen=True)
class StartupMode:
    mode: str = INITIAL
    position: BinlogPosition | None = None  # specific-offset by position
    gtid_set: str | None = None  # specific-offset by GTID set
    timestamp: datetime | None = None  # timestamp (UTC)

    HELP: ClassVar[str] = (
        "initial | snapshot-only | latest-offset | earliest-offset | specific-offset:<file>:<pos> | "
        "specific-offset:gtid=<set> | timestamp:<ISO 8601 or epoch seconds>"
    )

    @classmethod
    def parse(cls, text: str | None) -> StartupMode:
        value = (text or INITIAL).strip()
        mode, _, arg = value.partition(":")
        mode = mode.strip().lower()
        if mode in (INITIAL, SNAPSHOT_ONLY, LATEST, EARLIEST) and not arg:
            return cls(mode)
        if mode == SPECIFIC and arg.strip().lower().startswith("gtid="):
            gtid = arg.strip()[5:].strip()
            if gtid:
                return cls(mode, gtid_set=gtid)
        elif mode == SPECIFIC and (match := _POSITION.match(arg.strip())):
            return cls(mode, position=BinlogPosition(match["file"], int(match["pos"])))
        elif mode == TIMESTAMP and arg.strip():
            return cls(mode, timestamp=_parse_time(arg.strip()))
        raise ConfigurationError(f"startup mode {value!r}: use {cls.HELP}")

    def __str__(self) -> str:
        if self.position is not None:
            return f"{self.mode}:{self.position.file}:{self.position.pos}"
        if self.gtid_set is not None:
            return f"{self.mode}:gtid={self.gtid_set}"
        if self.timestamp is not None:
            return f"{self.mode}:{self.timestamp.isoformat()}"
        return self.mode

    @property
    def snapshots(self) -> bool:
        return self.mode in (INITIAL, SNAPSHOT_ONLY)

    @property
    def streams(self) -> bool:
        return self.mode != SNAPSHOT_ONLY

    @property
    def from_offset(self) -> bool:
        """The stream starts at a point of the binlog rather than at the chunks' smallest HW."""
        return not self.snapshots


def _parse_time(text: str) -> datetime:
    try:
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return datetime.fromtimestamp(float(text), UTC)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"startup mode timestamp {text!r}: use ISO 8601 (2026-11-21T08:00:00Z) or epoch seconds"
        ) from None
    if parsed.tzinfo is None:
        raise ConfigurationError(
            f"startup mode timestamp {text!r} has no time zone: add one (Z, +02:00); the binlog keeps UTC"
        )
    return parsed.astimezone(UTC)


def resolve_start(settings: MySQLSettings, mode: StartupMode, *,
                  server_id: int | None = None) -> BinlogOffset:
    """The transaction start the stream of a ``from_offset`` mode begins at, on this server."""
    if not mode.from_offset:
        raise ConfigurationError(f"startup mode {mode} starts from the chunks' HWs, not from an offset")
    conn = connect(settings.with_database(None))
    try:
        names = [name for name, _ in binary_logs(conn)]
        if not names:
            raise StartupError("the server lists no binary logs: binary logging must be on")
        if mode.mode == EARLIEST:
            return _first_boundary(conn, names, names[0])
        if mode.mode == LATEST:
            status = current_binlog_status(conn, server_info(conn))
            return _boundary_at_or_before(conn, names, BinlogPosition(status.file, status.position))
        if mode.mode == SPECIFIC and mode.position is not None:
            return _specific(conn, names, mode.position)
        if mode.mode == SPECIFIC and mode.gtid_set is not None:
            from airflow_provider_mysqlcdc.engine.binlog.gtid import (
                position_after_gtid_set,  # the GTID translation of failover
            )

            return position_after_gtid_set(conn, mode.gtid_set)
        assert mode.timestamp is not None
        return _at_time(settings, conn, names, mode.timestamp, server_id)
    finally:
        conn.close()


def _first_boundary(conn: Any, names: list[str], file: str) -> BinlogOffset:
    for boundary in iter_boundaries(conn, names, file, 4):
        return BinlogOffset.at(boundary)
    status = current_binlog_status(conn, server_info(conn))  # an empty binlog: its end
    return BinlogOffset.at(BinlogPosition(status.file, status.position))


def _boundary_at_or_before(conn: Any, names: list[str], position: BinlogPosition) -> BinlogOffset:
    """The last boundary at or before ``position`` in its file (the start of the transaction holding it)."""
    best: BinlogPosition | None = None
    for boundary in iter_boundaries(conn, names, position.file, 4):
        if boundary.key > position.key:
            break
        best = boundary
    if best is None:
        return _first_boundary(conn, names, position.file)
    return BinlogOffset.at(best)


def _specific(conn: Any, names: list[str], position: BinlogPosition) -> BinlogOffset:
    if position.file not in names:
        older = position.key < BinlogPosition(names[0], 4).key
        raise StartupError(
            f"startup offset {position.file}:{position.pos}: the server has no binlog file {position.file} "
            + (f"(purged: the oldest is {names[0]}); its changes are gone: use earliest-offset or a snapshot"
               if older else f"(the newest is {names[-1]}): is this offset from another server?")
        )
    sizes = dict(binary_logs(conn))
    if position.pos > sizes[position.file]:
        raise StartupError(
            f"startup offset {position.file}:{position.pos} lies beyond the end of {position.file} "
            f"({sizes[position.file]} bytes)"
        )
    return _boundary_at_or_before(conn, names, position)


def _at_time(settings: MySQLSettings, conn: Any, names: list[str], when: datetime, server_id: int | None
             ) -> BinlogOffset:
    """Binary search over the files by their first transaction's time, then a scan of the one that holds
    ``when``: only event headers are decoded (mysql-replication with rows events filtered out)."""
    from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id

    target = when.timestamp()
    with claimed_server_id(settings, prefer=1) as claimed:
        reader_id = server_id or claimed
        low, high = 0, len(names) - 1
        while low < high:  # the last file whose first transaction began before ``when``
            middle = (low + high + 1) // 2
            first = _group_starts(settings, reader_id, names[middle], stop_after=1)
            if first and first[0][1] < target:
                low = middle
            else:
                high = middle - 1
        for file in names[low:]:
            for position, started in _group_starts(settings, reader_id, file):
                if started >= target:
                    return BinlogOffset.at(position)
    status = current_binlog_status(conn, server_info(conn))  # nothing began at or after: from now on
    return _boundary_at_or_before(conn, names, BinlogPosition(status.file, status.position))


def _group_starts(settings: MySQLSettings, server_id: int, file: str, stop_after: int | None = None
                  ) -> list[tuple[BinlogPosition, float]]:
    """(start, begin time) of the transactions of one binlog file, in order."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent

    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(), server_id=server_id, resume_stream=True,
        blocking=False, log_file=file, log_pos=4, is_mariadb=False,
        only_events=[GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent], enable_logging=False,
    )
    out: list[tuple[BinlogPosition, float]] = []
    after_gtid = False  # MySQL writes Gtid, then Query BEGIN: one transaction start, not two
    try:
        for event in stream:
            packet = event.packet
            if isinstance(event, RotateEvent):
                if packet.log_pos and event.next_binlog != file:  # the real end of this file
                    break
                continue
            start = packet.log_pos - packet.event_size
            begin = isinstance(event, QueryEvent) and event.query.strip().upper() == "BEGIN"
            if isinstance(event, (GtidEvent, MariadbGtidEvent)) or (begin and not after_gtid):
                out.append((BinlogPosition(file, start), float(event.timestamp)))
            after_gtid = isinstance(event, (GtidEvent, MariadbGtidEvent))
            if stop_after is not None and len(out) >= stop_after:
                break
    except pymysql.err.MySQLError as exc:
        raise StartupError(
            f"reading binlog file {file} for a timestamp start failed: {exc.args[-1]}"
        ) from None
    finally:
        stream.close()
    return out
