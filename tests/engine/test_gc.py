"""Garbage collection (``engine/lake/gc``) on real files, a real chunk store and a real MariaDB.

Ages are made deterministic by passing GC a ``now`` (and by setting file times), never by sleeping: every
kind of garbage is deleted once older than the retention and kept while younger; what readers use (current
snapshot versions, current mirror files, a batch in flight, every ``_`` file) survives; the Delta tables read
the same after GC, and time travel within the retention still reads. A reader thread keeps reading while a
stream refreshes and GC runs with a tiny retention.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cli.main import main as cli_main
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import DELTA_LOG_RETENTION_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import read_changelog
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import (
    DeltaChangelog,
    batch_files,
    changelog_table_uri,
)
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.gc import collector
from airflow_provider_mysqlcdc.engine.lake.gc.collector import PeriodicGc, collect_garbage
from airflow_provider_mysqlcdc.engine.lake.gc.report import read_gc_report
from airflow_provider_mysqlcdc.engine.lake.gc.retention import (
    DEFAULT_MIRROR_RETENTION,
    MIN_GRACE,
    Retention,
    duration_text,
    parse_duration,
)
from airflow_provider_mysqlcdc.engine.lake.layout import (
    changelog_dir,
    changelog_marker,
    snapshot_dir,
    stream_progress_path,
    table_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from tests.support.layout_pipeline import LayoutPipeline

DAY = timedelta(days=1)


# --- the retention setting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [("3d", 3 * 86400), ("72h", 72 * 3600), ("30m", 1800), ("90s", 90),
                                           ("1w", 7 * 86400), (" 1.5h ", 5400), ("2D", 2 * 86400)])
def test_retention_values_parse(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["3", "-1d", "0m", "abc", "3x", "", "1y", "4000d"])
def test_nonsense_retention_is_refused_naming_the_setting(text):
    with pytest.raises(ConfigurationError, match="gc-retention"):
        parse_duration(text, "--gc-retention")


def test_the_grace_wins_over_a_lower_retention():
    assert Retention.parse("1m").keep == MIN_GRACE == timedelta(minutes=15)
    assert Retention.parse("3d").keep == 3 * DAY
    now = datetime(2026, 1, 10, tzinfo=UTC)
    assert Retention.parse("1m").cutoff(now) == (now - MIN_GRACE).timestamp()
    assert "grace" in Retention.parse("1m").describe() and Retention.parse("72h").describe() == "3d"
    assert duration_text(parse_duration("90m")) == "90m"


def test_superseded_mirror_files_keep_an_hour_unless_a_retention_is_set():
    """The default keeps superseded mirror files 1h (time travel reaches 10 minutes); a retention the user
    set applies to them as before; their own setting wins; the log horizon plus the grace is the floor."""
    assert DEFAULT_MIRROR_RETENTION == "1h"
    hour = timedelta(hours=1)
    assert Retention.settings(None) == Retention(3 * DAY, MIN_GRACE, hour)
    assert Retention.settings("3d").mirror == hour and Retention.settings("72h").mirror == hour
    assert Retention.settings("7d").mirror == 7 * DAY  # raised for long readers: the mirror's files too
    assert Retention.settings("30m").mirror == timedelta(minutes=30)
    assert Retention.settings("7d", "2h").mirror == 2 * hour
    assert (Retention.settings(None).describe(), Retention.settings(None).describe_mirror()) == ("3d", "1h")
    assert Retention.settings(None, "1m").describe_mirror() == "15m"  # the grace
    assert Retention.settings("7d").describe_mirror() is None
    assert Retention.parse("3d").mirror is None  # the API as before: one retention for every kind
    now = datetime(2026, 11, 28, 20, 0, tzinfo=UTC)
    ten = timedelta(minutes=10)
    assert Retention.settings(None).mirror_cutoff(now, ten) == (now - hour).timestamp()
    assert Retention.settings(None, "1m").mirror_cutoff(now, ten) == (now - ten - MIN_GRACE).timestamp()
    assert Retention.settings(None).mirror_cutoff(now, 3 * hour) == (now - 3 * hour - MIN_GRACE).timestamp()
    assert Retention.parse("3d").mirror_cutoff(now, 3 * hour) == Retention.parse("3d").cutoff(now)
    with pytest.raises(ConfigurationError, match="mirror retention"):
        Retention.settings(None, "soon")


# --- helpers ------------------------------------------------------------------------------------------------


def _pipeline(mysql_server, mysql_db, tmp_path, **kw) -> LayoutPipeline:
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store = ChunkStore(str(tmp_path / "chunks.db"))
    return LayoutPipeline(settings, store, mysql_db, root=str(tmp_path / "out"), **kw)


def _sql(mysql_server, mysql_db, *statements: str) -> None:
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
        conn.commit()


def _batch(pipe: LayoutPipeline, table: TableId) -> int:
    """A stream batch as the Spark sink commits it: files, marker, Delta changelog commit, progress file."""
    batch_id, _ = pipe.stream_batch()
    marker = read_batch(pipe.root, table, batch_id)
    names = [os.path.basename(f) for f in marker.files]
    # the markers list their files, as the sink's do (a killed attempt's files are then told apart)
    write_json_atomic(changelog_marker(pipe.root, table, batch_id),
                      {**marker.marker, "files": names, "changelog_json_files": []})
    DeltaChangelog(pipe.root, table).commit(batch_id, batch_files(pipe.root, table, batch_id, names),
                                            marker.marker.get("end_offset"))
    write_json_atomic(stream_progress_path(pipe.root), {
        "batch_id": batch_id, "end_offset": marker.marker.get("end_offset"), "tables": [str(table)]})
    return batch_id


def _underscore_files(root: str) -> dict[str, bytes]:
    """Every file with a ``_``-prefixed path segment under the root (manifests, markers, logs, locks)."""
    out = {}
    for path in Path(root).rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and any(p.startswith("_") for p in rel.parts):
            out[str(rel)] = path.read_bytes()
    return out


def _age(path: str, when: float) -> None:
    """Set the modification time of a file or of a directory and everything in it."""
    targets = [Path(path)] + (list(Path(path).rglob("*")) if os.path.isdir(path) else [])
    for p in targets:
        os.utime(p, (when, when))


def _rows(table: pa.Table) -> Counter:
    names = sorted(table.column_names)
    return Counter(zip(*[table.column(n).to_pylist() for n in names]))


def _current_snapshot_dirs(pipe: LayoutPipeline, table: TableId, generation: int) -> set[str]:
    """The chunk store's current version directory of each chunk of ``generation``."""
    return {snapshot_dir(pipe.root, table, generation, s.chunk_id, s.output_version)
            for s in pipe.store.chunks(str(table), generation) if s.output_version}


