"""The binlog reader on a real server: decoding equals SELECT, exact resume, rotation, loud failures."""
from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterable, Iterator

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowChange, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.ddl import statement_tables
from airflow_provider_mysqlcdc.engine.binlog.errors import (
    BinlogPurged,
    BinlogReadError,
    CompressedEvent,
    OffsetMismatch,
    ReadTimeout,
    ResnapshotRequired,
    UnsupportedEvent,
)
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.model.values import select_list, snapshot_normalizer
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)

# --- helpers ------------------------------------------------------------------------------------------------


def status(conn) -> BinlogPosition:
    return binlog_end(conn)


def execute(conn, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def reader_for(server, db: str, tables: Iterable[str], slot: int = 0) -> BinlogReader:
    settings = MySQLSettings.from_url(server.cdc_url)
    ids = [TableId(db, t) for t in tables]
    with server.admin(db) as admin:
        schemas = {t: load_schema(admin, t) for t in ids}
    return BinlogReader(settings, allocate_server_id(settings, slot), set(ids), schemas)


def snapshot(server, table: TableId) -> dict:
    """The table as the snapshot phase reads it, by primary key."""
    settings = MySQLSettings.from_url(server.cdc_url)
    with connect(settings) as conn, conn.cursor() as cur:
        schema = load_schema(conn, table)
        cur.execute(f"SELECT {select_list(schema)} FROM {table.quoted}")
        normalize = snapshot_normalizer(schema)
        rows = [dict(zip(schema.column_names, normalize(r))) for r in cur.fetchall()]
    return {r[schema.primary_key[0]]: r for r in rows}


def take(iterator: Iterator, n: int) -> list:
    items = list(itertools.islice(iterator, n))
    iterator.close()  # a consumer that stops early: the reader must close its stream
    return items


def identity(change: RowChange) -> tuple:
    return change.table, change.op, change.values, change.key, change.binlog_file, change.commit_ts


# --- server ids ---------------------------------------------------------------------------------------------


def test_allocate_server_id_reserves_the_top_id_for_check():
    settings = MySQLSettings.from_url("mysql://cdc@db:3306/?server_id=5400-5409")
    assert [allocate_server_id(settings, s) for s in (0, 1, 8)] == [5400, 5401, 5408]
    for slot in (9, 10, -1):
        with pytest.raises(ConfigurationError, match="slot"):
            allocate_server_id(settings, slot)
    with pytest.raises(ConfigurationError, match="reserved"):
        allocate_server_id(MySQLSettings.from_url("mysql://cdc@db/?server_id=7"), 0)
    assert allocate_server_id(MySQLSettings.from_url("mysql://cdc@db/?server_id=7-8"), 0) == 7


# --- decoding -----------------------------------------------------------------------------------------------


def test_insert_update_delete_decode_like_select(mysql_server, mysql_db):
    table = TableId(mysql_db, "items")
    with mysql_server.admin(mysql_db) as admin:
        execute(
            admin,
            "CREATE TABLE items (id BIGINT UNSIGNED PRIMARY KEY, name VARCHAR(50), price DECIMAL(10,2), "
            "seen TIMESTAMP(3) NULL DEFAULT NULL, flags SET('x','y','z'), raw BINARY(3), t TIME(6))",
        )
        start = status(admin)
        execute(
            admin,
            "INSERT INTO items VALUES (18446744073709551615, 'max \U0001F600', -12.50, "
            "'2024-03-10 10:00:00.5', 'z,x', x'01', '-01:02:03.25'), "
            "(1, 'one', 0.01, NULL, '', x'000102', NULL), "
            "(2, NULL, 99999999.99, '1999-12-31 23:59:59', 'y', NULL, '00:00:00')",
        )
        after_insert = snapshot(mysql_server, table)
        execute(admin, "UPDATE items SET price = price * 2, flags = 'x,y', t = '-00:00:00.5' WHERE id <> 2")
        after_update = snapshot(mysql_server, table)
        execute(admin, "DELETE FROM items WHERE id = 2")
        end = status(admin)
        with admin.cursor() as cur:
            cur.execute("SELECT UTC_TIMESTAMP()")
            server_now = cur.fetchone()[0]

    reader = reader_for(mysql_server, mysql_db, ["items"])
    changes = list(reader.read(BinlogOffset.at(start), end))
    assert [c.op for c in changes] == ["+I"] * 3 + ["-U", "+U"] * 2 + ["-D"]
    assert [c.values for c in changes[:3]] == [after_insert[2**64 - 1], after_insert[1], after_insert[2]]
    for before, after in (changes[3:5], changes[5:7]):
        key = before.values["id"]
        assert before.values == after_insert[key] and after.values == after_update[key]
        assert before.key[:3] == after.key[:3] and (before.key[3], after.key[3]) == (0, 1)
    assert changes[7].values == after_update[2]
    assert [c.key for c in changes] == sorted(c.key for c in changes) and len({c.key for c in changes}) == 8
    assert all(c.table == table and c.binlog_file == start.file for c in changes)
    for change in changes:
        assert change.commit_ts.utcoffset().total_seconds() == 0
        assert abs((change.commit_ts.replace(tzinfo=None) - server_now).total_seconds()) < 120
    assert changes[-1].offset_after.position == end and changes[-1].offset_after.at_boundary
    assert reader.last_offset.position == end
    record = changes[0].to_record()
    assert record.phase == "stream" and record.table == str(table) and record.key == changes[0].key


def test_large_multi_row_transaction(mysql_server, mysql_db):
    rng = random.Random(5000)
    rows = [(i, f"row-{i}-{rng.randrange(10**9)}", rng.randrange(-1000, 1000)) for i in range(1, 5001)]
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE big (id INT PRIMARY KEY, a VARCHAR(40), b INT)")
        start = status(admin)
        admin.begin()
        with admin.cursor() as cur:
            cur.executemany("INSERT INTO big VALUES (%s, %s, %s)", rows)
        admin.commit()
        end = status(admin)
    changes = list(reader_for(mysql_server, mysql_db, ["big"]).read(BinlogOffset.at(start), end))
    assert [tuple(c.values.values()) for c in changes] == rows
    assert {c.op for c in changes} == {"+I"} and len({c.commit_ts for c in changes}) == 1
    events = {c.key[1] for c in changes}
    assert len(events) > 10  # many rows events, each with many rows
    assert all(c.offset_after.pos == start.pos and not c.offset_after.at_boundary for c in changes[:-1])
    assert changes[-1].offset_after == BinlogOffset.at(end, gtid=changes[-1].offset_after.gtid)


# --- exact resume -------------------------------------------------------------------------------------------


@pytest.fixture
def workload(mysql_server, mysql_db):
    """Captured t1, t2 and a non-captured table: one big mixed transaction, updates, a rotation, deletes."""
    rng = random.Random(42)
    with mysql_server.admin(mysql_db) as admin:
        execute(
            admin,
            "CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR(30), n INT)",
            "CREATE TABLE t2 (k VARCHAR(10) PRIMARY KEY, payload TEXT)",
            "CREATE TABLE other (id INT PRIMARY KEY, x INT)",
        )
        start = status(admin)
        admin.begin()
        with admin.cursor() as cur:
            for chunk in range(4):  # interleave captured and non-captured rows events in one transaction
                ids = range(chunk * 300 + 1, chunk * 300 + 301)
                t1_rows = [(i, f"v{rng.random()}", i) for i in ids]
                t2_rows = [(f"k{chunk}-{j}", "p" * rng.randrange(300)) for j in range(15)]
                cur.executemany("INSERT INTO t1 VALUES (%s, %s, %s)", t1_rows)
                cur.executemany("INSERT INTO other VALUES (%s, %s)", [(i, i) for i in ids])
                cur.executemany("INSERT INTO t2 VALUES (%s, %s)", t2_rows)
            cur.execute("UPDATE t1 SET n = -n WHERE id % 10 = 0")
        admin.commit()
        execute(admin, "UPDATE t1 SET n = n + 1, v = CONCAT(v, '!') WHERE id % 3 = 0")
        for i in range(5):
            execute(admin, f"UPDATE other SET x = x + 1 WHERE id = {i + 1}")
        execute(admin, "FLUSH BINARY LOGS")
        admin.begin()
        execute(admin, "DELETE FROM t1 WHERE id > 1100", "INSERT INTO other VALUES (5000, 1)",
                "UPDATE t2 SET payload = 'changed' WHERE k LIKE 'k1-%'")
        admin.commit()
        admin.begin()
        execute(admin, "INSERT INTO t1 VALUES (9999, 'rolled back', 0)")
        admin.rollback()
        for i in range(20):
            execute(admin, f"INSERT INTO t1 VALUES ({10000 + i}, 'tail', {i})")
        end = status(admin)
    return start, end


def test_exact_resume_from_random_cut_points(mysql_server, mysql_db, workload):
    start, end = workload
    reader = reader_for(mysql_server, mysql_db, ["t1", "t2"])
    full = list(reader.read(BinlogOffset.at(start), end))
    assert len(full) == 1200 + 60 + 120 * 2 + 400 * 2 + 100 + 15 * 2 + 20
    assert len({c.binlog_file for c in full}) == 2  # the rotation is inside the range
    assert not any(c.values.get("v") == "rolled back" for c in full)
    assert [c.key for c in full] == sorted(c.key for c in full)

    rng = random.Random(7)
    cuts: list[BinlogOffset] = []
    for _chain in range(3):
        offset, got = BinlogOffset.at(start), []
        while True:
            n = rng.choice([1, 2, 3, rng.randint(1, 120), rng.randint(100, 900)])
            items = take(reader.read(offset, end), n)
            if not items:
                break
            got.extend(items)
            offset = items[-1].offset_after
            cuts.append(offset)
        assert [identity(c) for c in got] == [identity(c) for c in full]
        assert [c.offset_after for c in got] == [c.offset_after for c in full]
    assert any(o.skip_rows > 0 for o in cuts) and any(o.skip_events > 0 for o in cuts)

    # explicit cut points: between the halves of an update, inside one rows event, at a transaction's end
    between = next(i for i, c in enumerate(full) if c.op == "-U")
    inside = next(i for i, c in enumerate(full) if c.offset_after.skip_rows > 5)
    boundary = next(i for i, c in enumerate(full) if c.offset_after.at_boundary)
    for i in (between, inside, boundary, len(full) - 2):
        resumed = take(reader.read(full[i].offset_after, end), 3)
        assert [identity(c) for c in resumed] == [identity(c) for c in full[i + 1 : i + 4]]
    assert list(reader.read(full[-1].offset_after, end)) == []


def test_rotation_and_heartbeats(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY)")
        start = status(admin)
        execute(admin, "INSERT INTO b VALUES (1)", "INSERT INTO a VALUES (1)", "FLUSH BINARY LOGS")
        rotated = status(admin)
        execute(admin, "INSERT INTO b VALUES (2)", "INSERT INTO a VALUES (2)")
        end = status(admin)
    reader = reader_for(mysql_server, mysql_db, ["a"])
    items = list(reader.read_with_heartbeats(BinlogOffset.at(start), end))
    changes = [i for i in items if isinstance(i, RowChange)]
    beats = [i.offset for i in items if isinstance(i, Heartbeat)]
    assert [c.values["id"] for c in changes] == [1, 2]
    assert changes[0].binlog_file == start.file and changes[1].binlog_file == rotated.file
    assert BinlogOffset(rotated.file, 4) in [BinlogOffset(b.file, b.pos) for b in beats]
    assert beats[0].position < changes[0].offset_after.position  # the insert into b moved the offset on
    assert reader.last_offset.position == end
    # resuming from the heartbeat in the new file reads on from there
    resumed = list(reader.read(BinlogOffset(rotated.file, 4), end))
    assert [identity(c) for c in resumed] == [identity(changes[1])]


def test_rollbacks_produce_nothing(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE r (id INT PRIMARY KEY)")
        start = status(admin)
        admin.begin()
        execute(admin, "INSERT INTO r VALUES (1), (2)")
        admin.rollback()
        admin.begin()
        execute(admin, "INSERT INTO r VALUES (3)", "SAVEPOINT s1")
        execute(admin, "INSERT INTO r VALUES (4)", "ROLLBACK TO s1")
        admin.commit()
        end = status(admin)
    changes = list(reader_for(mysql_server, mysql_db, ["r"]).read(BinlogOffset.at(start), end))
    assert [(c.op, c.values) for c in changes] == [("+I", {"id": 3})]


def test_non_transactional_tables_commit_with_a_query_event(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE m (id INT PRIMARY KEY, v VARCHAR(5)) ENGINE=MyISAM")
        start = status(admin)
        execute(admin, "INSERT INTO m VALUES (1, 'a'), (2, 'b')", "UPDATE m SET v = 'c' WHERE id = 2")
        end = status(admin)
    changes = list(reader_for(mysql_server, mysql_db, ["m"]).read(BinlogOffset.at(start), end))
    assert [(c.op, c.values["id"]) for c in changes] == [("+I", 1), ("+I", 2), ("-U", 2), ("+U", 2)]
    assert changes[-1].offset_after.position == end


# --- DDL ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "verb", "refs"),
    [
        ("ALTER TABLE t ADD COLUMN x INT", "ALTER", [(None, "t")]),
        ("alter online ignore table `d`.`t``x` add index (a)", "ALTER", [("d", "t`x")]),
        ("ALTER TABLE a EXCHANGE PARTITION p0 WITH TABLE d.b", "ALTER", [(None, "a"), ("d", "b")]),
        ("ALTER TABLE a RENAME COLUMN x TO y", "ALTER", [(None, "a")]),
        ("ALTER TABLE a RENAME TO b", "ALTER", [(None, "a"), (None, "b")]),
        ("DROP TABLE IF EXISTS `a`,d.b /* generated by server */", "DROP", [(None, "a"), ("d", "b")]),
        ("/* c */ TRUNCATE TABLE t", "TRUNCATE", [(None, "t")]),
        ("TRUNCATE d.t", "TRUNCATE", [("d", "t")]),
        ("RENAME TABLE a TO b, d.c TO d.e", "RENAME", [(None, "a"), (None, "b"), ("d", "c"), ("d", "e")]),
        ("CREATE OR REPLACE TABLE t (id INT) SELECT * FROM src", "CREATE", [(None, "t")]),
        ("CREATE TABLE IF NOT EXISTS x LIKE t", "CREATE", [(None, "x")]),
        ("CREATE UNIQUE INDEX i ON d.t (a)", "CREATE", [("d", "t")]),
        ("DROP INDEX i ON t", "DROP", [(None, "t")]),
        ("DROP DATABASE IF EXISTS d", "DROP", [("d", None)]),
        ("CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @a = 1", "CREATE", []),
        ("CREATE VIEW v AS SELECT * FROM t", "CREATE", []),
        ("GRANT SELECT ON d.t TO u", "GRANT", []),
        ("/*!40000 ALTER TABLE `t` DISABLE KEYS */", "ALTER", [(None, "t")]),
    ],
)
def test_statement_tables(sql, verb, refs):
    assert statement_tables(sql) == (verb, refs)


def test_statement_based_dml_names_every_table_it_may_change():
    verb, refs = statement_tables("INSERT INTO d.t (a) SELECT 'x.y' FROM `s` -- d.nope\n")
    assert verb == "INSERT" and ("d", "t") in refs and (None, "s") in refs and ("d", "nope") not in refs


def test_ddl_on_other_tables_is_ignored(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY)")
        start = status(admin)
        execute(
            admin,
            "CREATE TABLE other (id INT PRIMARY KEY, cap INT)",
            "INSERT INTO cap VALUES (1)",
            "ALTER TABLE other ADD COLUMN y INT",
            "CREATE INDEX i_cap ON other (cap)",
            "TRUNCATE TABLE other",
            "RENAME TABLE other TO other2",
            "INSERT INTO cap VALUES (2)",
            "CREATE TABLE copy_of_cap LIKE cap",
            "DROP TABLE other2, copy_of_cap",
            "CREATE DATABASE IF NOT EXISTS `" + mysql_db + "_x`",
            "DROP DATABASE `" + mysql_db + "_x`",
        )
        end = status(admin)
    items = list(reader_for(mysql_server, mysql_db, ["cap"]).read(BinlogOffset.at(start), end))
    assert [c.values["id"] for c in items] == [1, 2]


@pytest.mark.parametrize(
    "ddl",
    [
        "TRUNCATE TABLE cap",
        "RENAME TABLE cap TO cap_old",
        "DROP TABLE cap",
        "ALTER TABLE other EXCHANGE PARTITION p0 WITH TABLE cap",
        "ALTER TABLE cap ADD COLUMN ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
        "ALTER TABLE cap MODIFY id BIGINT",
    ],
)
def test_ddl_that_changes_rows_without_row_events_needs_a_new_snapshot(mysql_server, mysql_db, ddl):
    with mysql_server.admin(mysql_db) as admin:
        execute(
            admin,
            "CREATE TABLE cap (id INT PRIMARY KEY, v INT)",
            "CREATE TABLE other (id INT PRIMARY KEY, v INT) "
            "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN MAXVALUE)",
        )
        start = status(admin)
        execute(admin, "INSERT INTO cap VALUES (1, 1)")
        before_ddl = status(admin)
        reader = reader_for(mysql_server, mysql_db, ["cap"])  # the schema as snapshotted, before the DDL
        covered = reader_for(mysql_server, mysql_db, ["cap"])
        execute(admin, ddl)
        after_ddl = status(admin)
        if not ddl.startswith(("DROP", "RENAME", "TRUNCATE")) and "EXCHANGE" not in ddl:
            execute(admin, "INSERT INTO cap (id, v) VALUES (2, 2)")
        end = status(admin)
    got = []
    with pytest.raises(ResnapshotRequired) as info:
        for change in reader.read(BinlogOffset.at(start), end):
            got.append(change)  # noqa: PERF402 - keeps the changes read before the raise
    message = str(info.value)
    assert [c.values["id"] for c in got] == [1]  # everything before the DDL was emitted
    assert f"{mysql_db}.cap" in message and f"{before_ddl.file}:{before_ddl.pos}" in message
    assert ("snapshotted again" in message and "mysqlcdc plan --tables" in message
            and ddl.split()[0] in message)
    assert info.value.table.table == "cap" and info.value.position == after_ddl
    assert reader.last_offset.position == before_ddl
    # A plan made at or after the DDL covers it: the stream passes it (and decodes what follows).
    covered.replanned = {info.value.table: after_ddl}
    items = list(covered.read_with_heartbeats(BinlogOffset.at(start), end))
    ddl_items = [i for i in items if isinstance(i, SchemaChange)]
    assert len(ddl_items) == 1 and ddl_items[0].ddl.resnapshot
    assert next(c.values["id"] for c in items if isinstance(c, RowChange)) == 1


def test_column_ddl_is_followed_with_the_schema_of_each_event(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY, v INT, w VARCHAR(10))")
        reader = reader_for(mysql_server, mysql_db, ["cap"])  # schema taken before every change
        start = status(admin)
        execute(
            admin,
            "INSERT INTO cap VALUES (1, 1, 'a')",
            "ALTER TABLE cap ADD COLUMN five INT NOT NULL DEFAULT 5 AFTER id",
            "INSERT INTO cap VALUES (2, 7, 2, 'b')",
            "ALTER TABLE cap ADD COLUMN first_col VARCHAR(3) FIRST",
            "UPDATE cap SET first_col = 'x' WHERE id = 1",
            "ALTER TABLE cap DROP COLUMN v",
            "ALTER TABLE cap RENAME COLUMN w TO w2, MODIFY five BIGINT NOT NULL DEFAULT 5",
            "INSERT INTO cap VALUES ('y', 3, 9000000000, 'c')",
            "CREATE INDEX i_w2 ON cap (w2)",
            "DELETE FROM cap WHERE id = 2",
        )
        end = status(admin)
    items = list(reader.read_with_heartbeats(BinlogOffset.at(start), end))
    changes = [i for i in items if isinstance(i, RowChange)]
    ddl = [i for i in items if isinstance(i, SchemaChange)]
    assert [list(c.values) for c in changes] == [
        ["id", "v", "w"],
        ["id", "five", "v", "w"],
        ["first_col", "id", "five", "v", "w"], ["first_col", "id", "five", "v", "w"],
        ["first_col", "id", "five", "w2"],
        ["first_col", "id", "five", "w2"],
    ]
    assert changes[1].values == {"id": 2, "five": 7, "v": 2, "w": "b"}
    assert changes[4].values == {"first_col": "y", "id": 3, "five": 9000000000, "w2": "c"}
    assert changes[4].schema.column("five").data_type == "bigint"
    assert len({c.schema.schema_id for c in changes}) == 4
    assert [d.ddl.changes.added for d in ddl[:2]] == [{"five": "5"}, {"first_col": None}]
    assert ddl[2].ddl.changes.dropped == ("v",)
    assert ddl[3].ddl.changes.renamed == {"w": "w2"} and ddl[3].ddl.changes.modified == ("five",)
    assert all(d.ddl.resnapshot is None for d in ddl) and len(ddl) == 5
    assert [d.key for d in ddl] == sorted(d.key for d in ddl)


# --- XA -----------------------------------------------------------------------------------------------------


def test_xa_transactions(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)")
        start = status(admin)
        execute(admin, "XA START 'one'", "INSERT INTO cap VALUES (1)", "XA END 'one'")
        execute(admin, "XA COMMIT 'one' ONE PHASE")
        execute(admin, "XA START 'o'", "INSERT INTO other VALUES (1)", "XA END 'o'")
        execute(admin, "XA PREPARE 'o'", "XA COMMIT 'o'")
        middle = status(admin)
        execute(admin, "XA START 'two'", "INSERT INTO cap VALUES (2)", "XA END 'two'", "XA PREPARE 'two'",
                "XA COMMIT 'two'")
        end = status(admin)
    reader = reader_for(mysql_server, mysql_db, ["cap"])
    assert [c.values for c in reader.read(BinlogOffset.at(start), middle)] == [{"id": 1}]
    with pytest.raises(UnsupportedEvent, match=r"XA transaction.*two.*not supported"):
        list(reader.read(BinlogOffset.at(middle), end))


# --- start, end and time bounds -----------------------------------------------------------------------------


def _event_positions(admin, start: BinlogPosition) -> list[tuple[str, int, int]]:
    with admin.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s", (start.file, start.pos))
        return [(str(r[2]), int(r[1]), int(r[4])) for r in cur.fetchall()]  # (type, start, end)


def test_bad_start_and_end_positions_fail_loudly(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY)")
        start = status(admin)
        admin.begin()
        execute(admin, "INSERT INTO cap VALUES (1)", "INSERT INTO cap VALUES (2)")
        admin.commit()
        end = status(admin)
        events = _event_positions(admin, start)
    reader = reader_for(mysql_server, mysql_db, ["cap"])
    table_map = next(s for kind, s, _ in events if kind == "Table_map")
    with pytest.raises(OffsetMismatch, match="outside a transaction"):
        list(reader.read(BinlogOffset(start.file, table_map), end))
    with pytest.raises(OffsetMismatch, match="beyond the end"):
        list(reader.read(BinlogOffset(start.file, end.pos + 10_000_000)))
    future = f"{start.file.rsplit('.', 1)[0]}.{int(start.file.rsplit('.', 1)[1]) + 1000:06d}"
    with pytest.raises(OffsetMismatch, match="newer than the newest"):
        list(reader.read(BinlogOffset(future, 4)))
    with pytest.raises(BinlogReadError):
        list(reader.read(BinlogOffset(start.file, table_map + 3), end))
    first_rows_end = next(e for kind, _, e in events if kind in ("Write_rows_v1", "Write_rows"))
    with pytest.raises(OffsetMismatch, match="inside the transaction"):
        list(reader.read(BinlogOffset.at(start), BinlogPosition(start.file, first_rows_end)))
    with pytest.raises(OffsetMismatch, match="only"):  # skips more row images than the event has
        list(reader.read(BinlogOffset(start.file, start.pos, 0, 5), end))
    with pytest.raises(OffsetMismatch, match="more rows events"):
        list(reader.read(BinlogOffset(start.file, start.pos, 7, 0), end))


def test_reads_are_bounded_in_time(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY)")
        start = status(admin)
        execute(admin, "INSERT INTO cap VALUES (1)")
        now = status(admin)
    reader = reader_for(mysql_server, mysql_db, ["cap"])

    t0 = time.monotonic()
    assert [c.values["id"] for c in reader.read(BinlogOffset.at(start))] == [1]  # stops at the current end
    assert time.monotonic() - t0 < 10

    # a blocking read with nothing new returns at its timeout, having emitted nothing
    wait_s = 0.8  # the blocking reads' timeout: what the test waits out
    t0 = time.monotonic()
    assert list(reader.read(BinlogOffset.at(now), blocking=True, timeout=wait_s)) == []
    assert wait_s - 0.1 < time.monotonic() - t0 < 8

    # a blocking read sees a change written while it waits
    def write_later() -> None:
        time.sleep(0.4)
        with mysql_server.admin(mysql_db) as other:
            execute(other, "INSERT INTO cap VALUES (2)")

    writer = threading.Thread(target=write_later)
    writer.start()
    got = take(reader.read(BinlogOffset.at(now), blocking=True, timeout=20), 1)
    writer.join()
    assert [c.values["id"] for c in got] == [2]

    beyond = BinlogPosition(now.file, now.pos + 10_000)
    with pytest.raises(BinlogReadError, match="before the requested end"):
        list(reader.read(BinlogOffset.at(start), beyond))
    with pytest.raises(ReadTimeout):
        list(reader.read(BinlogOffset.at(start), beyond, blocking=True, timeout=wait_s))


def test_a_dropped_stream_connection_resumes_where_it_was(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE cap (id INT PRIMARY KEY)")
        start = status(admin)
        execute(admin, "INSERT INTO cap VALUES (1)")
    reader = reader_for(mysql_server, mysql_db, ["cap"], slot=7)

    def kill_then_write() -> None:
        with mysql_server.admin(mysql_db) as other, other.cursor() as cur:
            deadline = time.monotonic() + 20
            dumps: tuple = ()
            while not dumps and time.monotonic() < deadline:  # the reader's dump is running: cut it
                time.sleep(0.05)
                cur.execute(
                    "SELECT ID FROM information_schema.PROCESSLIST "
                    "WHERE COMMAND LIKE 'Binlog Dump%%' AND USER = 'cdc'"
                )
                dumps = cur.fetchall()
            for (thread_id,) in dumps:
                cur.execute(f"KILL {int(thread_id)}")
            time.sleep(0.3)
            cur.execute("INSERT INTO cap VALUES (2)")

    killer = threading.Thread(target=kill_then_write)
    killer.start()
    got = take(reader.read(BinlogOffset.at(start), blocking=True, timeout=20), 2)
    killer.join()
    assert [c.values["id"] for c in got] == [1, 2]  # nothing lost or repeated across the reconnect


# --- destructive settings on a private server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def capture_server(private_server):
    """A server of the module's own, of the test's flavor: these tests purge binlogs and change settings."""
    with private_server.admin() as admin:
        execute(admin, "CREATE DATABASE p", "CREATE TABLE p.cap (id INT PRIMARY KEY, doc TEXT)")
    return private_server


def test_purged_start_file_names_the_way_out(capture_server):
    with capture_server.admin("p") as admin:
        start = status(admin)
        execute(admin, "INSERT INTO cap VALUES (1, 'a')", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
        oldest = status(admin).file
        deadline = time.monotonic() + 20
        while True:  # MariaDB keeps files until its binlog checkpoint moves on: retry for a moment
            execute(admin, f"PURGE BINARY LOGS TO '{oldest}'")
            with admin.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                if [r[0] for r in cur.fetchall()] == [oldest] or time.monotonic() > deadline:
                    break
            time.sleep(0.05)
    reader = reader_for(capture_server, "p", ["cap"])
    with pytest.raises(BinlogPurged) as info:
        list(reader.read(BinlogOffset.at(start)))
    message = str(info.value)
    assert start.file in message and oldest in message and "Re-snapshot" in message


def test_compressed_binlog_events_are_refused(capture_server, server_flavor):
    """MariaDB's log_bin_compress (global) and MySQL's binlog_transaction_compression (one session's
    transactions in a TRANSACTION_PAYLOAD event): the read stops naming the setting, never skips them."""
    setting = "log_bin_compress" if server_flavor == "mariadb" else "binlog_transaction_compression"
    with capture_server.admin("p") as admin:
        start = status(admin)
        if server_flavor == "mariadb":
            execute(admin, "SET GLOBAL log_bin_compress = ON")
    try:
        with capture_server.admin("p") as writer:
            if server_flavor == "mysql":
                execute(writer, "SET SESSION binlog_transaction_compression = ON")
            execute(writer, "INSERT INTO cap VALUES (2, REPEAT('compress me ', 200))")
            end = status(writer)
    finally:
        if server_flavor == "mariadb":
            with capture_server.admin("p") as admin:
                execute(admin, "SET GLOBAL log_bin_compress = OFF")
    with pytest.raises(CompressedEvent, match=setting):
        list(reader_for(capture_server, "p", ["cap"]).read(BinlogOffset.at(start), end))


# --- throughput ---------------------------------------------------------------------------------------------


def test_throughput_raw_vs_reader(mysql_server, mysql_db):
    """Not a pass/fail check: prints row changes per second of raw mysql-replication and of our reader."""
    total = 50_000
    with mysql_server.admin(mysql_db) as admin:
        execute(
            admin,
            "CREATE TABLE bench "
            "(id INT PRIMARY KEY, a INT, b VARCHAR(32), c DECIMAL(10,2), d DATETIME, e DOUBLE)",
        )
        start = status(admin)
        with admin.cursor() as cur:
            for batch in range(0, total, 5000):
                admin.begin()
                rows = [
                    (i, i * 7, f"name-{i}", f"{i % 1000}.25", "2024-01-02 03:04:05", i / 3)
                    for i in range(batch, batch + 5000)
                ]
                cur.executemany("INSERT INTO bench VALUES (%s, %s, %s, %s, %s, %s)", rows)
                admin.commit()
        end = status(admin)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)

    t0 = time.perf_counter()
    raw = 0
    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(), server_id=allocate_server_id(settings, 2),
        resume_stream=True, blocking=False, log_file=start.file, log_pos=start.pos, is_mariadb=False,
        filter_non_implemented_events=False, enable_logging=False,
    )
    try:
        for event in stream:
            if isinstance(event, ROWS_EVENTS) and event.table == "bench":
                raw += len(event.rows)
            if event.packet.log_pos >= end.pos and event.packet.log_pos != 0 and stream.log_file == end.file:
                break
    finally:
        stream.close()
    raw_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    reader = reader_for(mysql_server, mysql_db, ["bench"], slot=3)
    ours = sum(1 for _ in reader.read(BinlogOffset.at(start), end))
    our_seconds = time.perf_counter() - t0
    assert raw == ours == total
    print(
        f"\nthroughput over {total} row changes: raw mysql-replication {raw / raw_seconds:,.0f} rows/s "
        f"({raw_seconds:.2f} s); BinlogReader {ours / our_seconds:,.0f} rows/s ({our_seconds:.2f} s)"
    )
