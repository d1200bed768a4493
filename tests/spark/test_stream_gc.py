"""The stream runs garbage collection in its driver after a batch's mirror refresh, and records what it
reclaimed (``_mysqlcdc_gc.json``), which ``status`` shows. Small: one table, two available-now runs."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.gc.report import read_gc_report
from airflow_provider_mysqlcdc.engine.lake.layout import changelog_dir
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream, snapshot_table
from tests.support.engine_harness import password_file


def test_the_stream_collects_garbage_after_batches_and_records_it(mysql_server, mysql_db, tmp_path, spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "g")
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE g (id INT PRIMARY KEY, v INT NOT NULL)")
        cur.executemany("INSERT INTO g VALUES (%s, 0)", [(i,) for i in range(1, 101)])
        conn.commit()
    config = StreamConfig(
        mysql_url=settings.url_without_password(),
        tables=(str(table),), chunk_store=str(tmp_path / "chunks.db"),
        output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings), lock_lease_seconds=20.0, gc_interval_minutes=60,
    )
    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(table)], chunk_size=50)
    assert snapshot_table(spark, config, table).ok

    def changes(n: int) -> None:
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            for i in range(1, n + 1):
                cur.execute("UPDATE g SET v = v + 1 WHERE id = %s", (i,))
            conn.commit()

    changes(5)
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
    first = read_gc_report(config.output)
    assert first is not None and first.runs == 1 and first.last_run["trigger"] == "stream"
    assert first.last_run["retention"] == "3d" and not first.last_run["errors"]

    # a killed attempt's file in a batch before the latest committed one, last written 4 days ago
    batch = read_stream_progress(config.output).batch_id
    killed = os.path.join(changelog_dir(config.output, table, 0), "part-00000-killed-t7.parquet")
    os.makedirs(os.path.dirname(killed), exist_ok=True)
    pq.write_table(pa.table({"id": [1]}), killed)
    old = time.time() - 4 * 86400
    os.utime(killed, (old, old))
    changes(3)
    with mirror_refresh(config) as hook:  # a new stream run: its first batch runs GC again
        run_stream(spark, config, on_batch_committed=hook)
    assert read_stream_progress(config.output).batch_id > batch
    report = read_gc_report(config.output)
    assert report.runs == 2 and report.last_run["by_kind"]["changelog"]["files"] == 1
    assert report.total.files == 1 and not os.path.exists(killed)
    with ChunkStore(config.chunk_store) as store:
        text = collect_status(store, config.output).render()
    assert "garbage collection: since" in text and "2 runs, 1 files" in text

    # 0: off
    off = StreamConfig(**{**config.__dict__, "gc_interval_minutes": 0})
    changes(2)
    with mirror_refresh(off) as hook:
        run_stream(spark, off, on_batch_committed=hook)
    assert read_gc_report(config.output).runs == 2
