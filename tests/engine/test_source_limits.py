"""Protecting the source: a cap on concurrent chunk reads per server, a rows/s budget, a per-query time
limit."""
from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_mysqlcdc.engine.chunks.planner import plan_table
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.limits import (
    RateLimiter,
    SlotWaitTimeout,
    SourceLimits,
    read_slot,
)

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

_DIGITS = "(" + " UNION ALL ".join(f"SELECT {d} AS i" for d in range(10)) + ")"


def _table(mysql_server, mysql_db: str, rows: int, width: int = 20) -> tuple[MySQLSettings, TableId]:
    """Rows (id, id zero-padded to ``width``) for id in 0..rows-1 (at most 100,000), made by the server
    itself: tens of MB in a fraction of the time a client takes to send them."""
    assert rows <= 100_000
    numbers = (f"SELECT a.i + 10 * b.i + 100 * c.i + 1000 * d.i + 10000 * e.i AS n FROM {_DIGITS} a, "
               f"{_DIGITS} b, {_DIGITS} c, {_DIGITS} d, {_DIGITS} e")
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR({width}))")
        cur.execute(f"INSERT INTO t SELECT n, LPAD(n, {width}, '0') FROM ({numbers}) numbers "
                    f"WHERE n < {rows}")
    return MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "t")


def _read(settings: MySQLSettings, table: TableId, limits: SourceLimits, batch_rows: int = 100) -> ChunkRead:
    """A read of the table's only chunk (the whole table) under ``limits``."""
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    plan = plan_table(lambda: connect(settings), table, 1, chunk_size=10**9)
    assert len(plan.chunks) == 1
    options = ChunkReadOptions(batch_rows=batch_rows, limits=limits)
    return ChunkRead(settings, schema, plan, plan.chunks[0], options)


