"""Snapshot and available-now stream on a real Spark standalone cluster (master + worker), via spark-submit:
the first snapshot through the group runner (one application taking two chunk groups handed to it through the
chunk store), a chunk rerun as an application of its own.

Nothing may depend on local mode: executors are separate JVMs with their own Python workers, the apps are
submitted with a password file (never the password on the command line), and the result must equal the source.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.support.engine_harness import assert_mirror_equals_source
from tests.support.spark_cluster import SparkStandaloneCluster
from tests.support.spark_jvm import FAST_START, ensure_archive
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

REPO = Path(__file__).resolve().parents[2]
STEP = 60  # transactions the writer writes into each step (a volume: a slow machine writes no more)


@pytest.fixture(scope="module")
def spark_cluster():
    with SparkStandaloneCluster(worker_cores=2, worker_memory="1g") as cluster:
        yield cluster


def _executor_jvm_options() -> str:
    """The suite's cheaper JVM start for the executors too (a worker starts one JVM per application, with
    the application's ``spark.executor.extraJavaOptions``, not the suite's environment)."""
    archive = ensure_archive()
    return " ".join([*FAST_START, *([f"-XX:SharedArchiveFile={archive}"] if archive is not None else [])])


def _command(cluster: SparkStandaloneCluster, app: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop(MYSQL_PASSWORD_ENV, None)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", cluster.master_url,
           "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=700m",
           "--conf", f"spark.executor.extraJavaOptions={_executor_jvm_options()}",
           "--conf", "spark.sql.shuffle.partitions=2", str(REPO / "spark_apps" / app), *args]
    return cmd, env


def _submit(cluster: SparkStandaloneCluster, app: str, args: list[str],
            password: str) -> subprocess.CompletedProcess:
    cmd, env = _command(cluster, app, args)
    result = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"{app} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert password not in result.stdout + result.stderr
    assert password not in " ".join(cmd)
    return result


def test_snapshot_and_stream_on_standalone_cluster(spark_cluster, mysql_server, mysql_db, tmp_path):
    """Writers run into the snapshot (one chunk group of both tables, per-table exclusions), the first stream
    run and a chunk rerun, a bounded volume each; a secret column is left out of every file; the mirror equals
    the source."""
    specs = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=600, seed=31, specs=specs)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    password_file = tmp_path / "mysql.pw"
    password_file.write_text(settings.password)
    password_file.chmod(0o600)
    url = settings.url_without_password()
    store_path, output, checkpoint = tmp_path / "chunks.db", tmp_path / "out", tmp_path / "checkpoint"
    store = ChunkStore(str(store_path))
    t_int, t_ci = TableId(mysql_db, "t_int"), TableId(mysql_db, "t_ci")
    plans = {p.table: p for p in plan_tables(settings, store, [str(t_int), str(t_ci)], chunk_size=200)}
    assert all(len(p.chunks) >= 2 for p in plans.values())
    common = ["--mysql-url", url, "--password-file", str(password_file), "--chunk-store", str(store_path),
              "--output", str(output)]
    stream_args = [*common, "--tables", f"{t_int},{t_ci}", "--checkpoint", str(checkpoint),
                   "--trigger", "available-now", "--exclude-columns", f"{t_int}=note"]

    # one chunk group per table, both handed to the group runner (one application on the cluster)
    groups = [json.dumps({"parts": [{"table": str(t), "generation": plans[t].generation,
                                     "chunk_ids": [c.chunk_id for c in plans[t].chunks]}]})
              for t in (t_int, t_ci)]
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=31, writers=1, specs=specs, pace=0.01,
                        max_transactions=STEP, idle_at_bound=True).start()
    try:
        _run_groups_in_a_runner(spark_cluster, store, common, [
            [*common, "--chunk-group", groups[0], "--exclude-columns-of", f"{t_int}=note"],
            [*common, "--chunk-group", groups[1]]], tmp_path, settings.password)
        for table in plans:
            assert all(c.status == "committed" for c in store.chunks(str(table)))
        workload.allow_transactions(STEP)
        _submit(spark_cluster, "binlog_stream.py", stream_args, settings.password)
        # a chunk rerun while the writers go on, between two runs of the stream
        workload.allow_transactions(STEP)
        before = {c.chunk_id: c.hw for c in store.chunks(str(t_int))}
        _submit(spark_cluster, "snapshot_chunks.py",
                [*common, "--table", str(t_int), "--chunks", "1", "--exclude-columns", "note"],
                settings.password)
        after = {c.chunk_id: c.hw for c in store.chunks(str(t_int))}
        assert after[1] > before[1] and all(after[i] == before[i] for i in before if i != 1)
    finally:
        workload.stop()
    _submit(spark_cluster, "binlog_stream.py", stream_args, settings.password)  # restart from the checkpoint

    assert "note" not in read_mirror(str(output), t_int).column_names
    assert_mirror_equals_source(settings, str(output), list(plans))
    for parquet in output.rglob("*.parquet"):
        if "/t_int/" in str(parquet):
            assert "note" not in pq.read_schema(parquet).names, parquet


def _run_groups_in_a_runner(cluster: SparkStandaloneCluster, store: ChunkStore, common: list[str],
                            groups: list[list[str]], tmp_path: Path, password: str) -> None:
    """Start the group runner on the cluster, hand it ``groups`` (each a snapshot app's arguments), wait for
    them, stop it: it leaves by itself once asked."""
    scope, runner_id = "cluster/run-1", "runner-1"
    store.register_runner(scope, runner_id, source=common[1], host="test", pid=None)
    runner_args = [*common[:6], "--scope", scope, "--runner-id", runner_id, "--concurrency", "2"]
    cmd, env = _command(cluster, "snapshot_runner.py", runner_args)
    log_path = tmp_path / "runner.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ids = [store.request_group(scope, f"req-{i}", task=f"snap[{i}]", name=f"group {i}", args=args)
               .request_id for i, args in enumerate(groups)]
        deadline = time.monotonic() + 300
        while not all(store.group_request(i).finished for i in ids):
            assert process.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            time.sleep(0.2)
        for request_id in ids:
            request = store.group_request(request_id)
            assert request.state == "done" and request.result["ok"], (request, log_path.read_text()[-3000:])
        store.stop_runner(scope)
        assert process.wait(timeout=120) == 0, log_path.read_text()[-4000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    runner = store.runner(scope)
    assert runner.state == "stopped" and "ran 2 group(s), 0 failed" in runner.detail, runner
    assert password not in log_path.read_text() and password not in " ".join(cmd)
