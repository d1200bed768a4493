"""End to end through the three real parts: MySQL table -> Spark job (submitted by Airflow) -> Parquet."""
from __future__ import annotations

import json
import random
from decimal import Decimal

import pyarrow.parquet as pq


def test_airflow_runs_spark_job_that_copies_mysql_table(
    mysql_server, mysql_db, airflow_home, tmp_path, monkeypatch, capfd
):
    rng = random.Random(7)
    rows = [(i, f"name-{i}-{rng.randint(0, 999)}", Decimal(rng.randint(0, 10**6)) / 100)
            for i in range(1, 501)]
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(10,2))")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", rows)

    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    cdc = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_MYSQLCDC_MYSQL",
        json.dumps({"conn_type": "mysql", "host": cdc.host, "port": cdc.port, "login": cdc.user,
                    "password": cdc.password}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    output = tmp_path / "items.parquet"

    from tests.airflow.dags.mysqlcdc_smoke import dag

    run = dag.test(run_conf={"database": mysql_db, "table": "items", "max_id": 500, "output": str(output)})
    assert run.state == "success", f"DAG run ended {run.state}"

    got = pq.read_table(output).sort_by("id").to_pylist()
    assert [(r["id"], r["name"], r["amount"]) for r in got] == rows
    logs = capfd.readouterr()
    assert "Spark-Submit cmd" in logs.out + logs.err
    assert cdc.password not in logs.out + logs.err
