"""Tables added to and removed from a running pipeline, on the session's MariaDB:
``plan_tables(only_new=True)`` plans only tables not in the pipeline yet, the plan operator does so by default
(and finishes its own run's snapshot when its plan task runs again), ``remove_tables`` / ``mysqlcdc
remove-table`` take tables out, and a wildcard never puts a removed table back (an exact name does, with a new
generation).

No Spark: chunk commits are recorded directly in the store where a test needs a finished snapshot.
"""
from __future__ import annotations

import json

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables, remove_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings


def _create(mysql_server, db: str, name: str, rows: int = 30) -> str:
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`{name}` (id INT PRIMARY KEY, v INT)")
        cur.executemany(f"INSERT INTO `{db}`.`{name}` VALUES (%s, %s)", [(i, i) for i in range(rows)])
    return f"{db}.{name}"


def _commit_all(store: ChunkStore, table: str, chunk_ids=None) -> None:
    """What a finished snapshot of these chunks leaves in the store (no Spark needed here)."""
    for c in store.chunks(table):
        if chunk_ids is None or c.chunk_id in chunk_ids:
            state = store.start_chunk(table, c.generation, c.chunk_id, "snap")
            store.commit_chunk(table, c.generation, c.chunk_id, rows=1,
                               lw=BinlogPosition("mysql-bin.000001", 4),
                               hw=BinlogPosition("mysql-bin.000001", 100 + c.chunk_id), output_version="v",
                               run_id="snap", attempt=state.attempts)


def _generations(store: ChunkStore, tables) -> dict[str, int | None]:
    return {t: store.latest_generation(t) for t in tables}


def test_plan_tables_only_new_leaves_existing_plans_alone(mysql_server, mysql_db, tmp_path):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    a = _create(mysql_server, mysql_db, "a")
    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        [first] = plan_tables(settings, store, [a], chunk_size=10)
        _commit_all(store, a)
        before = store.chunks(a)
        b = _create(mysql_server, mysql_db, "b")

        plans = plan_tables(settings, store, [f"{mysql_db}.*"], chunk_size=10, only_new=True)
        assert [str(p.table) for p in plans] == [b] and plans[0].generation == 1
        assert store.chunks(a) == before and store.latest_generation(a) == first.generation
        assert plan_tables(settings, store, [f"{mysql_db}.*"], only_new=True) == [], "nothing new to plan"
        assert _generations(store, [a, b]) == {a: 1, b: 1}

        # without only_new: every matched table gets a new generation (the behaviour so far)
        replanned = plan_tables(settings, store, [f"{mysql_db}.*"], chunk_size=10)
        assert [p.generation for p in replanned] == [2, 2]

        # a removed table: a wildcard does not put it back, with or without only_new; its exact name does
        assert remove_tables(store, [a], "rm") == [(a, True)]
        assert [str(p.table) for p in plan_tables(settings, store, [f"{mysql_db}.*"], chunk_size=10)] == [b]
        assert plan_tables(settings, store, [f"{mysql_db}.*"], only_new=True) == []
        assert store.active_tables() == [b] and _generations(store, [a, b]) == {a: 2, b: 3}
        [back] = plan_tables(settings, store, [a, f"{mysql_db}.*"], chunk_size=10, only_new=True)
        assert (str(back.table), back.generation) == (a, 3)
        assert store.active_tables() == [a, b] and store.table_entry(a).added_generation == 3


class _TaskInstance:
    """Collects what the plan task pushes to XCom (the operator is run directly, as the other operator tests
    do)."""

    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key: str, value) -> None:
        self.pushed[key] = value


