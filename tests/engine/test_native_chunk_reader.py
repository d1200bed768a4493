"""The native chunk reader (connectorx in its own consistent read view): the same Arrow as the pure-Python
reader, its fallbacks said once, an empty chunk's position, DDL before its high watermark, a KILL, a time
limit, and never a password in its errors. Every type and character set is compared in the conformance suite
(its ``native`` phase), and its reads under concurrent writes in the conformance pipeline, which reads
with the native reader."""
from __future__ import annotations

import logging
import random
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.engine.chunks.planner import plan_table
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ServerUnavailable
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.snapshot.native_read import date_guard, session
from airflow_provider_mysqlcdc.engine.snapshot.native_read.select import NativeSelect
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions
from airflow_provider_mysqlcdc.engine.snapshot.read_view import WATERMARK_DDL
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.limits import SourceLimits
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

SEED = 1717
# these read in MariaDB's consistent snapshot (the view's own binlog point, the chunk streamed as it is read,
# the session's state between reads); Oracle MySQL's watermark-table reads are tested below and in conformance
CONSISTENT_SNAPSHOT_ONLY = pytest.mark.mariadb_only
WIDE = """CREATE TABLE t (
  id INT PRIMARY KEY, u BIGINT UNSIGNED, i8 TINYINT, d DECIMAL(12,2), wide DECIMAL(40,12), \
fine DECIMAL(30,15),
  f FLOAT, g DOUBLE, dt DATETIME(3), d0 DATE, ts TIMESTAMP(6) NULL, tm TIME(2), y YEAR, b BIT(64), b3 BIT(3),
  s VARCHAR(20) CHARACTER SET latin1, k VARCHAR(20) CHARACTER SET sjis, e ENUM('a','b','é'), \
st SET('x','y','z'),
  bn BINARY(4), bl BLOB, pt POINT NULL, uu UUID NULL, ip INET6 NULL, tx TEXT)"""


@pytest.fixture(autouse=True)
def native_reader(monkeypatch):
    monkeypatch.setenv(CHUNK_READER_ENV, "native")


def _values(rng: random.Random, i: int) -> tuple:
    pick = rng.random
    zero = pick() < 0.15
    return (
        i, rng.choice([None, 0, 2**64 - 1, rng.randrange(2**64)]), rng.randrange(-128, 128),
        f"{rng.randrange(-10**10, 10**10) / 100:.2f}",
        f"{rng.randrange(-10**27, 10**27)}.{rng.randrange(10**12):012d}",
        f"0.{rng.randrange(10**15):015d}", rng.choice([1.1, -0.0, 3.4e38, None]), rng.random() * 1e300,
        "0000-00-00 00:00:00" if zero
        else f"20{rng.randrange(10, 30)}-0{rng.randrange(1, 10)}-1{rng.randrange(10)} "
        f"0{rng.randrange(10)}:1{rng.randrange(10)}:22.{rng.randrange(1000):03d}",
        rng.choice(["2020-00-15", "0000-01-01", "2021-02-31", "1999-12-31"]) if pick() < 0.3
        else "2024-02-29",
        None if pick() < 0.2 else "0000-00-00 00:00:00" if zero else "2021-06-01 12:00:00.5",
        rng.choice(["-838:59:59.99", "838:59:59", "-00:00:00.5", "12:34:56.78", None]),
        rng.choice([0, 1901, 2155]), rng.randrange(2**64), rng.randrange(8),
        rng.choice(["é", "Ã©", "plain", ""]), rng.choice(["日本", "ｱ", "x"]),
        rng.choice(["a", "b", "é", ""]), rng.choice(["", "x", "z,x", "x,y,z"]),
        rng.randbytes(rng.randrange(5)), rng.randbytes(rng.randrange(40)), None,
        None if pick() < 0.5 else "123e4567-e89b-12d3-a456-426614174000",
        rng.choice([None, "::ffff:1.2.3.4", "2001:db8::1"]), rng.choice(["😀 emoji", "", "trailing  ", None]),
    )


