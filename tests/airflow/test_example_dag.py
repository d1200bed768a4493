"""The example DAG through real Airflow, Spark and Oracle MySQL, with writers, and a Spark driver killed
mid-chunk. On Oracle MySQL only, for the suite's time: the same DAG runs on MariaDB in
``test_on_call_recovery.py`` (a real scheduler, failed groups, recovery from the UI, mirror equal to the
source), and the group runner's reads on both flavors in ``tests/spark/test_group_runner.py``.

1. ``dag.test()``: plan -> the run's group runner (one Spark application) -> mapped snapshot groups handed to
   it, each task deferred while its group runs -> available-now stream; map indexes are named. While it runs,
   a watcher SIGKILLs the runner's driver caught half way through a chunk read (the chunk ``running`` in the
   chunk store, its first Parquet file on disk, not committed), as when a node dies (the fault matrix, issue
   7). The deferred task of that group learns that its runner is gone, records the group's chunks ``failed``
   and runs the group with a ``spark-submit`` of its own, in the same try, as do the groups after it; the run
   succeeds: the killed chunks show two attempts (the first failed, the second committed), no other chunk is
   read twice, and the snapshot manifest (what readers follow) names only the committed attempt's files, every
   key once; the runner's teardown records it failed;
2. one mapped snapshot task instance is cleared (Airflow's own clear, which clears the runner's setup and
   teardown with it) and the run is driven again: a new runner reads exactly that chunk group again, nothing
   else;
3. the stream task runs in continuous mode (``airflow tasks test`` in a subprocess) while a second DAG run
   redoes two chunk ids: that run's stream task skips, the running stream picks up the new HWs;
4. the continuous stream task is killed (SIGTERM) once it has committed a batch of its own: spark-submit and
   its driver go away; the next available-now run resumes from the checkpoint; then the mirror of every table
   equals the source row by row (nothing of the killed attempt lost or duplicated);
5. the MySQL password appears in no task log, XCom value, rendered template field or process command line;
6. the first run's OpenLineage events (the provider's listener on, file transport): plan, snapshot groups and
   stream with their datasets, schema and column-lineage facets and run facets, the password in none, and
   each Spark application it started naming its task as OpenLineage parent (``lineage_events.py``).

The writers are bounded by volume: a first set overlaps the first run (its snapshot and the kill), a second
one the continuous stream and the redo run.
"""
from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import posixpath
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.assets import table_asset_uri
from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, FAILED, RUNNING, ChunkState, ChunkStore
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.operators.snapshot_runner import LOG_DIR_ENV
from airflow_provider_mysqlcdc.operators.spark_apps import RUNNER_APP, SNAPSHOT_APP
from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY
from airflow_provider_mysqlcdc.pipeline.settings import CHUNK_STORE_FILE
from tests.airflow.lineage_events import (
    check_example_run_lineage,
    check_spark_parents,
    openlineage_to_file,
    read_events,
)
from tests.support.engine_harness import assert_mirror_equals_source
from tests.support.processes import argv_of, snapshot_tables
from tests.support.servers import airflow_connection, create_cdc_user
from tests.support.statsd_listener import StatsdListener, airflow_statsd
from tests.support.threads import ReportingThread
from tests.support.workload import TABLE_SPECS, Workload, WorkloadStats, create_tables, seed_rows

# MariaDB: test_on_call_recovery.py runs this DAG end to end. The budget: the whole DAG in one test (plan, a
# runner killed and retried, a cleared task's rerun, a continuous stream beside a redo run, SIGTERM, the
# catch-up, the UI page, lineage and secrets) took 125-145 s on 2 quiet cores (2026-11-28), against 120 s for
# any other test; splitting it would repeat its snapshot and Spark starts, so it costs more in all
pytestmark = [pytest.mark.mysql_only, pytest.mark.budget(170)]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "mysqlcdc_replication"
SNAPSHOT_TASK = "snapshot_phase.snapshot_chunk_group"
SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]


