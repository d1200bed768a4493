"""Schema changes while the pipeline runs: the stream follows column DDL, snapshots a table again after DDL
that changes rows without row events, and the mirror (read as consumers do) equals the source after each.

Seeded writers change the tables throughout; DDL lands while stream runs are in progress (a thread applies
it, each statement after a volume of writes, every third after a new batch: ``tests/spark/pacing.py``), and
one ADD COLUMN lands between two chunk groups of the snapshot phase. Writers and DDL are paced by volume and
batches, never by time, so a slow machine does no more work.
"""

from __future__ import annotations

import random

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import read_changelog
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.lake.schema_history import read_schema_history, schema_version
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.plugins import status_page
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import (
    StreamFailed,
    mirror_refresh,
    run_stream,
    snapshot_table,
)
from tests.spark.pacing import CountingHook, DdlSteps
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.workload import SingleRowWriters

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

SEED = 31
STEP = 20  # writer statements before each DDL statement (and before each snapshot call)
AFTER_DDL = 800  # writer statements after the last one
STREAM_DDL = [
    "ALTER TABLE t_evolve ADD COLUMN five INT NOT NULL DEFAULT 5 AFTER id",
    "ALTER TABLE t_evolve ADD COLUMN f0 VARCHAR(5) FIRST",
    "ALTER TABLE t_evolve MODIFY a BIGINT",
    "ALTER TABLE t_evolve DROP COLUMN c",
    "ALTER TABLE t_evolve RENAME COLUMN b TO b2",
    "ALTER TABLE t_evolve ADD COLUMN note VARCHAR(8) NOT NULL DEFAULT 'it''s'",
    "TRUNCATE TABLE t_trunc",
    # an online schema change tool's cut-over (gh-ost, pt-osc): a copy with a new column replaces the table
    "CREATE TABLE t_trunc_new LIKE t_trunc",
    "ALTER TABLE t_trunc_new ADD COLUMN extra INT",
    "INSERT INTO t_trunc_new (id, a) SELECT id, a FROM t_trunc",
    "RENAME TABLE t_trunc TO t_trunc_old, t_trunc_new TO t_trunc",
    # partition operations change rows without row events too
    "ALTER TABLE t_part TRUNCATE PARTITION p0",
    "ALTER TABLE t_part EXCHANGE PARTITION p0 WITH TABLE x_swap",
    "ALTER TABLE t_part DROP PARTITION p1",
    "ALTER TABLE t_evolve ADD COLUMN d DECIMAL(8,3) DEFAULT 1.5",
]


def _setup(server, db: str) -> None:
    rng = random.Random(SEED)
    with server.admin(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t_evolve (id INT PRIMARY KEY, a INT, b VARCHAR(20), c DECIMAL(6,2))")
        cur.execute("CREATE TABLE t_trunc (id INT PRIMARY KEY, a INT)")
        cur.executemany(
            "INSERT INTO t_evolve VALUES (%s, %s, %s, %s)",
            [(i, rng.randrange(1000), f"b{i}", f"{rng.randrange(9999) / 100:.2f}") for i in range(1, 301)],
        )
        cur.executemany("INSERT INTO t_trunc VALUES (%s, %s)", [(i, i) for i in range(1, 121)])
        cur.execute(
            "CREATE TABLE t_part (id INT PRIMARY KEY, a INT) PARTITION BY RANGE (id) "
            "(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200), "
            "PARTITION p2 VALUES LESS THAN MAXVALUE)"
        )
        cur.executemany("INSERT INTO t_part VALUES (%s, %s)", [(i, i) for i in range(1, 251)])
        cur.execute("CREATE TABLE x_swap (id INT PRIMARY KEY, a INT)")  # not captured (outside t_*)
        cur.executemany("INSERT INTO x_swap VALUES (%s, %s)", [(i, -i) for i in range(1, 51)])


def _config(server, db, tmp_path, settings: MySQLSettings, **kw) -> StreamConfig:
    options = {
        "mysql_url": settings.url_without_password(),
        "tables": (f"{db}.t_*",),
        "chunk_store": str(tmp_path / "chunks.db"),
        "output": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "ckpt"),
        "password_file": password_file(tmp_path, settings),
        "max_bytes_per_batch": 30_000,
        "lock_lease_seconds": 20.0,
    }
    options.update(kw)
    return StreamConfig(**options)


def _snapshot(spark, config: StreamConfig, table: TableId, chunk_ids=None) -> None:
    result = snapshot_table(spark, config, table, chunk_ids)
    assert result.ok, result


def _assert_exact(settings: MySQLSettings, output: str, tables: list[TableId], min_rows: int = 50) -> None:
    """Mirror == source, over every column the source has now (none missing, none left over)."""
    with connect(settings) as conn:
        for table in tables:
            assert read_mirror(output, table).column_names == load_schema(conn, table).column_names, table
    assert_mirror_equals_source(settings, output, tables, min_rows=min_rows)


