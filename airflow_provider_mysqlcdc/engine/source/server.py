"""What server we talk to: flavor first (MariaDB or Oracle MySQL), then version, then its binlog position.

Branch on the flavor before the version: MariaDB 10.11 is not "newer than MySQL 8.4" (it has no
``SHOW BINARY LOG STATUS``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ServerNotReady

Flavor = Literal["mariadb", "mysql"]


@dataclass(frozen=True)
class ServerInfo:
    flavor: Flavor
    version: tuple[int, int, int]
    version_string: str
    server_id: int
    server_uuid: str | None
    gtid_mode: str

    @property
    def label(self) -> str:
        name = "MariaDB" if self.flavor == "mariadb" else "MySQL"
        return f"{name} {'.'.join(map(str, self.version))}"


@dataclass(frozen=True)
class BinlogStatus:
    """The binlog point the server reports as written, with the GTID set where the server has one."""

    file: str
    position: int
    gtid: str | None

    def __str__(self) -> str:
        text = f"{self.file}:{self.position}"
        return f"{text} (gtid {self.gtid})" if self.gtid else text


def parse_version(version_string: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version_string)
    if not match:
        raise ServerNotReady(f"cannot read the server version from {version_string!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def detect_flavor(version_string: str, version_comment: str) -> Flavor:
    text = f"{version_string} {version_comment}".lower()
    return "mariadb" if "mariadb" in text else "mysql"


def global_variables(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, str | None]:
    """Read global variables by name; a variable this server does not have maps to None.

    ``SHOW GLOBAL VARIABLES`` on both flavors: MariaDB keeps them in ``information_schema.GLOBAL_VARIABLES``,
    MySQL 8+ only in ``performance_schema.global_variables`` (which a server may run without)."""
    with conn.cursor() as cur:
        placeholders = ", ".join(["%s"] * len(names))
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})",
                    [n.lower() for n in names])
        found = {str(name).lower(): value for name, value in cur.fetchall()}
    return {n: found.get(n.lower()) for n in names}


def server_info(conn: pymysql.connections.Connection) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute("SELECT @@version, @@version_comment, @@server_id")
        version_string, comment, server_id = cur.fetchone()
    flavor = detect_flavor(str(version_string), str(comment or ""))
    if flavor == "mysql":
        extra = global_variables(conn, ["server_uuid", "gtid_mode"])
        uuid, gtid_mode = extra["server_uuid"], extra["gtid_mode"] or "OFF"
    else:
        uuid = None
        extra = global_variables(conn, ["gtid_current_pos"])
        gtid_mode = "ON" if extra["gtid_current_pos"] else "OFF"
    return ServerInfo(
        flavor=flavor,
        version=parse_version(str(version_string)),
        version_string=str(version_string),
        server_id=int(server_id),
        server_uuid=uuid,
        gtid_mode=str(gtid_mode),
    )


def has_snapshot_status(conn: pymysql.connections.Connection) -> bool:
    """Whether a consistent snapshot tells its own binlog position (MariaDB, Percona)."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Binlog_snapshot_position'")
        return cur.fetchone() is not None


def watermark_table_used(conn: pymysql.connections.Connection, info: ServerInfo, read_view_mode: str) -> bool:
    """Whether chunk reads write watermark markers under ``read_view_mode`` on this server: asked for, or
    ``auto`` on a server with neither an exact consistent snapshot nor GTIDs (``snapshot/read_view.py``)."""
    if read_view_mode != "auto":
        return read_view_mode == "watermark_table"
    gtids = info.flavor == "mysql" and info.gtid_mode.upper() == "ON"
    return not gtids and not has_snapshot_status(conn)


def binlog_status_statement(info: ServerInfo) -> str:
    if info.flavor == "mysql" and info.version >= (8, 4, 0):
        return "SHOW BINARY LOG STATUS"
    return "SHOW MASTER STATUS"


def current_binlog_status(conn: pymysql.connections.Connection, info: ServerInfo) -> BinlogStatus:
    """The current end of the binlog. Raises ServerNotReady if binary logging is off."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(binlog_status_statement(info))
        row: dict[str, Any] | None = cur.fetchone()
        if not row:
            raise ServerNotReady(
                "binary logging is off (log_bin=OFF): start the server with log_bin enabled "
                "(e.g. --log-bin=mysql-bin) and binlog_format=ROW"
            )
        gtid = row.get("Executed_Gtid_Set") or None
        if info.flavor == "mariadb":
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos AS g")
            gtid = (cur.fetchone() or {}).get("g") or None
    return BinlogStatus(file=str(row["File"]), position=int(row["Position"]), gtid=gtid)
