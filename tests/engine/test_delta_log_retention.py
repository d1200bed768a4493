"""The Delta tables' log stays bounded (issue 38, point 3): the table properties the package sets
(``delta_log.table_properties``: a checkpoint every 10 commits, log entries kept
``delta.logRetentionDuration``, tombstones ``delta.deletedFileRetentionDuration``), set at creation and on
tables of an earlier release, and what must stay exact once delta-rs has cleaned up expired log entries: every
reader of the changelog and of the mirror, time travel by position within the kept log, the changelog's batch
idempotence (its application transaction lives on in the checkpoint), and garbage collection, which then reads
removal times from the checkpoint's tombstones. Real Delta tables, small; the log is aged by setting file
times, never by waiting."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Schema
from deltalake.transaction import create_table_with_add_actions

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import DELTA_LOG_RETENTION_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake import delta_log
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import read_changelog
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import APP_ID, DeltaChangelog, changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_log import DeltaLog, table_properties
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.gc.collector import collect_garbage
from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import mirror_versions, read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.support.delta_reads import delta_mirror
from tests.support.engine_harness import assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline

HOUR = 3600.0


def _log_versions(uri: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in Path(uri, "_delta_log").glob("*.json"))


def _age_log(uri: str, seconds: float) -> None:
    """Every entry of the table's log written ``seconds`` ago (as if the stream had run that long ago)."""
    when = time.time() - seconds
    for p in Path(uri, "_delta_log").iterdir():
        os.utime(p, (when, when))


# --- the properties ----------------------------------------------------------------------------------------


def test_an_earlier_table_gets_the_properties_once_and_keeps_its_batches(tmp_path, monkeypatch):
    root, table = str(tmp_path / "out"), TableId("shop", "orders")
    uri = changelog_table_uri(root, table)
    os.makedirs(f"{uri}/batch=000000000000")
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), f"{uri}/batch=000000000000/part-0.parquet")
    # a changelog Delta table as the release before wrote it: a checkpoint interval only
    old = DeltaLog(uri, table, "changelog")
    create_table_with_add_actions(uri, Schema.from_arrow(pa.schema([("id", pa.int64())])),
                                  [old.add_action("batch=000000000000/part-0.parquet", 2)], mode="error",
                                  configuration={"delta.checkpointInterval": "10"})
    assert DeltaTable(uri).metadata().configuration == {"delta.checkpointInterval": "10"}

    os.makedirs(f"{uri}/batch=000000000001")
    pq.write_table(pa.table({"id": pa.array([3], pa.int64())}), f"{uri}/batch=000000000001/part-0.parquet")
    changelog = DeltaChangelog(root, table)
    # readers (status, GC) look at it without committing anything
    assert changelog.last_batch() is None and changelog.files() == {"batch=000000000000/part-0.parquet"}
    assert len(DeltaTable(uri).history()) == 1
    assert changelog.commit_batch(1, ["part-0.parquet"])
    delta = DeltaTable(uri)
    assert delta.metadata().configuration == table_properties()
    assert table_properties()["delta.logRetentionDuration"] == "interval 10 minutes"
    assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    assert delta.transaction_version(APP_ID) == 1
    versions = len(delta.history())
    assert not DeltaChangelog(root, table).commit_batch(1, ["part-0.parquet"])  # replayed: nothing
    assert len(DeltaTable(uri).history()) == versions  # and no second properties commit

    # an operator's longer tombstone retention stays; another log retention is taken on the next write
    DeltaTable(uri).alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 2 weeks"})
    monkeypatch.setenv(DELTA_LOG_RETENTION_ENV, "2h")
    os.makedirs(f"{uri}/batch=000000000002")
    pq.write_table(pa.table({"id": pa.array([4], pa.int64())}), f"{uri}/batch=000000000002/part-0.parquet")
    assert DeltaChangelog(root, table).commit_batch(2, ["part-0.parquet"])
    config = DeltaTable(uri).metadata().configuration
    assert config["delta.deletedFileRetentionDuration"] == "interval 2 weeks"
    assert config["delta.logRetentionDuration"] == "interval 2 hours"

    monkeypatch.setenv(DELTA_LOG_RETENTION_ENV, "ten minutes")
    with pytest.raises(ConfigurationError, match=DELTA_LOG_RETENTION_ENV):
        table_properties()


