"""Smoke-test DAG: one SparkSubmitOperator copies a MySQL table to Parquet (scaffolding, not the product).

Lives in the tests' own DAG bundle ("tests-dags"), next to the project's ``dags/`` bundle.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, BaseHook, Param

from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV

APP = str(Path(__file__).resolve().parents[1] / "smoke" / "copy_table_app.py")


class SmokeCopyOperator(SparkSubmitOperator):
    """Resolves the MySQL connection at run time and hands the password to spark-submit by environment
    only."""

    def __init__(self, *, mysql_conn_id: str, **kw: Any) -> None:
        super().__init__(application=APP, **kw)
        self.mysql_conn_id = mysql_conn_id

    def execute(self, context: Any) -> None:
        conn = BaseHook.get_connection(self.mysql_conn_id)
        params = context["params"]
        self.application_args = [
            "--mysql-url", f"mysql://{conn.login}@{conn.host}:{conn.port}/",
            "--database", params["database"], "--table", params["table"],
            "--max-id", str(params["max_id"]), "--output", params["output"],
        ]
        self.env_vars = {**(self.env_vars or {}), MYSQL_PASSWORD_ENV: conn.password or ""}
        super().execute(context)


with DAG(
    dag_id="mysqlcdc_smoke",
    schedule=None,
    catchup=False,
    params={
        "database": Param("demo", type="string"),
        "table": Param("items", type="string"),
        "max_id": Param(1000, type="integer"),
        "output": Param("/tmp/mysqlcdc-smoke/items.parquet", type="string"),
    },
) as dag:
    SmokeCopyOperator(
        task_id="copy_table",
        conn_id="mysqlcdc_spark",
        mysql_conn_id="mysqlcdc_mysql",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