@pytest.fixture
def wide(mysql_server, server_flavor, mysql_db) -> tuple[MySQLSettings, TableId]:
    rng = random.Random(SEED)
    ddl = WIDE if server_flavor == "mariadb" else (  # MariaDB's own types: their text on Oracle MySQL
        WIDE.replace("uu UUID NULL", "uu CHAR(36) NULL").replace("ip INET6 NULL", "ip VARCHAR(39) NULL"))
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(ddl)
        cur.executemany(f"INSERT INTO t VALUES ({', '.join(['%s'] * 25)})",
                        [_values(rng, i) for i in range(600)])
        cur.execute("UPDATE t SET pt = POINT(id, -id) WHERE id % 3 = 0")
        conn.commit()
    return MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "t")


def _plan(settings: MySQLSettings, table: TableId, chunk_size: int):
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    return schema, plan_table(lambda: connect(settings), table, 1, chunk_size=chunk_size)


def _read_all(settings, schema, plan, options=None) -> tuple[pa.Table, list[ChunkRead]]:
    reads, batches = [], []
    for chunk in plan.chunks:
        read = ChunkRead(settings, schema, plan, chunk, options)
        batches += list(read.batches())
        reads.append(read)
    return pa.Table.from_batches(batches), reads


def test_native_reads_the_same_arrow_as_the_python_reader(wide, server_flavor, monkeypatch):
    settings, table = wide
    schema, plan = _plan(settings, table, chunk_size=150)
    assert len(plan.chunks) >= 4
    monkeypatch.setenv(CHUNK_READER_ENV, "python")
    want, python_reads = _read_all(settings, schema, plan)
    monkeypatch.setenv(CHUNK_READER_ENV, "native")
    got, native_reads = _read_all(settings, schema, plan, ChunkReadOptions(batch_rows=64))
    assert {r.result.reader for r in python_reads} == {"python"}
    assert {r.result.reader for r in native_reads} == {"native"}
    assert got.schema == want.schema
    # each watermark-table read (Oracle MySQL's) writes markers of its own: its position is its own too
    own_positions = server_flavor == "mysql"
    for name in want.schema.names:
        if not (own_positions and name == "_position"):
            assert got.column(name).combine_chunks().equals(want.column(name).combine_chunks()), name
    if not own_positions:
        assert ([r.result.high_watermark for r in native_reads]
                == [r.result.high_watermark for r in python_reads])
    assert want.num_rows == 600 and want.column("d0__zero_date").null_count < 600


def test_fallbacks_are_said_once_per_table(mysql_server, mysql_db, monkeypatch, caplog):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE w (id INT PRIMARY KEY, s VARCHAR(10) CHARACTER SET ucs2)")
        cur.executemany("INSERT INTO w VALUES (%s, %s)", [(i, f"é{i}") for i in range(40)])
    settings, table = MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "w")
    schema, plan = _plan(settings, table, chunk_size=10)
    with caplog.at_level(logging.INFO, logger="airflow_provider_mysqlcdc.engine.snapshot.native_read.choice"):
        _, reads = _read_all(settings, schema, plan)
    assert {r.result.reader for r in reads} == {"python"}
    said = [r.getMessage() for r in caplog.records if "pure-Python reader" in r.getMessage()]
    assert len(said) == 1 and "'s' is ucs2" in said[0] and str(table) in said[0], said
    # a rows/s budget is kept by the pure-Python reader, which paces what the server sends
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE r (id INT PRIMARY KEY)")
        cur.executemany("INSERT INTO r VALUES (%s)", [(i,) for i in range(20)])
    schema, plan = _plan(settings, TableId(mysql_db, "r"), chunk_size=100)
    limited = ChunkReadOptions(limits=SourceLimits(rows_per_second=1000.0))
    assert {r.result.reader for r in _read_all(settings, schema, plan, limited)[1]} == {"python"}
    assert {r.result.reader for r in _read_all(settings, schema, plan)[1]} == {"native"}
    monkeypatch.setenv(CHUNK_READER_ENV, "python")
    assert {r.result.reader for r in _read_all(settings, schema, plan)[1]} == {"python"}
    monkeypatch.setenv(CHUNK_READER_ENV, "fast")
    with pytest.raises(CdcError, match=f"{CHUNK_READER_ENV}='fast': give one of native, python"):
        _read_all(settings, schema, plan)


