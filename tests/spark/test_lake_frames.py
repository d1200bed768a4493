"""Spark reads the lake's Delta tables in one line, without delta-spark: the mirror equals the source (now and
as of a recorded position), the changelog holds every committed record once.

Real parts: the session's MariaDB with binlog and Spark, concurrent writers with a fixed seed, the engine's
pipeline writing the documented layout with the Delta commits the stream makes.
"""

from __future__ import annotations

import random
from datetime import UTC

import pytest
from pyspark.sql.types import TimestampType

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import read_changelog
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import mirror_versions
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.lake_frames import changelog_frame, mirror_frame
from tests.support.engine_harness import assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline, drain_and_refresh, stream_while_writing
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_comp")]
SEED = 53
WRITES = 60  # transactions the writers write before each batch (and while the tables are snapshotted)


def _spark_rows(frame, names: list[str]) -> list[tuple]:
    """Rows as Python values; a TIMESTAMP (an instant, naive local time in PySpark) as an aware UTC
    datetime."""
    instants = {f.name for f in frame.schema.fields if isinstance(f.dataType, TimestampType)}
    return [tuple(row[n].astimezone(UTC) if n in instants and row[n] is not None else row[n]
                  for n in names) for row in frame.collect()]


@pytest.mark.parametrize("updates", ["rewrite", "deletion_vectors"])
def test_spark_reads_mirror_and_changelog_in_one_line(mysql_server, mysql_db, tmp_path, spark, updates):
    """Both mirror update modes: in ``deletion_vectors`` the frame drops the rows the vectors delete."""
    rng = random.Random(SEED)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=200, seed=SEED, specs=SPECS)
    root = str(tmp_path / "out")
    pipe = LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db, root=root,
                          chunk_size=70)
    refresher = MirrorRefresher(root, pipe.store, settings=settings, updates=updates)
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=SPECS,
                        max_transactions=WRITES, idle_at_bound=True).start()
    try:
        plans = pipe.plan([f"{mysql_db}.t_*"])
        pipe.tables = [p.table for p in plans]
        for plan in plans:
            for chunk in plan.chunks:
                pipe.snapshot(plan, chunk.chunk_id)
        pipe.open_stream(pipe.tables)
        stream_while_writing(pipe, refresher, rng, workload, batches=3, transactions=WRITES)
        workload.stop()
        drain_and_refresh(pipe, refresher)
        recorded = {t: (mirror_versions(root, t)[-1], pipe.source(t)) for t in pipe.tables}
        workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED + 1, writers=2, specs=SPECS,
                            max_transactions=0, idle_at_bound=True).start()
        stream_while_writing(pipe, refresher, rng, workload, batches=3, transactions=WRITES)
    finally:
        stats = workload.stop()
    assert stats.transactions > 5, stats
    drain_and_refresh(pipe, refresher)

    for table in pipe.tables:
        schema = pipe.schemas[table]
        names = schema.column_names
        now = mirror_frame(spark, root, table)  # the one line
        assert set(names) <= set(now.columns)
        assert_same_rows(_spark_rows(now, names), pipe.source(table), table)
        version, source_then = recorded[table]
        assert source_then != pipe.source(table), f"{table}: no change after the recorded position"
        then = mirror_frame(spark, root, table, as_of=version.as_of)
        assert_same_rows(_spark_rows(then, names), source_then, f"{table} as of {version.as_of}")
        if updates == "deletion_vectors":
            assert read_manifest(root, table).deletion_vectors, f"{table}: no deletion vector to apply"
        changes = changelog_frame(spark, root, table)  # the other line
        ours = read_changelog(root, schema)
        assert changes.count() == ours.num_rows > 0
        assert sorted(r["_position"] for r in changes.select("_position").collect()) == sorted(
            ours.column("_position").to_pylist()
        )
