"""The mirror in deletion-vector mode on a real server, under concurrent writes with the stream running:
updates, deletes, inserts, key-changing updates, a chunk rerun that commits while changes stream in, an ADD
COLUMN, compaction and garbage collection. After each phase every reader path (delta-rs ``scan()``, Polars,
DuckDB over ``scan()``, ``read_mirror``, the manifest's files) equals the source row by row; a refresh writes
far fewer bytes than the chunks it touches hold. Both server flavors; seeds fixed.
"""

from __future__ import annotations

import os
import random
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.gc.delta_garbage import mirror_garbage
from airflow_provider_mysqlcdc.engine.lake.mirror_dv_refresh import Compaction
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest, read_manifest_files
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import mirror_versions, read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.engine.test_mirror_schema_changes import Writer, _source, _sql
from tests.support.engine_harness import assert_mirror_equals_source, assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline

pytestmark = pytest.mark.both_flavors
SEED = 38


def _readers_equal_source(pipe: LayoutPipeline, table, what: str) -> None:
    import duckdb
    import polars as pl

    names, source = _source(pipe, table)
    uri = mirror_table_uri(pipe.root, table)
    delta = DeltaTable(uri)
    reader = pa.RecordBatchReader.from_stream(delta.scan())
    found = {
        "delta-rs scan": pa.table(reader),
        "polars": pl.read_delta(uri).to_arrow(),
        "read_mirror": read_mirror(pipe.root, table),
        "manifest files": read_manifest_files(pipe.root, table),
    }
    scan = delta.scan()  # noqa: F841 - DuckDB reads delta-rs's scan by name
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    found["duckdb over scan()"] = con.sql("SELECT * FROM scan").fetch_arrow_table()
    con.close()
    for reader_name, data in found.items():
        rows = [tuple(r.get(c) for c in names) for r in values.canonical_pylist(data)]
        assert_same_rows(rows, source, f"{what}: {reader_name}")


def test_deletion_vector_mirror_equals_source_while_streaming(mysql_server, mysql_db, tmp_path):
    rng = random.Random(SEED)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20), f FLOAT)")
        cur.executemany("INSERT INTO acct VALUES (%s, %s, %s, %s)",
                        [(i, rng.randrange(1000), f"n{i}", rng.randrange(100) / 4) for i in range(1, 601)])
        conn.commit()
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    pipe = LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db,
                          root=str(tmp_path / "out"), chunk_size=100, empty_batches=False)
    plan = pipe.plan([f"{mysql_db}.acct"])[0]
    table = plan.table
    pipe.tables = [table]
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=settings, updates="deletion_vectors",
                                compaction=Compaction(ratio=0.3, min_rows=20, chunks=1))
    assert set(refresher.refresh(table).rebuilt) == {c.chunk_id for c in plan.chunks}
    pipe.open_stream([table])
    results = []

    def stream(batches: int) -> None:
        for _ in range(batches):
            batch_id, _ = pipe.stream_batch(max_rows=rng.randint(20, 120))
            results.append(refresher.refresh(table, [batch_id]))
            time.sleep(0.05)

    writer = Writer(mysql_server, mysql_db, 1, 660, SEED).start()
    try:
        stream(4)
        # key-changing updates, across chunks
        with writer._lock:
            _sql(mysql_server, mysql_db, "UPDATE acct SET id = id + 1000 WHERE id IN (150, 151, 420)")
        stream(2)
        # a chunk rerun committing while changes stream in: its rows in shared overlay files are deleted
        rerun = plan.chunks[2].chunk_id
        commit = pipe.read_uncommitted(plan, rerun)
        stream(2)
        commit()
        stream(2)
        assert any(rerun in r.rebuilt for r in results), [r.rebuilt for r in results]
        with writer._lock:
            _sql(mysql_server, mysql_db, "ALTER TABLE acct ADD COLUMN extra INT")
            writer.set_column("extra", lambda r: r.randrange(-50, 50))
        stream(5)
    finally:
        changes = writer.stop()
    results += [refresher.refresh(table, [batch_id]) for batch_id, _ in pipe.drain()]
    assert changes > 100, changes
    _readers_equal_source(pipe, table, "after the stream")
    assert_mirror_equals_source(pipe.settings, pipe.root, [table], min_rows=300)

    manifest = read_manifest(pipe.root, table)
    assert manifest.deletion_vectors and any("/overlay/" in f for f in manifest.files)
    assert "extra" in manifest.columns
    assert any(r.compacted for r in results), "no chunk was compacted"
    # no refresh but the rerun's and the compactions' wrote a base file: each wrote about its changes
    chunk_bytes = sum(os.path.getsize(os.path.join(pipe.root, mysql_db, "acct", f)) for f in manifest.files
                      if "/chunk=" in f) / max(len(load_plan(pipe.store, table).chunks), 1)
    small = [r for r in results if r.batches and not r.rebuilt and not r.compacted and r.records]
    assert small and all(r.bytes_written < 3 * chunk_bytes + 4096 for r in small), (
        [r.bytes_written for r in small], chunk_bytes)

    # time travel by binlog position: each recorded position reads as the version that recorded it
    versions = [v for v in mirror_versions(pipe.root, table) if v.as_of is not None]
    for version in versions[-3:]:
        by_position = read_mirror(pipe.root, table, as_of=version.as_of)
        by_version = read_mirror(pipe.root, table, as_of=version.version)
        scanned = pa.table(pa.RecordBatchReader.from_stream(
            DeltaTable(mirror_table_uri(pipe.root, table), version=version.version).scan()))
        assert by_position.num_rows == by_version.num_rows == scanned.num_rows
        assert sorted(by_position.column("id").to_pylist()) == sorted(scanned.column("id").to_pylist())

    # GC with everything superseded past the retention: the current version still reads as the source
    garbage = mirror_garbage(pipe.root, table, time.time() + 7200)
    assert any(os.path.basename(g.path).startswith("deletion_vector_") for g in garbage)
    for g in garbage:
        os.remove(g.path)
    _readers_equal_source(pipe, table, "after GC")
    with pytest.raises(Exception, match="deletionVectors"):
        DeltaTable(mirror_table_uri(pipe.root, table)).to_pyarrow_table()


def test_verify_judges_a_deletion_vector_mirror_chunk_by_chunk(mysql_server, mysql_db, tmp_path):
    """``mysqlcdc verify`` reads each chunk's live rows (its row ranges minus the deleted rows): clean under
    writes for an integer and a case-insensitive string key."""
    from tests.engine.test_verify import Lake, _results
    from tests.support.layout_pipeline import stream_while_writing
    from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

    specs = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=150, seed=SEED, specs=specs)
    lake = Lake(mysql_server, mysql_db, tmp_path)
    lake.refresher = MirrorRefresher(lake.root, lake.store, settings=lake.settings,
                                     updates="deletion_vectors")
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=specs).start()
    try:
        plans = lake.pipe.plan([f"{mysql_db}.{s.name}" for s in specs])
        for plan in plans:
            for chunk in plan.chunks:
                lake.pipe.snapshot(plan, chunk.chunk_id)
        lake.pipe.open_stream([p.table for p in plans])
        lake.pipe.tables = [p.table for p in plans]
        stream_while_writing(lake.pipe, lake.refresher, lake.rng, workload, batches=3)
        for plan in plans:
            assert read_manifest(lake.root, plan.table).deletion_vectors, plan.table
            verdicts = lake.verify(plan.table)
            assert set(_results(verdicts).values()) == {"match"}, [v.describe() for v in verdicts]
    finally:
        workload.stop()