def test_column_ddl_and_truncate_while_streaming_keep_the_mirror_exact(
    mysql_server, mysql_db, tmp_path, spark
):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    _setup(mysql_server, mysql_db)
    evolve, trunc, part = (TableId(mysql_db, t) for t in ("t_evolve", "t_trunc", "t_part"))
    config = _config(mysql_server, mysql_db, tmp_path, settings)
    writers = SingleRowWriters(
        lambda: mysql_server.admin(mysql_db), ("t_evolve", "t_trunc", "t_part"), "a", SEED, weights=(3, 1, 1),
        limit=STEP,
    ).start()
    try:
        with ChunkStore(config.chunk_store) as store:
            plan_tables(settings, store, [f"{mysql_db}.t_*"], chunk_size=80)
            plan = load_plan(store, evolve)
        # the snapshot phase: one ADD COLUMN between two chunk groups of t_evolve
        ids = [c.chunk_id for c in plan.chunks]
        writers.allow(STEP)
        _snapshot(spark, config, evolve, tuple(ids[: len(ids) // 2]))
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute("ALTER TABLE t_evolve ADD COLUMN during_snapshot INT NOT NULL DEFAULT 7")
        writers.allow(STEP)
        _snapshot(spark, config, evolve, tuple(ids[len(ids) // 2 :]))
        writers.allow(STEP)
        _snapshot(spark, config, trunc)

        # the stream phase: DDL lands while available-now runs are in progress, writes in between
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur, mirror_refresh(config) as hook:
            counted = CountingHook(hook)
            # after the DDL, enough writes that the re-created t_trunc holds 50+ rows (1 in 12 statements
            # inserts into it)
            ddl = DdlSteps(STREAM_DDL, cur.execute, writers, counted, STEP, after=AFTER_DDL, batch_every=3)
            ddl.start()
            runs = 0
            while ddl.is_alive() or runs < 2:
                run_stream(spark, config, on_batch_committed=counted)
                runs += 1
                assert runs < 40, "the DDL thread did not finish"
            ddl.join_and_check()
            writers.wait_for(writers.limit or 0)
            changes = sum(writers.stop().values())
            run_stream(spark, config, on_batch_committed=counted)
    finally:
        writers.stop()
    assert changes > 200, changes
    _assert_exact(settings, config.output, [evolve, trunc, part])

    # what the output says about it: the schema history, the re-snapshot, the changelog's columns
    history = read_schema_history(config.output, evolve)
    assert [e.changes.added for e in history if e.changes.added] == [
        {"during_snapshot": "7"},
        {"five": "5"},
        {"f0": None},
        {"note": "'it''s'"},
        {"d": "1.5"},
    ]
    assert schema_version(history) == 1 + 8
    with ChunkStore(config.chunk_store) as store:
        # one new snapshot covers every such DDL that came before it was planned
        assert store.plan(str(trunc)).generation >= 2, "TRUNCATE and RENAME did not re-snapshot t_trunc"
        assert store.plan(str(evolve)).generation == 1, "column DDL must not re-snapshot t_evolve"
        assert store.plan(str(part)).generation >= 2, "partition operations did not re-snapshot t_part"
        schema = load_schema_of(settings, evolve)
    changelog = read_changelog(config.output, schema)
    assert {"b", "b2", "c", "five", "f0", "during_snapshot"} <= set(changelog.column_names)
    # status (CLI and UI) shows the schema version each table is in
    with ChunkStore(config.chunk_store) as store:
        report = collect_status(store, config.output, [evolve, trunc])
    by_name = {t.table: t for t in report.tables}
    assert by_name[str(evolve)].schema_version == 9 and "DECIMAL(8,3)" in by_name[str(evolve)].last_ddl
    assert by_name[str(trunc)].schema_version == 1 and "RENAME TABLE" in by_name[str(trunc)].last_ddl
    assert "v9" in report.render() and "snapshotted again" in report.render()
    page = status_page._table_details(by_name[str(evolve)])  # the UI's section of the table
    assert 'data-field="schema_version">9<' in page and "DECIMAL(8,3)" in page


def test_truncate_with_resnapshot_off_stops_with_what_to_do(mysql_server, mysql_db, tmp_path, spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    _setup(mysql_server, mysql_db)
    config = _config(
        mysql_server, mysql_db, tmp_path, settings, tables=(f"{mysql_db}.t_trunc",), resnapshot=False
    )
    trunc = TableId(mysql_db, "t_trunc")
    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(trunc)], chunk_size=80)
    _snapshot(spark, config, trunc)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t_trunc SET a = 0 WHERE id = 1")
        cur.execute("TRUNCATE TABLE t_trunc")
        cur.execute("INSERT INTO t_trunc VALUES (1, 1)")
    with pytest.raises(StreamFailed) as info:
        run_stream(spark, config)
    message = str(info.value)
    assert "TRUNCATE" in message and str(trunc) in message and "snapshotted again" in message
    assert f"mysqlcdc plan --tables {trunc}" in message and "restart the stream" in message
    # doing what it says gets the stream past the TRUNCATE
    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(trunc)], chunk_size=80)
    _snapshot(spark, config, trunc)
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
    _assert_exact(settings, config.output, [trunc], min_rows=1)


def load_schema_of(settings: MySQLSettings, table: TableId):
    with connect(settings) as conn:
        return load_schema(conn, table)
