"""The group runner's teardown records a runner that went silent as failed, whatever it last said.

A runner whose driver was killed leaves its row ``serving`` (or ``stopping``): nobody is left to record its
end. Its teardown must: a heartbeat older than ``STALE_S`` is as gone as a process that ended (the example
DAG's test kills a runner; under load its groups' own applications take longer than ``STALE_S`` before the
teardown looks). Here the runner lives on another host, so only its silence can tell.
"""
from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import sqlalchemy as sa

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store import group_runs as gr
from airflow_provider_mysqlcdc.engine.chunk_store.schema import runners_table
from airflow_provider_mysqlcdc.operators.snapshot_runner import MySqlCdcStopRunnerOperator


def test_the_teardown_records_a_silent_runner_failed(tmp_path):
    url = str(tmp_path / "chunks.db")
    with ChunkStore(url) as store:
        store.register_runner("d/r1", "u1", source="mysql://cdc@h:1", host="elsewhere", pid=4242)
        store.runner_heartbeat("d/r1", "u1")  # serving
        silent_since = store.runner("d/r1").heartbeat_at - timedelta(seconds=gr.STALE_S + 5)
    engine = sa.create_engine(f"sqlite:///{url}")
    with engine.begin() as conn:
        conn.execute(sa.update(runners_table).values(heartbeat_at=silent_since))
    engine.dispose()

    stop = MySqlCdcStopRunnerOperator(task_id="stop_runner", output_path=str(tmp_path / "out"),
                                      chunk_store=url, stop_timeout=5)
    result = stop.execute({"dag": SimpleNamespace(dag_id="d"), "run_id": "r1"})

    assert result["state"] == gr.RUNNER_FAILED, result
    assert "not been heard from" in result["detail"], result
    with ChunkStore(url) as store:
        assert store.runner("d/r1").state == gr.RUNNER_FAILED
