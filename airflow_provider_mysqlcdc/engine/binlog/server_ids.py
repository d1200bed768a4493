"""Replica server ids: every binlog reader connects with its own (two readers with one id kill each other)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError, ServerNotReady
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect


def allocate_server_id(settings: MySQLSettings, slot: int) -> int:
    """The replica ``server_id`` of reader ``slot`` (0-based); the top id of the range is for ``check``."""
    low, high = settings.server_id_range
    slots = high - low  # ids low .. high-1; high is reserved for mysqlcdc check
    if slots <= 0:
        raise ConfigurationError(
            f"server_id range {low}-{high} leaves no id for binlog readers (the top id {high} is reserved "
            "for mysqlcdc check): configure a range of at least two ids, e.g. server_id=5400-5499"
        )
    if not 0 <= slot < slots:
        raise ConfigurationError(
            f"binlog reader slot {slot} does not fit the server_id range {low}-{high} ({slots} reader ids; "
            f"the top id is reserved for mysqlcdc check): widen the range or run fewer parallel readers"
        )
    return low + slot


@contextlib.contextmanager
def claimed_server_id(settings: MySQLSettings, prefer: int = 1) -> Iterator[int]:
    """A reader ``server_id`` no other claimant on this server holds while the block runs.

    Snapshot backfills run in many Spark tasks of many applications at once, and two binlog readers with one
    ``server_id`` make the server drop the first. Each claim takes ``GET_LOCK('mysqlcdc.server_id.<id>', 0)``
    (no privilege needed; released when the claiming session ends), trying the range's snapshot slots (1 ..
    n-1; slot 0 is the stream's) from ``prefer`` on.
    """
    low, high = settings.server_id_range
    slots = high - low
    if slots < 2:
        raise ConfigurationError(
            f"server_id range {low}-{high} leaves no id for snapshot backfill readers (slot 0 is the "
            "stream's, the top id is mysqlcdc check's): configure a range of at least three ids, "
            "e.g. server_id=5400-5499"
        )
    first = (max(prefer, 1) - 1) % (slots - 1)
    conn = connect(settings.with_database(None))
    try:
        with conn.cursor() as cur:
            for i in range(slots - 1):
                server_id = low + 1 + (first + i) % (slots - 1)
                cur.execute("SELECT GET_LOCK(%s, 0)", (f"mysqlcdc.server_id.{server_id}",))
                if cur.fetchone()[0] == 1:
                    yield server_id
                    return
        raise ServerNotReady(
            f"all {slots - 1} snapshot reader server_ids of the range {low}-{high} are in use: widen "
            "server_id in the MySQL connection, or run fewer chunk reads at once"
        )
    finally:
        conn.close()