def test_plan_operator_adds_new_tables_resumes_its_own_run_and_removes(mysql_server, mysql_db, tmp_path,
                                                                       monkeypatch, capfd):
    from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
    from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY

    monkeypatch.setenv("AIRFLOW_CONN_MEMBERSHIP_SRC", mysql_server.cdc_url)
    store_path = str(tmp_path / "chunks.db")
    a = _create(mysql_server, mysql_db, "a")

    def run(run_id: str, tables: str, **kwargs):
        task = MySqlCdcPlanOperator(task_id="plan", tables=tables, output_path=str(tmp_path / "lake"),
                                    chunk_store=store_path, mysql_conn_id="membership_src", chunk_size=10,
                                    chunks_per_group=2, **kwargs)
        ti = _TaskInstance()
        groups = task.execute({"run_id": run_id, "ti": ti})
        return groups, ti.pushed[XCOM_KEY]

    def chunks_of(groups, table):
        return sorted(c for g in groups if g["table"] == table for c in g["chunk_ids"])

    groups, record = run("manual__1", a)
    assert {g["table"] for g in groups} == {a} and chunks_of(groups, a) == [0, 1, 2]
    with ChunkStore(store_path) as store:
        _commit_all(store, a)
        before = store.chunks(a)

    # the DAG author adds a table and runs the DAG again: only it is planned; the record names both
    b = _create(mysql_server, mysql_db, "b")
    groups, record = run("manual__2", f"{a}, {b}")
    assert {g["table"] for g in groups} == {b} and chunks_of(groups, b) == [0, 1, 2]
    assert all(g["generation"] == 1 for g in groups) and record["tables"] == [a, b]
    with ChunkStore(store_path) as store:
        assert store.chunks(a) == before, "the existing table's plan and snapshot stay"
        _commit_all(store, b, chunk_ids={0, 1})  # chunk 2 of b failed in run 2's snapshot

    # run 2 is cleared (its plan task runs again): it finishes its own snapshot, no new generation
    groups, _ = run("manual__2", f"{a}, {b}")
    assert [(g["table"], g["generation"], g["chunk_ids"]) for g in groups] == [(b, 1, [2])]
    # another run leaves run 2's unfinished chunk alone and says how to finish it
    capfd.readouterr()
    groups, _ = run("manual__3", f"{mysql_db}.*")
    assert groups == []
    logged = "".join(capfd.readouterr())  # the task log (Airflow's structlog writes it to the process output)
    assert f'redo_chunks="{b}=2"' in logged, logged
    with ChunkStore(store_path) as store:
        assert {t: store.latest_generation(t) for t in (a, b)} == {a: 1, b: 1}

    # remove b (a wildcard in tables still covers it): not planned, not in the record; idempotent
    for run_id in ("manual__4", "manual__5"):
        groups, record = run(run_id, f"{mysql_db}.*", remove_tables=b)
        assert groups == [] and record["tables"] == [a]
    with ChunkStore(store_path) as store:
        entry = store.table_entry(b)
        assert not entry.active and entry.removed_run_id == "manual__4" and store.active_tables() == [a]
    with pytest.raises(ConfigurationError, match="was removed from the pipeline"):
        run("manual__6", a, redo_chunks=f"{b}=0")
    with pytest.raises(ConfigurationError, match="both named in tables and matched by remove_tables"):
        run("manual__6", f"{a},{b}", remove_tables=f"{mysql_db}.b*")
    with pytest.raises(ConfigurationError, match="no planned table matches"):
        run("manual__6", a, remove_tables=f"{mysql_db}.nothing")

    # naming b exactly puts it back (a new generation); only_new as rendered text ("False") re-plans all
    groups, record = run("manual__7", f"{mysql_db}.*,{b}")
    assert [(g["table"], g["generation"]) for g in groups] == [(b, 2), (b, 2)] and record["tables"] == [a, b]
    groups, _ = run("manual__8", f"{mysql_db}.*", only_new="False")
    assert sorted({(g["table"], g["generation"]) for g in groups}) == [(a, 2), (b, 3)]


def test_example_dag_plan_task_renders_only_new_and_remove_tables(mysql_server, mysql_db, airflow_home,
                                                                 tmp_path, monkeypatch):
    """The example DAG's plan task alone (``dag.test()`` of that task): its params reach the operator."""
    from tests.airflow.test_example_dag import _load_dag, _task_instances, _xcoms

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", json.dumps(
        {"conn_type": "mysql", "host": settings.host, "port": settings.port, "login": settings.user,
         "password": settings.password}))
    a = _create(mysql_server, mysql_db, "a")
    output = tmp_path / "lake"
    conf = {"tables": f"{mysql_db}.*", "output": str(output), "chunk_size": 10}
    dag = _load_dag().partial_subset("plan", include_downstream=False, include_upstream=False)

    def plan(**extra):
        run = dag.test(run_conf={**conf, **extra})
        assert run.state == "success", _task_instances(run.run_id)
        return next(v for (t, _, k, v) in _xcoms([run.run_id]) if t == "plan" and k == "return_value")

    assert {g["table"] for g in plan()} == {a}
    b = _create(mysql_server, mysql_db, "b")
    assert {g["table"] for g in plan()} == {b}, "only the new table (only_new is the default)"
    assert plan(remove_tables=b) == []
    with ChunkStore(str(output / "_mysqlcdc_chunks.db")) as store:
        assert store.active_tables() == [a] and store.removed_tables() == [b]
    assert {(g["table"], g["generation"]) for g in plan(only_new=False)} == {(a, 2)}


