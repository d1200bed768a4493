"""Oracle MySQL's read-only exact read view (``read_view_mode=gtid_executed``, ``snapshot/gtid_window.py``):
each step of its proof forced to matter once, on a server of the module's own (a commit held in its sync stage
by ``binlog_group_commit_sync_delay``, a transaction committed as the view opens), by a CDC user who may write
nothing. Concurrent random writes over every table shape are in test_consistency, test_group_runner and the
conformance suite, which read in this mode on MySQL."""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from airflow_provider_mysqlcdc.engine.binlog import mysql_gtid
from airflow_provider_mysqlcdc.engine.chunks.planner import plan_table
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot import gtid_window
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.snapshot.read_modes import gtid_executed
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import server_info
from airflow_provider_mysqlcdc.testing.server_process import CDC_GRANTS
from tests.support.servers import binlog_end

pytestmark = pytest.mark.mysql_only


@pytest.fixture(scope="module")
def server(private_server):
    with private_server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE g")
        cur.execute("CREATE TABLE g.kv (id INT PRIMARY KEY, v INT NOT NULL)")
        cur.execute("CREATE TABLE g.bag (ck INT NOT NULL, v INT NOT NULL, KEY (ck))")  # no primary key
        cur.executemany("INSERT INTO g.kv VALUES (%s, 0)", [(i,) for i in range(1, 61)])
        cur.executemany("INSERT INTO g.bag VALUES (%s, 0)", [(i % 30,) for i in range(60)])
        conn.commit()
    return private_server


@pytest.fixture(scope="module")
def reader_url(server) -> str:
    """A CDC user with the binlog reader's grants only: no watermark table, no write anywhere."""
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'gtidreader'@'%' IDENTIFIED BY 'gtid-pw-123'")
        cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO 'gtidreader'@'%'")
    return f"mysql://gtidreader:gtid-pw-123@127.0.0.1:{server.port}/"


@pytest.fixture(params=["python", "native"])
def chunk_reader(request, monkeypatch) -> str:
    monkeypatch.setenv(CHUNK_READER_ENV, request.param)
    return request.param


def _read(url: str, name: str, chunk_key: str | None, chunk_index: int,
          **options) -> tuple[ChunkRead, list[tuple]]:
    settings = MySQLSettings.from_url(url)
    table = TableId("g", name)
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    plan = plan_table(lambda: connect(settings), table, 1, chunk_size=20, chunk_key=chunk_key)
    read = ChunkRead(settings, schema, plan, plan.chunks[chunk_index],
                     ChunkReadOptions(server_id=5471, **options))
    rows = [tuple(r[c] for c in schema.column_names)
            for batch in read.batches() for r in batch.to_pylist()]
    return read, sorted(rows)


def _source(server, sql: str) -> list[tuple]:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return sorted(tuple(r) for r in cur.fetchall())


@contextlib.contextmanager
def _held_commit(server, sql: str) -> Iterator[tuple[threading.Event, str]]:
    """``sql`` committed by another session and held in the commit's sync stage (1 s, the server's longest):
    written to the binlog and owning its GTID, not yet committed in the engine. Yields (set once it
    committed, its GTID)."""
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_group_commit_sync_delay = 1000000")
    done = threading.Event()

    def slow_commit() -> None:
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute(sql)
            conn.commit()
        done.set()

    writer = threading.Thread(target=slow_commit)
    try:
        writer.start()
        with server.admin() as conn, conn.cursor() as cur:
            deadline = time.monotonic() + 30
            while True:  # until it is written and owned, not committed
                cur.execute("SELECT @@global.gtid_owned")
                owned = cur.fetchone()[0]
                if owned or done.is_set():
                    break
                assert time.monotonic() < deadline, "the held commit never showed in gtid_owned"
            assert not done.is_set(), "the commit was not held long enough for the test"
        yield done, mysql_gtid.owned_gtids(owned)
    finally:
        writer.join()
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_group_commit_sync_delay = 0")


def test_a_transaction_written_before_the_window_but_not_yet_committed_is_in_the_chunk(
        server, reader_url, chunk_reader):
    """A commit held in its sync stage is in the binlog (before the window's start) and not yet visible: the
    read waits for its GTID (gtid_owned) before opening the view, so the chunk holds it. Without the wait the
    chunk would miss this update for good (the stream starts after the chunk's HW)."""
    before = _source(server, "SELECT v FROM g.kv WHERE id = 5")
    with _held_commit(server, "UPDATE g.kv SET v = v + 1 WHERE id = 5") as (done, _gtid):
        read, rows = _read(reader_url, "kv", None, 0)
        assert read.result.mode == "gtid_executed" and read.result.reader == chunk_reader
        assert dict(rows)[5] == before[0][0] + 1, "the chunk lost a transaction committed before its window"
        assert done.is_set()  # the read waited for it
        assert rows == _source(server, "SELECT id, v FROM g.kv WHERE id < 21")
        _assert_hw_gtid_set(server, read)


def test_a_commit_that_does_not_end_within_the_wait_stops_the_read_naming_it(server):
    """The window waits for the transactions already written to commit, but not forever: past the wait
    (here 0.05 s against a commit held 1 s) no view is opened, and the error names the GTID and what to do."""
    with _held_commit(server, "UPDATE g.kv SET v = v + 1 WHERE id = 8") as (_done, gtid), \
            server.admin() as conn, pytest.raises(gtid_window.UncommittedTransactions,
                                                  match=rf"{gtid} were written .* within 0.05s"):
        gtid_window.start_window(conn, server_info(conn), 0.05)


