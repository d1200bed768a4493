"""Which reader reads a chunk's rows: the native one (connectorx, Arrow from the wire) or the pure-Python one
(pymysql, the reference).

``$MYSQLCDC_CHUNK_READER`` chooses: ``native`` (the default) reads with connectorx wherever it keeps every
guarantee, ``python`` always with pymysql (the reference, and the way out). Where the native reader cannot
serve, the pure-Python one reads, and the log says why once per table (per process): connectorx not
installed; consistent-snapshot mode on a server other than MariaDB (Percona: no ``@@in_transaction`` to prove
the session; Oracle MySQL reads in watermark-table mode, where connectorx SELECTs between the markers on any
server and ``chunk_buffer.ArrowChunkBuffer`` applies the events between them); watermark-table mode on a table
without a primary key (corrected as a multiset of whole rows); a ``rows_per_second`` budget (connectorx reads
the whole chunk ahead of its consumer, so pacing the consumer would not pace the server); TLS (connectorx's
MySQL driver takes no CA file); a column it cannot read exactly (``columns.plan_columns``).
"""
from __future__ import annotations

import logging
import os
import threading

from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

log = logging.getLogger(__name__)

NATIVE, PYTHON = "native", "python"
MODES = (NATIVE, PYTHON)
DEFAULT = NATIVE
_said: set[tuple[str, str]] = set()
_lock = threading.Lock()


def reader_mode() -> str:
    raw = os.environ.get(CHUNK_READER_ENV, "").strip().lower() or DEFAULT
    if raw not in MODES:
        raise ConfigurationError(
            f"{CHUNK_READER_ENV}={raw!r}: give one of {', '.join(MODES)} (or leave it unset for {DEFAULT})"
        )
    return raw


def connectorx_available() -> bool:
    try:
        import connectorx  # noqa: F401
    except ImportError:
        return False
    return True


def why_not_native(settings: MySQLSettings, mode: str, flavor: str, rate_limited: bool) -> str | None:
    """Why the session-level conditions rule the native reader out for this read (None: they do not)."""
    if reader_mode() == PYTHON:
        return ""  # asked for: nothing to say
    if not connectorx_available():
        return "connectorx is not installed"
    if mode == "consistent_snapshot" and flavor != "mariadb":
        return "the server is not MariaDB (the native reader proves its read view with @@in_transaction)"
    if rate_limited:
        return ("rows_per_second is set: connectorx reads a chunk ahead of its consumer, so only the "
                "pure-Python reader paces what the server sends")
    if settings.ssl:
        return "the connection uses TLS, which connectorx's MySQL driver cannot set up with a CA file"
    return None


def say_once(table: object, reason: str) -> None:
    """Log once per table and reason that the pure-Python reader reads it, and why."""
    if not reason:
        return
    key = (str(table), reason)
    with _lock:
        if key in _said:
            return
        _said.add(key)
    log.info("chunks of %s are read by the pure-Python reader (slower): %s", table, reason)