@CONSISTENT_SNAPSHOT_ONLY
def test_an_empty_chunk_gets_its_position_from_a_fresh_view(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE e (id INT PRIMARY KEY)")
        cur.executemany("INSERT INTO e VALUES (%s)", [(i,) for i in range(300)])
    settings, table = MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "e")
    schema, plan = _plan(settings, table, chunk_size=100)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM e WHERE id >= 100 AND id < 200")  # chunk 1's range, after planning
    read = ChunkRead(settings, schema, plan, plan.chunks[1])
    assert sum(b.num_rows for b in read.batches()) == 0
    assert read.result.high_watermark is not None and read.result.reader == "python"
    with mysql_server.admin() as conn:
        end = binlog_end(conn)
    assert (read.result.high_watermark.file, read.result.high_watermark.pos) == (end.file, end.pos)


def _dated(mysql_server, db: str) -> tuple[MySQLSettings, TableId]:
    """400 rows of valid dates, then the odd ones: a zero DATETIME and an invalid DATE (ALLOW_INVALID_DATES)
    in the middle of chunk 2, a year-0 DATE in the middle of chunk 3, a zero TIMESTAMP as chunk 1's first
    row."""
    rng = random.Random(SEED)
    with mysql_server.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute("CREATE TABLE dz (id INT PRIMARY KEY, d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, "
                    "v INT)")
        cur.executemany("INSERT INTO dz VALUES (%s, %s, %s, %s, %s)", [
            (i, f"{rng.randrange(1, 9999):04d}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
             f"{rng.randrange(1000, 9999)}-0{rng.randrange(1, 10)}-1{rng.randrange(0, 10)} 12:34:56.{i:06d}",
             None if i % 7 == 0 else f"20{rng.randrange(10, 37)}-05-06 07:08:09.{i:06d}", i)
            for i in range(400)])
        cur.execute("UPDATE dz SET dt = '0000-00-00 00:00:00' WHERE id = 250")
        cur.execute("UPDATE dz SET d = '2024-02-31' WHERE id = 260")
        cur.execute("UPDATE dz SET d = '0000-03-04' WHERE id = 350")
        cur.execute("UPDATE dz SET ts = '0000-00-00 00:00:00' WHERE id = 100")
        conn.commit()
    return MySQLSettings.from_url(mysql_server.cdc_url), TableId(db, "dz")


def _python_read(settings, schema, plan, chunk, monkeypatch) -> pa.Table:
    monkeypatch.setenv(CHUNK_READER_ENV, "python")
    try:
        return pa.Table.from_batches(list(ChunkRead(settings, schema, plan, chunk).batches()))
    finally:
        monkeypatch.setenv(CHUNK_READER_ENV, "native")


