"""Fault matrix (issue 7): a snapshot task killed mid-chunk, retried by Airflow; nothing lost or duplicated.

Real parts only: the session's MariaDB with writers running, the example DAG through ``dag.test()`` (Airflow's
own retry of the mapped task: ``retries=1``, only the delay shortened), and real ``spark-submit`` runs.

1. a watcher waits until one chunk group's Spark driver is reading a chunk (the chunk is ``running`` in
   the chunk store and its first Parquet file is on disk, not committed), then SIGKILLs that Python driver,
   as when a node dies; once Airflow has failed that try, the chunks of the group must not be left
   ``running``;
2. Airflow retries exactly that mapped task (try 2); the DAG run succeeds; the killed chunks show two
   attempts, the first failed, the second committed; no chunk of another group is read twice;
3. the snapshot manifest (what readers follow) names only the committed attempt's files: nothing of the killed
   attempt is visible, and the committed snapshot holds every key once;
4. after the writers stop and a catch-up stream run, the mirror of every table equals the source row by row.
"""
from __future__ import annotations

import glob
import json
import os
import posixpath
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, FAILED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.operators.spark_apps import SNAPSHOT_APP
from airflow_provider_mysqlcdc.pipeline.settings import CHUNK_STORE_FILE
from tests.airflow.test_example_dag import (
    DAG_ID,
    SNAPSHOT_TASK,
    SPECS,
    _airflow_task,
    _load_dag,
    _task_instances,
)
from tests.support.engine_harness import assert_mirror_equals_source
from tests.support.processes import argv_of, snapshot_tables
from tests.support.workload import Workload, create_tables, seed_rows

SEED = 47


@dataclass
class Kill:
    """What the watcher saw and did: the killed driver, its chunk group, the chunk it was in, the try."""

    pid: int = 0
    table: str = ""
    generation: int = 0
    running: tuple[int, ...] = ()  # chunk ids of the group (all started by the driver before its Spark job)
    chunk_id: int = -1  # the chunk whose read was half way (its first Parquet file on disk)
    version_dirs: tuple[str, ...] = ()  # the killed attempt's version directories (none was committed yet)
    attempt: int = 0  # the killed chunk's attempt number in the chunk store
    map_index: int | None = None
    try_number: int | None = None
    after_failure: dict[int, str] = field(default_factory=dict)  # chunk statuses once Airflow failed the try
    ti_state_after: str | None = None
    error: str | None = None


def _snapshot_drivers(output: str) -> list[tuple[int, list[str]]]:
    """Python driver processes of snapshot spark-submits writing to ``output`` (not the JVM, not the test)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        argv = argv_of(proc.name)
        if len(argv) < 2 or int(proc.name) == os.getpid() or output not in argv:
            continue
        if Path(argv[0]).name.startswith("java") or "org.apache.spark.deploy.SparkSubmit" in argv:
            continue
        if any(a.endswith("/" + SNAPSHOT_APP) for a in argv[1:3]):
            found.append((int(proc.name), argv))
    return found


def _snapshot_tis(dag_id: str) -> list[tuple[int, int, str | None]]:
    """(map index, try number, state) of the snapshot task's instances, from the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.map_index, TaskInstance.try_number, TaskInstance.state)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == SNAPSHOT_TASK)
        ).all()
        return [(int(m), int(t), None if s is None else str(s)) for m, t, s in rows]


class DriverKiller(threading.Thread):
    """Kills the first snapshot driver caught half way through a chunk read, then waits for Airflow to fail
    that try and records what the chunk store says about the killed chunks at that moment."""

    def __init__(self, output: str, timeout: float = 240) -> None:
        super().__init__(daemon=True, name="driver-killer")
        self.output, self.timeout = output, timeout
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
            time.sleep(0.1)
        if not self.killed.is_set():
            return
        # Airflow fails the try once spark-submit has exited; the try stays the same (up_for_retry)
        while not self.halt.is_set() and time.monotonic() < deadline:
            states = {m: s for m, _t, s in _snapshot_tis(DAG_ID)}
            state = states.get(self.kill.map_index)
            if state in ("up_for_retry", "failed"):
                self.kill.ti_state_after = state
                with ChunkStore(self.store_path) as store:
                    self.kill.after_failure = {c.chunk_id: c.status
                                               for c in store.chunks(self.kill.table, self.kill.generation)
                                               if c.chunk_id in self.kill.running}
                return
            time.sleep(0.5)

    def _try_kill(self) -> bool:
        for pid, argv in _snapshot_drivers(self.output):
            [table] = snapshot_tables(argv)  # one table per group (pack_tables off)
            with ChunkStore(self.store_path) as store:
                running = [c for c in store.chunks(table) if c.status == RUNNING]
            if not running:
                continue
            snapshot = posixpath.join(table_dir(self.output, TableId.parse(table)), "snapshot")
            for chunk in running:
                if not glob.glob(posixpath.join(snapshot, f"generation={chunk.generation}",
                                                f"chunk={chunk.chunk_id}", "version=*", "part-*.parquet")):
                    continue
                tis = [(m, t) for m, t, s in _snapshot_tis(DAG_ID) if s == "running"]
                os.kill(pid, signal.SIGKILL)  # the driver only: spark-submit's JVM sees it die
                started = glob.glob(posixpath.join(snapshot, f"generation={chunk.generation}", "chunk=*",
                                                   "version=*"))
                self.kill = Kill(
                    pid=pid, table=table, generation=chunk.generation,
                    running=tuple(c.chunk_id for c in running), chunk_id=chunk.chunk_id,
                    version_dirs=tuple(sorted(started)), attempt=chunk.attempts,
                    map_index=tis[0][0] if len(tis) == 1 else None,
                    try_number=tis[0][1] if len(tis) == 1 else None,
                )
                self.killed.set()
                return True
        return False


