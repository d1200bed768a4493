"""After how long the server purges a binlog file by itself, from its settings.

MySQL 8+ and MariaDB 10.6+ have ``binlog_expire_logs_seconds``; older servers (and MySQL 8.0 when it is 0)
``expire_logs_days`` (a fraction of a day on MariaDB). 0 means never. MySQL 8.0.29+ purges nothing by age when
``binlog_expire_logs_auto_purge`` is OFF. MariaDB 11.4+ also purges by total size (``max_binlog_total_size``),
which no clock predicts: said in a note.
"""
from __future__ import annotations

from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.source.server import global_variables

VARIABLES = ["binlog_expire_logs_seconds", "expire_logs_days", "binlog_expire_logs_auto_purge",
             "max_binlog_total_size"]


@dataclass(frozen=True)
class BinlogExpiry:
    seconds: float | None  # a file is purged this long after it was last written; None: never by age
    setting: str  # the setting that decided, as the server has it
    notes: tuple[str, ...] = ()


def binlog_expiry(variables: dict[str, str | None]) -> BinlogExpiry:
    """The expiry the server's variables (name -> value, None: the server has no such variable) give."""
    notes = []
    total = _number(variables.get("max_binlog_total_size"))
    if total:
        notes.append(f"max_binlog_total_size={int(total)}: the server also purges by total size, which the "
                     "headroom does not predict")
    if str(variables.get("binlog_expire_logs_auto_purge") or "ON").upper() in ("OFF", "0"):
        return BinlogExpiry(None, "binlog_expire_logs_auto_purge=OFF", tuple(notes))
    seconds = _number(variables.get("binlog_expire_logs_seconds"))
    if seconds:
        return BinlogExpiry(seconds, f"binlog_expire_logs_seconds={seconds:g}", tuple(notes))
    days = _number(variables.get("expire_logs_days"))
    if days:
        return BinlogExpiry(days * 86400, f"expire_logs_days={days:g}", tuple(notes))
    name = "binlog_expire_logs_seconds" if variables.get("binlog_expire_logs_seconds") is not None \
        else "expire_logs_days"
    return BinlogExpiry(None, f"{name}=0", tuple(notes))


def read_binlog_expiry(conn: pymysql.connections.Connection) -> BinlogExpiry:
    return binlog_expiry(global_variables(conn, VARIABLES))


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None
