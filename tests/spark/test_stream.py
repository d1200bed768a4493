"""The stream phase on Spark: binlog source -> exactly-once changelog, with restarts, kills and replays.

Real parts: the session's MariaDB (binlog on), the session's local Spark, concurrent writers with fixed seeds.
The snapshot phase runs through the engine (tests/engine_harness.Pipeline); the mirror is the engine's
``materialize`` over Records rebuilt from the Parquet changelog, reading only batches with a marker.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cli import stream as cli_stream
from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import APP_ID, DeltaChangelog, changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import changelog_dir, changelog_marker, read_json
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock, StreamLocked
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.stream.admission import next_batch_end
from airflow_provider_mysqlcdc.engine.stream.transport import STREAM_ARROW_SCHEMA, stream_batches
from airflow_provider_mysqlcdc.spark.stream.changelog_sink import ChangelogSink, PartitionWriter
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import run_stream, start_stream
from tests.support.delta_reads import assert_delta_changelog_matches_markers, delta_changelog
from tests.support.engine_harness import Pipeline, password_file
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

# on MariaDB and on Oracle MySQL in every run, but for the killed-stream scenario (35 s; the same restart
# protocol as the others': MYSQLCDC_TEST_FLAVORS=all runs it on MySQL too)
BOTH = pytest.mark.both_flavors

REPO = Path(__file__).resolve().parents[2]
SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ubig", "t_dt", "t_ci", "t_nopk")]


# --- helpers ------------------------------------------------------------------------------------------------


def _settings(mysql_server) -> MySQLSettings:
    return MySQLSettings.from_url(mysql_server.cdc_url)


def _config(mysql_server, mysql_db, tmp_path, name: str = "a", **kw) -> StreamConfig:
    settings = _settings(mysql_server)
    options = {
        "mysql_url": settings.url_without_password(),
        "tables": (f"{mysql_db}.t_*",),
        "chunk_store": str(tmp_path / "chunks.db"),
        "output": str(tmp_path / f"out-{name}"),
        "checkpoint": str(tmp_path / f"ckpt-{name}"),
        "password_file": password_file(tmp_path, settings),
        "max_bytes_per_batch": 60_000,
        "lock_lease_seconds": 20.0,
    }
    options.update(kw)
    return StreamConfig(**options)


SETUP_TRANSACTIONS = 30  # the writers' volume while the tables are planned and snapshotted
OVERLAP = 20  # transactions the writers go on with into the step after a volume they were asked for


def _setup(mysql_server, mysql_db, tmp_path, seed: int, rows: int = 150, writers: bool = True):
    """Tables, seeded rows, writers (bounded by volume: they idle at their bound until ``_let_binlog_grow``
    moves it), and every chunk snapshotted by the engine while the writers write."""
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=rows, seed=seed, specs=SPECS)
    pipe = Pipeline(_settings(mysql_server), ChunkStore(str(tmp_path / "chunks.db")), mysql_db, chunk_size=60)
    workload = Workload(
        lambda: mysql_server.admin(), mysql_db, seed=seed, writers=2, specs=SPECS, rotate_every=25, pace=0.05,
        max_transactions=SETUP_TRANSACTIONS, idle_at_bound=True,
    )
    if writers:
        workload.start()
        workload.wait_for_transactions(1)  # writing before the plan
    plans = pipe.plan([f"{mysql_db}.t_*"], chunk_keys={f"{mysql_db}.t_nopk": "ck"})
    for plan in plans:
        for chunk in plan.chunks:
            pipe.snapshot(plan, chunk.chunk_id)
    return pipe, plans, workload


def _binlog_bytes(mysql_server) -> int:
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return sum(int(row[1]) for row in cur.fetchall())


def _let_binlog_grow(mysql_server, nbytes: int, timeout: float = 60.0, workload: Workload | None = None,
                     overlap: int = OVERLAP) -> None:
    """Wait while the writers add at least ``nbytes`` of binlog (batch counts then do not depend on speed).
    ``workload`` (bounded, idling at its bound): unbounded while the binlog grows, then bounded to ``overlap``
    more transactions, which overlap the step that follows (a stream run) without growing with its time."""
    if workload is not None:
        workload.allow_transactions(None)
    target = _binlog_bytes(mysql_server) + nbytes
    deadline = time.monotonic() + timeout
    while _binlog_bytes(mysql_server) < target:
        assert time.monotonic() < deadline, "the writers are too slow"
        time.sleep(0.2)
    if workload is not None:
        workload.allow_transactions(overlap)


def _changelog(output: str, pipe: Pipeline) -> list[Record]:
    return [r for schema in pipe.schemas.values() for r in changelog_records(output, schema)]


def _assert_mirror_equals_source(pipe: Pipeline, plans, output: str) -> None:
    pipe.changelog = _changelog(output, pipe)
    for plan in plans:
        pipe.assert_mirror_is_source(plan.table)


def _ledgers(checkpoint: str) -> list[dict]:
    folder = Path(checkpoint) / "mysqlcdc" / "batches"
    return [read_json(str(p)) for p in sorted(folder.glob("batch=*.json"))]


def _comparable(records: list[Record]) -> list[tuple]:
    """Records in a canonical order, as tuples that compare by value (an aware datetime equals itself in any
    zone object)."""
    return sorted(((r.table, r.key, r.op, r.commit_ts, r.values) for r in records), key=lambda t: t[:2])


# --- tests --------------------------------------------------------------------------------------------------


def _assert_status_at_the_last_committed_batch(pipe: Pipeline, config: StreamConfig,
                                               names: list[str]) -> list[dict]:
    """Every table's status stands at the last batch the sink committed (its end offset, exact)."""
    ledgers = _ledgers(config.checkpoint)
    assert ledgers and all(e["state"] == "committed" for e in ledgers), ledgers
    last = ledgers[-1]
    end = BinlogOffset.from_dict(last["end_offset"])
    for t in collect_status(pipe.store, config.output, names).tables:
        assert (t.stream_batch, t.stream_position, t.stream_position_exact) == (
            last["batch_id"], end.position, True), t
    return ledgers


