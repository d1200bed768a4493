"""The Spark stream follows DDL into the mirror with Delta's schema evolution, and excluded columns stay out
of both Delta tables whatever DDL renames or adds around them (issue 19, part 3).

Seeded writers change rows throughout; DDL lands while available-now runs are in progress, each statement
after a volume of writes, every second one after a new batch (``tests/spark/pacing.py``): paced by volume and
batches, never by time, so a slow machine does no more work.
"""

from __future__ import annotations

import random
from dataclasses import replace as replace_config
from datetime import UTC
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import changelog_dir, changelog_marker, read_json
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream, snapshot_table
from tests.spark.pacing import CountingHook, DdlSteps
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.workload import SingleRowWriters

SEED = 191
STEP = 10  # writer statements before each DDL statement
SECRETS = ("secret", "secret2")
DDL = [
    "ALTER TABLE t_ev ADD COLUMN extra INT",  # NULL for existing rows: no rewrite
    "UPDATE t_ev SET extra = id * 3 WHERE id % 4 = 0",
    "ALTER TABLE t_ev RENAME COLUMN secret TO secret2",  # an excluded column renamed: excluded still
    "UPDATE t_ev SET secret2 = 'leak-after-rename' WHERE id % 3 = 0",
    "ALTER TABLE t_ev DROP COLUMN secret2",
    "ALTER TABLE t_ev ADD COLUMN secret VARCHAR(20)",  # the excluded name added back: excluded too
    "UPDATE t_ev SET secret = 'leak-after-add' WHERE id % 5 = 0",
]


def _config(tmp_path, settings: MySQLSettings, db: str) -> StreamConfig:
    return StreamConfig(
        mysql_url=settings.url_without_password(),
        tables=(f"{db}.t_ev",),
        chunk_store=str(tmp_path / "chunks.db"),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings),
        max_bytes_per_batch=30_000,
        lock_lease_seconds=20.0,
        exclude_columns={f"{db}.t_ev": ("secret",)},
    )


def _delta_names(uri: str, version: int | None = None) -> list[str]:
    return pa.schema(DeltaTable(uri, version=version).schema().to_arrow()).names