@CONSISTENT_SNAPSHOT_ONLY
def test_dates_are_read_as_they_are_until_an_unfit_one_shows(mysql_server, mysql_db, monkeypatch):
    """A table's dates go to connectorx unguarded (the guard costs the server ~half its rate) until a zero,
    invalid or year-0 date shows: in a read's first batch, the read goes again with the guard by itself; after
    rows were handed out, it raises ZeroDateSeen and a second read (``read_again_if_zero_date``) serves. Every
    read equals the pure-Python reader's, value by value."""
    settings, table = _dated(mysql_server, mysql_db)
    schema, plan = _plan(settings, table, chunk_size=100)
    assert len(plan.chunks) == 4
    monkeypatch.setenv(CHUNK_READER_ENV, "native")
    small = ChunkReadOptions(batch_rows=16)
    sqls: list[str] = []
    real_init = NativeSelect.__init__

    def remember(self, settings, sql, *args):
        sqls.append(sql)
        real_init(self, settings, sql, *args)

    monkeypatch.setattr(NativeSelect, "__init__", remember)
    name = str(table)

    def native(chunk_id: int) -> tuple[pa.Table, ChunkRead]:
        read = ChunkRead(settings, schema, plan, plan.chunks[chunk_id], small)
        return pa.Table.from_batches(list(read.batches())), read

    def same_as_python(got: pa.Table, chunk_id: int) -> None:
        want = _python_read(settings, schema, plan, plan.chunks[chunk_id], monkeypatch)
        assert got.schema == want.schema and got.num_rows == want.num_rows == 100
        for column in want.schema.names:
            assert got.column(column).combine_chunks().equals(want.column(column).combine_chunks()), column

    got, read = native(0)  # valid dates only: no guard, one SELECT
    assert read.result.reader == "native" and not date_guard.guarded(name)
    assert len(sqls) == 1 and "YEAR(" not in sqls[0]
    same_as_python(got, 0)

    got, read = native(1)  # a zero TIMESTAMP in the first batch: read again with the guard, by itself
    assert read.result.reader == "native" and date_guard.guarded(name)
    assert len(sqls) == 3 and "YEAR(" not in sqls[1] and "YEAR(" in sqls[2]
    assert got.column("ts__zero_date").to_pylist()[0] == "0000-00-00 00:00:00.000000"
    same_as_python(got, 1)

    monkeypatch.setattr(date_guard, "_guarded", set())  # a fresh process: the table not known yet
    with pytest.raises(date_guard.ZeroDateSeen,
                       match=r"dz chunk 2: connectorx could not read a date.*read the chunk again"):
        native(2)  # the zero DATETIME is in the read's fourth batch
    assert date_guard.guarded(name)
    got, _ = native(2)
    assert sorted(v for v in got.column("dt__zero_date").to_pylist() if v) == ["0000-00-00 00:00:00.000000"]
    same_as_python(got, 2)

    monkeypatch.setattr(date_guard, "_guarded", set())
    with pytest.raises(date_guard.ZeroDateSeen, match="column 'd' holds a date of year 0"):
        native(3)  # connectorx returns year 0 as a date: the read's check finds it, in the fourth batch
    monkeypatch.setattr(date_guard, "_guarded", set())
    got, read = date_guard.read_again_if_zero_date(lambda: native(3))  # what a consumer of a read does
    assert read.result.reader == "native" and date_guard.guarded(name)
    assert got.column("d__zero_date").to_pylist().count("0000-03-04") == 1
    same_as_python(got, 3)
    with mysql_server.admin() as conn, conn.cursor() as cur:  # the reads given up left no session behind
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                    "WHERE INFO LIKE '%%mysqlcdc-read-%%' AND ID <> CONNECTION_ID()")
        assert cur.fetchone()[0] == 0


