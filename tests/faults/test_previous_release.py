"""Stored formats are unchanged: what the previous release wrote, this code resumes and reads as before.

Why this exists: users upgrade a running pipeline in place. The chunk store (SQLite here), the stream's
checkpoint (Spark's offset log and our ledger, with ``BinlogOffset`` JSON in both) and the output (snapshot
versions and manifest, changelog batches and markers, the mirror and its manifest) outlive the code that wrote
them. A restructuring that moves or splits modules must not change any of them: a renamed chunk-store column,
a reworded offset field, a moved manifest or a different directory layout would strand every deployed stream.
Unit tests of the new code cannot see that (they write and read with the same code), so here the previous
release itself writes, and this code goes on from there:

1. ``git archive`` extracts the previous release (``PREVIOUS_RELEASE``) into a temp dir. A child process runs
   it (``PYTHONPATH`` = that dir, checked in the driver and in a Spark worker) against the session's MariaDB:
   ``plan`` two tables (one with a composite key), ``snapshot`` them on Spark, then (after seeded writes)
   ``stream --available-now`` into a checkpoint, which also refreshes the mirror. One process, one Spark
   start (about 25 s of the test's ~45 s).
2. This code reads all of it: the chunk store (migrated in place from schema version 2 to 5 when opened: then
   its tables and columns are the ones this code creates, and the tables the migration leaves alone are the
   same DDL text for DDL text; every chunk field, HWs included, as the previous release read it), ``status``
   (every chunk committed, stream position = the old stream's end), the offsets of the old ledger and of
   Spark's offset log (each round-trips through ``BinlogOffset`` unchanged), the snapshot manifest and the
   mirror (its manifest round-trips; its rows equal the source).
3. More seeded writes (inserts, updates, deletes, key-changing updates, a binlog rotation); this code's stream
   resumes from the old checkpoint (available-now) in the shared Spark session: its first batch starts exactly
   at the old stream's end offset, the old batches are not written again, every record of the new batches
   lies after the old end, the changelog holds exactly the expected number of records with no position twice,
   and the mirror the new code refreshed equals the source row by row. What the new code writes (ledger
   entries, markers, offsets, manifests, Parquet schemas) has the same shape as what the old code wrote, but
   for the ``format_version`` the lake's stored records carry now (``engine.lake.record_format``): the old
   records, which have none, read through the same definitions (``BatchMarker``, ``LedgerEntry``,
   ``StreamProgress``, the snapshot manifest) as version 0, and convert to the new form field for field.
4. A new stream (new checkpoint and output) over the old chunk store, whose HWs record no server: it starts
   at min(HW), logs once that it takes those positions to be its own server's, and streams every change.
"""
from __future__ import annotations