@BOTH
def test_available_now_runs_under_concurrent_writes_equal_source(mysql_server, mysql_db, tmp_path, spark):
    """Several available-now runs, restarted from the checkpoint while writers run; then mirror == source.

    Where the stream stands has one source: what the sink committed (the batch markers and the output's
    progress file), the batches consumers can read. The checkpoint keeps no position of its own: earlier
    releases wrote ``mysqlcdc/stream_position.json`` when Spark committed a batch to the source, which Spark
    does only when it plans the next batch (one batch behind the sink). Such a file, left by an earlier
    release, changes nothing in status and is gone after the next start. (Folded in from
    test_status_position_is_the_last_batch_the_sink_committed, which set up the same world.)"""
    pipe, plans, workload = _setup(mysql_server, mysql_db, tmp_path, seed=11)
    config = _config(mysql_server, mysql_db, tmp_path, changelog_json=True, max_bytes_per_batch=40_000)
    hooked: list[tuple[int, list[TableId]]] = []
    try:
        for _ in range(2):
            # 2+ batches per run
            _let_binlog_grow(mysql_server, 3 * config.max_bytes_per_batch // 2, workload=workload)
            run_stream(spark, config, on_batch_committed=lambda b, t: hooked.append((b, t)))
    finally:
        stats = workload.stop()
    run_stream(spark, config, on_batch_committed=lambda b, t: hooked.append((b, t)))
    assert stats.transactions > 30 and stats.rotations >= 1, stats

    _assert_mirror_equals_source(pipe, plans, config.output)
    ledgers = _ledgers(config.checkpoint)
    assert len(ledgers) >= 4, "admission control should split each run into several batches"
    assert all(entry["state"] == "committed" and not entry["replay"] for entry in ledgers)
    assert [b for b, _ in hooked] == [entry["batch_id"] for entry in ledgers]
    # the batches tile the binlog: each starts where the previous one ended, at a transaction boundary
    for before, after in itertools.pairwise(ledgers):
        assert after["start_offset"] == before["end_offset"], (before, after)
    assert all(BinlogOffset.from_dict(entry["end_offset"]).at_boundary for entry in ledgers)
    assert all(set(tables) <= set(pipe.schemas) for _, tables in hooked)
    records = _changelog(config.output, pipe)
    assert len({(r.table, r.key) for r in records}) == len(records), "a change was written twice"
    # the Flink changelog-json form carries the same records
    table = plans[0].table
    batch_id = committed_batch_ids(config.output, table)[-1]
    marker = read_json(changelog_marker(config.output, table, batch_id))
    assert marker["end_offset"] is not None
    json_dir = Path(changelog_dir(config.output, table, batch_id, "changelog-json"))
    lines = [line for f in marker["changelog_json_files"] for line in (json_dir / f).read_text().splitlines()]
    assert len(lines) == marker["rows"] and all(line.startswith('{"data":{') for line in lines)
    assert {json.loads(line)["op"] for line in lines} <= {"+I", "-U", "+U", "-D"}

    # status stands at the last batch the sink committed; the checkpoint keeps no position of its own
    names = [str(p.table) for p in plans]
    old_position_file = Path(config.checkpoint) / "mysqlcdc" / "stream_position.json"
    ledgers = _assert_status_at_the_last_committed_batch(pipe, config, names)
    assert len(ledgers) >= 3, "the run should take several batches"
    assert not old_position_file.exists(), (
        f"the checkpoint keeps a stream position of its own: {old_position_file.read_text()}, where the sink "
        f"committed batch {ledgers[-1]['batch_id']} ending at {ledgers[-1]['end_offset']} (batch "
        f"{ledgers[-2]['batch_id']} ended at {ledgers[-2]['end_offset']})")
    # an earlier release's file, one batch behind: status does not read it, the next start removes it
    old_position_file.write_text(json.dumps({"offset": ledgers[-2]["end_offset"], "committed_at": "then"}))
    _assert_status_at_the_last_committed_batch(pipe, config, names)

    # one table changes, the others stay idle: status still moves every table to the stream's position
    busy = plans[0].table
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{busy.table}` SET `v` = `v` + 1 LIMIT 3")
    run_stream(spark, config)
    end = BinlogOffset.from_dict(_ledgers(config.checkpoint)[-1]["end_offset"]).position
    report = collect_status(pipe.store, config.output, [str(p.table) for p in plans])
    for plan, t in zip(plans, report.tables):
        idle = plan.table != busy
        assert idle == (committed_batch_ids(config.output, plan.table)[-1] < t.stream_batch), t.table
        assert (t.stream_position, t.stream_position_exact, t.consistent) == (end, True, True), t.table
    assert len(_assert_status_at_the_last_committed_batch(pipe, config, names)) > len(ledgers)
    assert not old_position_file.exists()
    _assert_mirror_equals_source(pipe, plans, config.output)


_KILLED_APP = """
import sys, time
from pathlib import Path
from pyspark.sql import SparkSession
sys.path.insert(0, {repo!r})
from spark_apps.binlog_stream import build_parser, run

ready, pause_batch = Path(sys.argv[1]), int(sys.argv[2])
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())

def hook(batch_id, tables):
    if batch_id == pause_batch:  # the batch's changelog and markers are written; Spark has not committed it
        ready.write_text(str(batch_id))
        time.sleep(3600)

run(spark, build_parser().parse_args(sys.argv[3:]), on_batch_committed=hook)
"""


def _kill_app_when(argv: list[str], env: dict, log_path: Path, reached, what: str) -> None:
    """Run a stream app and SIGKILL its whole process group as soon as ``reached()`` holds."""
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 150
            while not reached():
                assert proc.poll() is None, f"the app ended early:\n{log_path.read_text()[-3000:]}"
                assert time.monotonic() < deadline, (
                    f"the app never reached {what}:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.01)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_killed_stream_restarts_without_duplicates_or_gaps(mysql_server, mysql_db, tmp_path, spark, caplog):
    """SIGKILL the spark app twice: once mid-read (batch 2's ledger says "writing", its executors are decoding
    and writing part files, in the middle of transactions) and once after its sink wrote batch 1's markers but
    before Spark committed it. Each restart replays the batch over the same offsets, overwriting it, and the
    result equals an uninterrupted run."""
    pipe, plans, workload = _setup(mysql_server, mysql_db, tmp_path, seed=23)
    killed = _config(mysql_server, mysql_db, tmp_path, name="killed", max_bytes_per_batch=20_000)
    # batch 2 is not the last
    _let_binlog_grow(mysql_server, 4 * killed.max_bytes_per_batch, workload=workload)
    workload.stop()
    script = tmp_path / "killed_app.py"
    script.write_text(_KILLED_APP.format(repo=str(REPO)))
    ready = tmp_path / "ready"
    settings = _settings(mysql_server)
    env = {**os.environ, MYSQL_PASSWORD_ENV: settings.password, "PYSPARK_PYTHON": sys.executable}
    options = {
        "--mysql-url": killed.mysql_url,
        "--tables": f"{mysql_db}.t_*",
        "--chunk-store": killed.chunk_store,
        "--output": killed.output,
        "--checkpoint": killed.checkpoint,
        "--trigger": "available-now",
        "--max-bytes-per-batch": str(killed.max_bytes_per_batch),
    }
    args = [item for pair in options.items() for item in pair]
    assert settings.password not in " ".join(args)
    checkpoint = Path(killed.checkpoint)

    # kill 1: batch 1 written (markers in place), not committed by Spark
    argv = [sys.executable, str(script), str(ready), "1", *args]
    _kill_app_when(argv, env, tmp_path / "killed_app.log", ready.exists, "batch 1")
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()
    written = [t for t in pipe.schemas if Path(changelog_marker(killed.output, t, 1)).exists()]
    assert written, "the killed attempt should have left batch 1's markers behind"

    # kill 2: the restart replays batch 1, then dies while batch 2 is being read and written
    def batch_2_writing() -> bool:
        ledger = read_json(str(checkpoint / "mysqlcdc" / "batches" / f"batch={2:012d}.json"))
        return ledger is not None and ledger["state"] == "writing"

    argv = [sys.executable, str(script), str(ready), "-1", *args]
    _kill_app_when(argv, env, tmp_path / "killed_app_2.log", batch_2_writing, "batch 2")
    assert (checkpoint / "commits" / "1").exists() and not (checkpoint / "commits" / "2").exists()
    assert not any(Path(changelog_marker(killed.output, t, 2)).exists() for t in pipe.schemas)

    run_stream(spark, killed)  # takes over the dead app's lock, replays batch 2, catches up
    assert "taking over the stream lock" in caplog.text and "no longer exists" in caplog.text
    ledgers = _ledgers(killed.checkpoint)
    assert ledgers[1]["replay"] is True and ledgers[2]["replay"] is True and len(ledgers) >= 4
    assert all(entry["state"] == "committed" for entry in ledgers)

    # the uninterrupted reference: the engine reads the same binlog range in one go
    pipe.open_stream([p.table for p in plans])
    pipe.catch_up()
    got = _comparable(_changelog(killed.output, pipe))
    want = _comparable(pipe.changelog)
    assert len(want) > 200
    assert got == want, f"killed+restarted: {len(got)} records, uninterrupted: {len(want)}"
    _assert_mirror_equals_source(pipe, plans, killed.output)
    # the killed attempt's part files of batch 2 are gone: only what the markers name is left
    for schema in pipe.schemas.values():
        directory = Path(changelog_dir(killed.output, schema.table, 2))
        marker = read_json(changelog_marker(killed.output, schema.table, 2))
        on_disk = sorted(p.name for p in directory.glob("*.parquet")) if directory.exists() else []
        assert on_disk == sorted(marker["files"] if marker else []), schema.table


@BOTH
def test_second_stream_on_a_checkpoint_fails_clearly(mysql_server, mysql_db, tmp_path, spark):
    """Continuous (processing-time) mode streams new changes; a second start on its checkpoint is refused."""
    pipe, _plans, _ = _setup(mysql_server, mysql_db, tmp_path, seed=5, rows=40, writers=False)
    config = _config(mysql_server, mysql_db, tmp_path, trigger="processing-time=1 second")
    run = start_stream(spark, config)
    try:
        with pytest.raises(StreamLocked) as refused:
            start_stream(spark, config)
        message = str(refused.value)
        assert "another stream runs on this checkpoint" in message
        assert f"pid {os.getpid()}" in message and "--break-lock" in message and "stream.lock" in message
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{mysql_db}`.`t_int` (id, v) VALUES (%s, 1), (%s, 2)", (90001, 90002))
        table = TableId(mysql_db, "t_int")
        deadline = time.monotonic() + 60
        while not committed_batch_ids(config.output, table):
            assert run.query.isActive and time.monotonic() < deadline, "the continuous stream wrote nothing"
            time.sleep(0.5)
    finally:
        run.stop()
    assert StreamLock(config.checkpoint).read() is None, "stopping the stream releases its lock"
    ids = {r.values["id"] for r in changelog_records(config.output, pipe.schemas[table])}
    assert {90001, 90002} <= ids
    # a stream with a new checkpoint must not write into this stream's output (its batch ids restart at 0)
    other = replace(config, checkpoint=str(tmp_path / "ckpt-other"))
    with pytest.raises(ConfigurationError, match="already holds the changelog of another stream"):
        start_stream(spark, other)
    assert StreamLock(other.checkpoint).read() is None


def test_cli_and_app_arguments_build_the_stream_config(tmp_path):
    parser = argparse.ArgumentParser(prog="mysqlcdc")
    cli_stream.add_parser(parser.add_subparsers(dest="command"))
    common = [
        "--mysql-url",
        "mysql://cdc@db:3306",
        "--tables",
        "shop.a,shop.b",
        "--tables",
        "shop.c_*",
        "--chunk-store",
        "chunks.db",
        "--output",
        "/lake",
        "--checkpoint",
        "/ckpt",
    ]
    args = parser.parse_args(["stream", *common, "--available-now", "--max-bytes-per-batch", "1000",
                              "--catchup-partitions", "3", "--catchup-partition-bytes", "500",
                              "--rows-per-read", "70", "--rows-per-second", "500"])
    config = cli_stream.config_from_args(args)
    assert args.func is cli_stream.cmd_stream
    assert config.tables == ("shop.a", "shop.b", "shop.c_*") and config.available_now
    assert config.max_bytes_per_batch == 1000 and config.trigger_kwargs() == {"availableNow": True}
    assert (config.catchup_partitions, config.catchup_partition_bytes, config.rows_per_read) == (3, 500, 70)
    # the limits a re-snapshot's chunk reads keep: given, and the snapshot's defaults
    assert (config.source_limits.rows_per_second, config.source_limits.max_concurrent_reads) == (500, 4)
    assert (config.gc_retention, config.gc_interval_minutes) == ("3d", 60)  # garbage collection's defaults
    gc = cli_stream.config_from_args(parser.parse_args(["stream", *common, "--available-now",
                                                        "--gc-retention", "36h",
                                                        "--gc-interval-minutes", "0"]))
    assert (gc.gc_retention, gc.gc_interval_minutes) == ("36h", 0)
    assert config.gc_mirror_retention is None  # superseded mirror files: 1h while gc_retention is the default
    mirror = cli_stream.config_from_args(parser.parse_args(["stream", *common, "--available-now",
                                                            "--gc-mirror-retention", "120m"]))
    assert mirror.gc_mirror_retention == "2h"
    with pytest.raises(SystemExit):
        parser.parse_args(["stream", *common, "--gc-retention", "3 days"])
    assert config.mirror_updates == "rewrite"  # the default: every documented reader reads the mirror
    vectors = cli_stream.config_from_args(parser.parse_args(["stream", *common, "--available-now",
                                                             "--mirror-updates", "deletion_vectors"]))
    assert vectors.mirror_updates == "deletion_vectors"
    with pytest.raises(SystemExit):
        parser.parse_args(["stream", *common, "--mirror-updates", "merge_on_read"])
    continuous = cli_stream.config_from_args(
        parser.parse_args(["stream", *common, "--interval", "30 seconds"])
    )
    assert continuous.trigger_kwargs() == {"processingTime": "30 seconds"}
    with pytest.raises(SystemExit) as refused:  # refused as an argument, before Spark starts
        parser.parse_args(["stream", *common[2:], "--mysql-url", "mysql://cdc:secret@db", "--available-now"])
    assert refused.value.code == 2

    sys.path.insert(0, str(REPO))
    try:
        from spark_apps.binlog_stream import build_parser, config_from_args
    finally:
        sys.path.remove(str(REPO))
    app = config_from_args(build_parser().parse_args([*common, "--trigger", "processing-time=10 seconds"]))
    assert app.trigger_kwargs() == {"processingTime": "10 seconds"} and app.tables == config.tables
    with pytest.raises(ConfigurationError, match="available-now"):
        replace(app, trigger="hourly").trigger_kwargs()


@BOTH
def test_replayed_batch_overwrites_instead_of_duplicating(mysql_server, mysql_db, tmp_path, spark,
                                                          monkeypatch):
    specs = [s for s in SPECS if s.name in ("t_int", "t_dt")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=20, seed=3, specs=specs)
    with connect(_settings(mysql_server)) as conn:
        schemas = {TableId(mysql_db, s.name): load_schema(conn, TableId(mysql_db, s.name)) for s in specs}
    pipe = Pipeline(_settings(mysql_server), ChunkStore(str(tmp_path / "chunks.db")), mysql_db)
    pipe.schemas = schemas
    commit_ts = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    records = {
        table: [
            Record(
                str(table),
                "+I",
                "stream",
                (7, 1000 + i, 0, 1),
                dict(zip(schema.column_names, row)),
                commit_ts=commit_ts,
                binlog_file="mysql-bin.000007",
            )
            for i, row in enumerate(pipe.source(table))
        ]
        for table, schema in schemas.items()
    }
    t_int, t_dt = sorted(schemas)
    root, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    sink = ChangelogSink(root, schemas, checkpoint)
    by_name = {str(t): s for t, s in schemas.items()}

    def frame(recs: list[Record]):
        batches = list(stream_batches(recs, table_schemas=by_name))
        return spark.createDataFrame(pa.Table.from_batches(batches, STREAM_ARROW_SCHEMA))

    sink(frame(records[t_int] + records[t_dt]), 5)
    first = {t: changelog_records(root, schemas[t]) for t in schemas}
    assert [r.values for r in first[t_int]] == [r.values for r in records[t_int]]
    for schema in schemas.values():
        assert_delta_changelog_matches_markers(root, schema)
    delta_log = sorted(p.name for p in Path(changelog_table_uri(root, t_int), "_delta_log").iterdir())
    # a later attempt of batch 5 that died before its markers left files behind ...
    writer = PartitionWriter(root, 5, "dead-attempt", {str(t): s for t, s in schemas.items()})
    list(writer(iter(stream_batches(records[t_int], table_schemas=by_name))))
    # ... and the replay of batch 5 now holds fewer changes (a chunk rerun committed in between): the Delta
    # changelog holds batch 5 already, so the replay writes nothing; the committed attempt stays, whole
    sink(frame(records[t_int][:3]), 5)
    assert sorted(p.name for p in Path(changelog_table_uri(root, t_int), "_delta_log").iterdir()) == delta_log
    assert {t: changelog_records(root, schemas[t]) for t in schemas} == first
    for t, schema in schemas.items():
        assert_delta_changelog_matches_markers(root, schema)
        attempt = read_json(changelog_marker(root, t, 5))["attempt"]
        files = [p.name for p in Path(changelog_dir(root, t, 5)).iterdir()]
        assert files and all(attempt in name for name in files), files  # this and the dead attempt: gone
    assert read_json(str(Path(checkpoint) / "mysqlcdc/batches/batch=000000000005.json"))["replay"] is True

    # batch 6 is killed after its markers, before its Delta commits: the replay, with fewer changes, replaces
    # it in the markers and commits only the replay's records to Delta
    with monkeypatch.context() as patch:
        patch.setattr(DeltaChangelog, "commit", _killed)
        with pytest.raises(KeyboardInterrupt):
            sink(frame(records[t_int] + records[t_dt]), 6)
    assert len(changelog_records(root, schemas[t_int])) == 40  # the markers of the killed attempt
    sink(frame(records[t_int][:3]), 6)
    assert [r.values for r in changelog_records(root, schemas[t_int])] == [
        r.values for r in records[t_int] + records[t_int][:3]
    ]
    assert [r.values for r in changelog_records(root, schemas[t_dt])] == [r.values for r in records[t_dt]]
    assert (not Path(changelog_marker(root, t_dt, 6)).exists()
            and not Path(changelog_dir(root, t_dt, 6)).exists())
    for schema in schemas.values():
        assert_delta_changelog_matches_markers(root, schema)
    assert delta_changelog(root, schemas[t_int]).num_rows == 23
    assert DeltaTable(changelog_table_uri(root, t_dt)).transaction_version(APP_ID) == 5
    history = DeltaTable(changelog_table_uri(root, t_int)).history()
    assert [h.get("mysqlcdc.batchId") for h in history] == ["6", "5"]  # newest first, one commit per batch


def _killed(*args, **kwargs):
    raise KeyboardInterrupt("killed between the markers and the Delta commit")


@BOTH
def test_admission_ends_batches_at_transaction_boundaries(mysql_server, mysql_db):
    """Batches of at most max_bytes of binlog end where a transaction ends; a larger transaction goes whole;
    the last transaction of the binlog is admitted; an available-now target bounds the end."""
    db = mysql_db
    settings = _settings(mysql_server)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.adm (id INT PRIMARY KEY, pad VARCHAR(200) NOT NULL)")
        cur.execute(f"CREATE TABLE `{db}`.side (id INT) ENGINE=MyISAM")
        start = _binlog_end(conn)
        sql = f"INSERT INTO `{db}`.adm VALUES (%s, %s)"
        for i in range(20):
            cur.execute(sql, (i, "x" * 100))
        cur.execute("BEGIN")
        cur.executemany(sql, [(1000 + i, "y" * 150) for i in range(300)])  # ~50 KB in one transaction
        cur.execute("COMMIT")
        middle = _binlog_end(conn)
        for i in range(10):
            cur.execute(sql, (2000 + i, "z" * 100))
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"CREATE TABLE `{db}`.other (id INT)")  # a single-statement group
        cur.execute(f"INSERT INTO `{db}`.side VALUES (1)")  # a non-transactional group ending in COMMIT
        for i in range(5):
            cur.execute(sql, (3000 + i, "w"))
        end = _binlog_end(conn)
    table = TableId(db, "adm")
    with connect(settings) as conn:
        schemas = {table: load_schema(conn, table)}
    reader = BinlogReader(settings, allocate_server_id(settings, 0), {table}, schemas)
    max_bytes = 4000
    offset, rows_per_batch = start, []
    with connect(settings) as conn:
        bounded = next_batch_end(conn, start, max_bytes=None, until=middle.position)
        assert bounded.end.position == middle.position
        while True:
            admission = next_batch_end(conn, offset, max_bytes=max_bytes)
            if admission.end.key == offset.key:
                break
            items = list(reader.read_with_heartbeats(offset, admission.end.position))
            assert reader.last_offset.position == admission.end.position  # the read ends exactly there
            ids = [i.values["id"] for i in items if not isinstance(i, Heartbeat)]
            big = [i for i in ids if 1000 <= i < 1300]
            assert admission.bytes <= max_bytes or len(big) == 300, (admission, len(ids))
            assert len(big) in (0, 300), "a transaction was split between batches"
            rows_per_batch.append(len(ids))
            offset = admission.end
    assert offset.position == end.position, "the last transaction of the binlog must be admitted"
    assert sum(rows_per_batch) == 20 + 300 + 10 + 5 and len(rows_per_batch) >= 5