def test_watermark_mode_selects_natively_and_corrects_the_rows_by_key(mysql_server, mysql_db, monkeypatch):
    """Watermark-table mode (what Oracle MySQL uses): connectorx SELECTs the chunk between the two markers,
    and the binlog events between them replace, by primary key, the rows they touched: an update, a delete, an
    insert, a key moved within the chunk and one moved out of it, a zero date written between the markers. The
    chunk equals the source as of its HW (nothing else writes), value by value, as the pure-Python reader's
    watermark read does; a table without a primary key stays with the pure-Python reader."""
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE wmk (id INT PRIMARY KEY, v VARCHAR(20), d DATETIME(3), n DECIMAL(10, 2))")
        cur.executemany("INSERT INTO wmk VALUES (%s, %s, %s, %s)",
                        [(i, f"v{i}", f"2024-01-02 03:04:05.{i % 1000:03d}", i / 4)
                         for i in range(0, 900, 3)])
        cur.execute("CREATE TABLE nopk (id INT, v INT, KEY (id))")
        cur.executemany("INSERT INTO nopk VALUES (%s, %s)", [(i % 50, i) for i in range(120)])
        conn.commit()
    wm = TableId(mysql_db, "mysqlcdc_watermark")
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(WATERMARK_DDL.format(table=wm.quoted))
        cur.execute(f"GRANT INSERT, UPDATE ON {wm.quoted} TO 'cdc'@'%'")
    settings, table = MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "wmk")
    schema, plan = _plan(settings, table, chunk_size=100)
    chunk = plan.chunks[1]  # ids in [start, end): the writes below stay in it, but for the key moved out
    low, high = chunk.start[0], chunk.end[0]
    ids = [i for i in range(0, 900, 3) if low <= i < high]
    assert len(plan.chunks) == 3 and len(ids) > 20
    options = ChunkReadOptions(mode="watermark_table", watermark_table=wm, server_id=5460)
    real_read_all = NativeSelect.read_all
    writes = [
        ("UPDATE wmk SET v = 'changed' WHERE id = %s", (ids[0],)),
        ("DELETE FROM wmk WHERE id = %s", (ids[1],)),
        ("INSERT INTO wmk VALUES (%s, 'new', '0000-00-00 00:00:00', 1.5)", (ids[0] + 1,)),
        ("UPDATE wmk SET id = %s WHERE id = %s", (ids[2] + 1, ids[3])),  # a key moved within the chunk
        ("UPDATE wmk SET id = %s WHERE id = %s", (10_000, ids[4])),  # ... and out of it
    ]

    def select_then_write(self):
        batches = real_read_all(self)
        if "wmk" in self.sql:  # between the LW marker and the HW marker
            with mysql_server.admin(mysql_db) as admin, admin.cursor() as cur:
                cur.execute("SET SESSION sql_mode = ''")
                for sql, args in writes:
                    cur.execute(sql, args)
                admin.commit()
        return batches

    monkeypatch.setattr(NativeSelect, "read_all", select_then_write)
    monkeypatch.setenv(CHUNK_READER_ENV, "native")
    read = ChunkRead(settings, schema, plan, chunk, options)
    got = pa.Table.from_batches(list(read.batches()))
    assert read.result.reader == "native" and read.result.mode == "watermark_table"
    assert (read.result.backfill_events >= len(writes)
            and read.result.low_watermark < read.result.high_watermark)
    monkeypatch.setenv(CHUNK_READER_ENV, "python")
    writes.clear()
    want = pa.Table.from_batches(list(ChunkRead(settings, schema, plan, chunk, options).batches()))
    assert got.schema == want.schema

    def rows(t: pa.Table) -> list[tuple]:
        return sorted(values.python_rows(t, schema, schema.column_names))

    assert rows(got) == rows(want)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM wmk WHERE id >= %s AND id < %s ORDER BY id", (low, high))
        assert [r[0] for r in rows(got)] == [r[0] for r in cur.fetchall()]
    by_id = {r[0]: r for r in rows(got)}
    assert by_id[ids[0]][1] == "changed" and ids[1] not in by_id and ids[4] not in by_id
    assert by_id[ids[0] + 1][2] == "0000-00-00 00:00:00.000" and ids[2] + 1 in by_id and ids[3] not in by_id

    monkeypatch.setenv(CHUNK_READER_ENV, "native")
    nopk_table = TableId(mysql_db, "nopk")
    with connect(settings) as conn:
        nopk_schema = load_schema(conn, nopk_table)
    nopk_plan = plan_table(lambda: connect(settings), nopk_table, 1, chunk_size=1000, chunk_key="id")
    nopk = ChunkRead(settings, nopk_schema, nopk_plan, nopk_plan.chunks[0], options)
    assert sum(b.num_rows for b in nopk.batches()) == 120 and nopk.result.reader == "python"


@CONSISTENT_SNAPSHOT_ONLY
def test_a_column_added_before_the_native_view_is_in_every_record(wide, mysql_server, monkeypatch):
    """DDL after the schema was loaded and before the view's point (HW): the columns are compared once the
    first rows arrived, and the chunk is read again with the new column."""
    settings, table = wide
    schema, plan = _plan(settings, table, chunk_size=150)
    opened = []
    real_open = NativeSelect.open

    def open_after_ddl(self):
        if not opened:
            with mysql_server.admin(table.database) as admin, admin.cursor() as cur:
                cur.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5")
        opened.append(self.tag)
        return real_open(self)

    monkeypatch.setattr(NativeSelect, "open", open_after_ddl)
    date_guard.guard(str(table), "the table holds zero dates")  # one read per view: none fails on a zero date
    read = ChunkRead(settings, schema, plan, plan.chunks[0])
    rows = pa.Table.from_batches(list(read.batches()))
    assert len(opened) == 2 and read.result.reader == "native"
    assert rows.column("c").to_pylist() == [5] * read.result.rows and read.result.rows > 0
    with mysql_server.admin() as conn, conn.cursor() as cur:  # the given-up first read left no session behind
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s "
                    "AND ID <> CONNECTION_ID()", (f"%{opened[0]}%",))
        assert cur.fetchone()[0] == 0