def test_added_column_and_excluded_column_ddl_while_streaming(mysql_server, mysql_db, tmp_path, spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    rng = random.Random(SEED)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t_ev (id INT PRIMARY KEY, a INT, secret VARCHAR(20), note VARCHAR(20))")
        cur.executemany("INSERT INTO t_ev VALUES (%s, %s, %s, %s)",
                        [(i, rng.randrange(1000), f"pw{i}", f"n{i}") for i in range(1, 401)])
    table = TableId(mysql_db, "t_ev")
    config = _config(tmp_path, settings, mysql_db)
    writers = SingleRowWriters(lambda: mysql_server.admin(mysql_db), ("t_ev",), "a", SEED, limit=STEP).start()
    try:
        with ChunkStore(config.chunk_store) as store:
            plan_tables(settings, store, [str(table)], chunk_size=80)
        assert snapshot_table(spark, config, table).ok
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur, mirror_refresh(config) as hook:
            counted = CountingHook(hook)
            run_stream(spark, config, on_batch_committed=counted)
            version_before = DeltaTable(mirror_table_uri(config.output, table)).version()

            def apply(statement: str) -> None:
                cur.execute(statement)
                conn.commit()

            # every UPDATE lands a batch after the DDL before it: the ADD COLUMN's batch leaves chunks
            # unchanged (a batch that rewrites every chunk replaces the mirror's Delta table instead)
            thread = DdlSteps(DDL, apply, writers, counted, STEP, batch_every=2)
            thread.start()
            runs = 0
            while thread.is_alive() or runs < 1:
                run_stream(spark, config, on_batch_committed=counted)
                runs += 1
                assert runs < 40, "the DDL thread did not finish"
            thread.join_and_check()
            writers.wait_for(writers.limit or 0)
            changes = sum(writers.stop().values())
            run_stream(spark, config, on_batch_committed=counted)
    finally:
        writers.stop()
    assert changes > 50, changes

    # the mirror equals the source over its columns (none excluded is there), read through manifest and Delta
    assert_mirror_equals_source(settings, config.output, [table], min_rows=300)
    mirror_uri, changelog_uri = (mirror_table_uri(config.output, table),
                                 changelog_table_uri(config.output, table))
    manifest = read_manifest(config.output, table)
    assert "extra" in manifest.columns and not set(SECRETS) & set(manifest.columns)
    assert "extra" in _delta_names(mirror_uri) and not set(SECRETS) & set(_delta_names(mirror_uri))
    assert not set(SECRETS) & set(_delta_names(changelog_uri)), _delta_names(changelog_uri)
    for batch_id in committed_batch_ids(config.output, table):  # no changelog file holds them either
        for name in read_json(changelog_marker(config.output, table, batch_id))["files"]:
            names = pq.read_schema(Path(changelog_dir(config.output, table, batch_id)) / name).names
            assert not set(SECRETS) & set(names), (batch_id, names)
    delta = DeltaTable(mirror_uri).to_pyarrow_table()
    assert not any("leak" in str(v) for column in delta.columns for v in column.to_pylist())

    # no DDL here needed a rewrite of the mirror (the excluded column's are not its): an ADD COLUMN commit,
    # no overwrite; the version before it reads the old columns
    history = list(reversed(DeltaTable(mirror_uri).history()))
    operations = [(h["operation"], (h.get("operationParameters") or {}).get("mode")) for h in history]
    assert ("ADD COLUMN", None) in operations[version_before + 1:], operations
    assert all(mode != "Overwrite" for _, mode in operations[1:]), operations
    assert "extra" not in _delta_names(mirror_uri, version_before)


def test_a_renamed_excluded_column_never_reaches_a_changelog_file(mysql_server, mysql_db, tmp_path):
    """The sink's pieces without Spark: a partition that reads ``RENAME COLUMN secret TO secret2`` before
    rows leaves secret2 out; a partition of the same batch that starts after the rename (parallel catch-up)
    cannot know it, so the driver refuses the batch before its markers, and the replay (the rename now in the
    schema history) leaves it out everywhere."""
    from datetime import datetime

    import pytest

    from airflow_provider_mysqlcdc.engine.binlog.changes import SchemaChange
    from airflow_provider_mysqlcdc.engine.binlog.ddl import table_ddl
    from airflow_provider_mysqlcdc.engine.common.errors import CdcError
    from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
    from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
    from airflow_provider_mysqlcdc.engine.model.records import Record
    from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from airflow_provider_mysqlcdc.engine.stream.transport import stream_batches
    from airflow_provider_mysqlcdc.spark.stream.changelog_sink import ChangelogSink, PartitionWriter
    from airflow_provider_mysqlcdc.spark.stream.config import written_schemas

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "t_ev")
    rename = "ALTER TABLE t_ev RENAME COLUMN secret TO secret2"
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t_ev (id INT PRIMARY KEY, secret VARCHAR(20), a INT)")
    with connect(settings) as conn:
        v1 = load_schema(conn, table)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(rename)
    with connect(settings) as conn:
        v2 = load_schema(conn, table)
    now = datetime.now(UTC)

    def record(i: int, schema, secret_name: str) -> Record:
        return Record(str(table), "+I", "stream", (7, 1000 + i, 0, 1),
                      {"id": i, secret_name: f"pw{i}", "a": i}, commit_ts=now, binlog_file="mysql-bin.000007",
                      schema_id=schema.schema_id)

    change = SchemaChange(table, (7, 1500, 0, 0), "mysql-bin.000007", now, table_ddl(rename, ("id",)),
                          BinlogOffset.at(BinlogPosition("mysql-bin.000007", 1500)))
    before, after = ([record(i, v1, "secret") for i in range(3)],
                     [record(i, v2, "secret2") for i in range(600, 603)])
    versions = {v1.schema_id: v1, v2.schema_id: v2}
    root, exclude = str(tmp_path / "out"), {str(table): ("secret",)}

    def write(batch_id: int, attempt: str, partition_exclude, records, changes) -> list[tuple]:
        writer = PartitionWriter(root, batch_id, attempt, {str(table): v1}, exclude=partition_exclude)
        batches = list(stream_batches(records, schemas=versions, schema_changes=changes))
        out = pa.Table.from_batches(list(writer(iter(batches))))
        return [tuple(r.values()) for r in out.to_pylist()]

    def columns_written(batch_id: int) -> set[str]:
        folder = Path(changelog_dir(root, table, batch_id))
        return {n for f in folder.glob("*.parquet") for n in pq.read_schema(f).names}

    # one partition reads the rename, then rows in the new columns: secret2 left out
    sink = ChangelogSink(root, {table: v1}, str(tmp_path / "ckpt"), exclude=exclude)
    results = write(0, "a0", sink._exclusions(), before + after, [change])
    assert {"id", "a"} <= columns_written(0) and not {"secret", "secret2"} & columns_written(0)
    sink.commit(0, "a0", results, replay=False)

    # a parallel catch-up batch: the rename in its first partition, later rows in the second
    root = str(tmp_path / "out2")  # a fresh output: no schema history yet
    sink = ChangelogSink(root, {table: v1}, str(tmp_path / "ckpt2"), exclude=exclude)
    first = write(0, "b0", sink._exclusions(), before, [change])
    second = write(0, "b0", sink._exclusions(), after, [])
    assert "secret2" in columns_written(0)  # the second partition could not know
    with pytest.raises(CdcError, match="secret2"):
        sink.commit(0, "b0", first + second, replay=False)
    assert not Path(changelog_marker(root, table, 0)).exists()  # nothing committed
    # the replay: the rename is in the schema history now, every partition leaves secret2 out
    for f in Path(changelog_dir(root, table, 0)).glob("*.parquet"):
        f.unlink()
    replay = ChangelogSink(root, {table: v1}, str(tmp_path / "ckpt2"), exclude=exclude)
    assert replay._exclusions() == {str(table): ("secret", "secret2")}
    results = (write(0, "b1", replay._exclusions(), before, [change])
               + write(0, "b1", replay._exclusions(), after, []))
    assert not {"secret", "secret2"} & columns_written(0)
    replay.commit(0, "b1", results, replay=True)
    assert Path(changelog_marker(root, table, 0)).exists()

    # a stream started after the rename: the configured name is gone from the source, and is no error
    from airflow_provider_mysqlcdc.engine.lake.schema_history import read_schema_history

    written = written_schemas({table: v2}, exclude, lambda t: read_schema_history(root, t))
    assert written[table].column_names == ["id", "a"]