def test_snapshot_task_killed_mid_chunk_is_retried_by_airflow(
    mysql_server, mysql_db, airflow_home, tmp_path, monkeypatch
):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=180, seed=SEED, specs=SPECS)
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", json.dumps(
        {"conn_type": "mysql", "host": settings.host, "port": settings.port, "login": settings.user,
         "password": settings.password}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    output = str(tmp_path / "lake")
    # several chunks per table (the writers add rows before the plan), one chunk group per table (pack_tables
    # off): each
    # spark-submit costs ~25 s here. The read rate (40 rows/s per read) makes a chunk read take a few seconds,
    # so the watcher catches one half way.
    conf = {"tables": f"{mysql_db}.t_*", "output": output, "chunk_size": 60, "chunks_per_group": 64,
            "pack_tables": False,
            "max_concurrent_reads": 2, "rows_per_second": 80}
    tables = [TableId(mysql_db, s.name) for s in SPECS]
    dag = _load_dag()
    # Airflow's default retry_delay is 5 minutes; only the delay changes, the retry is Airflow's own
    dag.task_dict[SNAPSHOT_TASK].retry_delay = timedelta(seconds=1)
    assert dag.task_dict[SNAPSHOT_TASK].retries == 1

    killer = DriverKiller(output)
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=SPECS, pace=0.2)
    started = time.monotonic()
    workload.start()
    killer.start()
    try:
        run = dag.test(run_conf=conf)
    finally:
        killer.halt.set()
        killer.join(timeout=10)
        stats = workload.stop()
    kill = killer.kill
    dag_seconds = time.monotonic() - started
    assert kill.error is None, kill.error
    assert killer.killed.is_set(), "no snapshot driver was caught half way through a chunk"
    tis = _task_instances(run.run_id)
    assert run.state == "success", f"DAG run ended {run.state}: {tis}"
    assert stats.transactions > 20, stats

    # 1. the kill hit the first try of one mapped task; once Airflow failed it, the chunks were not "running"
    assert kill.try_number == 1 and kill.map_index is not None, kill
    assert kill.ti_state_after == "up_for_retry", kill
    assert kill.after_failure == {c: FAILED for c in kill.running}, kill

    # 2. Airflow retried exactly that mapped task; every other task ran once
    mapped = {k[1]: v for k, v in tis.items() if k[0] == SNAPSHOT_TASK}
    assert len(mapped) == len(tables), mapped
    tries = {i: v[2] for i, v in mapped.items()}
    assert tries == {i: 2 if i == kill.map_index else 1 for i in mapped}, mapped
    assert all(v[0] == "success" for v in tis.values()), tis
    assert tis[("plan", -1)][2] == 1 and tis[("stream", -1)][2] == 1, tis
    killed_name = mapped[kill.map_index][1]
    assert killed_name.startswith(f"{kill.table} ") and " chunks " in killed_name, (killed_name, kill)

    store = ChunkStore(os.path.join(output, CHUNK_STORE_FILE))
    assert all(len(store.chunks(str(t))) >= 3 for t in tables), "want several chunks per chunk group"
    assert kill.chunk_id in kill.running and kill.version_dirs and kill.attempt == 1, kill
    for table in map(str, tables):
        for chunk in store.chunks(table):
            history = [(e.attempt, e.event) for e in store.history(table, chunk.chunk_id, chunk.generation)]
            assert chunk.status == COMMITTED and not chunk.rerun_pending, chunk
            if table == kill.table and chunk.chunk_id in kill.running:
                # the killed attempt failed (recorded when Airflow failed the try), the retry committed
                assert chunk.attempts == 2 and chunk.committed_run_id == run.run_id, chunk
                assert history == [(1, "started"), (1, "failed"), (2, "started"), (2, "committed")], history
            else:  # outside the killed group: read exactly once
                assert chunk.attempts == 1 and history == [(1, "started"), (1, "committed")], (table, history)

    # 3. readers follow the manifest: it names only the committed attempt's files of the killed chunks
    killed_table = TableId.parse(kill.table)
    manifest = read_snapshot_manifest(output, killed_table)
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
    files = manifest.chunk_files()
    keys = []
    for chunk_id, paths in files.items():
        assert paths and not [p for p in paths if posixpath.dirname(p) in kill.version_dirs], paths
        rows = pq.read_table(paths, partitioning=None)
        assert rows.num_rows == by_chunk[chunk_id].rows, (chunk_id, paths)
        keys += rows.column("id").to_pylist()
    assert len(keys) == len(set(keys)) == sum(e.rows for e in by_chunk.values())  # every key once
    store.close()

    # 4. catch up what the writers left after the DAG's stream run, then the mirror equals the source
    catch_up_log = tmp_path / "catch_up_stream.log"
    catch_up = _airflow_task(["stream", run.run_id], catch_up_log)
    assert catch_up.wait(timeout=300) == 0, catch_up_log.read_text()[-4000:]
    assert_mirror_equals_source(settings, output, tables, min_rows=100)
    print(f"kill: {kill}; dag.test {dag_seconds:.0f}s, total {time.monotonic() - started:.0f}s; {stats}")