def _binlog_end(conn) -> BinlogOffset:
    status = current_binlog_status(conn, server_info(conn))
    return BinlogOffset.at(BinlogPosition(status.file, status.position))


@BOTH
def test_excluded_columns_never_reach_the_changelog(mysql_server, mysql_db, tmp_path, spark):
    """Excluded columns are absent from the stream's Parquet and changelog-json files; every other value is
    the one a stream without exclusions writes."""
    pipe, _plans, _ = _setup(mysql_server, mysql_db, tmp_path, seed=5, rows=30, writers=False)
    table = TableId(mysql_db, "t_int")
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE `t_int` SET `v` = `v` + 1, `note` = 'secret note', `amount` = 12.5 LIMIT 7")
        cur.execute("DELETE FROM `t_int` LIMIT 2")
    excluded = _config(mysql_server, mysql_db, tmp_path, name="x", changelog_json=True,
                       exclude_columns={str(table): ("note", "amount")})
    full = _config(mysql_server, mysql_db, tmp_path, name="full")
    run_stream(spark, excluded)
    run_stream(spark, full)

    got = changelog_records(excluded.output, pipe.schemas[table])
    want = changelog_records(full.output, pipe.schemas[table])
    assert len(got) == 7 * 2 + 2 and all("note" not in r.values and "amount" not in r.values for r in got)
    for r in want:
        r.values.pop("note"), r.values.pop("amount")
    assert _comparable(got) == _comparable(want)
    for batch_id in committed_batch_ids(excluded.output, table):
        marker = read_json(changelog_marker(excluded.output, table, batch_id))
        for name in marker["files"]:
            names = pq.read_schema(Path(changelog_dir(excluded.output, table, batch_id)) / name).names
            assert "v" in names and not {"note", "amount"} & set(names), names
        json_dir = Path(changelog_dir(excluded.output, table, batch_id, "changelog-json"))
        for name in marker["changelog_json_files"]:
            for line in (json_dir / name).read_text().splitlines():
                data = json.loads(line)["data"]
                assert "secret note" not in line and set(data) == {"id", "v", "ts", "wall"}