def test_delta_intervals_read_back():
    assert delta_log.interval_seconds("interval 3 days") == 3 * 86400
    assert delta_log.interval_seconds("interval 1 week") == 7 * 86400
    assert delta_log.interval_seconds("interval 10 minutes") == 600
    assert delta_log.interval_seconds(None) is None and delta_log.interval_seconds("3 days") is None
    assert delta_log.delta_interval("90s", "x") == "interval 90 seconds"


# --- after log cleanup -------------------------------------------------------------------------------------


def _sql(mysql_server, mysql_db, *statements: str) -> None:
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
        conn.commit()


def _changes(mysql_server, mysql_db, rng: random.Random, next_id: list[int]) -> None:
    """Inserts, updates and deletes spread over the table's chunks."""
    ids = [rng.randint(1, next_id[0] - 1) for _ in range(6)]
    _sql(mysql_server, mysql_db,
         *[f"UPDATE t SET v = v + 1 WHERE id = {i}" for i in ids[:4]],
         f"DELETE FROM t WHERE id = {ids[4]}",
         f"INSERT INTO t VALUES ({next_id[0]}, 0), ({next_id[0] + 1}, 7)")
    next_id[0] += 2


def _batch(pipe: LayoutPipeline, refresher: MirrorRefresher) -> None:
    batch_id, changed = pipe.stream_batch()
    refresher.on_batch_committed(batch_id, sorted(changed, key=str))


def _data_files(uri: str) -> list[Path]:
    """The mirror's data files: chunk versions, and with deletion vectors the overlay and vector files."""
    return [*Path(uri).glob("chunk=*/version=*/*.parquet"), *Path(uri).glob("overlay/version=*/*.parquet"),
            *Path(uri).glob("deletion_vector_*.bin")]


def _mirror_files(uri: str) -> set[str]:
    return {os.path.relpath(p, uri) for p in _data_files(uri)}


def _current(root: str, table: TableId) -> set[str]:
    manifest = read_manifest(root, table)
    return {f.removeprefix("mirror/") for f in manifest.files} | {
        v.file for v in manifest.deletion_vectors.values()}


def _age_files(uri: str, seconds: float) -> None:
    when = time.time() - seconds
    for p in _data_files(uri):
        os.utime(p, (when, when))


def _rows(table: pa.Table, names: list[str]) -> list[tuple]:
    return [tuple(r[c] for c in names) for r in values.canonical_pylist(table)]


def _changelog_rows(table: pa.Table, names: list[str]) -> Counter:
    return Counter(_rows(table, names))


