"""Tables added to and removed from a running stream, under seeded writers on every table.

A table planned into the pipeline's chunk store while the stream runs is captured from the next batch on
(its unread chunks count as HW = -inf), snapshotted alone, and its mirror equals the source; the other tables'
plans are untouched. A removed table stops getting changelog batches; the others go on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids
from airflow_provider_mysqlcdc.engine.lake.layout import read_json
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import (
    mirror_refresh,
    run_stream,
    snapshot_table,
    start_stream,
)
from tests.spark.pacing import WritesPerBatch
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.workload import SingleRowWriters

SEED = 47
TABLES = ("t_a", "t_b", "t_c")
PER_BATCH = 30  # writer statements per committed batch: the volume follows the batches the test waits for


def _batches(checkpoint: str) -> int:
    return len(list((Path(checkpoint) / "mysqlcdc" / "batches").glob("batch=*.json")))


def _wait_streamed(output: str, table: TableId, timeout: float = 120) -> None:
    """Until ``table`` has a committed changelog batch: the stream starts at the smallest HW, and how long it
    takes to reach a later-snapshotted table's HW depends on the machine's speed."""
    deadline = time.monotonic() + timeout
    while not committed_batch_ids(output, table):
        assert time.monotonic() < deadline, f"the stream did not reach {table} in {timeout:.0f}s"
        time.sleep(0.3)


def _wait_batches(checkpoint: str, more: int, timeout: float = 120) -> None:
    target = _batches(checkpoint) + more
    deadline = time.monotonic() + timeout
    while _batches(checkpoint) < target:
        assert time.monotonic() < deadline, "the stream made no progress"
        time.sleep(0.3)


def test_a_table_added_and_one_removed_while_the_stream_runs(mysql_server, mysql_db, tmp_path, spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        for name in TABLES:
            # t_c joins with zero_dates="null": its date column gets no companion, also from the running
            # stream
            extra = ", d DATE NULL DEFAULT '2020-02-02'" if name == "t_c" else ""
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT{extra})")
            cur.executemany(f"INSERT INTO {name} (id, v) VALUES (%s, %s)", [(i, i) for i in range(1, 201)])
    a, b, c = (TableId(mysql_db, t) for t in TABLES)
    config = StreamConfig(
        mysql_url=settings.url_without_password(),
        tables=(str(a), str(b)),
        chunk_store=str(tmp_path / "chunks.db"),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings),
        max_bytes_per_batch=20_000,
        trigger="processing-time=0.3 seconds",
        lock_lease_seconds=20.0,
    )

    def snapshot(table: TableId) -> None:
        result = snapshot_table(spark, config, table)
        assert result.ok, result

    writers = SingleRowWriters(lambda: mysql_server.admin(mysql_db), TABLES, "v", SEED,
                               limit=PER_BATCH).start()
    try:
        with ChunkStore(config.chunk_store) as store:
            plan_tables(settings, store, [str(a), str(b)], chunk_size=60)
        snapshot(a)
        snapshot(b)
        with mirror_refresh(config) as hook:
            paced = WritesPerBatch(writers, PER_BATCH, hook)
            run = start_stream(spark, config, on_batch_committed=paced)
            try:
                _wait_batches(config.checkpoint, 2)
                # add t_c: planned only it (t_a, t_b keep generation 1), snapshotted while the stream runs
                with ChunkStore(config.chunk_store) as store:
                    added = plan_tables(settings, store, [f"{mysql_db}.t_*"], chunk_size=60, only_new=True,
                                        zero_dates="null")
                assert [p.table for p in added] == [c]
                snapshot(c)
                _wait_batches(config.checkpoint, 2)
                _wait_streamed(config.output, b)  # t_b streamed before it is removed
                # remove t_b: its output stops, the rest goes on
                with ChunkStore(config.chunk_store) as store:
                    assert store.remove_table(str(b), reason="test")
                _wait_batches(config.checkpoint, 1)  # a batch read before the removal may still commit
                removed_at_batch = max(committed_batch_ids(config.output, b), default=-1)
                _wait_batches(config.checkpoint, 3)
            finally:
                run.stop()
            counts = writers.stop()
            final = StreamConfig(**{**config.__dict__, "trigger": "available-now"})
            run_stream(spark, final, on_batch_committed=hook)
    finally:
        writers.stop()
    assert min(counts.values()) > 50, counts

    with ChunkStore(config.chunk_store) as store:
        assert store.plan(str(a)).generation == 1 and store.plan(str(b)).generation == 1
        assert store.active_tables() == [str(a), str(c)]
    assert max(committed_batch_ids(config.output, b)) == removed_at_batch, "t_b still streamed after removal"
    assert max(committed_batch_ids(config.output, a)) > removed_at_batch
    assert committed_batch_ids(config.output, c), "the added table got no changelog"
    progress = read_json(str(Path(config.output) / "_mysqlcdc_stream_progress.json"))
    assert str(c) in progress["tables"]
    assert_mirror_equals_source(settings, config.output, [a, c], min_rows=150)
    with_dates = [pq.read_schema(p).names for p in Path(config.output).rglob("*.parquet")]
    with_dates = [names for names in with_dates if "d" in names]  # t_c's snapshot, changelog and mirror
    assert len(with_dates) >= 3 and not any("d__zero_date" in names for names in with_dates), with_dates
    with ChunkStore(config.chunk_store) as store:
        report = collect_status(store, config.output, [a, b, c])
    assert any("removed from the pipeline" in n and "test" in n for n in report.tables[1].notes)