def _load_dag():
    spec = importlib.util.spec_from_file_location("mysqlcdc_replication_dag",
                                                  REPO / "dags" / "mysqlcdc_replication.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


class CommandLines(threading.Thread):
    """Samples every process's command line while the test runs (the password must never be on one; the
    test's CDC user has a password of its own, so other test sessions on the machine cannot show it)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    line = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                    self.seen.add(line.decode(errors="replace"))
                except OSError:
                    pass
            time.sleep(0.25)

    def stop(self) -> set[str]:
        self.halt.set()
        self.join(timeout=5)
        return self.seen


def _task_instances(run_id: str):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id)
        ).all()
        return {(ti.task_id, ti.map_index): (ti.state, ti.rendered_map_index, ti.try_number) for ti in tis}


def _xcoms(run_ids: list[str]) -> list:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.run_id.in_(run_ids))).all()
        return [(r.task_id, r.map_index, r.key, r.value) for r in rows]


def _asset_events(run_id: str) -> list[tuple[str, str]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.source_task_id)
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == run_id)
        ).all()
        return [(str(uri), str(task)) for uri, task in rows]


def _rendered_fields(run_ids: list[str]) -> list:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(RTIF).where(RTIF.run_id.in_(run_ids))).all()
        return [r.rendered_fields for r in rows]


def _clear_and_rerun(dag, run_id: str, task_id: str, map_index: int) -> str:
    """What an on-call engineer's "Clear" of one mapped task instance does, then the scheduler's part: run
    what became runnable (the loop of ``dag.test()``, without its clearing of the whole run)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    # as the UI's Clear: the task's setup and teardown (the group runner's start and stop) are cleared with it
    around = [t.task_id for t in dag.task_dict[task_id].get_upstreams_only_setups_and_teardowns()]
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id,
                ((TaskInstance.task_id == task_id) & (TaskInstance.map_index == map_index))
                | TaskInstance.task_id.in_(around),
            )
        ).all()
        assert len(tis) == 1 + len(around)
        clear_task_instances(tis, session, dag_run_state=DagRunState.QUEUED)
    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    with create_session() as session:
        dr = session.scalar(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id))
        dr.dag = scheduler_dag
        dr.state = DagRunState.RUNNING
        session.commit()
        deadline = time.monotonic() + 300
        while dr.state == DagRunState.RUNNING:
            assert time.monotonic() < deadline, "the cleared run did not finish"
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [t for t in dr.get_task_instances(session=session)
                         if t.state == TaskInstanceState.SCHEDULED]
            for ti in scheduled:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
        return str(dr.state)


def _airflow_task(args: list[str], log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "tasks", "test", DAG_ID, *args],
        env=os.environ.copy(), stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def _wait(condition, what: str, log_path: Path | None = None, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path and log_path.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.1)


def _spark_processes(checkpoint: str) -> list[str]:
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if checkpoint in line and "binlog_stream.py" in line:
            out.append(f"{proc.name}: {line[:200]}")
    return out


def _stream_batches(checkpoint: str) -> int:
    """Micro-batches the stream has committed to its Spark checkpoint (``commits/<batch id>``)."""
    commits = Path(checkpoint, "commits")
    return sum(p.name.isdigit() for p in commits.iterdir()) if commits.is_dir() else 0


# --- the driver killed mid-chunk ---------------------------------------------------------------------------


@dataclass
class Kill:
    """What the watcher saw and did: the killed driver, its chunk group, the chunk it was in, the try."""

    app: str = ""  # the killed driver's Spark app: the group runner, or one group's own application
    pid: int = 0
    table: str = ""
    generation: int = 0
    running: tuple[int, ...] = ()  # chunk ids of the group (all started by the driver before its Spark job)
    chunk_id: int = -1  # the chunk whose read was half way (its first Parquet file on disk)
    version_dirs: tuple[str, ...] = ()  # the killed attempt's version directories (none was committed yet)
    attempt: int = 0  # the killed chunk's attempt number in the chunk store
    run_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None
    after_failure: dict[int, str] = field(default_factory=dict)  # chunk statuses once Airflow failed the try
    ti_state_after: str | None = None
    error: str | None = None


