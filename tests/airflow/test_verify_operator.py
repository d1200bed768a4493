"""The example DAG ``mysqlcdc_verify_daily`` (``MySqlCdcVerifyOperator``) through real Airflow
(``dag.test()``), the session's server and a lake the engine's pipeline writes in the documented layout with
its stream progress (``tests/support/layout_pipeline.py``; no Spark: the test is about the operator), its
stream driven by a thread of the test.

On MariaDB and on Oracle MySQL.

1. Writes the stream has not read yet when the task starts: the task takes its digests, defers (the trigger
   runs in line in ``dag.test()``), the stream catches up only once the trigger looks, the trigger fires and
   the task resumes to compare: every chunk matches; XCom holds the summary (counts and the verify id).
2. A row changed in the source behind the binlog's back (``SET sql_log_bin = 0``): the task fails, naming the
   chunk, its key range, both counts and the repair commands; the verdicts are in the chunk store; the
   password is in no log.
"""
from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.triggers.stream_position import StreamPositionTrigger
from tests.support.layout_pipeline import LayoutPipeline, drain_and_refresh
from tests.support.servers import airflow_connection
from tests.support.workload import TABLE_SPECS, create_tables, seed_rows

REPO = Path(__file__).resolve().parents[2]
SPECS = [s for s in TABLE_SPECS if s.name == "t_int"]


def _load_dag():
    spec = importlib.util.spec_from_file_location("mysqlcdc_verify_daily_dag",
                                                  REPO / "dags" / "mysqlcdc_verify_daily.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


class StreamDriver(threading.Thread):
    """The stream (batches, each followed by the mirror refresh) while ``go`` is set."""

    def __init__(self, pipe: LayoutPipeline, refresher: MirrorRefresher) -> None:
        super().__init__(daemon=True)
        self.pipe, self.refresher = pipe, refresher
        self.go, self.halt = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                if self.go.wait(0.1):
                    batch_id, changed = self.pipe.stream_batch(max_rows=300)
                    self.refresher.on_batch_committed(batch_id, sorted(changed, key=str))
                    time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)
        assert self.error is None, self.error