def test_the_gtid_set_at_a_position_holds_a_transaction_written_before_it_and_still_committing(server):
    """The executed GTID set at a position near the binlog's end is gtid_executed minus what follows the
    position: read once the transactions already written committed, or one still committing before the
    position would be missing from it (and a failover by that set would apply it twice)."""
    with _held_commit(server, "UPDATE g.kv SET v = v + 1 WHERE id = 6") as (_done, gtid), \
            server.admin() as conn:
        position = binlog_end(conn)  # after the held transaction
        at = mysql_gtid.set_at(conn, position, scan="backward")
    assert at is not None and at.covers(mysql_gtid.MysqlGtidSet.parse(gtid)), (gtid, str(at))


def _commit_as_the_view_opens(server, monkeypatch, sql: str, times: int) -> list[int]:
    """Commit ``sql`` right after the window's executed GTID set is read, before the view opens: a
    transaction the view holds that the window cannot tell it holds, ``times`` times."""
    real, done = gtid_window.start_window, []

    def start_then_commit(conn, info, wait_s):
        start = real(conn, info, wait_s)
        if len(done) < times:
            with server.admin() as admin, admin.cursor() as cur:
                cur.execute(sql)
                admin.commit()
            done.append(1)
        return start

    monkeypatch.setattr(gtid_executed.gtid_window, "start_window", start_then_commit)
    return done


def test_a_keyed_chunk_is_corrected_by_the_window_it_cannot_tell_apart(server, reader_url, chunk_reader,
                                                                       monkeypatch):
    committed = _commit_as_the_view_opens(server, monkeypatch, "UPDATE g.kv SET v = v + 10 WHERE id = 30", 1)
    read, rows = _read(reader_url, "kv", None, 1)
    assert committed and read.result.backfill_events >= 1
    assert read.result.low_watermark < read.result.high_watermark
    assert rows == _source(server, "SELECT id, v FROM g.kv WHERE id BETWEEN 21 AND 40")
    _assert_hw_gtid_set(server, read)


def _assert_hw_gtid_set(server, read: ChunkRead) -> None:
    """The GTID set the read took from its window is the one a scan of the binlog finds at its HW."""
    with server.admin() as conn:
        scanned = mysql_gtid.set_at(conn, read.result.high_watermark, scan="forward")
    assert scanned is not None and read.result.hw_gtid_position == str(scanned), read.result


def test_a_chunk_without_primary_key_is_read_again_when_the_view_may_hold_it_twice(
        server, reader_url, monkeypatch, caplog):
    """Rows without a key are a multiset: a transaction the view may or may not hold cannot be applied, so the
    chunk is read in a fresh view (here the second one is clean), and never holds a row twice."""
    committed = _commit_as_the_view_opens(server, monkeypatch, "INSERT INTO g.bag VALUES (3, 7)", 2)
    with caplog.at_level(logging.INFO, logger=gtid_executed.__name__):
        read, rows = _read(reader_url, "bag", "ck", 0)
    assert len(committed) == 2
    assert sum("reading it again in a fresh view" in r.message for r in caplog.records) == 2
    first_chunk_end = read.chunk.end[0] if read.chunk.end else None
    assert first_chunk_end is not None
    assert rows == _source(server, f"SELECT ck, v FROM g.bag WHERE ck < {int(first_chunk_end)}")
    assert rows.count((3, 7)) == 2


def test_a_chunk_without_primary_key_that_never_gets_a_quiet_view_fails_clearly(server, reader_url,
                                                                                 monkeypatch):
    _commit_as_the_view_opens(server, monkeypatch, "INSERT INTO g.bag VALUES (4, 8)", 100)
    monkeypatch.setattr(gtid_executed.time, "sleep", lambda s: None)
    with pytest.raises(gtid_executed.KeylessChunkKeptChanging,
                       match=r"g\.bag chunk 0: the table has no primary key.*or read it at-least"):
        _read(reader_url, "bag", "ck", 0)


def test_a_truncate_in_the_window_makes_the_chunk_be_read_again(server, reader_url, monkeypatch, caplog):
    """TRUNCATE changes rows without row events: a window holding one cannot be applied, so the chunk is read
    again in a fresh view (after it)."""
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE g.tr (id INT PRIMARY KEY, v INT NOT NULL)")
        cur.executemany("INSERT INTO g.tr VALUES (%s, 1)", [(i,) for i in range(1, 61)])
        conn.commit()
    _commit_as_the_view_opens(server, monkeypatch, "TRUNCATE TABLE g.tr", 1)
    with caplog.at_level(logging.WARNING):
        _, rows = _read(reader_url, "tr", None, 0, backfill_timeout=30)
    assert rows == [] == _source(server, "SELECT id, v FROM g.tr")
    assert "in its read view's window (TRUNCATE or a partition operation)" in caplog.text


def test_without_gtids_auto_takes_the_watermark_table_and_gtid_executed_says_what_to_turn_on(server):
    """Runs last: takes the module's server down to gtid_mode=OFF, one step at a time as MySQL asks."""
    with server.admin() as conn, conn.cursor() as cur:
        for mode in ("ON_PERMISSIVE", "OFF_PERMISSIVE", "OFF"):
            cur.execute(f"SET GLOBAL gtid_mode = {mode}")
    with pytest.raises(ConfigurationError, match=r"gtid_executed needs gtid_mode=ON .*gtid_mode=OFF.*"
                                                 r"enforce_gtid_consistency=ON.*watermark_table"):
        _read(server.cdc_url, "kv", None, 0, mode="gtid_executed")
    read, rows = _read(server.cdc_url, "kv", None, 0)  # the test server's URL names its watermark table
    assert read.result.mode == "watermark_table"
    assert rows == _source(server, "SELECT id, v FROM g.kv WHERE id < 21")
