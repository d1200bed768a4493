"""The native reader's MySQL session: connectorx's URL, the statements that open the read view and pin its
binlog point, and what connectorx's errors mean.

connectorx runs ``pre_execution_query`` on the very connection that then runs the main query (one query, no
partitioning: research/fast-reads.md), so the MariaDB consistent snapshot and its exact binlog point are had
in the session that reads the rows. The point is packed into one session variable (binlog file number << 40 |
position) that the main query returns as its first column: NULL if the statements ever ran elsewhere (an
error, never a wrong position), or if the session reached another server than the one planned on.

The URL holds the password, so it never leaves this module: errors are rebuilt from connectorx's text with the
password removed.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import (
    LOST_CONNECTION_ERRORS,
    SESSION_INIT,
    SESSION_SQL_MODE,
    MySQLSettings,
)

HW_VARIABLE = "@mysqlcdc_hw"
POSITION_BITS = 40
_MYSQL_ERROR = re.compile(r"ERROR (\d+) \(\w+\): (.*?)\s*\}?\s*$", re.DOTALL)
# connectorx's words for a connection that broke (the server or the network went away, or a KILL)
_LOST_WORDS = ("IO error", "IoError", "server disconnected", "bytes remaining on stream", "Connection reset",
               "Broken pipe", "connection closed", "Could not connect", "timed out waiting for connection")


def connectorx_url(settings: MySQLSettings) -> str:
    """The URL connectorx (the Rust ``mysql`` crate) connects with: TCP keepalive probes and a user timeout
    bound how long a dead path can hold the read (the pure-Python reader's ``read_timeout``; a slow but live
    server answers the probes, so a long read is never cut)."""
    user = quote(settings.user, safe="")
    password = quote(settings.password, safe="")
    credentials = f"{user}:{password}" if settings.password else user
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    database = quote(settings.database or "", safe="")
    timeout_ms = max(1000, int(settings.read_timeout * 1000))
    keepalive_ms = max(1000, min(timeout_ms // 2, 60_000))
    return (f"mysql://{credentials}@{host}:{settings.port}/{database}"
            f"?tcp_keepalive_time_ms={keepalive_ms}&tcp_user_timeout_ms={timeout_ms}")


def session_statements(flavor: str, query_timeout_s: float | None) -> list[str]:
    """UTF-8, UTC and the sql_mode of the pure-Python reader's sessions, and the per-statement limit. Enough
    for a SELECT between two watermarks (watermark-table mode: its read view is the statement's own)."""
    if flavor == "mariadb":
        limit = f"SET SESSION max_statement_time = {float(query_timeout_s or 0)!r}"
    else:
        limit = f"SET SESSION max_execution_time = {int((query_timeout_s or 0) * 1000)}"
    return ["SET NAMES utf8mb4", SESSION_INIT, limit]


def statement_hint(flavor: str) -> str:
    """What the SELECT itself must carry: connectorx first runs it with ``LIMIT 0`` on a connection of its
    own, without the statements above, for its column types; under Oracle MySQL's default sql_mode a zero date
    in the chunk's predicate fails there (error 1525). MySQL's SET_VAR hint gives the statement our sql_mode
    wherever it runs (MariaDB has no SET_VAR, and its default sql_mode compares zero dates)."""
    return f"/*+ SET_VAR(sql_mode = '{SESSION_SQL_MODE}') */ " if flavor == "mysql" else ""


def read_view_statements(flavor: str, server_id: int, query_timeout_s: float | None) -> list[str]:
    """Run before the SELECT on its connection: ``session_statements``, a fresh REPEATABLE READ read view and
    its binlog point in ``HW_VARIABLE``."""
    packed = (
        "SELECT CAST(SUBSTRING_INDEX(f.VARIABLE_VALUE, '.', -1) AS UNSIGNED) << 40 "
        "| CAST(p.VARIABLE_VALUE AS UNSIGNED) FROM information_schema.SESSION_STATUS f "
        "JOIN information_schema.SESSION_STATUS p ON p.VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION' "
        "WHERE f.VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE'"
    )
    return [
        *session_statements(flavor, query_timeout_s),
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        f"SET {HW_VARIABLE} = IF(@@in_transaction = 1 AND @@server_id = {int(server_id)}, ({packed}), NULL)",
    ]


def hw_column() -> str:
    return f"CAST({HW_VARIABLE} AS UNSIGNED) AS hw"


def unpack_position(packed: int, file_like: str) -> BinlogPosition:
    """The binlog point from ``HW_VARIABLE``; ``file_like``: any binlog file name of the server (its base)."""
    base = file_like.rsplit(".", 1)[0]
    number, position = packed >> POSITION_BITS, packed & ((1 << POSITION_BITS) - 1)
    return BinlogPosition(f"{base}.{number:06d}", position)


def error_code(text: str) -> int | None:
    """The MySQL error number in a connectorx error, if it names one."""
    found = _MYSQL_ERROR.search(text)
    return int(found.group(1)) if found else None


def is_lost_connection(text: str) -> bool:
    code = error_code(text)
    if code is not None:
        return code in LOST_CONNECTION_ERRORS
    return any(word in text for word in _LOST_WORDS)


def error_text(exc: BaseException, settings: MySQLSettings) -> str:
    """connectorx's error as one line, the server's message if it has one, never the password."""
    text = str(exc)
    found = _MYSQL_ERROR.search(text)
    line = f"{found.group(1)}: {found.group(2)}" if found else " ".join(text.split())
    for secret in {settings.password, quote(settings.password, safe="")} - {""}:
        line = line.replace(secret, "***")
    return line[:500]