def _snapshot_drivers(output: str) -> list[tuple[int, list[str]]]:
    """Python driver processes of snapshot spark-submits writing to ``output`` (not the JVM, not the test):
    one group's own application, or the group runner (whose chunk store is in ``output``)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        argv = argv_of(proc.name)
        if len(argv) < 2 or int(proc.name) == os.getpid() or not any(output in a for a in argv):
            continue
        if Path(argv[0]).name.startswith("java") or "org.apache.spark.deploy.SparkSubmit" in argv:
            continue
        if any(a.endswith(("/" + SNAPSHOT_APP, "/" + RUNNER_APP)) for a in argv[1:3]):
            found.append((int(proc.name), argv))
    return found


def _snapshot_tis(run_id: str | None = None) -> list[tuple[int, int, str | None, str]]:
    """(map index, try number, state, run id) of the snapshot task's instances in runs still running (or in
    ``run_id``), from the metadata DB."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(TaskInstance.map_index, TaskInstance.try_number, TaskInstance.state, TaskInstance.run_id)
             .join(DagRun, (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id))
             .where(TaskInstance.dag_id == DAG_ID, TaskInstance.task_id == SNAPSHOT_TASK))
    query = query.where(TaskInstance.run_id == run_id) if run_id else query.where(DagRun.state == "running")
    with create_session() as session:
        rows = session.execute(query).all()
        return [(int(m), int(t), None if s is None else str(s), str(r)) for m, t, s, r in rows]


class DriverKiller(threading.Thread):
    """Kills the first snapshot driver caught half way through a chunk read, then waits for Airflow to fail
    that try and records what the chunk store says about the killed chunks at that moment."""

    def __init__(self, output: str, tables: list[str], timeout: float = 300) -> None:
        super().__init__(daemon=True, name="driver-killer")
        self.output, self.tables, self.timeout = output, tables, timeout
        self.store_path = os.path.join(output, CHUNK_STORE_FILE)
        self.kill = Kill()
        self.killed = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.kill.error = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.halt.is_set() and time.monotonic() < deadline:
            if os.path.exists(self.store_path) and self._try_kill():
                break
            time.sleep(0.05)
        if not self.killed.is_set() or self.kill.app == RUNNER_APP:
            return  # a group handed to a dead runner is run again in the same try, not retried
        # Airflow fails the try once spark-submit has exited; the try stays the same (up_for_retry) for the
        # retry delay (1 s): polled often enough to see it
        while not self.halt.is_set() and time.monotonic() < deadline:
            states = {m: s for m, _t, s, _r in _snapshot_tis(self.kill.run_id)}
            state = states.get(self.kill.map_index)
            if state in ("up_for_retry", "failed"):
                self.kill.ti_state_after = state
                with ChunkStore(self.store_path) as store:
                    self.kill.after_failure = {c.chunk_id: c.status
                                               for c in store.chunks(self.kill.table, self.kill.generation)
                                               if c.chunk_id in self.kill.running}
                return
            time.sleep(0.1)

    def _try_kill(self) -> bool:
        for pid, argv in _snapshot_drivers(self.output):
            runner = any(a.endswith("/" + RUNNER_APP) for a in argv[1:3])
            for table in self.tables if runner else snapshot_tables(argv):
                app = RUNNER_APP if runner else SNAPSHOT_APP
                if self._kill_in(pid, table, app, None if runner else argv):
                    return True
        return False

    def _kill_in(self, pid: int, table: str, app: str, argv: list[str] | None = None) -> bool:
        with ChunkStore(self.store_path) as store:
            running = [c for c in store.chunks(table) if c.status == RUNNING]
        snapshot = posixpath.join(table_dir(self.output, TableId.parse(table)), "snapshot")

        def written(chunk: ChunkState) -> bool:
            return bool(glob.glob(posixpath.join(snapshot, f"generation={chunk.generation}",
                                                 f"chunk={chunk.chunk_id}", "version=*", "part-*.parquet")))

        group = _group_chunks(argv or [], table)
        if group is not None:  # a group's own application: the kill must land before its table commits,
            # right after its last chunk is written: kill only while another of its chunks is unwritten
            running = [c for c in running if c.chunk_id in group]
            if all(written(c) for c in running):
                return False
        for chunk in running:
            if not written(chunk):
                continue
            tis = [(m, t, r) for m, t, s, r in _snapshot_tis() if s == "running"]
            if app == RUNNER_APP:  # the task whose group the runner runs waits deferred: its request says
                tis = [(m, t, r) for m, t, s, r in _snapshot_tis() if m in _runner_tasks(self.store_path)]
            os.kill(pid, signal.SIGKILL)  # the driver only: spark-submit's JVM sees it die
            started = glob.glob(posixpath.join(snapshot, f"generation={chunk.generation}", "chunk=*",
                                               "version=*"))
            self.kill = Kill(
                app=app, pid=pid, table=table, generation=chunk.generation,
                running=tuple(c.chunk_id for c in running), chunk_id=chunk.chunk_id,
                version_dirs=tuple(sorted(started)), attempt=chunk.attempts,
                run_id=tis[0][2] if len(tis) == 1 else None,
                map_index=tis[0][0] if len(tis) == 1 else None,
                try_number=tis[0][1] if len(tis) == 1 else None,
            )
            self.killed.set()
            return True
        return False


