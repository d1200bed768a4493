"""A snapshot run of many tables as one Spark job (``run_snapshot``): one job however many tables, several
small chunks per Spark task, tables that fail alone at commit, tables committed while the job still reads the
others, a failed task that leaves nothing uncommitted behind, and the spark-submit app running a chunk group
of several tables with their column exclusions.

Real parts: the shared MariaDB (binlog on), the shared local[2] Spark session; every table's committed Parquet
is compared row by row with the source, under concurrent writes where the run reads.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.spark.snapshot import tasks
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import SnapshotFailed, run_snapshot
from tests.spark.test_snapshot import _options, _parquet_snapshots, _spark_app, secrets  # noqa: F401 - fixture
from tests.support.engine_harness import Pipeline
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

SEED = 4242
TABLES = 12
ROWS = 90  # 3 chunks of 30 each


def _tables(mysql_server, db: str, count: int = TABLES) -> list[TableId]:
    rng = random.Random(SEED)
    with mysql_server.admin(db) as conn, conn.cursor() as cur:
        for i in range(count):
            cur.execute(f"CREATE TABLE t{i:02d} (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
            cur.executemany(f"INSERT INTO t{i:02d} VALUES (%s, %s, %s)",
                            [(k, rng.randrange(1000), f"n{rng.randrange(99)}") for k in range(1, ROWS + 1)])
    return [TableId(db, f"t{i:02d}") for i in range(count)]


def _plan(mysql_server, store_url: str, tables: list[TableId], chunk_size: int = 30) -> None:
    with ChunkStore(store_url) as store:
        plan_tables(MySQLSettings.from_url(mysql_server.cdc_url), store, [str(t) for t in tables],
                    chunk_size=chunk_size)


def _source(mysql_server, table: TableId, columns: str = "id, v, note") -> list[tuple]:
    with mysql_server.admin(table.database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM {table.quoted}")
        return sorted(cur.fetchall())


def _committed(output: str, table: TableId,
               columns: tuple[str, ...] = ("id", "v", "note")) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns)
                  for rows in _parquet_snapshots(output, table).values() for r in rows)


def _version_dirs(output: str, table: TableId) -> list[Path]:
    return sorted((Path(table_dir(output, table)) / "snapshot").glob("generation=*/chunk=*/version=*"))


def test_task_count_reads_several_small_chunks_per_task():
    assert tasks.task_count(0, 2) == 0
    assert tasks.task_count(5, 2) == 5  # few chunks: one each, all cores busy
    assert tasks.task_count(36, 2) == 8  # at least 4 tasks per core
    assert tasks.task_count(601, 2) == 38  # at most 16 full chunks' worth per task
    assert tasks.task_count(601, 2, chunks_per_task=1) == 601  # a stream's re-snapshot: a task per chunk
    assert tasks.task_count(500, 2, cost=500 / 8) == 8  # 500 small tables: 4 tasks per core, not 32 tasks
    assert tasks.task_count(5000, 2, cost=5000 / 8) == 40  # at most 128 small chunks per task


def _plan_of(rows: int, chunks: int, chunk_size: int = 100) -> ChunkPlan:
    return ChunkPlan(TableId("db", "t"), 1, ("id",), tuple(Chunk(i, None, None) for i in range(chunks)),
                     "even", chunk_size, rows, BinlogPosition("b.000001", 4))


def test_a_chunk_weighs_its_rows_but_at_least_its_fixed_cost():
    assert tasks.chunk_cost(_plan_of(1000, 10)) == 1.0  # full chunks
    assert tasks.chunk_cost(_plan_of(5000, 10)) == 1.0  # at most one full chunk
    assert tasks.chunk_cost(_plan_of(50, 2)) == 0.25
    assert tasks.chunk_cost(_plan_of(0, 1)) == tasks.SMALL_CHUNK_COST  # an empty table still costs a read


@pytest.mark.parametrize("costs, cores, per_task", [
    ([1.0] * 601, 2, 16), ([1.0] * 36, 2, 16), ([0.125] * 500, 2, 16), ([1.0] * 5, 2, 16),
    ([0.125] * 7 + [1.0] * 3 + [0.125] * 90, 1, 4), ([1.0] * 40, 2, 1), ([0.125] * 3, 4, 16),
])
def test_split_work_keeps_the_order_and_evens_out_the_cost(costs, cores, per_task):
    work = [(i // 10, i % 10) for i in range(len(costs))]
    groups = tasks.split_work(work, costs, cores, per_task)
    assert [item for group in groups for item in group] == work  # every chunk once, in order
    assert len(groups) == tasks.task_count(len(work), cores, per_task, sum(costs))
    assert all(groups)
    weight = {item: cost for item, cost in zip(work, costs)}
    heaviest = max(sum(weight[i] for i in g) for g in groups)
    assert heaviest <= sum(costs) / len(groups) + max(costs) + 1e-9, groups


def test_many_tables_are_one_spark_job_and_snapshot_plus_stream_equals_the_source_under_writes(
    spark, mysql_server, mysql_db, tmp_path, secrets  # noqa: F811
):
    """Every table's chunks in one Spark job of fewer tasks than chunks, read under concurrent writes; the
    committed Parquet plus the stream from min(HW) equals the source row by row."""
    rng = random.Random(SEED)
    specs = [s for s in TABLE_SPECS if s.name in ("t_ubig", "t_dec", "t_dt", "t_ci", "t_nopk")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=200, seed=SEED, specs=specs)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store = ChunkStore(store_url)
    pipe = Pipeline(settings, store, mysql_db)
    group = "test-many-tables"
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=specs).start()
    try:
        plans = plan_tables(settings, store, [f"{mysql_db}.t_*"], chunk_size=25,
                            chunk_keys={f"{mysql_db}.t_nopk": "ck"})
        tables = [p.table for p in plans]
        results = run_snapshot(spark, [_options(secrets, store_url, output, str(t)) for t in tables],
                               job_group=group)
        assert all(r.ok for r in results), results
        with connect(settings) as conn:
            pipe.schemas = {t: load_schema(conn, t) for t in tables}
        pipe.open_stream(tables)  # the engine's stream, from min(HW) of the chunks the run committed
        pipe.pump(rng, batches=3)
    finally:
        stats = workload.stop()
    pipe.catch_up()
    assert stats.transactions > 20, stats
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    assert len(jobs) == 1, jobs  # every table's chunks in one Spark job
    [stage] = tracker.getJobInfo(jobs[0]).stageIds
    chunks = sum(len(p.chunks) for p in plans)
    assert chunks > 2 * tasks.TASKS_PER_CORE * 2, chunks
    assert tracker.getStageInfo(stage).numTasks == tasks.task_count(chunks, 2) < chunks
    for table in tables:
        pipe.snapshots = {(table, c): rows for c, rows in _parquet_snapshots(output, table).items()}
        pipe.assert_mirror_is_source(table)
    store.close()


def test_many_tables_without_writes_equal_the_source_row_by_row(spark, mysql_server, mysql_db, tmp_path,
                                                                secrets):  # noqa: F811
    tables = _tables(mysql_server, mysql_db, 5)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, tables)
    results = run_snapshot(spark, [_options(secrets, store_url, output, str(t)) for t in tables])
    assert all(r.ok for r in results)
    for table in tables:
        assert _committed(output, table) == _source(mysql_server, table), table


def test_a_table_replanned_during_the_run_fails_alone(spark, mysql_server, mysql_db, tmp_path,
                                                      secrets):  # noqa: F811
    """A table re-planned while the run reads it cannot commit its chunks of the old plan; the other tables of
    the run commit theirs, and the refused table's written files are deleted."""
    tables = _tables(mysql_server, mysql_db, 3)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, tables)
    replanned = tables[1]

    def progress(message: str) -> None:
        if message.endswith("chunk(s) started"):  # attempts started, tasks not yet run: a concurrent re-plan
            with ChunkStore(store_url) as store:
                plan_tables(MySQLSettings.from_url(mysql_server.cdc_url), store, [str(replanned)],
                            chunk_size=30, only_new=False)

    results = run_snapshot(spark, [_options(secrets, store_url, output, str(t)) for t in tables],
                           progress=progress, raise_on_failure=False)
    ok = {r.table: r.ok for r in results}
    assert ok == {str(tables[0]): True, str(replanned): False, str(tables[2]): True}, results
    failed = results[1]
    assert "generation" in (failed.error or "") and all(c.status != COMMITTED for c in failed.chunks), failed
    assert not _version_dirs(output, replanned), "the refused table's files stay behind"
    for table in (tables[0], tables[2]):
        assert _committed(output, table) == _source(mysql_server, table)


