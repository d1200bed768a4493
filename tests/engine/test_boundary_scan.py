"""Transaction boundaries read by the compiled framer over a replication session
(``boundaries.iter_framed_boundaries``) equal those listed by ``SHOW BINLOG EVENTS`` (``iter_boundaries``), on
both flavors, with checksums on and off, across a rotation, DDL, autocommit statements, a rollback,
multi-statement transactions and an XA transaction; the stream's batch planning
(``admission.next_batch_end``) plans the same batches both ways (and in compare mode, the suite's, checks
each framed boundary against the listed one)."""
from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.engine.binlog.boundaries import iter_boundaries, iter_framed_boundaries
from airflow_provider_mysqlcdc.engine.binlog.event_framer import compiled
from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.stream.admission import next_batch_end
from tests.engine.test_binlog_reader import execute, status

pytestmark = pytest.mark.skipif(compiled.loaded() is None, reason="the compiled framer is not built")


def _workload(admin) -> None:
    for txn in range(5):
        admin.begin()
        for i in range(3):
            key = txn * 10 + i
            execute(admin, f"INSERT INTO t (id, v) VALUES ({key}, 'v{key}')", f"INSERT INTO u VALUES ({key})")
        execute(admin, f"UPDATE t SET v = 'x' WHERE id = {txn * 10}")
        admin.commit()
        execute(admin, f"DELETE FROM t WHERE id = {txn * 10 + 1}")  # autocommit: a group of one statement
        if txn == 1:
            execute(admin, "ALTER TABLE t ADD COLUMN extra INT DEFAULT 7", "FLUSH BINARY LOGS")
        if txn == 3:
            admin.begin()
            execute(admin, "INSERT INTO t (id, v) VALUES (999, 'gone')")
            admin.rollback()  # nothing of it reaches the binlog (InnoDB)
            execute(admin, "XA START 'x1'", "INSERT INTO u VALUES (998)", "XA END 'x1'", "XA PREPARE 'x1'",
                    "XA COMMIT 'x1'")


@pytest.mark.both_flavors
@pytest.mark.parametrize("checksum", ["CRC32", "NONE"])
def test_framed_boundaries_equal_the_listed_ones(mysql_server, mysql_db, checksum):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                "CREATE TABLE u (id INT PRIMARY KEY)")
        execute(admin, f"SET GLOBAL binlog_checksum = {checksum}")
        try:
            start = status(admin)
            _workload(admin)
            end = status(admin)
            with connect(settings) as conn:
                names = [name for name, _ in binary_logs(conn)]
                listed = [b for b in iter_boundaries(conn, names, start.file, start.pos) if b.key <= end.key]
            framed = [b for b in iter_framed_boundaries(settings, allocate_server_id(settings, 1), start.file,
                                                        start.pos) if b.key <= end.key]
        finally:
            execute(admin, "SET GLOBAL binlog_checksum = CRC32")
    assert framed == listed
    assert len(listed) >= 2 * 5 + 5 + 2 and len({b.file for b in listed}) == 2  # starts and ends; a rotation


@pytest.mark.both_flavors
def test_batches_are_planned_alike_either_way(mysql_server, mysql_db):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                "CREATE TABLE u (id INT PRIMARY KEY)")
        start = status(admin)
        _workload(admin)
        end = status(admin)
    with connect(settings) as conn:
        for max_bytes in (1, 700, 3000, None):
            offset, ends = BinlogOffset.at(start), {}
            for how in ("listed", "framed"):
                offset, plan = BinlogOffset.at(start), []
                while offset.position.key < end.key:
                    admission = next_batch_end(conn, offset, max_bytes=max_bytes, until=end, mark_bytes=500,
                                               settings=settings if how == "framed" else None, listed_below=0)
                    assert admission.end.position.key > offset.position.key
                    assert admission.scan == how
                    plan.append((admission.end, admission.bytes, admission.marks))
                    offset = admission.end
                ends[how] = plan
            assert ends["framed"] == ends["listed"], max_bytes
            assert ends["listed"][-1][0].position == end


@pytest.mark.both_flavors
def test_a_binlog_file_made_after_the_list_ends_the_batch_before_it(mysql_server, mysql_db, monkeypatch):
    """The framed scan reads on to the binlog's end, which may lie in a file made after the planner listed
    the binlog files (a rotation or a server restart in between, as the stream-recovery test does): the batch
    ends in the files the planner listed, and the next batch takes the new one (was: ``ValueError: ... is
    not in list``, the stream died)."""
    from airflow_provider_mysqlcdc.engine.stream import admission

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE u (id INT PRIMARY KEY)")
        start = status(admin)
        execute(admin, "INSERT INTO u VALUES (1)")
        with connect(settings) as conn:
            listed = binary_logs(conn)  # what the planner read before the rotation
        execute(admin, "FLUSH BINARY LOGS", "INSERT INTO u VALUES (2)")
        end = status(admin)
    assert end.file not in [name for name, _ in listed]
    with connect(settings) as conn:
        monkeypatch.setattr(admission, "binary_logs", lambda _conn: listed)
        first = next_batch_end(conn, BinlogOffset.at(start), max_bytes=None, settings=settings,
                               listed_below=0)
        assert first.scan == admission.FRAMED
        assert first.end.position.file == start.file and first.end.position.key > start.key
        monkeypatch.undo()
        second = next_batch_end(conn, first.end, max_bytes=None, settings=settings, listed_below=0)
        assert second.end.position == end


@pytest.mark.both_flavors
def test_a_small_range_is_listed_a_large_one_framed(mysql_server, mysql_db):
    """A stream that has caught up plans a few KiB per trigger: one page of SHOW BINLOG EVENTS costs less
    than the framed scan's replication session (``admission.LISTED_SCAN_BYTES``); the same batch either
    way."""
    from airflow_provider_mysqlcdc.engine.stream.admission import FRAMED, LISTED, LISTED_SCAN_BYTES

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))")
        start = status(admin)
        execute(admin, "INSERT INTO t VALUES (1, 'small')")
        small = status(admin)
        for i in range(2, 2 + LISTED_SCAN_BYTES // 200 + 10):  # single-row transactions past the threshold
            execute(admin, f"INSERT INTO t VALUES ({i}, '{'x' * 190}')")
        large = status(admin)
    with connect(settings) as conn:
        few = next_batch_end(conn, BinlogOffset.at(start), max_bytes=None, until=small, settings=settings)
        framed = next_batch_end(conn, BinlogOffset.at(start), max_bytes=None, until=small, settings=settings,
                                listed_below=0)
        many = next_batch_end(conn, BinlogOffset.at(start), max_bytes=None, until=large, settings=settings)
    assert (few.scan, framed.scan, many.scan) == (LISTED, FRAMED, FRAMED)
    assert few.end.position == framed.end.position == small
    assert many.end.position == large and many.bytes >= LISTED_SCAN_BYTES