# connectorx holds the GIL while it opens its read (docs/development.md): a test cannot watch a blocked native
# read from a thread of its own process, so the KILL comes from another process.
KILLER = """
import sys, time, pymysql
conn = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", autocommit=True)
deadline = time.monotonic() + 30
with conn.cursor() as cur:
    while time.monotonic() < deadline:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST \
WHERE INFO LIKE 'SELECT /* mysqlcdc-read-%%' "
                    "AND ID <> CONNECTION_ID()")
        found = cur.fetchall()
        if found:
            cur.execute("KILL %s", (found[0][0],))
            print("killed")
            break
        time.sleep(0.05)
"""


@pytest.fixture
def locked_table(mysql_server, mysql_db):
    """Table k, write-locked by another session: a chunk SELECT on it waits for the lock."""
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.executemany("INSERT INTO k VALUES (%s, %s)", [(i, f"v{i}") for i in range(500)])
    settings, table = MySQLSettings.from_url(mysql_server.cdc_url), TableId(mysql_db, "k")
    schema, plan = _plan(settings, table, chunk_size=10**6)
    locker = mysql_server.admin(mysql_db)
    locker.cursor().execute("LOCK TABLES k WRITE")
    yield settings, schema, plan, locker
    locker.close()


@CONSISTENT_SNAPSHOT_ONLY
def test_a_killed_native_read_fails_clearly_and_reruns(mysql_server, locked_table):
    settings, schema, plan, locker = locked_table
    killer = subprocess.Popen([sys.executable, "-c", KILLER, str(mysql_server.port)], stdout=subprocess.PIPE,
                              text=True)
    # the bound, should the KILL not come
    options = ChunkReadOptions(limits=SourceLimits(query_timeout_s=60.0))
    with pytest.raises(ServerUnavailable) as caught:
        for _ in ChunkRead(settings, schema, plan, plan.chunks[0], options).batches():
            pass
    assert killer.communicate(timeout=60)[0].strip() == "killed"
    assert "chunk 0: the connection to MySQL was lost during the read" in str(caught.value)
    assert "rerun it" in str(caught.value)
    locker.cursor().execute("UNLOCK TABLES")
    again = ChunkRead(settings, schema, plan, plan.chunks[0])
    assert sum(b.num_rows for b in again.batches()) == 500 and again.result.reader == "native"


def test_a_native_select_over_the_time_limit_is_stopped_with_a_clear_error(locked_table):
    settings, schema, plan, _ = locked_table
    options = ChunkReadOptions(limits=SourceLimits(query_timeout_s=1.0))
    started = time.monotonic()
    with pytest.raises(CdcError, match=r"per-query time limit \(1s, query_timeout\)"):
        for _ in ChunkRead(settings, schema, plan, plan.chunks[0], options).batches():
            pass
    assert time.monotonic() - started < 30


def _connections(admin) -> int:
    with admin.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        return int(cur.fetchone()[1])


@CONSISTENT_SNAPSHOT_ONLY
def test_reads_of_one_task_share_one_session_and_a_failed_read_drops_it(wide, mysql_server, mysql_db):
    """A Spark task's reads run their checks on one MySQL session (plus connectorx's own per read), with the
    same records as reads with a session each; a read that fails closes it, and the next read opens a new
    one."""
    settings, table = wide
    schema, plan = _plan(settings, table, chunk_size=150)
    date_guard.guard(str(table), "the table holds zero dates")  # no read opens connectorx twice
    with mysql_server.admin(mysql_db) as admin, ReadSessions() as sessions:
        before = _connections(admin)
        want, _ = _read_all(settings, schema, plan)  # a session of its own each
        own = _connections(admin) - before
        before = _connections(admin)
        batches = []
        for chunk in plan.chunks:
            read = ChunkRead(settings, schema, plan, chunk, session=sessions.for_settings(settings))
            batches += list(read.batches())
            assert read.result.reader == "native"
        assert own - (_connections(admin) - before) == len(plan.chunks) - 1  # connectorx's own are as many
        got = pa.Table.from_batches(batches)
        assert got.schema == want.schema
        for name in want.schema.names:
            assert got.column(name).combine_chunks().equals(want.column(name).combine_chunks()), name
        session = sessions.for_settings(settings)
        assert session.connected
        with admin.cursor() as cur:
            cur.execute("LOCK TABLES t WRITE")
            try:
                limited = ChunkReadOptions(limits=SourceLimits(query_timeout_s=1.0))
                with pytest.raises(CdcError, match="time limit"):
                    list(ChunkRead(settings, schema, plan, plan.chunks[0], limited,
                                   session=session).batches())
            finally:
                cur.execute("UNLOCK TABLES")
        assert not session.connected
        again = ChunkRead(settings, schema, plan, plan.chunks[0], session=session)
        first = sum(1 for c in want.column("_chunk_id").to_pylist() if c == plan.chunks[0].chunk_id)
        assert sum(b.num_rows for b in again.batches()) == first > 0 and session.connected