def test_a_failed_task_commits_the_tables_written_before_it_and_leaves_nothing_else(
        spark, mysql_server, mysql_db, tmp_path, secrets):  # noqa: F811
    """One chunk's write fails half way, in the last task: the job fails; the tables whose chunks were all
    written before commit (equal to the source), the others are recorded failed with the task's error and no
    written directory of theirs stays, also of tasks that had finished (the accumulator)."""
    tables = _tables(mysql_server, mysql_db, 4)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, tables)
    options = [_options(secrets, store_url, output, str(t)) for t in tables]
    options[-1] = options[-1].with_(test_fault="raise:2:10")  # the last table's last chunk
    # a task per chunk: the failing one starts after ten of the other eleven have finished
    results = run_snapshot(spark, options, raise_on_failure=False, chunks_per_task=1)
    assert results[0].ok and not results[-1].ok, [(r.table, r.ok, r.error) for r in results]
    for table, result in zip(tables, results):
        if result.ok:
            assert result.error is None and _committed(output, table) == _source(mysql_server, table), table
            continue
        assert "test_fault" in (result.error or ""), result
        assert all(c.status == "failed" for c in result.chunks), result
        assert not _version_dirs(output, table), f"{table}: written files stay behind"
        manifest = read_snapshot_manifest(output, table)
        assert manifest is None or not manifest.chunk_files()
    with pytest.raises(SnapshotFailed, match=str(tables[-1]).replace(".", r"\.")):  # names the table
        run_snapshot(spark, options, chunks_per_task=1)
    # run again without the fault: everything commits
    results = run_snapshot(spark, [_options(secrets, store_url, output, str(t)) for t in tables])
    assert all(r.ok for r in results)
    for table in tables:
        assert _committed(output, table) == _source(mysql_server, table)