def _group_chunks(argv: list[str], table: str) -> set[int] | None:
    """The chunk ids of ``table`` a snapshot app's ``--chunk-group`` names (None: not given there)."""
    if "--chunk-group" not in argv:
        return None
    try:
        group = json.loads(argv[argv.index("--chunk-group") + 1])
        return {int(c) for part in group["parts"] if part["table"] == table for c in part["chunk_ids"]}
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def _runner_tasks(store_path: str) -> set[int]:
    """Map indexes of the snapshot tasks whose groups the group runner is running."""
    import sqlalchemy as sa

    from airflow_provider_mysqlcdc.engine.chunk_store.schema import group_requests_table as q

    with ChunkStore(store_path) as store, store.engine.connect() as conn:
        tasks = conn.execute(sa.select(q.c.task).where(q.c.state == "running")).scalars().all()
    return {int(t.rsplit("[", 1)[1].rstrip("]")) for t in tasks}


def _running_run_states() -> dict[str, str | None]:
    """The state of each unmapped task (plan, stream) of the DAG's run in progress."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state)
            .join(DagRun, (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id))
            .where(TaskInstance.dag_id == DAG_ID, TaskInstance.map_index == -1, DagRun.state == "running")
        ).all()
        return {str(task): None if state is None else str(state) for task, state in rows}


class SnapshotPhaseWriters(ReportingThread):
    """Runs ``workload`` over the snapshot phase of the run in progress: its writers start once the plan task
    has succeeded (the plan, and so the number of chunk groups, is that of the seeded rows) and stop as the
    stream task starts (which then has changes of every table to catch up). The workload's own bound caps
    the volume on a slow machine."""

    def __init__(self, workload: Workload, timeout: float = 600) -> None:
        super().__init__("snapshot-phase-writers")
        self.workload, self.timeout = workload, timeout
        self.started = threading.Event()

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.halt.is_set() and time.monotonic() < deadline:
            states = _running_run_states()
            if not self.started.is_set() and states.get("plan") == "success":
                self.workload.start()
                self.started.set()
            if self.started.is_set() and states.get("stream") not in (None, "scheduled", "queued"):
                break
            time.sleep(0.1)
        if self.started.is_set():
            self.workload.stop()

    def stop(self) -> WorkloadStats:
        """Stops the writers (if they ran); returns their figures."""
        self.halt.set()
        self.join(timeout=10)
        return self.workload.stop() if self.started.is_set() else self.workload.stats


def _assert_killed_try_retried(kill: Kill, tis: dict, tables: list[TableId], store: ChunkStore, output: str,
                               run_id: str) -> None:
    """What the kill left once the run succeeded: the killed attempt failed and the next one committed (a
    group's own application killed: Airflow retried exactly that mapped task; the group runner killed: the
    task ran its group itself in the same try); readers following the manifest see only the committed
    attempt's files."""
    assert kill.try_number == 1 and kill.map_index is not None and kill.run_id == run_id, kill
    mapped = {k[1]: v for k, v in tis.items() if k[0] == SNAPSHOT_TASK}
    tries = {i: v[2] for i, v in mapped.items()}
    if kill.app == SNAPSHOT_APP:  # once Airflow failed the try, the chunks were not "running"
        assert kill.ti_state_after == "up_for_retry", kill
        assert kill.after_failure == {c: FAILED for c in kill.running}, kill
        assert tries == {i: 2 if i == kill.map_index else 1 for i in mapped}, mapped
    else:  # the runner's end: recorded by its teardown, and no task needed a retry
        assert kill.app == RUNNER_APP and tries == {i: 1 for i in mapped}, mapped
        assert tis[("stop_runner", -1)][0] == "success", tis
    assert all(v[0] == "success" for v in tis.values()), tis
    assert tis[("plan", -1)][2] == 1 and tis[("stream", -1)][2] == 1, tis
    killed_name = mapped[kill.map_index][1]
    assert killed_name.startswith(f"{kill.table} ") and " chunks " in killed_name, (killed_name, kill)

    assert all(len(store.chunks(str(t))) >= 3 for t in tables), "want several chunks per table"
    assert kill.chunk_id in kill.running and kill.version_dirs and kill.attempt == 1, kill
    for table in map(str, tables):
        for chunk in store.chunks(table):
            history = [(e.attempt, e.event) for e in store.history(table, chunk.chunk_id, chunk.generation)]
            assert chunk.status == COMMITTED and not chunk.rerun_pending, chunk
            if table == kill.table and chunk.chunk_id in kill.running:
                # the killed attempt failed (recorded when Airflow failed the try), the retry committed
                assert chunk.attempts == 2 and chunk.committed_run_id == run_id, chunk
                assert history == [(1, "started"), (1, "failed"), (2, "started"), (2, "committed")], history
            else:  # outside the killed group: read exactly once
                assert chunk.attempts == 1 and history == [(1, "started"), (1, "committed")], (table, history)

    # readers follow the manifest: it names only the committed attempt's files of the killed chunks
    manifest = read_snapshot_manifest(output, TableId.parse(kill.table))
    assert manifest is not None and manifest.current is not None
    states = {c.chunk_id: c for c in store.chunks(kill.table)}
    by_chunk = {c.chunk_id: c for c in manifest.current.chunks}
    assert set(by_chunk) == set(states), (by_chunk, states)
    for chunk_id, entry in by_chunk.items():
        state = states[chunk_id]
        assert entry.directory(manifest.root) == state.output_version, (entry, state)
        assert entry.rows == state.rows, (entry, state)
        assert list(entry.files) == state.extra["files"], (entry, state.extra)
        if chunk_id in kill.running:  # the directory that attempt 2 committed, none of attempt 1's
            history = store.history(kill.table, chunk_id, kill.generation)
            committed = [(e.attempt, e.output_version) for e in history if e.event == COMMITTED]
            assert committed == [(2, state.output_version)], committed
            assert state.output_version not in kill.version_dirs, (state, kill.version_dirs)
    keys = []
    for chunk_id, paths in manifest.chunk_files().items():
        assert paths and not [p for p in paths if posixpath.dirname(p) in kill.version_dirs], paths
        rows = pq.read_table(paths, partitioning=None)
        assert rows.num_rows == by_chunk[chunk_id].rows, (chunk_id, paths)
        keys += rows.column("id").to_pylist()
    assert len(keys) == len(set(keys)) == sum(e.rows for e in by_chunk.values())  # every key once