@CONSISTENT_SNAPSHOT_ONLY
def test_a_shared_session_keeps_what_it_learned_and_asks_again_when_it_changes(wide, mysql_server, mysql_db,
                                                                               monkeypatch):
    """A shared session sets the time limit once and asks the GTID position at HW once per HW: reads with no
    write between them share the HW and its position; a committed write moves the HW and the position is asked
    again; another time limit is set again. Every recorded position is the server's own answer for its HW."""
    from airflow_provider_mysqlcdc.engine.binlog.gtid import gtid_position_at
    from airflow_provider_mysqlcdc.engine.snapshot import read_session

    settings, table = wide
    schema, plan = _plan(settings, table, chunk_size=150)
    asked: list = []
    real = read_session.hw_server
    monkeypatch.setattr(read_session, "hw_server",
                        lambda conn, info, hw: asked.append(hw) or real(conn, info, hw))

    def read(chunk, options=None) -> ChunkRead:
        one = ChunkRead(settings, schema, plan, chunk, options, session=shared)
        assert sum(b.num_rows for b in one.batches()) > 0 and one.result.reader == "native"
        return one

    with mysql_server.admin(mysql_db) as admin, ReadSessions() as sessions:
        shared = sessions.for_settings(settings)
        quiet = [read(c) for c in plan.chunks[:2]]
        with admin.cursor() as cur:  # a write between two reads: a later HW
            cur.execute("CREATE TABLE bump (id INT AUTO_INCREMENT PRIMARY KEY)")
            cur.execute("INSERT INTO bump VALUES ()")
        admin.commit()
        moved = read(plan.chunks[2], ChunkReadOptions(limits=SourceLimits(query_timeout_s=5.0)))
        conn, _ = shared.open()
        with conn.cursor() as cur:
            cur.execute("SELECT @@max_statement_time")
            assert float(cur.fetchone()[0]) == 5.0
        last = read(plan.chunks[3])
        with conn.cursor() as cur:
            cur.execute("SELECT @@max_statement_time")
            assert float(cur.fetchone()[0]) == SourceLimits().query_timeout_s
        results = [r.result for r in (*quiet, moved, last)]
        hws = [r.high_watermark for r in results]
        assert hws[1] < hws[2] <= hws[3]  # reads with no write between them (unless another session wrote)
        assert asked == [hw for i, hw in enumerate(hws) if i == 0 or hws[i - 1] != hw]
        for result in results:
            assert result.hw_gtid_position == str(gtid_position_at(admin, result.high_watermark, "mariadb"))
        assert results[0].hw_gtid_position != results[2].hw_gtid_position


def test_errors_and_urls_keep_the_password_out():
    settings = MySQLSettings(host="db", port=3306, user="cdc", password="p@ss/w:rd")
    url = session.connectorx_url(settings)
    assert "p%40ss%2Fw%3Ard" in url and "tcp_user_timeout_ms=900000" in url
    exc = RuntimeError(f"timed out waiting for connection to {url}: "
                       "MySqlError { ERROR 1045 (28000): denied }")
    text = session.error_text(exc, settings)
    assert "p@ss" not in text and "p%40ss" not in text and text == "1045: denied"
    leaked = RuntimeError(f"cannot parse {url} nor p@ss/w:rd")
    assert ("p@ss" not in session.error_text(leaked, settings)
            and "p%40ss" not in session.error_text(leaked, settings))
    assert session.is_lost_connection("cx writer failed: Source(MySQLError(CodecError { IO error: `x' }))")
    assert not session.is_lost_connection("MySqlError { ERROR 1054 (42S22): Unknown column 'v' in 'SELECT' }")