def test_a_table_commits_while_the_job_still_reads_the_others(spark, mysql_server, mysql_db, tmp_path,
                                                             secrets, monkeypatch):  # noqa: F811
    """The first table's commit happens before the job ends: its chunks are in the store, committed, while a
    later task still runs (seen from that task: it waits until the store shows them, or fails the job)."""
    tables = _tables(mysql_server, mysql_db, 3)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, tables)
    first = str(tables[0])
    original = tasks.write_items

    def wait_for_the_first_table(writers, partition, items):
        items = list(items)
        if any(writers[i].job.options.table == str(tables[-1]) for i, _ in items):
            deadline = time.monotonic() + 30
            with ChunkStore(store_url) as store:
                while not all(c.status == COMMITTED for c in store.chunks(first, 1)):
                    assert time.monotonic() < deadline, "the first table was not committed during the job"
                    time.sleep(0.1)
        return original(writers, partition, items)

    monkeypatch.setattr(tasks, "write_items", wait_for_the_first_table)
    results = run_snapshot(spark, [_options(secrets, store_url, output, str(t)) for t in tables],
                           chunks_per_task=1)
    assert all(r.ok for r in results), results
    for table in tables:
        assert _committed(output, table) == _source(mysql_server, table), table


def test_zero_dates_met_half_way_through_a_chunk_are_read_again_behind_the_guard(
        spark, mysql_server, mysql_db, tmp_path, secrets):  # noqa: F811
    """Dates are read as they are; a zero date, an invalid day and a year-0 date after a task's reads handed
    out rows make those chunks be read again behind the guard (``date_guard``): every chunk commits once, its
    files equal the pure-Python reader's values, and no directory of a given-up read stays."""
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute("CREATE TABLE dz (id INT PRIMARY KEY, d DATE, dt DATETIME(3), v INT)")
        cur.executemany("INSERT INTO dz VALUES (%s, %s, %s, %s)",
                        [(i, f"2020-01-{1 + i % 28:02d}", f"2021-03-04 05:06:07.{i % 1000:03d}", i)
                         for i in range(300)])
        cur.execute("UPDATE dz SET dt = '0000-00-00 00:00:00' WHERE id = 70")
        cur.execute("UPDATE dz SET d = '2024-02-31' WHERE id = 180")
        cur.execute("UPDATE dz SET d = '0000-01-01' WHERE id = 290")
        conn.commit()
    table = TableId(mysql_db, "dz")
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, [table], chunk_size=100)
    [result] = run_snapshot(spark, [_options(secrets, store_url, output, str(table), batch_rows=16)],
                            chunks_per_task=1)
    assert result.ok and [c.attempt for c in result.chunks] == [1, 1, 1], result
    assert len(_version_dirs(output, table)) == 3  # one per chunk: the given-up reads' files are gone
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    with ChunkStore(store_url) as store:
        plan = load_plan(store, table)
    committed = _parquet_snapshots(output, table)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CHUNK_READER_ENV, "python")
        for chunk in plan.chunks:
            batches = list(ChunkRead(settings, schema, plan, chunk).batches())
            want = [{k: v for k, v in r.items() if k not in METADATA_NAMES}
                    for r in values.canonical_pylist(pa.Table.from_batches(batches))]
            assert committed[chunk.chunk_id] == want, chunk
    texts = [r[c] for rows in committed.values() for r in rows for c in ("d", "dt") if isinstance(r[c], str)]
    assert sorted(texts) == ["0000-00-00 00:00:00.000", "0000-01-01", "2024-02-31"], texts


