"""Every environment variable the package reads, named once: import the name from here, never spell it.

Secrets travel by environment (or by file) so that command lines, Spark options, plans and logs never carry
them. The test suite's own variables (``MYSQLCDC_TEST_*``, ``MYSQLCDC_BINLOG_TOOL``,
``MYSQLCDC_UI_SCREENSHOTS``) are read by ``tests/`` only and live there.
"""
from __future__ import annotations

import os

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

# The source server's URL without its password (mysql://user@host:port[?...]): the CLI's --mysql-url default.
MYSQL_URL_ENV = "MYSQLCDC_MYSQL_URL"
# The source server's password, wherever a MySQL URL comes without one (driver and executors).
MYSQL_PASSWORD_ENV = "MYSQLCDC_MYSQL_PASSWORD"
# The chunk store URL or SQLite path; a URL that carries a password must come from here, not from options.
CHUNK_STORE_URL_ENV = "MYSQLCDC_CHUNK_STORE_URL"
# Seconds a chunk store call keeps retrying while the store is unreachable (default 300; 0: fail at once).
CHUNK_STORE_OUTAGE_ENV = "MYSQLCDC_CHUNK_STORE_OUTAGE_S"
# Seconds a chunk store session waits for any one reply before it is dropped as dead (default 60).
CHUNK_STORE_READ_TIMEOUT_ENV = "MYSQLCDC_CHUNK_STORE_READ_TIMEOUT_S"
# Which decoder reads rows events: compiled (default), python (mysql-replication only), compare (both,
# stopping at a difference: the test suite's mode). engine/binlog/decoder_choice.py.
ROWS_DECODER_ENV = "MYSQLCDC_ROWS_DECODER"
# Which reader reads snapshot chunks: native (connectorx, Arrow from the wire, where it keeps every guarantee)
# or python (pymysql, the reference; the default for now). engine/snapshot/native_read/choice.py.
CHUNK_READER_ENV = "MYSQLCDC_CHUNK_READER"
# The Spark master of ``mysqlcdc stream`` (default local[*]).
SPARK_MASTER_ENV = "MYSQLCDC_SPARK_MASTER"
# How many tables' commits a stream batch makes at once (Delta changelog commits, mirror refreshes; default 8,
# 1: one after another). engine/lake/concurrent_commits.py.
COMMIT_THREADS_ENV = "MYSQLCDC_COMMIT_THREADS"
# How long the Delta tables' log entries are kept (their time-travel horizon; default 10m: a duration such as
# 10m, 2h or 1d). engine/lake/delta_log.py.
DELTA_LOG_RETENTION_ENV = "MYSQLCDC_DELTA_LOG_RETENTION"


def seconds_from_env(name: str, given: float | None, default: float, what: str) -> float:
    """``given`` if set, else the seconds in ``$name``, else ``default`` (callers check the range)."""
    if given is not None:
        return float(given)
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: give {what} in seconds") from None