def _snapshot_version_dirs(root: str, table: TableId) -> set[str]:
    base = Path(table_dir(root, table)) / "snapshot"
    return {str(p) for p in base.glob("generation=*/chunk=*/version=*")}


def _mirror_files_on_disk(root: str, table: TableId) -> set[str]:
    base = Path(mirror_table_uri(root, table))
    return {str(p.relative_to(base)) for p in base.glob("chunk=*/version=*/*.parquet")}


# --- every kind, old and young -----------------------------------------------------------------------------


def _streaming_table(mysql_server, mysql_db, tmp_path, name: str, rows: int):
    """Table ``name`` (``rows`` rows, chunks of 100) snapshotted, its mirror built, the stream open on it."""
    _sql(mysql_server, mysql_db, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    _sql(mysql_server, mysql_db,
         f"INSERT INTO {name} VALUES " + ",".join(f"({i}, 0)" for i in range(1, rows + 1)))
    pipe = _pipeline(mysql_server, mysql_db, tmp_path, chunk_size=100)
    plan = pipe.plan([f"{mysql_db}.{name}"])[0]
    pipe.tables = [plan.table]
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings)
    refresher.refresh(plan.table)
    pipe.open_stream([plan.table])
    return pipe, plan, refresher


def test_gc_deletes_each_kind_once_older_than_the_retention_and_keeps_what_readers_use(
    mysql_server, mysql_db, tmp_path
):
    pipe, plan, refresher = _streaming_table(mysql_server, mysql_db, tmp_path, "acct", rows=400)
    table = plan.table
    rng = random.Random(19)
    checkpoints: list[tuple[float, int]] = []  # (a moment between two refreshes, the Delta version before it)
    for step in range(4):
        ids = rng.sample(range(1, 401), 5)
        _sql(mysql_server, mysql_db, *[f"UPDATE acct SET v = v + 1 WHERE id = {i}" for i in ids])
        refresher.refresh(table, [_batch(pipe, table)])
        time.sleep(0.02)
        checkpoints.append((time.time(), DeltaTable(mirror_table_uri(pipe.root, table)).version()))
        time.sleep(0.02)
    # a chunk rerun: its previous snapshot version is superseded
    rerun = plan.chunks[1].chunk_id
    pipe.snapshot(plan, rerun)
    refresher.refresh(table)
    # a new plan generation, fully committed, and the mirror moved to it: the old generation is garbage
    new_plan = pipe.plan([f"{mysql_db}.acct"])[0]
    assert new_plan.generation == plan.generation + 1
    for chunk in new_plan.chunks:
        pipe.snapshot(new_plan, chunk.chunk_id)
    refresher.refresh(table)
    assert read_manifest(pipe.root, table).generation == new_plan.generation
    last_batch = _batch(pipe, table)  # the stream's latest committed batch (nothing changed: no marker)
    _sql(mysql_server, mysql_db, "UPDATE acct SET v = 100 WHERE id = 7")
    last_batch = _batch(pipe, table)
    refresher.refresh(table, [last_batch])

    # killed attempts: a snapshot read that never committed, changelog files no marker or Delta commit names
    generation = new_plan.generation
    killed_snapshot = snapshot_dir(pipe.root, table, generation, new_plan.chunks[0].chunk_id, "killed")
    os.makedirs(killed_snapshot)
    pq.write_table(pa.table({"x": [1]}), os.path.join(killed_snapshot, "part-00000.parquet"))
    in_flight_snapshot = snapshot_dir(pipe.root, table, generation, new_plan.chunks[1].chunk_id, "flying")
    os.makedirs(in_flight_snapshot)
    pq.write_table(pa.table({"x": [1]}), os.path.join(in_flight_snapshot, "part-00000.parquet"))
    first_batch = committed_batch_ids(pipe.root, table)[0]
    killed_part = os.path.join(changelog_dir(pipe.root, table, first_batch), "part-00000-killed-t9.parquet")
    pq.write_table(pa.table({"x": [1]}), killed_part)
    json_dir = changelog_dir(pipe.root, table, first_batch, "changelog-json")
    os.makedirs(json_dir)
    killed_json = os.path.join(json_dir, "part-00000-killed-t9.json")
    Path(killed_json).write_text('{"data": {}, "op": "+I"}\n')
    in_flight_batch = changelog_dir(pipe.root, table, last_batch + 1)  # after the latest committed batch
    os.makedirs(in_flight_batch)
    in_flight_part = os.path.join(in_flight_batch, "part-00000-next-t1.parquet")
    pq.write_table(pa.table({"x": [1]}), in_flight_part)

    mirror_uri, changelog_uri = mirror_table_uri(pipe.root, table), changelog_table_uri(pipe.root, table)
    mirror_before = _rows(DeltaTable(mirror_uri).to_pyarrow_table())
    ours_before = _rows(read_mirror(pipe.root, table))
    changelog_before = _rows(DeltaTable(changelog_uri).to_pyarrow_table())
    markers_before = _rows(read_changelog(pipe.root, pipe.schemas[table]))
    underscore_before = _underscore_files(pipe.root)
    current_snapshots = _current_snapshot_dirs(pipe, table, generation)  # the generation the mirror uses
    current_mirror = {f.split("mirror/", 1)[1] for f in read_manifest(pipe.root, table).files}
    all_snapshots = _snapshot_version_dirs(pipe.root, table)
    all_mirror = _mirror_files_on_disk(pipe.root, table)
    superseded_snapshots = all_snapshots - current_snapshots - {killed_snapshot, in_flight_snapshot}
    assert len(superseded_snapshots) == len(plan.chunks) + 1  # the old generation's, and the rerun's
    assert all_mirror - current_mirror  # refreshes deleted nothing
    version_mid, rows_mid = checkpoints[1][1], _rows(DeltaTable(mirror_uri, version=checkpoints[1][1])
                                                     .to_pyarrow_table())
    real_now = time.time()

    def gc(now: float, **kw):
        return collect_garbage(pipe.root, pipe.store, Retention.parse("3d"),
                               now=datetime.fromtimestamp(now, UTC), **kw)

    # younger than the retention (everything above happened minutes ago): nothing at all
    young = gc(real_now + 3 * 86400 - 3600)
    assert young.total.files == 0 and not young.errors, young.as_dict()
    assert _snapshot_version_dirs(pipe.root, table) == all_snapshots
    assert _mirror_files_on_disk(pipe.root, table) == all_mirror

    # a dry run long after: finds everything, deletes nothing
    later = real_now + 4 * 86400
    _age(in_flight_snapshot, later - 60)  # still being written "now": judged by its own age
    dry = gc(later, dry_run=True)
    assert dry.by_kind["snapshot"].files and dry.by_kind["mirror"].files and dry.by_kind["changelog"].files
    assert _snapshot_version_dirs(pipe.root, table) == all_snapshots
    assert _mirror_files_on_disk(pipe.root, table) == all_mirror
    assert read_gc_report(pipe.root).runs == 1  # the run above; a dry run records nothing

    # a cutoff between two refreshes: mirror files removed before it go, those removed after it stay, so
    # time travel to a version within the retention still reads
    mid_cutoff = checkpoints[1][0]
    mid = gc(mid_cutoff + 3 * 86400)
    assert mid.by_kind["mirror"].files and not mid.errors
    assert _rows(DeltaTable(mirror_uri, version=version_mid).to_pyarrow_table()) == rows_mid
    with pytest.raises(FileNotFoundError):  # the version before the first batch's refresh lost its files
        DeltaTable(mirror_uri, version=checkpoints[0][1] - 1).to_pyarrow_table()
    with pytest.raises(CdcError,
                       match="deleted by garbage collection: time travel on the mirror reaches back"):
        read_mirror(pipe.root, table, as_of=checkpoints[0][1] - 1)  # our reader says why

    # long after: every kind of garbage goes; what readers use stays
    run = gc(later)
    assert not run.errors, run.errors
    assert run.by_kind["snapshot"].files >= len(superseded_snapshots) + 1
    assert run.by_kind["changelog"].files == 1 and run.by_kind["changelog-json"].files == 1
    assert run.by_kind["mirror"].files >= 1
    assert run.total.bytes > 0
    remaining = _snapshot_version_dirs(pipe.root, table)
    assert remaining == current_snapshots | {in_flight_snapshot}
    assert not (Path(table_dir(pipe.root, table)) / "snapshot" / f"generation={plan.generation}").exists()
    assert _mirror_files_on_disk(pipe.root, table) == current_mirror
    assert not os.path.exists(killed_part) and not os.path.exists(killed_json)
    assert os.path.exists(in_flight_part)  # after the latest committed batch: in flight, or to be replayed
    assert all(os.path.exists(f) for b in committed_batch_ids(pipe.root, table)
               for f in read_batch(pipe.root, table, b).files)
    after = _underscore_files(pipe.root)  # manifests, markers, Delta logs, the lock: all there, unchanged
    assert {k: after.get(k) for k in underscore_before} == underscore_before
    # readers read what they read before
    assert _rows(DeltaTable(mirror_uri).to_pyarrow_table()) == mirror_before
    assert _rows(read_mirror(pipe.root, table)) == ours_before
    assert _rows(DeltaTable(changelog_uri).to_pyarrow_table()) == changelog_before
    assert _rows(read_changelog(pipe.root, pipe.schemas[table])) == markers_before
    # the stream and refreshes go on after GC
    _sql(mysql_server, mysql_db, "UPDATE acct SET v = 5 WHERE id = 350")
    refresher.refresh(table, [_batch(pipe, table)])
    assert Counter((r["id"], r["v"]) for r in read_mirror(pipe.root, table).to_pylist()) == Counter(
        (r[0], r[1]) for r in pipe.source(table))

    # the report: the last run, and totals over the runs that deleted
    report = read_gc_report(pipe.root)
    assert report is not None and report.runs == 3
    assert report.total.files == mid.total.files + run.total.files
    assert report.last_run["files"] == run.total.files and report.last_run["retention"] == "3d"
    assert report.last_run["by_table"][str(table)]["snapshot"]["files"] == run.by_kind["snapshot"].files
    status = collect_status(pipe.store, pipe.root)
    assert status.gc is not None and "garbage collection" in status.render()
    assert status.as_dict()["gc"]["totals"]["files"] == report.total.files