def _assert_metrics_received(statsd: StatsdListener, tables: list[TableId], record: dict,
                             settings: MySQLSettings) -> None:
    """What the first run sent through Airflow's StatsD (issue 40): every table's chunk progress (snapshot
    tasks), the stream task's counters equal to its progress record's totals, the lag and headroom gauges, the
    batch timings; never the password."""
    from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from airflow_provider_mysqlcdc.engine.status.binlog_expiry import read_binlog_expiry

    got: dict[str, list] = {}
    for r in statsd.received("mysqlcdc."):
        got.setdefault(r.name, []).append(r)
    done = {r.tags["table"]: r.value for r in got["mysqlcdc.snapshot.chunks_done"]}  # the last per table
    with ChunkStore(record["chunk_store"]) as store:
        assert done == {str(t): len(store.chunks(str(t))) for t in tables}, done
    assert all(r.tags["dag_id"] == DAG_ID for rs in got.values() for r in rs)
    totals = read_stream_progress(record["output"]).totals
    written: dict[str, float] = {}
    for r in got.get("mysqlcdc.stream.rows_written", []):
        written[r.tags["table"]] = written.get(r.tags["table"], 0) + r.value
    assert written == {t: float(n) for t, n in totals.rows.items() if n}, (written, totals)
    assert sum(r.value for r in got["mysqlcdc.stream.batches"]) == totals.batches
    gauges = {"mysqlcdc.stream.lag_seconds", "mysqlcdc.stream.lag_bytes", "mysqlcdc.stream.batch_duration"}
    assert gauges <= set(got), sorted(got)
    with contextlib.closing(connect(settings)) as conn:  # headroom only where the server purges by age
        purges = read_binlog_expiry(conn).seconds is not None
    assert ("mysqlcdc.stream.binlog_headroom_seconds" in got) == purges, sorted(got)
    assert settings.password not in "\n".join(statsd.lines)