@pytest.mark.parametrize("updates", ["rewrite", "deletion_vectors"])
def test_after_log_cleanup_every_reader_time_travel_and_gc_stay_exact(mysql_server, mysql_db, tmp_path,
                                                                      monkeypatch, updates):
    """With ``mirror_updates=deletion_vectors`` the engine writes the mirror's commits itself: its checkpoints
    and log cleanup keep the log as short, the vectors are found again from the checkpoint, and GC deletes the
    early overlay and vector files by their tombstones while every live vector file stays."""
    import duckdb
    import polars as pl

    rng = random.Random(38)
    _sql(mysql_server, mysql_db, "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)",
         "INSERT INTO t VALUES " + ",".join(f"({i}, {i % 7})" for i in range(1, 401)))
    next_id = [401]
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    root = str(tmp_path / "out")
    pipe = LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db, root=root,
                          chunk_size=100)
    plan = pipe.plan([f"{mysql_db}.t"])[0]
    table = plan.table
    pipe.tables = [table]
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    refresher = MirrorRefresher(root, pipe.store, settings=settings, updates=updates)
    refresher.refresh(table)
    pipe.open_stream([table])
    names = pipe.schemas[table].column_names
    mirror_uri, changelog_uri = mirror_table_uri(root, table), changelog_table_uri(root, table)

    # two hours ago: batches whose mirror commits remove superseded chunk files (tombstones of that time)
    real_time = time.time
    monkeypatch.setattr(delta_log.time, "time", lambda: real_time() - 2 * HOUR)
    for n in range(14):
        _changes(mysql_server, mysql_db, rng, next_id)
        _batch(pipe, refresher)
        if n == 4:
            gone = mirror_versions(root, table)[-1]
    monkeypatch.setattr(delta_log.time, "time", real_time)
    assert gone.as_of is not None
    early_files = _mirror_files(mirror_uri)
    removed_early = early_files - _current(root, table)
    assert removed_early, "the early batches superseded no mirror file"
    for uri in (mirror_uri, changelog_uri):
        assert DeltaTable(uri).metadata().configuration == table_properties()  # set at creation
        _age_log(uri, HOUR / 4)  # past the 10-minute log retention, within the GC retention below
    _age_files(mirror_uri, 2 * HOUR)

    # now: more batches; each table's next checkpoint deletes the expired entries
    kept = []
    for n in range(22):  # versions 15-36: delta-rs cleans up at a checkpoint (every 10th version) up to the
        _changes(mysql_server, mysql_db, rng, next_id)  # checkpoint before it
        _batch(pipe, refresher)
        if n == 18:
            kept.append((mirror_versions(root, table)[-1], pipe.source(table)))
    for uri in (mirror_uri, changelog_uri):
        logged = _log_versions(uri)
        assert logged[0] > 0 and len(logged) <= 30, (uri, logged)  # the early entries are gone

    # the changelog: every reader, the same records as our marker-following reader
    ours = _changelog_rows(read_changelog(root, pipe.schemas[table]), ["_op", "_position", *names])
    assert sum(ours.values()) > 50
    delta = DeltaTable(changelog_uri)
    assert delta.transaction_version(APP_ID) == pipe.next_batch - 1  # idempotence survives the cleanup
    assert DeltaChangelog(root, table).holds(pipe.next_batch - 1)
    columns = ["_op", "_position", *names]
    assert _changelog_rows(delta.to_pyarrow_table(), columns) == ours
    assert _changelog_rows(pl.read_delta(changelog_uri).to_arrow(), columns) == ours
    dataset = delta.to_pyarrow_dataset()  # DuckDB scans the variable by name
    assert _changelog_rows(duckdb.connect().sql("SELECT * FROM dataset").fetch_arrow_table(), columns) == ours

    # the mirror: every reader equals the source
    source = pipe.source(table)
    mirror = DeltaTable(mirror_uri)
    vectors = "deletionVectors" in (mirror.protocol().reader_features or [])
    assert vectors == (updates == "deletion_vectors")
    assert_same_rows(_rows(read_mirror(root, table), names), source, "read_mirror")
    assert_same_rows(_rows(delta_mirror(root, table), names), source, "delta-rs")
    assert_same_rows(_rows(pl.read_delta(mirror_uri).to_arrow(), names), source, "polars")
    dataset = mirror.scan() if vectors else mirror.to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it
    assert_same_rows(_rows(duckdb.connect().sql("SELECT * FROM dataset").fetch_arrow_table(), names), source,
                     "duckdb")
    # time travel by position: within the kept log exact; before it refused, saying why
    version, then = kept[0]
    assert_same_rows(_rows(read_mirror(root, table, as_of=version.as_of), names), then, "as of a kept one")
    assert_same_rows(_rows(delta_mirror(root, table, version.version), names), then, "delta-rs version")
    # the cleanup keeps the last checkpoint at or before the expired entries (the engine writes the mirror's
    # commits in both modes and checkpoints at version 10), so the versions from it on stay readable; earlier
    # ones go
    earliest = mirror_versions(root, table)[0].version
    assert earliest == 10
    assert Path(mirror_uri, "_delta_log", f"{earliest:020d}.checkpoint.parquet").exists()
    assert gone.version < earliest
    with pytest.raises(CdcError, match="before the earliest position"):
        read_mirror(root, table, as_of=gone.as_of)

    # GC: the files superseded two hours ago go (their removes survive as the checkpoint's tombstones);
    # the ones superseded now and every current file stay, and the mirror reads the same after it
    superseded_now = _mirror_files(mirror_uri) - early_files - _current(root, table)
    assert superseded_now
    _age_files(mirror_uri, 2 * HOUR)  # every data file written long ago: only removal times tell them apart
    run = collect_garbage(root, pipe.store, Retention(timedelta(hours=1), min_grace=timedelta(0)),
                          tables=[table])
    assert not run.errors, run.errors
    left = _mirror_files(mirror_uri)
    assert not (left & removed_early), sorted(left & removed_early)
    assert superseded_now <= left
    assert _current(root, table) <= left
    assert_same_rows(_rows(read_mirror(root, table), names), source, "read_mirror after GC")
    assert_same_rows(_rows(delta_mirror(root, table), names), source, "delta-rs after GC")
    assert_same_rows(_rows(read_mirror(root, table, as_of=version.as_of), names), then,
                     "time travel after GC")
