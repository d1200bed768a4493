"""A server that is not ready for CDC stops the plan (engine, CLI, Airflow operator) and the Spark stream
before they write anything, with the setting or privilege and its fix: a STATEMENT binlog or a missing grant
would otherwise stream nothing, or fail later, half way."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ServerNotReady
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import run_stream
from tests.engine.test_readiness_check import MISCONFIGURATIONS, global_variable
from tests.support.engine_harness import password_file


@pytest.fixture
def orders(mysql_server, mysql_db) -> str:
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{mysql_db}`.orders (id INT PRIMARY KEY, v INT)")
        cur.executemany(f"INSERT INTO `{mysql_db}`.orders VALUES (%s, %s)", [(i, i) for i in range(50)])
    return f"{mysql_db}.orders"


def _assert_nothing_planned(store_path: Path) -> None:
    if store_path.exists():
        with ChunkStore(str(store_path)) as store:
            assert store.tables() == [], "a plan was written"


@pytest.mark.both_flavors
@pytest.mark.parametrize("name, bad, flavor", MISCONFIGURATIONS,
                         ids=[f"{n}={v}" for n, v, _ in MISCONFIGURATIONS])
def test_plan_refuses_a_misconfigured_server(mysql_server, server_flavor, orders, tmp_path, name, bad,
                                             flavor):
    if flavor and flavor != server_flavor:
        pytest.skip(f"{name} exists only on {flavor}")
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with global_variable(mysql_server, name, bad), ChunkStore(str(tmp_path / "chunks.db")) as store:
        with pytest.raises(ServerNotReady) as info:
            plan_tables(settings, store, [orders])
        assert store.tables() == []
    message = str(info.value)
    assert f"{name} = {bad}" in message and f"set {name}=" in message and "wrote nothing" in message, message


def test_cli_plan_and_spark_stream_refuse_a_statement_binlog(mysql_server, orders, tmp_path, spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store, output = tmp_path / "chunks.db", tmp_path / "lake"
    with ChunkStore(str(store)) as chunk_store:  # planned while the server was fine
        plan_tables(settings, chunk_store, [orders])
    config = StreamConfig(mysql_url=settings.url_without_password(), tables=(orders,), chunk_store=str(store),
                          output=str(output), checkpoint=str(tmp_path / "ckpt"),
                          password_file=password_file(tmp_path, settings))
    with global_variable(mysql_server, "binlog_format", "STATEMENT"):
        env = {**os.environ, MYSQL_PASSWORD_ENV: settings.password}
        result = subprocess.run(
            ["mysqlcdc", "plan", "--mysql-url", settings.url_without_password(),
             "--chunk-store", str(tmp_path / "other.db"), "--tables", orders],
            check=False, capture_output=True, text=True, env=env,
        )
        with pytest.raises(ServerNotReady) as info:
            run_stream(spark, config)
    assert result.returncode != 0 and "binlog_format = STATEMENT" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and settings.password not in result.stderr + result.stdout
    _assert_nothing_planned(tmp_path / "other.db")
    assert "binlog_format = STATEMENT" in str(info.value) and "the stream of" in str(info.value)
    assert not list(output.rglob("*.parquet")) and not (tmp_path / "ckpt" / "offsets").exists()


def test_missing_replication_privilege_stops_the_plan_operator(mysql_server, orders, tmp_path, limited_user,
                                                              monkeypatch):
    """Through Airflow: the plan task of a connection whose user lacks REPLICATION SLAVE fails naming the
    grant."""
    from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator

    url = limited_user("cdc_noslave_plan", "SELECT, REPLICATION CLIENT")
    monkeypatch.setenv("AIRFLOW_CONN_NOT_READY_SRC", url)
    store = tmp_path / "chunks.db"
    task = MySqlCdcPlanOperator(task_id="plan", tables=orders, output_path=str(tmp_path / "lake"),
                                chunk_store=str(store), mysql_conn_id="not_ready_src")
    with pytest.raises(ServerNotReady) as info:
        task.execute({"run_id": "manual__1"})
    message = str(info.value)
    assert "REPLICATION SLAVE" in message and "GRANT REPLICATION SLAVE ON *.*" in message, message
    assert "limited-pw-123" not in message
    _assert_nothing_planned(store)