@pytest.fixture
def statsd(monkeypatch) -> Iterator[StatsdListener]:
    """Airflow's metrics of this test (its DAG runs, the task processes it starts) to a StatsD listener."""
    with airflow_statsd(monkeypatch) as listener:
        yield listener


@pytest.fixture
def task_processes() -> Iterator[list[subprocess.Popen]]:
    """The test's ``airflow tasks test`` processes: one still running when the test ends (it failed) is
    killed with its process group (spark-submit and its driver)."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def unique_cdc_user(mysql_server) -> Iterator[str]:
    """A CDC user with the CDC grants and a password no other process on the machine knows: the URL."""
    name, password = f"cdc_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    yield create_cdc_user(mysql_server, name, password)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("DROP USER IF EXISTS %s@'%%'", (name,))


def test_example_dag_snapshot_rerun_redo_and_stream(
    mysql_server, mysql_db, airflow_home, tmp_path, monkeypatch, capfd, task_processes, unique_cdc_user,
    statsd,
):
    settings = MySQLSettings.from_url(unique_cdc_user)
    password = settings.password
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=180, seed=31, specs=SPECS)
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", airflow_connection(settings))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    output = str(tmp_path / "lake")
    # stream_trigger stays at its default (available-now): a run's conf would override the task params that
    # `airflow tasks test -t` sets below. The read rate (100 rows/s per read, two reads at once) makes a
    # chunk read (60 rows and more) take over half a second, so the watcher (a look every ~0.05 s) catches
    # one half way.
    conf = {"tables": f"{mysql_db}.t_*", "output": output, "chunk_size": 60, "chunks_per_group": 2,
            "max_concurrent_reads": 2, "rows_per_second": 200}
    tables = [TableId(mysql_db, s.name) for s in SPECS]
    dag = _load_dag()
    # Airflow's default retry_delay is 5 minutes; only the delay changes, the retry is Airflow's own
    dag.task_dict[SNAPSHOT_TASK].retry_delay = timedelta(seconds=1)
    # every group's task defers at once (the example's tasks wait 20 s in place first, longer than these
    # groups take): the trigger's path is the one under test, the runner killed while a task waits in it
    dag.task_dict[SNAPSHOT_TASK].partial_kwargs["defer_after"] = 0
    assert dag.task_dict[SNAPSHOT_TASK].retries == 1
    cmdlines = CommandLines()
    cmdlines.start()
    # writers over the first run's snapshot phase (and the kill in it): slow (each row they add is read at the
    # rate above), at most 100 transactions
    writers = SnapshotPhaseWriters(Workload(lambda: mysql_server.admin(), mysql_db, seed=31, writers=2,
                                            specs=SPECS, pace=1.5, max_transactions=100))
    # and a second set for the continuous stream and the redo run (started there)
    more = Workload(lambda: mysql_server.admin(), mysql_db, seed=32, writers=2, specs=SPECS, pace=0.1,
                    max_transactions=30)
    more_started = False
    killer = DriverKiller(output, [str(t) for t in tables])
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path / "runner-logs"))
    logs: list[str] = []
    # the watchers' first queries import Airflow's models and configure its mappers: here, not in a thread
    # while dag.test() does the same (that deadlocks on the import lock)
    assert _running_run_states() == {} and _snapshot_tis() == []
    try:
        # 1. the whole DAG while the writers run; the group runner's driver killed mid-chunk
        writers.start()
        killer.start()
        try:
            with openlineage_to_file(tmp_path / "openlineage.jsonl") as lineage_file:
                run = dag.test(run_conf=conf)
        finally:
            killer.halt.set()
            killer.join(timeout=10)
            stats = writers.stop()
        kill = killer.kill
        assert kill.error is None and writers.error is None, (kill.error, writers.error)
        assert killer.killed.is_set(), "no snapshot driver was caught half way through a chunk"
        assert run.state == "success", f"DAG run ended {run.state}: {_task_instances(run.run_id)}"
        tis = _task_instances(run.run_id)
        mapped = sorted((k[1], v[1]) for k, v in tis.items() if k[0] == SNAPSHOT_TASK)
        assert all(name and name.startswith(f"{mysql_db}.t_") and " chunks " in name
               and name.endswith(")") and "(plan generation 1)" in name for _, name in mapped), mapped
        record = next(v for (_, _, k, v) in _xcoms([run.run_id]) if k == XCOM_KEY)
        store = ChunkStore(record["chunk_store"])
        counts = [len(store.chunks(str(t))) for t in tables]
        # one mapped task per group of chunks_per_group chunks, each table its own groups (no group is lost)
        assert min(counts) >= 3 and len(mapped) == sum(-(-n // 2) for n in counts), (counts, mapped)
        results = [v for (t, _, k, v) in _xcoms([run.run_id]) if t == SNAPSHOT_TASK and k == "return_value"]
        assert sum(r["rows"] for r in results) > 300 and all(r["max_hw"] for r in results)
        lineage = read_events(lineage_file)
        check_example_run_lineage(lineage, dag_id=DAG_ID, snapshot_task=SNAPSHOT_TASK, settings=settings,
                                  output=output, tables=tables, store=store,
                                  group_names=[n for _, n in mapped])
        # one asset per table, updated by the snapshot (table complete) and by the stream run
        events = _asset_events(run.run_id)
        for t in tables:
            uri = table_asset_uri(settings.host, settings.port, str(t))
            assert events.count((uri, SNAPSHOT_TASK)) == 1, (uri, events)
            assert events.count((uri, "stream")) == 1, (uri, events)
        _assert_killed_try_retried(kill, tis, tables, store, output, run.run_id)
        _assert_metrics_received(statsd, tables, record, settings)
        scope = f"{DAG_ID}/{run.run_id}"
        killed_runner = store.runner(scope)
        assert killed_runner.state == "failed" and "has ended" in killed_runner.detail, killed_runner

        # 2. clear one mapped snapshot task (not the killed one): a new runner reads exactly its chunk group
        # again
        index, name = next((i, n) for i, n in mapped[1:] + mapped[:1] if i != kill.map_index)
        group_table = name.split(" ")[0]
        before = {(t, c.chunk_id): c.attempts for t in map(str, tables) for c in store.chunks(t)}
        assert _clear_and_rerun(dag, run.run_id, SNAPSHOT_TASK, index) == "success"
        after = {(t, c.chunk_id): c.attempts for t in map(str, tables) for c in store.chunks(t)}
        rerun = {key for key in after if after[key] != before[key]}
        group = next(r for r in results if r["name"] == name)
        assert rerun == {(group_table, c) for c in group["chunk_ids"]}, (name, rerun)
        assert _task_instances(run.run_id)[(SNAPSHOT_TASK, index)][2] == 2  # a second try of that task only
        rerun_runner = store.runner(scope)  # started again by the cleared setup, stopped by its teardown
        assert rerun_runner.runner_id != killed_runner.runner_id, rerun_runner
        assert rerun_runner.state == "stopped", rerun_runner
        assert "ran 1 group(s), 0 failed" in rerun_runner.detail, rerun_runner

        # 3. the stream task in continuous mode (a long-running task) while another run redoes two chunks
        checkpoint = record["checkpoint"]
        batches_before = _stream_batches(checkpoint)
        stream_log = tmp_path / "stream_task.log"
        # a long-running task as "continuous" runs it, with a 1 s trigger (continuous's 5 s only makes the
        # test wait for its batches)
        continuous = json.dumps({"stream_trigger": "processing-time=1 second"})
        stream_task = _airflow_task(["stream", run.run_id, "-t", continuous], stream_log)
        task_processes.append(stream_task)
        logs.append(str(stream_log))
        _wait(lambda: StreamLock(checkpoint).read() is not None, "the continuous stream to start", stream_log)
        more.start()
        more_started = True
        more.wait_for_transactions(5)  # the redo's chunks then get HWs past the first run's
        redo_table = str(tables[0])
        redo_before = {c.chunk_id: c for c in store.chunks(redo_table)}
        redo = dag.test(run_conf={**conf, "redo_chunks": f"{redo_table}=0,2"})
        assert redo.state == "success", _task_instances(redo.run_id)
        redo_tis = _task_instances(redo.run_id)
        assert redo_tis[("stream", -1)][0] == "skipped", redo_tis
        redo_after = {c.chunk_id: c for c in store.chunks(redo_table)}
        assert {c for c in redo_after if redo_after[c].attempts != redo_before[c].attempts} == {0, 2}
        assert all(redo_after[c].generation == redo_before[c].generation for c in redo_after), "no re-plan"
        assert redo_after[0].hw > redo_before[0].hw and redo_after[1].hw == redo_before[1].hw
        assert stream_task.poll() is None, stream_log.read_text()[-3000:]
    finally:
        killer.halt.set()
        stats = writers.stop()
        more_stats = more.stop() if more_started else more.stats
    assert stats.transactions > 20 and stats.transactions + more_stats.transactions > 50, (stats, more_stats)

    # 4. kill the long-running stream task the way Airflow does (SIGTERM) once it has taken a batch of its
    # own: the Spark job stops with it
    _wait(lambda: bool(_spark_processes(checkpoint)), "spark-submit of the stream", stream_log)
    _wait(lambda: _stream_batches(checkpoint) > batches_before, "the continuous stream to commit a batch",
          stream_log)
    os.killpg(stream_task.pid, signal.SIGTERM)
    try:
        stream_task.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(stream_task.pid, signal.SIGKILL)
        pytest.fail(f"the stream task ignored SIGTERM:\n{stream_log.read_text()[-3000:]}")
    _wait(lambda: not _spark_processes(checkpoint), "the Spark job to stop with its task", timeout=60)
    # catch up what the writers left (the checkpoint resumes; the lock of the dead job is taken over)
    final_log = tmp_path / "final_stream.log"
    logs.append(str(final_log))
    final = _airflow_task(["stream", redo.run_id, "-t", json.dumps({"stream_trigger": "available-now"})],
                          final_log)
    task_processes.append(final)
    assert final.wait(timeout=300) == 0, final_log.read_text()[-4000:]
    assert_mirror_equals_source(settings, output, tables, min_rows=100)

    # the UI page of the first run (what its "MySQL CDC" tab loads) shows this pipeline's real numbers
    from airflow.utils.session import create_session

    from airflow_provider_mysqlcdc.engine.status.report import collect_status
    from airflow_provider_mysqlcdc.plugins.status_app import load_run_status
    from airflow_provider_mysqlcdc.plugins.status_page import RunRef, render_status

    with create_session() as session:
        page = load_run_status(session, DAG_ID, run.run_id)
    want = collect_status(store, output, [str(t) for t in tables])
    fields = ("phase", "chunks", "committed", "failed", "rows", "min_hw", "max_hw", "stream_position",
              "consistent")
    shown = {t.table: [getattr(t, f) for f in fields] for t in page.report.tables}
    assert shown == {t.table: [getattr(t, f) for f in fields] for t in want.tables}
    assert all(t.phase == "stream" and t.consistent and t.failed == 0 for t in page.report.tables)
    html = render_status(RunRef(DAG_ID, run.run_id), page.record, page.report, notes=page.notes)
    assert all(str(t) in html for t in tables) and password not in html

    # 5. the password: nowhere
    seen = cmdlines.stop()
    assert any("spark-submit" in line or "SparkSubmit" in line for line in seen), \
        "the sampler saw no Spark job"
    assert not [line for line in seen if password in line]
    check_spark_parents(lineage, seen, dag_id=DAG_ID, snapshot_task=SNAPSHOT_TASK)
    captured = capfd.readouterr()
    assert password not in captured.out + captured.err
    for path in logs:
        assert password not in Path(path).read_text(errors="replace"), path
    for log_file in Path(airflow_home).rglob("*.log"):
        assert password not in log_file.read_text(errors="replace"), log_file
    assert password not in json.dumps(_xcoms([run.run_id, redo.run_id]), default=str)
    assert password not in json.dumps(_rendered_fields([run.run_id, redo.run_id]), default=str)