def test_superseded_mirror_files_go_after_the_mirror_retention_never_inside_the_time_travel_horizon(
    mysql_server, mysql_db, tmp_path, monkeypatch
):
    """The defaults: superseded mirror files go an hour after they were superseded while a rerun's snapshot
    version stays its 3 days; the current version reads the same; a mirror whose Delta log keeps 3 hours
    (time travel reaches that far) keeps them 3 hours and the grace."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pipe, plan, refresher = _streaming_table(mysql_server, mysql_db, tmp_path / "a", "hot", rows=300)
    monkeypatch.setenv(DELTA_LOG_RETENTION_ENV, "3h")
    long_pipe, long_plan, long_refresher = _streaming_table(mysql_server, mysql_db, tmp_path / "b", "kept",
                                                            rows=300)
    for step in range(3):
        _sql(mysql_server, mysql_db, f"UPDATE hot SET v = v + 1 WHERE id IN (5, 150, {250 + step})",
             f"UPDATE kept SET v = v + 1 WHERE id IN (5, 150, {250 + step})")
        refresher.refresh(plan.table, [_batch(pipe, plan.table)])
        long_refresher.refresh(long_plan.table, [_batch(long_pipe, long_plan.table)])
    pipe.snapshot(plan, plan.chunks[1].chunk_id)  # a rerun: the chunk's previous snapshot version is garbage
    refresher.refresh(plan.table)
    superseded_snapshots = _snapshot_version_dirs(pipe.root, plan.table) - _current_snapshot_dirs(
        pipe, plan.table, plan.generation)
    assert len(superseded_snapshots) == 1
    real_now = time.time()

    def gc(p: LayoutPipeline, after: timedelta):
        run = collect_garbage(p.root, p.store, Retention.settings(None),
                              now=datetime.fromtimestamp(real_now, UTC) + after)
        assert not run.errors, run.errors
        return run

    for p, table in ((pipe, plan.table), (long_pipe, long_plan.table)):
        current = {f.split("mirror/", 1)[1] for f in read_manifest(p.root, table).files}
        assert _mirror_files_on_disk(p.root, table) - current  # the refreshes superseded mirror files
        assert gc(p, timedelta(minutes=50)).total.files == 0  # younger than the hour: nothing
    mirror_before = _rows(read_mirror(pipe.root, plan.table))

    run = gc(pipe, timedelta(minutes=70))
    assert run.by_kind["mirror"].files >= 3 and set(run.by_kind) == {"mirror"}
    assert run.describe().endswith("retention 3d, superseded mirror files 1h")
    assert read_gc_report(pipe.root).last_run["mirror_retention"] == "1h"
    current = {f.split("mirror/", 1)[1] for f in read_manifest(pipe.root, plan.table).files}
    assert _mirror_files_on_disk(pipe.root, plan.table) == current
    assert superseded_snapshots <= _snapshot_version_dirs(pipe.root, plan.table)  # its 3 days run on
    assert _rows(read_mirror(pipe.root, plan.table)) == mirror_before
    assert _rows(DeltaTable(mirror_table_uri(pipe.root, plan.table)).to_pyarrow_table()) == mirror_before

    # time travel on this mirror reaches 3 hours: its superseded files stay that long and the grace
    long_table = long_plan.table
    assert gc(long_pipe, timedelta(minutes=70)).total.files == 0
    assert gc(long_pipe, timedelta(hours=3, minutes=10)).total.files == 0
    assert gc(long_pipe, timedelta(hours=3, minutes=20)).by_kind["mirror"].files >= 3
    current = {f.split("mirror/", 1)[1] for f in read_manifest(long_pipe.root, long_table).files}
    assert _mirror_files_on_disk(long_pipe.root, long_table) == current


# --- a reader while GC runs -------------------------------------------------------------------------------


def test_gc_under_a_running_reader_never_breaks_the_reader(mysql_server, mysql_db, tmp_path):
    """A reader thread opens the mirror's Delta table (and our reader) and reads, again and again, while
    batches refresh the mirror and GC runs after each with a retention of seconds: every read succeeds and is
    a state the table had."""
    pipe, plan, refresher = _streaming_table(mysql_server, mysql_db, tmp_path, "hot", rows=300)
    table = plan.table
    uri = mirror_table_uri(pipe.root, table)
    states: dict[int, Counter] = {}  # Delta version -> its rows
    lock = threading.Lock()

    def record() -> None:
        dt = DeltaTable(uri)
        with lock:
            states[dt.version()] = _rows(dt.to_pyarrow_table())

    record()
    retention = Retention(timedelta(seconds=3), min_grace=timedelta(0))  # test only: no 15 minute grace
    stop = threading.Event()
    reads: list[tuple[str, int | None, Counter]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                dt = DeltaTable(uri)
                reads.append(("delta", dt.version(), _rows(dt.to_pyarrow_table())))
                reads.append(("ours", None, _rows(read_mirror(pipe.root, table))))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    deleted = deleting_runs = 0
    rng = random.Random(7)
    try:
        # bounded by what the assertions need, not by a time: GC deletes in several runs (files age past the
        # retention first) while the reader has read many times
        deadline = time.monotonic() + 120
        while deleting_runs < 5 or len(reads) <= 20:
            assert time.monotonic() < deadline, (deleting_runs, len(reads))
            ids = rng.sample(range(1, 301), 4)
            _sql(mysql_server, mysql_db, *[f"UPDATE hot SET v = v + 1 WHERE id = {i}" for i in ids])
            refresher.refresh(table, [_batch(pipe, table)])
            record()
            run = collect_garbage(pipe.root, pipe.store, retention, trigger="stream")
            assert not run.errors, run.errors
            files = run.by_kind.get("mirror").files if "mirror" in run.by_kind else 0
            deleted += files
            deleting_runs += 1 if files else 0
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors[:3]
    assert deleted > 0  # GC did delete while the reader read
    assert len(reads) > 20
    with lock:
        known = list(states.values())
    for kind, version, rows in reads:
        if kind == "delta":
            assert rows == states[version], f"Delta version {version} read differently"
        else:
            assert rows in known, "read_mirror gave a state the table never had"


# --- mysqlcdc gc, without a server --------------------------------------------------------------------------


def _changelog_root(tmp_path) -> tuple[str, str, TableId, str, str]:
    """An output root with one committed batch, a killed attempt's file in it, and a chunk store."""
    root = str(tmp_path / "out")
    table = TableId("shop", "orders")
    batch = changelog_dir(root, table, 0)
    os.makedirs(batch)
    pq.write_table(pa.table({"id": [1, 2]}), os.path.join(batch, "part-00000-a-t1.parquet"))
    killed = os.path.join(batch, "part-00000-b-t2.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3]}), killed)
    write_json_atomic(changelog_marker(root, table, 0), {"batch_id": 0, "files": ["part-00000-a-t1.parquet"]})
    write_json_atomic(stream_progress_path(root), {
        "batch_id": 1, "end_offset": {"version": 1, "file": "mysql-bin.000001", "pos": 4},
        "tables": ["shop.orders"]})
    store = str(tmp_path / "chunks.db")
    ChunkStore(store).close()
    return root, store, table, killed, os.path.join(batch, "part-00000-a-t1.parquet")


def test_mysqlcdc_gc_dry_run_deletes_nothing_then_deletes_and_reports(tmp_path, capsys):
    root, store, _table, killed, kept = _changelog_root(tmp_path)
    _age(killed, time.time() - 4 * 86400)
    _age(kept, time.time() - 4 * 86400)
    assert cli_main(["gc", "--output", root, "--chunk-store", store, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["dry_run"] and out["run"]["files"] == 1
    assert out["run"]["by_kind"]["changelog"]["files"] == 1
    assert "totals" not in out
    assert os.path.exists(killed) and not os.path.exists(os.path.join(root, "_mysqlcdc_gc.json"))
    assert cli_main(["gc", "--output", root, "--chunk-store", store, "--dry-run", "--json",
                     "--table", "shop.other"]) == 0  # only the tables named
    assert json.loads(capsys.readouterr().out)["run"]["files"] == 0

    assert cli_main(["gc", "--output", root, "--chunk-store", store, "--json", "--retention", "72h"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["files"] == 1 and out["run"]["bytes"] > 0 and out["run"]["retention"] == "3d"
    assert out["run"]["by_table"]["shop.orders"]["changelog"]["files"] == 1
    assert out["totals"]["runs"] == 1 and out["totals"]["files"] == 1
    assert not os.path.exists(killed) and os.path.exists(kept)

    assert cli_main(["gc", "--output", root, "--chunk-store", store]) == 0  # text; nothing left to delete
    text = capsys.readouterr().out
    assert "deleted 0 files" in text and "2 runs, 1 files" in text
    assert cli_main(["status", "--output", root, "--chunk-store", store]) == 0
    assert "garbage collection: since" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        cli_main(["gc", "--output", root, "--chunk-store", store, "--retention", "3"])
    assert refused.value.code == 2 and "retention" in capsys.readouterr().err


def test_a_young_killed_file_is_kept_and_the_grace_applies_to_a_low_retention(tmp_path):
    root, store, _table, killed, _ = _changelog_root(tmp_path)
    _age(killed, time.time() - 600)  # 10 minutes old: within the 15 minute grace
    with ChunkStore(store) as s:
        assert collect_garbage(root, s, Retention.parse("1m")).total.files == 0
        assert os.path.exists(killed)
        _age(killed, time.time() - 1200)
        assert collect_garbage(root, s, Retention.parse("1m")).total.files == 1
    assert not os.path.exists(killed)


def test_the_stream_gc_runs_at_most_every_interval_and_never_raises(tmp_path, monkeypatch, caplog):
    root, store, _, _, _ = _changelog_root(tmp_path)
    clock = [1000.0]
    with ChunkStore(store) as s:
        periodic = PeriodicGc(root, s, Retention.parse("3d"), 60, clock=lambda: clock[0])
        assert periodic.maybe_run() is not None
        assert periodic.maybe_run() is None  # within the interval
        clock[0] += 3601
        calls = []

        def broken(*args, **kwargs):
            calls.append(1)
            raise OSError("disk on fire")

        monkeypatch.setattr(collector, "collect_garbage", broken)
        assert periodic.maybe_run() is None and calls == [1]  # the error is logged, not raised
        assert "the stream goes on" in caplog.text
        assert PeriodicGc(root, s, Retention.parse("3d"), 0).maybe_run() is None  # 0: off
    assert read_gc_report(root).runs == 1 and read_gc_report(root).last_run["trigger"] == "stream"


def test_changelog_batches_found_clean_are_not_read_again(tmp_path, monkeypatch):
    """Batches before the latest committed one are never written again: once a run found one holding named
    files only, the next runs start after it (no marker read per batch per run)."""
    root, store, _table, killed, _ = _changelog_root(tmp_path)
    with ChunkStore(store) as s:
        collect_garbage(root, s, Retention.parse("3d"))  # the killed file is young: batch 0 is not clean
        assert read_gc_report(root).changelog_clean_through == {}  # nothing before batch 0
        _age(killed, time.time() - 4 * 86400)
        assert collect_garbage(root, s, Retention.parse("3d")).total.files == 1
        assert read_gc_report(root).changelog_clean_through == {"shop.orders": 0}
        reads = []
        from airflow_provider_mysqlcdc.engine.lake.gc import changelog_garbage as module

        real = module.read_batch_marker
        monkeypatch.setattr(module, "read_batch_marker",
                            lambda at, table, batch_id: reads.append(batch_id) or real(at, table, batch_id))
        collect_garbage(root, s, Retention.parse("3d"))
        assert 0 not in reads  # no marker of batch 0 read again
