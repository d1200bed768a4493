"""The example DAG through real Airflow, Spark and MariaDB, with writers running the whole time.

1. ``dag.test()``: plan -> mapped snapshot groups (Spark) -> available-now stream; map indexes are named;
2. one mapped snapshot task instance is cleared (Airflow's own clear) and the run is driven again: exactly
   that chunk group is read again, nothing else;
3. the stream task runs in continuous mode (``airflow tasks test`` in a subprocess) while a second DAG run
   redoes two chunk ids: that run's stream task skips, the running stream picks up the new HWs;
4. the continuous stream task is killed (SIGTERM): spark-submit and its driver go away; the next available-now
   run resumes from the checkpoint; then the mirror of every table equals the source row by row;
5. the MySQL password appears in no task log, XCom value, rendered template field or process command line.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.assets import table_asset_uri
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY
from tests.support.engine_harness import assert_mirror_equals_source
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "mysqlcdc_replication"
SNAPSHOT_TASK = "snapshot_phase.snapshot_chunk_group"
SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]


def _load_dag():
    spec = importlib.util.spec_from_file_location("mysqlcdc_replication_dag", REPO / "dags" / "mysqlcdc_replication.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


class CommandLines(threading.Thread):
    """Samples every process's command line while the test runs (the password must never be on one)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    self.seen.add((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
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
        return [r.rendered_fields for r in session.scalars(select(RTIF).where(RTIF.run_id.in_(run_ids))).all()]


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

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id, TaskInstance.map_index == map_index,
            )
        ).all()
        assert len(tis) == 1
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
            for ti in [t for t in dr.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
        return str(dr.state)


def _airflow_task(args: list[str], log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "tasks", "test", DAG_ID, *args],
        env=os.environ.copy(), stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def _wait(condition, what: str, log_path: Path | None = None, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        tail = log_path.read_text(errors="replace")[-3000:] if log_path and log_path.exists() else ""
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{tail}"
        time.sleep(0.5)


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


def test_example_dag_snapshot_rerun_redo_and_stream(
    mysql_server, mysql_db, airflow_home, tmp_path, monkeypatch, capfd
):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    password = settings.password
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=180, seed=31, specs=SPECS)
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", json.dumps(
        {"conn_type": "mysql", "host": settings.host, "port": settings.port, "login": settings.user,
         "password": password}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    output = str(tmp_path / "lake")
    # stream_trigger stays at its default (available-now): a run's conf would override the task params that
    # `airflow tasks test -t` sets below
    conf = {"tables": f"{mysql_db}.t_*", "output": output, "chunk_size": 60, "chunks_per_group": 2}
    tables = [TableId(mysql_db, s.name) for s in SPECS]
    dag = _load_dag()
    cmdlines = CommandLines()
    cmdlines.start()
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=31, writers=2, specs=SPECS, pace=0.1)
    workload.start()
    logs: list[str] = []
    try:
        # 1. the whole DAG while the writers run
        run = dag.test(run_conf=conf)
        assert run.state == "success", f"DAG run ended {run.state}: {_task_instances(run.run_id)}"
        tis = _task_instances(run.run_id)
        mapped = sorted((k[1], v[1]) for k, v in tis.items() if k[0] == SNAPSHOT_TASK)
        assert all(name and name.startswith(f"{mysql_db}.t_") and " chunks " in name
               and name.endswith(")") and "(plan generation 1)" in name for _, name in mapped), mapped
        record = next(v for (_, _, k, v) in _xcoms([run.run_id]) if k == XCOM_KEY)
        store = ChunkStore(record["chunk_store"])
        counts = [len(store.chunks(str(t))) for t in tables]
        assert min(counts) >= 3 and len(mapped) == sum(-(-n // 2) for n in counts), (counts, mapped)
        results = [v for (t, _, k, v) in _xcoms([run.run_id]) if t == SNAPSHOT_TASK and k == "return_value"]
        assert sum(r["rows"] for r in results) > 300 and all(r["max_hw"] for r in results)
        # one asset per table, updated by the snapshot (table complete) and by the stream run
        events = _asset_events(run.run_id)
        for t in tables:
            uri = table_asset_uri(settings.host, settings.port, str(t))
            assert events.count((uri, SNAPSHOT_TASK)) == 1 and events.count((uri, "stream")) == 1, (uri, events)

        # 2. clear one mapped snapshot task: exactly its chunk group is read again
        index, name = mapped[1]
        group_table = name.split(" ")[0]
        before = {(t, c.chunk_id): c.attempts for t in map(str, tables) for c in store.chunks(t)}
        assert _clear_and_rerun(dag, run.run_id, SNAPSHOT_TASK, index) == "success"
        after = {(t, c.chunk_id): c.attempts for t in map(str, tables) for c in store.chunks(t)}
        rerun = {key for key in after if after[key] != before[key]}
        group = next(r for r in results if r["name"] == name)
        assert rerun == {(group_table, c) for c in group["chunk_ids"]}, (name, rerun)
        assert _task_instances(run.run_id)[(SNAPSHOT_TASK, index)][2] == 2  # a second try of that task only

        # 3. the stream task in continuous mode (a long-running task) while another run redoes two chunks
        checkpoint = record["checkpoint"]
        stream_log = tmp_path / "stream_task.log"
        stream_task = _airflow_task(["stream", run.run_id, "-t", json.dumps({"stream_trigger": "continuous"})],
                                    stream_log)
        logs.append(str(stream_log))
        _wait(lambda: StreamLock(checkpoint).read() is not None, "the continuous stream to start", stream_log)
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
        stats = workload.stop()
    assert stats.transactions > 50, stats

    # 4. kill the long-running stream task the way Airflow does (SIGTERM): the Spark job stops with it
    _wait(lambda: bool(_spark_processes(checkpoint)), "spark-submit of the stream", stream_log)
    time.sleep(3)  # let it take a batch or two
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
    final = _airflow_task(["stream", redo.run_id, "-t", json.dumps({"stream_trigger": "available-now"})], final_log)
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
    fields = ("phase", "chunks", "committed", "failed", "rows", "min_hw", "max_hw", "stream_position", "consistent")
    shown = {t.table: [getattr(t, f) for f in fields] for t in page.report.tables}
    assert shown == {t.table: [getattr(t, f) for f in fields] for t in want.tables}
    assert all(t.phase == "stream" and t.consistent and t.failed == 0 for t in page.report.tables)
    html = render_status(RunRef(DAG_ID, run.run_id), page.record, page.report, notes=page.notes)
    assert all(str(t) in html for t in tables) and password not in html

    # 5. the password: nowhere
    seen = cmdlines.stop()
    assert any("spark-submit" in line or "SparkSubmit" in line for line in seen), "the sampler saw no Spark job"
    assert not [line for line in seen if password in line]
    captured = capfd.readouterr()
    assert password not in captured.out + captured.err
    for path in logs:
        assert password not in Path(path).read_text(errors="replace"), path
    for log_file in Path(airflow_home).rglob("*.log"):
        assert password not in log_file.read_text(errors="replace"), log_file
    assert password not in json.dumps(_xcoms([run.run_id, redo.run_id]), default=str)
    assert password not in json.dumps(_rendered_fields([run.run_id, redo.run_id]), default=str)
