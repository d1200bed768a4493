"""GTID states: Oracle MySQL GTID sets (parsed as the server prints them, normalized, compared, tagged GTIDs),
the flavor's type chosen by ``parse_gtid_state``, and (on a server) the set at each position of a binlog."""
from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.engine.binlog.gtid import (
    GtidPosition,
    GtidUnsupported,
    MysqlGtid,
    MysqlGtidSet,
    parse_gtid_state,
)
from airflow_provider_mysqlcdc.engine.binlog.mysql_gtid import GtidSetBuilder, forget_scans, set_at
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.servers import binlog_end

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "9180c4c1-eb2e-11f1-b384-02fc00000001"


def test_sets_are_normalized_as_the_server_prints_them():
    printed = f"{B}:1-3,\n{A.upper()}:5:1-4:7:tag_x:2-3"  # SHOW ... prints a newline after each comma
    parsed = MysqlGtidSet.parse(printed)
    assert str(parsed) == f"{A}:1-5:7:tag_x:2-3,{B}:1-3"
    assert MysqlGtidSet.parse(str(parsed)) == parsed
    assert MysqlGtidSet.parse(f"{A}:1-3:4-5") == MysqlGtidSet.parse(f"{A}:1-5")  # adjacent intervals merge
    assert MysqlGtidSet.parse("") == MysqlGtidSet() and not MysqlGtidSet.parse(" ")
    assert MysqlGtidSet.parse(A.replace("-", "") + ":1") == MysqlGtidSet.parse(f"{A}:1")


def test_contains_covers_minus_union():
    whole = MysqlGtidSet.parse(f"{A}:1-10:tag_x:1-2,{B}:1-3")
    assert whole.contains(MysqlGtid.parse(f"{A}:10")) and not whole.contains(MysqlGtid.parse(f"{A}:11"))
    assert whole.contains(MysqlGtid.parse(f"{A}:tag_x:2"))
    assert not whole.contains(MysqlGtid.parse(f"{A}:tag_y:1"))
    part = MysqlGtidSet.parse(f"{A}:2-4:tag_x:1")
    assert whole.covers(part) and not part.covers(whole) and whole.covers(MysqlGtidSet())
    assert str(whole.minus(part)) == f"{A}:1:5-10:tag_x:2,{B}:1-3"
    assert part.union(whole.minus(part)) == whole
    builder = GtidSetBuilder()
    for gno in (1, 2, 3, 7, 5, 6, 4):  # out of order: merged all the same
        builder.add(MysqlGtid(A, "", gno))
    assert builder.freeze() == MysqlGtidSet.parse(f"{A}:1-7")


@pytest.mark.parametrize("text", ["0-11-57", f"{A}", f"{A}:0", f"{A}:5-3", "nonsense:1", f"{A}:1-2:Bad-Tag"])
def test_malformed_mysql_sets_are_refused(text):
    with pytest.raises(GtidUnsupported):
        MysqlGtidSet.parse(text)


def test_each_flavor_reads_its_own_form():
    assert parse_gtid_state("0-11-57,1-12-3", "mariadb") == GtidPosition.parse("1-12-3,0-11-57")
    assert parse_gtid_state(f"{A}:1-57", "mysql") == MysqlGtidSet.parse(f"{A}:1-57")
    with pytest.raises(GtidUnsupported, match="looks like a MariaDB GTID position"):
        parse_gtid_state("0-11-57", "mysql")
    with pytest.raises(GtidUnsupported, match="looks like an Oracle MySQL GTID set"):
        parse_gtid_state(f"{A}:1-57", "mariadb")


@pytest.mark.mysql_only
def test_the_set_at_each_position_of_the_binlog(mysql_server, mysql_db):
    """After each transaction of an idle server, the end of its binlog and gtid_executed are a reference pair:
    the set at that position, scanned forwards (cold, and from the checkpoints of earlier forward or backward
    scans) and backwards, is that gtid_executed, across a rotation; a position inside an event has none."""
    references = []
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        for i in range(6):
            if i == 3:
                cur.execute("FLUSH BINARY LOGS")
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            references.append((binlog_end(conn), MysqlGtidSet.parse(cur.fetchone()[0])))
    with connect(MySQLSettings.from_url(mysql_server.cdc_url).with_database(None)) as conn:
        forget_scans()
        for position, executed in references:
            assert set_at(conn, position, scan="forward") == executed, position  # from the last checkpoint
            assert set_at(conn, position, scan="backward") == executed, position
            assert set_at(conn, position) == executed, position
        forget_scans()
        for position, executed in reversed(references):  # cold: from the file's start
            assert set_at(conn, position, scan="forward") == executed, position
        forget_scans()
        for position, executed in references[::2]:  # checkpoints left by backward scans ...
            assert set_at(conn, position, scan="backward") == executed, position
        for position, executed in references:  # ... and forward scans from them
            assert set_at(conn, position, scan="forward") == executed, position
        inside = BinlogPosition(references[-1][0].file, references[-1][0].pos - 3)
        assert set_at(conn, inside, scan="forward") is None
        assert set_at(conn, inside, scan="backward") is None
        assert set_at(conn, BinlogPosition("binlog.999999", 4)) is None
