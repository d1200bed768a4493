"""Opening a fresh read view whose low watermark provably covers every transaction before it.

``SHOW MASTER STATUS`` reports what is *written* to the binlog; the storage engine commits after that, so a
transaction before a naive LW can still be invisible to the chunk's SELECT (and would be lost). Two modes:

- ``consistent_snapshot`` (MariaDB, Percona): ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and then the
  status variables ``Binlog_snapshot_file``/``Binlog_snapshot_position`` are the binlog point of that very
  read view. Exact: LW = HW, no binlog backfill.
- ``gtid_executed`` (Oracle MySQL with ``gtid_mode=ON``): read-only and exact. The binlog end and the executed
  GTID set read around the view's opening tell which transactions it holds (``gtid_window.py``); the chunk is
  corrected with the few events between them.
- ``watermark_table`` (any server; Oracle MySQL without GTIDs): the DBLog method. Commit a marker row with a
  unique token into a small table the user grants (INSERT, UPDATE), then open the read view. With
  ``binlog_order_commits=ON`` (the default) every transaction before the marker in the binlog committed in the
  engine before it, so the fresh read view contains it. LW and HW are the end positions of the two marker
  events, found in the binlog; the chunk is corrected with the events between them (backfill).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError, ServerNotReady
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.gtid_window import check_gtid_mode
from airflow_provider_mysqlcdc.engine.source.server import (
    ServerInfo,
    current_binlog_status,
    has_snapshot_status,
)
from airflow_provider_mysqlcdc.engine.source.watermark_table import WATERMARK_DDL

ReadViewMode = Literal["auto", "consistent_snapshot", "gtid_executed", "watermark_table"]



def resolve_mode(
    conn: pymysql.connections.Connection, info: ServerInfo, mode: ReadViewMode,
    watermark_table: TableId | None,
) -> ReadViewMode:
    """``auto`` picks the exact read-only view the server has: MariaDB's consistent snapshot, else Oracle
    MySQL's executed GTID set (``gtid_mode=ON``), else the watermark table (if configured)."""
    if mode == "consistent_snapshot" and not has_snapshot_status(conn):
        raise ConfigurationError(
            f"read view mode consistent_snapshot needs Binlog_snapshot_position, which {info.label} does not "
            "have (MariaDB and Percona do): use read_view_mode=auto (gtid_executed where gtid_mode=ON) or "
            "watermark_table with a watermark table"
        )
    if mode == "gtid_executed":
        check_gtid_mode(info)
    if mode == "watermark_table" and watermark_table is None:
        raise ConfigurationError(
            "read view mode watermark_table needs the option watermark_table=db.table: create it with "
            + WATERMARK_DDL.format(table="db.mysqlcdc_watermark")
            + " and GRANT INSERT, UPDATE on it to the CDC user"
        )
    if mode != "auto":
        return mode
    if has_snapshot_status(conn):
        return "consistent_snapshot"
    if info.flavor == "mysql" and info.gtid_mode.upper() == "ON":
        return "gtid_executed"
    if watermark_table is not None:
        return "watermark_table"
    raise ConfigurationError(
        f"{info.label} has no Binlog_snapshot_position and runs with gtid_mode={info.gtid_mode}, so an "
        "exact chunk read needs GTIDs or a watermark table: turn GTIDs on (gtid_mode=ON, "
        "enforce_gtid_consistency=ON: chunk reads then write nothing to the source), or set "
        "watermark_table=db.mysqlcdc_watermark, create "
        "it with " + WATERMARK_DDL.format(table="db.mysqlcdc_watermark")
        + " and GRANT INSERT, UPDATE on it to the CDC user (or use skip_backfill for at-least-once)"
    )


def open_consistent_snapshot(conn: pymysql.connections.Connection) -> BinlogPosition:
    """Start a fresh REPEATABLE READ read view and return its exact binlog point."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW SESSION STATUS "
                    "WHERE Variable_name IN ('Binlog_snapshot_file', 'Binlog_snapshot_position')")
        status = {str(k).lower(): v for k, v in cur.fetchall()}
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise ServerNotReady("the server reported no Binlog_snapshot_file/position: is log_bin on?")
    return BinlogPosition(str(file), int(pos))


def open_plain_snapshot(conn: pymysql.connections.Connection) -> None:
    """A fresh REPEATABLE READ read view (the watermark mode finds its LW in the binlog instead)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")


@dataclass(frozen=True)
class Marker:
    token: str
    written_after: BinlogPosition  # binlog status read before the marker: the scan for it starts here


def write_marker(
    conn: pymysql.connections.Connection, info: ServerInfo, table: TableId, slot: int
) -> Marker:
    """Commit a marker row with a unique token; its binlog event's end is the watermark."""
    status = current_binlog_status(conn, info)
    token = uuid.uuid4().hex
    with conn.cursor() as cur:
        try:
            cur.execute(
                f"INSERT INTO {table.quoted} (id, token) VALUES (%s, %s) "
                # the token given twice, not VALUES(token): MySQL deprecates VALUES() there and MariaDB has
                # no row alias, while a parameter means the same on both
                "ON DUPLICATE KEY UPDATE token = %s, written_at = CURRENT_TIMESTAMP(6)",
                (slot, token, token),
            )
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in (1142, 1044, 1227):
                raise ConfigurationError(
                    f"the CDC user may not write the watermark table {table}: GRANT INSERT, UPDATE ON "
                    f"{table.quoted} TO the CDC user"
                ) from None
            if code == 1146:
                raise ConfigurationError(
                    f"watermark table {table} does not exist: create it with "
                    + WATERMARK_DDL.format(table=table.quoted)
                ) from None
            raise
        conn.commit()
    return Marker(token, BinlogPosition(status.file, status.position))
