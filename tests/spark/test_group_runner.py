"""The group runner: one Spark application runs the chunk groups handed to it through the chunk store.

Real parts: the shared server of the run's flavor (binlog on), the shared local[2] Spark session, a SQLite
chunk store. Groups are handed over while writers change the tables; every table's committed snapshot plus
the stream from its HWs equals the source row by row. A group the runner cannot run fails alone with the
reason, and the runner goes on; asked to stop, it finishes what it runs and leaves, and a task waiting on a
request then learns that nobody will run it.
"""
from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import (
    DONE,
    GONE,
    REQUEST_FAILED,
    STOPPED,
    request_outcome,
)
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.spark.snapshot.group_runner import GroupRunnerLoop, RunnerSettings
from tests.spark.test_snapshot import _parquet_snapshots, secrets  # noqa: F401 - fixture
from tests.support.engine_harness import Pipeline
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

pytestmark = pytest.mark.both_flavors

SEED = 5151
SCOPE = "mysqlcdc_replication/manual__test"
APPS = Path(__file__).resolve().parents[2] / "spark_apps"


def _runner_app():
    sys.path.insert(0, str(APPS))  # as spark-submit runs it: snapshot_chunks.py beside it
    try:
        import snapshot_runner
    finally:
        sys.path.remove(str(APPS))
    return snapshot_runner


def _wait(condition, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_runner_runs_the_groups_handed_to_it_exactly_under_writes(
        spark, mysql_server, server_flavor, mysql_db, tmp_path, secrets):  # noqa: F811
    rng = random.Random(SEED)
    # a table without a primary key is exact where the read view is: MariaDB's consistent snapshot, Oracle
    # MySQL's executed-GTID window (the test servers run with gtid_mode=ON)
    names = ("t_int", "t_ci", "t_dec", "t_nopk")
    specs = [s for s in TABLE_SPECS if s.name in names]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=120, seed=SEED, specs=specs)
    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    url, password_file = secrets
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store = ChunkStore(store_url)
    plans = plan_tables(settings, store, [f"{mysql_db}.{n}" for n in names], chunk_size=30,
                        chunk_keys={f"{mysql_db}.t_nopk": "ck"} if "t_nopk" in names else None)
    tables = [p.table for p in plans]
    # groups as the plan task cuts them: two chunks each, the last table's chunks with another table's
    groups = [{"parts": [{"table": str(p.table), "generation": p.generation, "chunk_ids": ids}]}
              for p in plans[:-1] for ids in ([c.chunk_id for c in p.chunks][i:i + 2]
                                              for i in range(0, len(p.chunks), 2))]
    groups[-1]["parts"].append({"table": str(plans[-1].table), "generation": plans[-1].generation,
                                "chunk_ids": [c.chunk_id for c in plans[-1].chunks]})
    store.register_runner(SCOPE, "runner-1", source=url, host="here", pid=None)
    loop = GroupRunnerLoop(store, RunnerSettings(SCOPE, "runner-1", concurrency=3, poll_s=0.1),
                           _runner_app().GroupArguments(spark, url, store_url), say=lambda _m: None)
    served: list[str] = []
    serving = threading.Thread(target=lambda: served.append(loop.serve()), daemon=True)
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=specs).start()
    try:
        serving.start()
        ids = []
        for i, group in enumerate(groups):
            args = ["--mysql-url", url, "--password-file", password_file, "--output", output,
                    "--run-id", "run-1", "--chunk-group", json.dumps(group)]
            ids.append(store.request_group(SCOPE, f"req-{i}", task=f"snap[{i}]", name=f"group {i}",
                                           args=args).request_id)
        elsewhere = url.replace("@", "@other-")
        bad = store.request_group(SCOPE, "req-bad", task="snap[99]", name="elsewhere", args=[
            "--mysql-url", elsewhere, "--output", output, "--chunk-group", json.dumps(groups[0])])
        _wait(lambda: all(store.group_request(i).finished for i in [*ids, bad.request_id]), "every group")
    finally:
        stats = workload.stop()
    assert stats.transactions > 10, stats
    for request_id in ids:
        request = store.group_request(request_id)
        assert request.state == DONE and request.result["ok"], request
        assert request_outcome(request, store.runner(SCOPE)) == (DONE, "")
    refused = store.group_request(bad.request_id)
    assert refused.state == REQUEST_FAILED and "this runner from" in refused.error, refused
    assert request_outcome(refused, store.runner(SCOPE))[0] == REQUEST_FAILED
    for table in tables:  # every chunk once, by this run
        assert {(c.status, c.attempts, c.committed_run_id) for c in store.chunks(table)} == {
            (COMMITTED, 1, "run-1")}, table

    # asked to stop: it leaves; a request queued now will not be run, and its waiter learns so
    store.stop_runner(SCOPE)
    serving.join(timeout=30)
    assert not serving.is_alive() and "asked to stop" in served[0], served
    assert f"ran {len(groups)} group(s), 1 failed" in served[0], served
    late = store.request_group(SCOPE, "req-late", task="snap[7]", name="late", args=[])
    runner = store.runner(SCOPE)
    assert runner.state == STOPPED and request_outcome(late, runner)[0] == GONE

    pipe = Pipeline(settings, store, mysql_db)
    with connect(settings) as conn:
        pipe.schemas = {t: load_schema(conn, t) for t in tables}
    pipe.open_stream(tables)
    pipe.pump(rng, batches=2)
    pipe.catch_up()
    for table in tables:
        pipe.snapshots = {(table, c): rows for c, rows in _parquet_snapshots(output, table).items()}
        pipe.assert_mirror_is_source(table)
    store.close()