def test_a_restart_after_ddl_on_an_excluded_column_starts_and_keeps_it_out(mysql_server, mysql_db, tmp_path,
                                                                           spark):
    """The race of a restart, made deterministic: DDL on an excluded column lands between a stop and the next
    start, so today's schema and the schema history (the DDL the stream followed) disagree about its name.
    The start reads the DDL between where the stream resumes and now: it starts, and the column never
    reaches a file under any name; a re-snapshot (TRUNCATE first, the rename after it) reads today's table
    and leaves it out under today's name. A name no DDL explains is still refused, saying what to do."""
    import pytest

    from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
    from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
    from airflow_provider_mysqlcdc.spark.stream.job import start_stream

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "t_ev")
    names = ("secret", "secret2", "secret3")
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t_ev (id INT PRIMARY KEY, a INT, secret VARCHAR(20), note VARCHAR(20))")
        cur.executemany("INSERT INTO t_ev VALUES (%s, %s, %s, %s)",
                        [(i, i, f"pw{i}", f"n{i}") for i in range(1, 61)])
    config = _config(tmp_path, settings, mysql_db)

    def between_runs(*statements: str) -> None:
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            conn.commit()

    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(table)], chunk_size=20)
    assert snapshot_table(spark, config, table).ok
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
        # stopped: an excluded column renamed (and written under its new name) before the next start
        between_runs("UPDATE t_ev SET a = a + 1 WHERE id % 2 = 0",
                     "ALTER TABLE t_ev RENAME COLUMN secret TO secret2",
                     "UPDATE t_ev SET secret2 = 'leak-after-rename', a = a + 7 WHERE id % 3 = 0",
                     "INSERT INTO t_ev (id, a, secret2) VALUES (100, 1, 'leak-new-row')")
        run_stream(spark, config, on_batch_committed=hook)  # starts: the rename lies ahead of it
        # stopped again: the table truncated (a re-snapshot), refilled, and the column renamed once more
        between_runs("TRUNCATE TABLE t_ev",
                     "INSERT INTO t_ev (id, a, secret2, note) VALUES (1, 1, 'leak-refill', 'x'), "
                     "(2, 2, NULL, 'y')",
                     "ALTER TABLE t_ev RENAME COLUMN secret2 TO secret3",
                     "INSERT INTO t_ev (id, a, secret3) VALUES (3, 3, 'leak-after-truncate')",
                     "UPDATE t_ev SET secret3 = 'leak-again', a = a + 1 WHERE id = 1")
        run_stream(spark, config, on_batch_committed=hook)
    # a name that no DDL explains is refused before anything runs, naming the table, the column and the fix
    wrong = replace_config(config, exclude_columns={str(table): ("secret", "no_such_col")})
    with pytest.raises(ConfigurationError) as refused:
        start_stream(spark, wrong)
    message = str(refused.value)
    assert str(table) in message and "no_such_col" in message and "exclude-columns" in message, message
    assert StreamLock(config.checkpoint).read() is None

    assert_mirror_equals_source(settings, config.output, [table], min_rows=3)
    assert not set(names) & set(read_manifest(config.output, table).columns)
    for uri in (mirror_table_uri(config.output, table), changelog_table_uri(config.output, table)):
        assert not set(names) & set(_delta_names(uri)), uri
    written = [p for p in Path(config.output).rglob("*.parquet")]
    assert written
    for path in written:  # no file of the output (changelog, snapshot, mirror) holds it under any name
        assert not set(names) & set(pq.read_schema(path).names), path
        values = [v for column in pq.read_table(path).columns for v in column.to_pylist()]
        assert not any("leak" in str(v) for v in values), path
    # the restart streamed what the DDL reshaped: the row inserted under the new name, the updated rows
    changelog = DeltaTable(changelog_table_uri(config.output, table)).to_pyarrow_table().to_pylist()
    assert {(r["id"], r["_op"]) for r in changelog} >= {(100, "+I"), (3, "+U")}, changelog