def test_rate_limiter_paces_to_the_budget():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(100.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        limiter.take(50)  # 500 rows at 100 rows/s: 5 s, however fast the rows arrive
    assert now[0] == pytest.approx(5.0) and len(slept) == 10
    free = RateLimiter(None, clock=lambda: 0.0, sleep=sleep)
    free.take(10**6)
    assert len(slept) == 10
    assert SourceLimits(max_concurrent_reads=4, rows_per_second=1000).per_read_rows_per_second == 250


def test_limits_travel_as_spark_options():
    limits = SourceLimits(max_concurrent_reads=2, rows_per_second=500.0, query_timeout_s=30.0)
    options = SnapshotOptions(mysql_url="mysql://cdc@db:3306/", table="a.b", output="/out", limits=limits)
    assert SnapshotOptions.from_options(options.to_options()).limits == limits
    unlimited = SourceLimits(max_concurrent_reads=None, rows_per_second=None, query_timeout_s=None)
    options = options.with_(limits=unlimited)
    assert SnapshotOptions.from_options(options.to_options()).limits == unlimited
    # documented defaults: 4 reads, no rate limit, 600 s per query
    assert SnapshotOptions.from_options(
        {"mysql_url": "mysql://c@d/", "table": "a.b", "output": "/o"}).limits == SourceLimits()
    with pytest.raises(CdcError, match="max_concurrent_reads must be positive"):
        SourceLimits(max_concurrent_reads=-1)


def test_reads_beyond_the_cap_wait_for_a_slot(mysql_server, mysql_db):
    settings, table = _table(mysql_server, mysql_db, rows=300)
    limits = SourceLimits(max_concurrent_reads=1, slot_wait_timeout_s=60)
    holder = connect(settings)  # another job's read holds the server's only slot
    slot = read_slot(holder, limits, "the other read")
    slot.__enter__()
    read = _read(settings, table, limits)
    rows: list[int] = []
    thread = threading.Thread(target=lambda: rows.append(sum(b.num_rows for b in read.batches())))
    thread.start()
    thread.join(timeout=0.5)  # the slot stays taken this long
    assert thread.is_alive() and not rows, "the read must wait while the only slot is taken"
    slot.__exit__(None, None, None)
    thread.join(timeout=30)
    assert rows == [300] and read.result.timings["slot_wait_s"] >= 0.5
    holder.close()

    # all slots stay taken past the wait: a clear error, nothing read
    holder = connect(settings)
    with (
        read_slot(holder, limits, "the other read"),
        pytest.raises(SlotWaitTimeout, match="max_concurrent_reads=1"),
    ):
        list(_read(settings, table, SourceLimits(max_concurrent_reads=1, slot_wait_timeout_s=0.5)).batches())
    holder.close()
    # a task that dies holding a slot frees it with its session
    holder = connect(settings)
    read_slot(holder, limits, "a task about to die").__enter__()
    holder.close()
    assert sum(b.num_rows for b in _read(settings, table, limits).batches()) == 300


def test_rows_per_second_is_a_server_wide_budget(mysql_server, mysql_db):
    settings, table = _table(mysql_server, mysql_db, rows=400)
    limits = SourceLimits(max_concurrent_reads=2, rows_per_second=1000.0)  # each read: 500 rows/s
    read = _read(settings, table, limits, batch_rows=100)
    started = time.monotonic()
    assert sum(b.num_rows for b in read.batches()) == 400
    assert time.monotonic() - started >= 0.75  # 400 rows at 500 rows/s: at least 0.8 s (a lower bound)


def test_a_select_over_the_time_limit_is_stopped_with_a_clear_error(mysql_server, server_flavor,
                                                                    mysql_db):
    # ~16 MB of rows (twice what the socket buffers hold) read at 2,000 rows/s: the SELECT would run for 4 s;
    # the server stops it after 1 s, and the read ends once it has read what the buffers held (~2 s)
    settings, table = _table(mysql_server, mysql_db, rows=8_000, width=2_000)
    limits = SourceLimits(max_concurrent_reads=1, rows_per_second=2000.0, query_timeout_s=1.0)
    read = _read(settings, table, limits, batch_rows=500)
    started = time.monotonic()
    with pytest.raises(CdcError, match=r"per-query time limit \(1s, query_timeout\).*chunk_size"):
        for _ in read.batches():
            pass
    assert time.monotonic() - started < 30
    with connect(settings) as conn, conn.cursor() as cur:  # the timeout was the read session's, not global
        limit = "max_statement_time" if server_flavor == "mariadb" else "max_execution_time"
        cur.execute(f"SELECT @@GLOBAL.{limit}")
        assert float(cur.fetchone()[0]) == 0


# the read is killed while it streams the chunk (MariaDB's consistent snapshot); a watermark-table read
# (Oracle MySQL's) buffers the chunk whole before it yields any row
@pytest.mark.mariadb_only
def test_a_chunk_read_whose_connection_is_killed_fails_clearly_and_reruns(mysql_server, mysql_db):
    """KILL of the reader's session mid-read (an operator's or a proxy's doing): a clear error, and the rerun
    in a new read view returns every row."""
    from airflow_provider_mysqlcdc.engine.common.errors import ConnectionFailed

    # 30 MB (15,000 rows of 2 kB) read at 5,000 rows/s: three times what the socket buffers hold, so the
    # server is still sending when the KILL comes
    settings, table = _table(mysql_server, mysql_db, rows=15_000, width=2000)
    read = _read(settings, table, SourceLimits(max_concurrent_reads=1, rows_per_second=5000.0),
                 batch_rows=200)
    batches = read.batches()
    try:
        first = next(batches)
        assert first.num_rows == 200
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE ID <> CONNECTION_ID() AND USER = %s AND INFO LIKE %s",
                        (settings.user, f"SELECT %FROM `{mysql_db}`.`t` WHERE%"))
            found = cur.fetchall()
            assert len(found) == 1, found
            cur.execute("KILL %s", (found[0][0],))
        with pytest.raises(ConnectionFailed,
                           match=r"chunk 0: the connection to MySQL was lost during the read"):
            for _ in batches:
                pass
    finally:
        batches.close()  # never leave the read view open: it would block the test database's DROP
    again = _read(settings, table, SourceLimits(max_concurrent_reads=1))
    assert sum(b.num_rows for b in again.batches()) == 15_000