def test_a_misspelled_param_fails_the_run_before_anything_is_written(mysql_server, mysql_db, airflow_home,
                                                                      tmp_path, monkeypatch, capsys):
    """``{"tabels": ...}`` would run on the default tables, into the default output: the example DAG's plan
    task refuses it (``dag.test()`` of that task), naming the key and the param it was meant to be."""
    from airflow_provider_mysqlcdc.operators.run_conf import unknown_conf_message, unknown_keys
    from tests.airflow.test_example_dag import _load_dag, _task_instances

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SOURCE", json.dumps(
        {"conn_type": "mysql", "host": settings.host, "port": settings.port, "login": settings.user,
         "password": settings.password}))
    dag = _load_dag().partial_subset("plan", include_downstream=False, include_upstream=False)
    output = tmp_path / "lake"
    run = dag.test(run_conf={"tabels": f"{mysql_db}.*", "output": str(output), "chunksize": 10})
    assert run.state == "failed", _task_instances(run.run_id)
    logged = capsys.readouterr().out  # dag.test() prints the task's log
    assert ("has keys the DAG has no param for: 'tabels' (did you mean 'tables'?), 'chunksize' (did you mean "
            "'chunk_size'?). Nothing was read or written") in logged, logged[-3000:]
    assert not output.exists(), "nothing may be written"
    params = list(dag.params)
    assert unknown_keys({"tabels": 1, "output": 2, "chunksize": 3}, params) == ["tabels", "chunksize"]
    message = unknown_conf_message(dag.dag_id, ["tabels", "chunksize", "zzz"], params)
    assert "'tabels' (did you mean 'tables'?)" in message and "'chunksize' (did you mean 'chunk_size'?)" in (
        message) and "'zzz'," not in message and "Nothing was read or written" in message, message
    # the way out for a DAG whose other tasks read keys that are no params
    _create(mysql_server, mysql_db, "a")
    monkeypatch.setattr(dag.get_task("plan"), "allow_unknown_conf", True)
    run = dag.test(run_conf={"tables": f"{mysql_db}.*", "output": str(output), "note": "for another task"})
    assert run.state == "success", _task_instances(run.run_id)


def test_cli_remove_table_and_plan_only_new(mysql_server, mysql_db, tmp_path, capsys, monkeypatch):
    from airflow_provider_mysqlcdc.cli import main as cli

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv(MYSQL_PASSWORD_ENV, settings.password)
    store = str(tmp_path / "chunks.db")
    a, b = _create(mysql_server, mysql_db, "a"), _create(mysql_server, mysql_db, "b")
    plan = ["plan", "--mysql-url", settings.url_without_password(),
            "--chunk-store", store, "--chunk-size", "10"]
    assert cli.main([*plan, "--tables", a]) == 0
    capsys.readouterr()
    assert cli.main([*plan, "--tables", f"{mysql_db}.*", "--only-new", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["tables"]
    assert [(t["table"], t["generation"]) for t in report] == [(b, 1)]
    assert cli.main([*plan, "--tables", f"{mysql_db}.*", "--only-new"]) == 0
    assert "nothing planned: the matching tables are in the pipeline already" in capsys.readouterr().out

    assert cli.main(["remove-table", b, "--chunk-store", store, "--reason", "not needed"]) == 0
    out = capsys.readouterr().out
    assert f"{b}: removed from the pipeline" in out and "generation 1" in out, out
    assert cli.main(["remove-table", b, "--chunk-store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][0] | {"removed_at": None} == {
        "table": b, "removed_now": False, "removed_at": None, "generation": 1}
    assert cli.main(["remove-table", f"{mysql_db}.nothing", "--chunk-store", store]) == 2
    assert "no planned table matches" in capsys.readouterr().err
    with ChunkStore(store) as chunk_store:
        entry = chunk_store.table_entry(b)
        assert chunk_store.active_tables() == [a] and entry.removed_reason == "not needed"
    # snapshot refuses the removed table, and says why
    assert cli.main(["snapshot", "--mysql-url", settings.url_without_password(), "--chunk-store", store,
                     "--output", str(tmp_path / "lake"), "--tables", b]) == 2
    assert "was removed from the pipeline" in capsys.readouterr().err


def test_a_planned_table_dropped_in_the_source_says_how_to_take_it_out(mysql_server, mysql_db, tmp_path):
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE gone (id INT PRIMARY KEY)")
    table = TableId(mysql_db, "gone")
    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        plan_tables(settings, store, [str(table)])
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute("DROP TABLE gone")
        with pytest.raises(ConfigurationError,
                           match=rf"does not exist.*mysqlcdc remove-table {mysql_db}\.gone"):
            ChangeStream(settings, store, [table], 5401)