@pytest.mark.both_flavors  # issue 39: the operator works on both server flavors
def test_verify_dag_defers_until_the_stream_passes_then_finds_a_changed_row(
        mysql_server, mysql_db, airflow_home, tmp_path, monkeypatch, capsys):
    from tests.airflow.test_example_dag import _task_instances, _xcoms

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=150, seed=39, specs=SPECS)
    root, store_path = str(tmp_path / "lake"), str(tmp_path / "chunks.db")
    store = ChunkStore(store_path)
    pipe = LayoutPipeline(settings, store, mysql_db, root=root, chunk_size=60, progress=True)
    refresher = MirrorRefresher(root, store, settings=settings)
    table = TableId(mysql_db, "t_int")
    [plan] = pipe.plan([str(table)])
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    pipe.open_stream([table])
    pipe.tables = [table]
    drain_and_refresh(pipe, refresher)

    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", airflow_connection(settings))
    dag = _load_dag()
    task = dag.get_task("verify")
    assert task.deferrable
    task.defer_after, task.poll_interval = 0.0, 0.2  # defer at once; the trigger looks every 0.2 s
    conf = {"tables": f"{mysql_db}.t_*", "output": root, "chunk_store": store_path, "wait_timeout": 120}

    driver = StreamDriver(pipe, refresher)
    looks = []
    look = StreamPositionTrigger._look

    def first_look_starts_the_stream(self, wanted):  # the stream is behind until the trigger waits for it
        looks.append(wanted)
        driver.go.set()
        return look(self, wanted)

    monkeypatch.setattr(StreamPositionTrigger, "_look", first_look_starts_the_stream)
    driver.start()
    try:
        # 1. writes the stream has not read: the task defers, then matches once the stream has passed
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE `{mysql_db}`.t_int SET v = v + 1 ORDER BY id LIMIT 40")
            cur.execute(f"DELETE FROM `{mysql_db}`.t_int ORDER BY id DESC LIMIT 5")
        capsys.readouterr()
        run = dag.test(run_conf=conf)
        out = capsys.readouterr().out
        assert run.state == "success", (_task_instances(run.run_id), out[-4000:])
        assert looks, "the task did not defer"
        assert "deferred until it has" in out, out[-4000:]
        [summary] = [v for (t, _, k, v) in _xcoms([run.run_id]) if t == "verify" and k == "return_value"]
        assert summary["chunks"] == {"match": len(plan.chunks), "repaired": 0, "mismatch": 0,
                                     "unverified": 0}, summary
        assert summary["tables"] == {str(table): {"match": len(plan.chunks)}}
        first_id = summary["verify_id"]

        # 2. a row changed in the source behind the binlog's back: the task fails naming the chunk
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"SELECT id FROM `{mysql_db}`.t_int ORDER BY id LIMIT 1 OFFSET 70")
            (key,) = cur.fetchone()
            cur.execute(f"UPDATE `{mysql_db}`.t_int SET v = v + 1000 WHERE id = %s", (key,))
        chunk = next(c for c in plan.chunks if (c.start is None or (key,) >= tuple(c.start))
                     and (c.end is None or (key,) < tuple(c.end)))
        run = dag.test(run_conf={**conf, "explain": True})
        out = capsys.readouterr().out
        assert run.state == "failed", _task_instances(run.run_id)
        assert f"{table} chunk {chunk.chunk_id} (plan generation 1), key range id in [" in out, out[-4000:]
        assert "mysqlcdc verify --repair --resume" in out and f"--chunks {chunk.chunk_id}" in out
        assert f'redo_chunks "{table}={chunk.chunk_id}"' in out
        assert repr(key) in out, "explain names the differing key"
        assert settings.password not in out
    finally:
        driver.stop()
    verdicts = store.verifications(str(table))
    assert {v.verify_id for v in verdicts} >= {first_id} and len({v.verify_id for v in verdicts}) == 2
    bad = [v for v in verdicts if v.result == "mismatch"]
    assert [(v.chunk_id, v.source_rows == v.lake_rows) for v in bad] == [(chunk.chunk_id, True)]
    store.close()


@pytest.mark.parametrize("value, share", [("5%", 0.05), (0.25, 0.25), ("100 %", 1.0)])
def test_sample_share(value, share):
    from airflow_provider_mysqlcdc.pipeline.arguments import sample_share

    assert sample_share(value) == pytest.approx(share)


def test_verify_lineage_names_source_and_lake_tables_and_the_verify_facet(mysql_server, monkeypatch,
                                                                          tmp_path):
    """Start (names only) and completion (schemas, the ``mysqlcdc_verify`` run facet with the counts); no
    outputs; the password in none."""
    from openlineage.client.serde import Serde

    from airflow_provider_mysqlcdc.operators.verify import MySqlCdcVerifyOperator

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_SOURCE", airflow_connection(settings))
    task = MySqlCdcVerifyOperator(task_id="verify", tables="mysql.user, shop.*", output_path=str(tmp_path),
                                  mysql_conn_id="lineage_source")
    start = task.get_openlineage_facets_on_start()
    assert start.inputs[0].name.endswith("mysql.user") and not start.outputs
    assert {d.name.rsplit("/", 1)[-1] for d in start.inputs[1:]} == {"snapshot", "changelog", "mirror"}
    summary = {"verify_id": "v1", "chunks": {"match": 3, "repaired": 0, "mismatch": 1, "unverified": 0},
               "tables": {"mysql.user": {"match": 3, "mismatch": 1}}}
    task._lineage_facts = {"tables": ["mysql.user"], "verify_id": "v1", "summary": summary}
    done = task.get_openlineage_facets_on_complete(None)
    facet = done.run_facets["mysqlcdc_verify"]
    assert (facet.verifyId, facet.chunks, facet.tables) == ("v1", summary["chunks"], summary["tables"])
    assert "schema" in done.inputs[0].facets and not done.outputs
    assert settings.password not in Serde.to_json(done.run_facets["mysqlcdc_verify"]) + str(done.inputs)