import io
import itertools
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.batch_ledger import LEDGER_VERSION, LedgerEntry
from airflow_provider_mysqlcdc.engine.lake.batch_marker import MARKER_VERSION, BatchMarker
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import (
    LAYOUT_VERSION,
    changelog_marker,
    read_json,
    stream_progress_path,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import manifest_path as mirror_manifest_path
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import mirror_files, read_manifest
from airflow_provider_mysqlcdc.engine.lake.record_format import FORMAT_VERSION
from airflow_provider_mysqlcdc.engine.lake.snapshot_commit import SnapshotCommit
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import MANIFEST_VERSION, read_snapshot_manifest
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import manifest_path as snapshot_manifest_path
from airflow_provider_mysqlcdc.engine.lake.stream_progress import PROGRESS_VERSION, read_stream_progress
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.status.table_status import STREAM
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.workload import KEY_SPACE, TABLE_SPECS, _values, create_tables, insert_sql, seed_rows

REPO = Path(__file__).resolve().parents[2]
# The last release before the restructuring into engine subpackages (HEAD~1 of commit 0d4f92b, "Architecture
# step 1"). Its stored formats are the ones deployed pipelines hold; keep pointing at that release.
PREVIOUS_RELEASE = "7d2fff2"
# That release stopped at its first query on Oracle MySQL (information_schema.GLOBAL_VARIABLES): no pipeline
# state of it exists on MySQL to upgrade, so this upgrade path is MariaDB's alone.
pytestmark = pytest.mark.mariadb_only
SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_comp")]  # a single and a composite key
ROWS = 150
CHUNK_SIZE = 60
MAX_BYTES_PER_BATCH = 6000  # a few batches per stream run
SEED = 7021
OPS_PER_TABLE = 16  # per phase, in groups of (insert, update, delete, key change)
RECORDS_PER_OP = {"insert": 1, "update": 2, "delete": 1, "key_change": 2}  # -U/+U for an update
CHILD_TIMEOUT_S = 240

# Runs in the child with the previous release first on sys.path: plan, snapshot, (the test writes), stream.
_OLD_RELEASE_APP = r'''
import contextlib, dataclasses, io, json, os, sys, time
from pathlib import Path

old_root, work = sys.argv[1], Path(sys.argv[2])
job = json.loads((work / "job.json").read_text())

import airflow_provider_mysqlcdc as pkg
assert pkg.__file__.startswith(old_root + os.sep), f"not the previous release: {pkg.__file__}"
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[2]").appName("mysqlcdc-previous-release")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").config("spark.speculation", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
worker = (spark.sparkContext.parallelize([0], 1)
          .map(lambda _: __import__("airflow_provider_mysqlcdc").__file__).collect()[0])
assert worker.startswith(old_root + os.sep), f"a Spark worker imports another release: {worker}"

import importlib

# The previous release's module names, built at run time so that import rewrites of this repository (which
# move modules of the current code) cannot touch them: this code must stay the previous release's.
cli = importlib.import_module("airflow_provider_mysqlcdc." + "cli")
ChunkStore = importlib.import_module("airflow_provider_mysqlcdc.engine." + "chunk_store").ChunkStore


def run(name, argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    (work / f"{name}.out").write_text(out.getvalue())
    if code != 0:
        sys.exit(f"the previous release's `mysqlcdc {name}` exited with {code}:\n{out.getvalue()[-3000:]}")
    return out.getvalue()


def chunk_states():
    with ChunkStore(job["chunk_store"]) as store:
        return {t: [{f.name: None if getattr(c, f.name) is None else str(getattr(c, f.name))
                     for f in dataclasses.fields(c)} for c in store.chunks(t)] for t in job["tables"]}


run("plan", job["plan"])
snapshot = json.loads(run("snapshot", job["snapshot"]))
(work / "snapshot.done").write_text("")
deadline = time.monotonic() + 120
while not (work / "writes.done").exists():
    assert time.monotonic() < deadline, "the test never finished its writes"
    time.sleep(0.05)
run("stream", job["stream"])  # stops the Spark session
(work / "child.json").write_text(json.dumps(
    {"package": pkg.__file__, "worker": worker, "version": pkg.__version__, "snapshot": snapshot,
     "chunks": chunk_states()}))
'''


# --- helpers ------------------------------------------------------------------------------------------------


def _extract_previous_release(dest: Path) -> Path:
    """``git archive PREVIOUS_RELEASE airflow_provider_mysqlcdc spark_apps | tar -x -C dest``; fails (never
    skips) when that cannot be done, saying how to fix it."""
    how = (f"this test runs the previous release's code, extracted from git commit {PREVIOUS_RELEASE} of "
           f"{REPO}: run the tests from a git clone with full history (git fetch --unshallow)")
    if shutil.which("git") is None:
        pytest.fail(f"git is not installed; {how}")
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
                           check=False, capture_output=True, text=True)
    if found.returncode != 0:
        pytest.fail(f"commit {PREVIOUS_RELEASE} is not available ({found.stderr.strip()}); {how}")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE,
                              "airflow_provider_mysqlcdc", "spark_apps"], check=False,
                             capture_output=True)
    if archive.returncode != 0:
        error = archive.stderr.decode(errors="replace").strip()
        pytest.fail(f"git archive {PREVIOUS_RELEASE} failed ({error}); {how}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    assert (dest / "airflow_provider_mysqlcdc" / "cli.py").is_file(), "not the pre-restructuring layout"
    return dest


def _write_changes(mysql_server, db: str, rng: random.Random, fresh: int) -> dict[str, int]:
    """Seeded single-row changes per table: insert (a fresh key), update, delete, key-changing update (to a
    fresh key), each group of four in one transaction; a binlog rotation between the tables. Every update and
    delete hits a different existing row, so each op changes exactly one row. Returns the changelog records
    expected per table."""
    expected: dict[str, int] = {}
    with mysql_server.admin(db) as conn, conn.cursor() as cur:
        for i, spec in enumerate(SPECS):
            cols = ", ".join(f"`{c}`" for c in spec.key_columns)
            where = " AND ".join(f"`{c}` = %s" for c in spec.key_columns)
            sets = ", ".join(f"`{c}` = %s" for c in spec.key_columns)
            cur.execute(f"SELECT {cols} FROM `{spec.name}` ORDER BY {cols}")
            targets = iter(rng.sample([tuple(r) for r in cur.fetchall()], 3 * OPS_PER_TABLE // 4))
            count = 0
            for n in range(OPS_PER_TABLE):
                op = ("insert", "update", "delete", "key_change")[n % 4]
                if n % 4 == 0:
                    cur.execute("BEGIN")
                if op == "insert":
                    fresh += 1
                    cur.execute(insert_sql(db, spec), (*spec.make_key(rng, fresh), *_values(rng)))
                elif op == "update":
                    cur.execute(f"UPDATE `{spec.name}` SET v = v + 1, note = %s WHERE {where}",
                                (rng.choice(["u", "upd", None]), *next(targets)))
                elif op == "delete":
                    cur.execute(f"DELETE FROM `{spec.name}` WHERE {where}", next(targets))
                else:
                    fresh += 1
                    cur.execute(f"UPDATE `{spec.name}` SET {sets} WHERE {where}",
                                (*spec.make_key(rng, fresh), *next(targets)))
                assert cur.rowcount == 1, (spec.name, op)
                count += RECORDS_PER_OP[op]
                if n % 4 == 3:
                    cur.execute("COMMIT")
            expected[f"{db}.{spec.name}"] = count
            if i == 0:
                cur.execute("FLUSH BINARY LOGS")
    return expected


def _without_zero_date_companions(schema):
    """The one intended layout change since that release: each temporal column's ``__zero_date`` companion."""
    return pa.schema([f for f in schema if not f.name.endswith("__zero_date")], metadata=schema.metadata)


def _sqlite_schema(path: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


def _sqlite_version(path: str) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT value FROM mysqlcdc_meta WHERE name = 'schema_version'").fetchone()[0]


def _sqlite_columns(path: str) -> dict[str, list[tuple]]:
    """Every table's columns (name, type, not null, default, key position) and the names of all objects."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        objects = sorted(conn.execute("SELECT type, name, tbl_name FROM sqlite_master").fetchall())
        columns = {name: conn.execute("SELECT * FROM pragma_table_info(?)", (name,)).fetchall()
                   for kind, name, _ in objects if kind == "table"}
    return {"": objects, **columns}


def _ledger(checkpoint: str) -> list[dict]:
    folder = Path(checkpoint) / "mysqlcdc" / "batches"
    return [read_json(str(p)) for p in sorted(folder.glob("batch=*.json"), key=lambda p: int(p.stem[6:]))]


def _spark_offsets(checkpoint: str) -> dict[int, list[str]]:
    """Spark's offset log: batch id -> the source offsets (one JSON line per source after version and
    metadata)."""
    folder = Path(checkpoint) / "offsets"
    return {int(p.name): p.read_text().splitlines()[2:] for p in folder.iterdir() if p.name.isdigit()}


def _shape(value, tables: list[str]) -> str:
    """The structure of a JSON document (keys and value types, a table name as a key counts as "<table>"), not
    its values, as comparable text."""

    def shape(v):
        if isinstance(v, dict):
            return {("<table>" if k in tables else k): shape(x) for k, x in v.items()}
        if isinstance(v, list):
            return [shape(v[0])] if v else []
        return type(v).__name__

    return json.dumps(shape(value), sort_keys=True)


def _unversioned(record: dict) -> dict:
    """A stored record less what every file and this release's records add: the versions."""
    return {k: v for k, v in record.items() if k not in ("layout_version", FORMAT_VERSION)}


def _assert_reads_as_version_0(old: dict, parsed, current: int) -> None:
    """An earlier release's record (no ``format_version``) reads as version 0 through this release's one
    definition, and converts to this release's form field for field (only ``format_version`` added)."""
    assert FORMAT_VERSION not in old and parsed.version == 0, (old, parsed)
    new, old = parsed.to_dict(), _unversioned(old)
    assert new[FORMAT_VERSION] == current, new
    assert {k: new.get(k) for k in old} == old, (old, new)  # every field kept, value for value
    assert all(new[k] is None for k in set(_unversioned(new)) - set(old)), (old, new)  # later fields: unset


def _chunk_fields(store: ChunkStore, table: str, names: list[str]) -> list[dict]:
    """The fields ``names`` (those the previous release's ChunkState has) of every chunk as text, the form the
    child dumped the previous release's view in."""
    text = lambda v: None if v is None else str(v)
    return [{k: text(getattr(c, k)) for k in names} for c in store.chunks(table)]


# --- the test -----------------------------------------------------------------------------------------------


def test_previous_release_state_resumes_and_reads_as_before(mysql_server, mysql_db, tmp_path, spark, caplog):
    old_root = _extract_previous_release(tmp_path / "previous-release")
    rng = random.Random(SEED)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=ROWS, seed=SEED, specs=SPECS)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    tables = [TableId(mysql_db, s.name) for s in SPECS]
    names = [str(t) for t in tables]
    store_path, output, checkpoint = (str(tmp_path / n) for n in ("chunks.db", "lake", "checkpoint"))
    secret, url = password_file(tmp_path, settings), settings.url_without_password()
    pattern = f"{mysql_db}.t_*"
    common = ["--mysql-url", url, "--password-file", secret, "--chunk-store", store_path, "--tables", pattern]
    work = tmp_path / "old-run"
    work.mkdir()
    (work / "job.json").write_text(json.dumps({
        "chunk_store": store_path,
        "tables": names,
        "plan": ["plan", *common, "--chunk-size", str(CHUNK_SIZE), "--json"],
        "snapshot": ["snapshot", *common, "--output", output, "--json", "--master", "local[2]"],
        "stream": ["stream", *common, "--output", output, "--checkpoint", checkpoint, "--available-now",
                   "--max-bytes-per-batch", str(MAX_BYTES_PER_BATCH)],
    }))
    script = work / "old_release_app.py"
    script.write_text(_OLD_RELEASE_APP)
    path = os.pathsep.join(filter(None, [str(old_root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}

    # 1. the previous release: plan, snapshot, then (after the test's writes) an available-now stream
    started = time.monotonic()
    log_path = work / "child.log"

    def child_failed() -> str:
        return f"the previous release failed (log {log_path}):\n{log_path.read_text()[-4000:]}"

    with open(log_path, "wb") as log:
        # cwd: the old tree (Spark starts its Python workers with `python -m`, which puts the cwd first)
        child = subprocess.Popen([sys.executable, str(script), str(old_root), str(work)], env=env,
                                 cwd=old_root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while not (work / "snapshot.done").exists():
                assert child.poll() is None, child_failed()
                assert time.monotonic() - started < CHILD_TIMEOUT_S, "the previous release's snapshot hangs"
                time.sleep(0.1)
            expected_old = _write_changes(mysql_server, mysql_db, rng, fresh=KEY_SPACE)
            (work / "writes.done").write_text("")
            child.wait(timeout=max(1.0, CHILD_TIMEOUT_S - (time.monotonic() - started)))
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    assert child.returncode == 0, child_failed()
    old = json.loads((work / "child.json").read_text())
    assert old["package"].startswith(str(old_root)) and old["worker"].startswith(str(old_root)), old

    # 2a. the chunk store: the previous release's schema (version 2) becomes the one this code creates when
    # this code opens it (schema version 3 added chunk HW servers and stream claims, 4 the group-run tables, 5
    # the verifications table),
    # and every chunk reads as the previous release read it
    old_sqlite = _sqlite_schema(store_path)
    assert _sqlite_version(store_path) == "2", "the previous release wrote schema version 2"
    assert "hw_server" not in {c[1] for c in _sqlite_columns(store_path)["mysqlcdc_chunks"]}
    fresh = str(tmp_path / "fresh.db")
    with ChunkStore(fresh) as fresh_store:
        fresh_store.tables()  # creates the schema
    ChunkStore(store_path).close()  # migrates the old store in place
    assert _sqlite_version(store_path) == str(ChunkStore(fresh).schema_version()) == "5"
    assert _sqlite_columns(store_path) == _sqlite_columns(fresh), (
        "the migrated store differs from a fresh one")
    migrated = {"mysqlcdc_chunks"}  # (a deliberate change needs a new SCHEMA_VERSION and a migration)
    assert {r for r in old_sqlite if r[2] not in migrated} <= set(_sqlite_schema(fresh)), "a table changed"
    snapshots = {r["table"]: r for r in old["snapshot"]["tables"]}
    assert sorted(snapshots) == sorted(names), snapshots
    old_hws: dict[str, dict[int, BinlogPosition]] = {}
    with ChunkStore(store_path) as store:
        for table in names:
            result = snapshots[table]
            assert result["ok"] and len(result["chunks"]) >= 3, result
            fields = list(old["chunks"][table][0])
            assert _chunk_fields(store, table, fields) == old["chunks"][table], f"{table}: chunks differ"
            old_hws[table] = {c["chunk_id"]: BinlogPosition.parse(c["hw"]) for c in result["chunks"]}
            assert {c.chunk_id: c.hw for c in store.chunks(table)} == old_hws[table], table

        # 2b. the checkpoint: ledger and Spark offsets parse, round-trip unchanged, and agree
        old_ledger = _ledger(checkpoint)
        assert len(old_ledger) >= 2 and all(e["state"] == "committed" for e in old_ledger), old_ledger
        for entry in old_ledger:
            for name in ("start_offset", "end_offset"):
                assert BinlogOffset.from_dict(entry[name]).to_dict() == entry[name], entry
            _assert_reads_as_version_0(entry, LedgerEntry.from_dict(entry), LEDGER_VERSION)
        old_progress = read_json(stream_progress_path(output))
        progress = read_stream_progress(output)
        assert old_progress is not None and progress is not None
        _assert_reads_as_version_0(old_progress, progress, PROGRESS_VERSION)
        assert progress.end_offset == BinlogOffset.from_dict(old_ledger[-1]["end_offset"])
        old_end = BinlogOffset.from_dict(old_ledger[-1]["end_offset"])
        old_last_batch = old_ledger[-1]["batch_id"]
        spark_offsets = _spark_offsets(checkpoint)
        assert max(spark_offsets) == old_last_batch
        for lines in spark_offsets.values():
            assert len(lines) == 1, lines
            assert BinlogOffset.from_json(lines[0]).to_dict() == json.loads(lines[0]), lines
        assert BinlogOffset.from_json(spark_offsets[old_last_batch][0]) == old_end
        own = Path(checkpoint) / "mysqlcdc"
        old_identity = {n: read_json(str(own / n)) for n in ("stream_id.json", "startup.json")}
        min_hw = min(hw for hws in old_hws.values() for hw in hws.values())
        assert BinlogOffset.from_dict(old_identity["startup.json"]["start"]).position == min_hw, old_identity
        # (Spark commits a batch to the source when it plans the next one: this may be an earlier batch's end)
        position = read_json(str(own / "stream_position.json"))
        assert BinlogOffset.from_dict(position["offset"]).to_dict() in [e["end_offset"] for e in old_ledger]

        # 2c. status over the old chunk store, output and checkpoint position
        for table, t in zip(names, collect_status(store, output, names).tables):
            hws, n = old_hws[table], len(old_hws[table])
            assert (t.table, t.phase, t.committed, t.chunks, t.failed) == (table, STREAM, n, n, 0), t
            assert (t.min_hw, t.max_hw) == (min(hws.values()), max(hws.values())), t
            assert (t.stream_position, t.stream_position_exact) == (old_end.position, True), t
            assert t.consistent and t.consistent_as_of == old_end.position, t

        # 2d. the output: snapshot manifest, changelog batches, mirror manifest and mirror, through this code
        with connect(settings) as conn:
            schemas = {t: load_schema(conn, t) for t in tables}
        old_markers: dict[tuple[TableId, int], dict] = {}
        old_mirror: dict[TableId, tuple[dict, object]] = {}
        for table in tables:
            manifest = read_snapshot_manifest(output, table)
            assert manifest is not None and manifest.current is not None, table
            chunks = store.chunks(table)
            assert manifest.current.generation == chunks[0].generation
            files = manifest.chunk_files()
            assert sorted(files) == [c.chunk_id for c in chunks]
            for c in chunks:  # the manifest names the version directories the chunk store committed
                version_dir = c.output_version + "/"
                assert files[c.chunk_id] and all(f.startswith(version_dir) for f in files[c.chunk_id]), c
            assert sum(pq.read_table(f).num_rows for fs in files.values() for f in fs) == ROWS
            batches = committed_batch_ids(output, table)
            assert batches and batches[-1] <= old_last_batch, (table, batches)
            old_markers.update({(table, b): read_json(changelog_marker(output, table, b)) for b in batches})
            for b in batches:
                old_marker = old_markers[table, b]
                _assert_reads_as_version_0(old_marker, BatchMarker.from_dict(old_marker), MARKER_VERSION)
            old_manifest = read_json(snapshot_manifest_path(output, table))
            assert old_manifest is not None and FORMAT_VERSION not in old_manifest, table
            records = changelog_records(output, schemas[table])
            assert len(records) == expected_old[str(table)], (table, len(records))
            assert all((r.key[0], r.key[1]) <= old_end.position.key for r in records), table
            raw = read_json(mirror_manifest_path(output, table))
            mirror = read_manifest(output, table)
            assert mirror is not None, table
            assert {"layout_version": LAYOUT_VERSION, **mirror.to_dict()} == raw, f"{table}: manifest differs"
            # refreshed after the table's last batch (a batch without its changes does not refresh it)
            last_end = read_batch(output, table, batches[-1]).end_offset
            assert mirror.consistent and mirror.as_of == last_end.position, mirror.describe()
            old_mirror[table] = (raw, pq.read_schema(mirror_files(output, table)[0]))
            assert not Path(changelog_table_uri(output, table), "_delta_log").exists()  # written before Delta
        assert_mirror_equals_source(settings, output, tables, min_rows=ROWS, delta=False)
        # the lake's snapshot commit over the old output: the manifest it publishes names the same files
        for table in tables:
            before = read_snapshot_manifest(output, table)
            assert before is not None and before.current is not None, table
            SnapshotCommit(output, table, before.current.generation).republish(store)
            published = read_json(snapshot_manifest_path(output, table))
            assert published is not None and published[FORMAT_VERSION] == MANIFEST_VERSION, table
            after = read_snapshot_manifest(output, table)
            assert after is not None and after.chunk_files() == before.chunk_files(), table

    # 3. more writes, then this code's stream resumes from the old checkpoint
    expected_new = _write_changes(mysql_server, mysql_db, rng, fresh=2 * KEY_SPACE)
    config = StreamConfig(mysql_url=url, tables=(pattern,), chunk_store=store_path, output=output,
                          checkpoint=checkpoint, password_file=secret,
                          max_bytes_per_batch=MAX_BYTES_PER_BATCH)
    with mirror_refresh(config) as refresh:
        run_stream(spark, config, on_batch_committed=refresh)

    ledger = _ledger(checkpoint)
    assert ledger[: len(old_ledger)] == old_ledger, "the old batches were run again"
    new = ledger[len(old_ledger):]
    assert new and new[0]["batch_id"] == old_last_batch + 1, new
    assert new[0]["start_offset"] == old_ledger[-1]["end_offset"], "the stream did not resume where it was"
    for before, after in itertools.pairwise(ledger):
        assert after["start_offset"] == before["end_offset"], (before, after)
    assert all(e[FORMAT_VERSION] == LEDGER_VERSION and LedgerEntry.from_dict(e).to_dict() == _unversioned(e)
               | {FORMAT_VERSION: LEDGER_VERSION} for e in new), new
    assert ({_shape(_unversioned(e), names) for e in new}
            <= {_shape(_unversioned(e), names) for e in old_ledger}), "ledger entries changed"
    new_progress = read_json(stream_progress_path(output))
    assert new_progress is not None and new_progress[FORMAT_VERSION] == PROGRESS_VERSION
    assert set(_unversioned(old_progress)) <= set(_unversioned(new_progress)), "progress record changed"
    for name, data in old_identity.items():  # the stream's identity and start, as the old run left them
        assert read_json(str(own / name)) == data, name
    # the old release's position file (a batch behind the sink; status reads the sink's) is gone
    assert not (own / "stream_position.json").exists()
    assert max(_spark_offsets(checkpoint)) == new[-1]["batch_id"]
    new_end = BinlogOffset.from_dict(new[-1]["end_offset"])
    for (table, batch_id), marker in old_markers.items():
        assert read_json(changelog_marker(output, table, batch_id)) == marker, f"{table}: batch {batch_id}"

    with ChunkStore(store_path) as store:
        for table in tables:
            everything = changelog_records(output, schemas[table])
            resumed = changelog_records(output, schemas[table], after_batch=old_last_batch)
            want = expected_old[str(table)] + expected_new[str(table)]
            assert (len(everything), len(resumed)) == (want, expected_new[str(table)]), table
            assert len({r.key for r in everything}) == len(everything), f"{table}: a change was written twice"
            assert all(old_end.position.key < (r.key[0], r.key[1]) <= new_end.position.key for r in resumed)
            old_last = max(b for t, b in old_markers if t == table)
            last = committed_batch_ids(output, table)[-1]
            assert last > old_last_batch, table
            marker = read_json(changelog_marker(output, table, last))
            assert marker[FORMAT_VERSION] == MARKER_VERSION, marker
            assert (_shape(_unversioned(marker), names)
                    == _shape(_unversioned(old_markers[table, old_last]), names)), f"{table}: marker"
            new_schema = _without_zero_date_companions(
                pq.read_schema(read_batch(output, table, last).files[0]))
            assert new_schema == pq.read_schema(read_batch(output, table, old_last).files[0]), table
            raw, mirror_schema = old_mirror[table]
            manifest = read_json(mirror_manifest_path(output, table))
            assert _shape(manifest, names) == _shape(raw, names), f"{table}: mirror manifest changed"
            mirror_now = _without_zero_date_companions(pq.read_schema(mirror_files(output, table)[0]))
            assert mirror_now == mirror_schema, f"{table}: mirror schema"
            mirror = read_manifest(output, table)
            last_end = read_batch(output, table, last).end_offset
            assert old_end.key < last_end.key <= new_end.key, (old_end, last_end, new_end)
            assert mirror.consistent and mirror.as_of == last_end.position, mirror.describe()
        for table, t in zip(names, collect_status(store, output, names).tables):
            assert (t.table, t.phase, t.stream_position) == (table, STREAM, new_end.position), t
            assert t.consistent and t.consistent_as_of == new_end.position, t
            assert {c.chunk_id: c.hw for c in store.chunks(table)} == old_hws[table], "the snapshot changed"
        # this code's stream made the old changelog and mirror Delta tables, earlier batches included
        assert_mirror_equals_source(settings, output, tables, min_rows=ROWS)

    # 4. a new stream over the old store, whose HWs record no server: it starts at min(HW), saying once that
    # it takes those positions to be its own server's, and streams every change after the snapshot
    fresh_config = replace(config, checkpoint=str(tmp_path / "checkpoint-new"),
                           output=str(tmp_path / "lake-new"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="airflow_provider_mysqlcdc"):
        run_stream(spark, fresh_config)
    said = [r.getMessage() for r in caplog.records if "record no server" in r.getMessage()]
    assert len(said) == 1 and all(name in said[0] for name in names), said
    assert "taken to be positions of the server this stream starts on" in said[0], said
    started = _ledger(fresh_config.checkpoint)[0]["start_offset"]
    assert BinlogOffset.from_dict(started).position == min_hw, started
    for table in tables:
        streamed = changelog_records(fresh_config.output, schemas[table])
        assert len(streamed) == expected_old[str(table)] + expected_new[str(table)], table