def test_the_spark_app_runs_a_group_of_tables_with_their_exclusions(spark, mysql_server, mysql_db, tmp_path,
                                                                    secrets):  # noqa: F811
    tables = _tables(mysql_server, mysql_db, 2)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, store_url, tables)
    app = _spark_app()
    url, password_file = secrets
    group = {"parts": [{"table": str(tables[0]), "generation": 1, "chunk_ids": [1, 2]},
                       {"table": str(tables[1]), "generation": 1, "chunk_ids": [0, 1, 2]}]}
    common = ["--mysql-url", url, "--password-file", password_file, "--chunk-store", store_url,
              "--output", output, "--run-id", "group-run"]
    parser = app.build_parser()
    args = parser.parse_args([*common, "--chunk-group", json.dumps(group),
                              "--exclude-columns-of", f"{tables[1]}=note"])
    result = app.run(spark, app.group_options(args, parser))
    assert result["ok"] and [t["table"] for t in result["tables"]] == [str(t) for t in tables], result
    assert [c["chunk_id"] for c in result["tables"][0]["chunks"]] == [1, 2]
    files = [f for fs in read_snapshot_manifest(output, tables[1]).chunk_files().values() for f in fs]
    assert files and all("note" not in pq.read_schema(f).names for f in files)
    assert _committed(output, tables[1], ("id", "v")) == _source(mysql_server, tables[1], "id, v")
    for bad in (["--chunk-group", json.dumps(group), "--chunks", "1"],
                ["--chunk-group", json.dumps(group), "--exclude-columns-of", "other.t=note"],
                ["--table", str(tables[0]), "--exclude-columns-of", f"{tables[0]}=note"],
                ["--chunk-group", '{"parts": []}'], [],
                ["--chunk-group", json.dumps({"parts": group["parts"] + group["parts"][:1]})]):
        with pytest.raises(SystemExit) as exited:
            app.group_options(parser.parse_args([*common, *bad]), parser)
        assert exited.value.code == 2, bad
