"""The package installs as an Airflow provider with a working CLI, and PySpark's Python side matches its
jars."""
from __future__ import annotations

import subprocess
import sys

import pyspark


def test_pyspark_python_matches_jvm(spark):
    assert pyspark.__version__ == spark.version


def test_provider_is_registered(airflow_home):
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "-o", "plain"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "airflow-provider-mysqlcdc" in out


def test_provider_info_shape():
    from airflow_provider_mysqlcdc.get_provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-mysqlcdc"
    for key in ("hooks", "operators", "connection-types", "plugins", "versions"):
        assert key in info


def test_cli_help():
    result = subprocess.run(["mysqlcdc", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "check" in result.stdout


def test_cli_without_url_says_what_to_pass(monkeypatch):
    env = {k: v for k, v in __import__("os").environ.items() if k != "MYSQLCDC_MYSQL_URL"}
    result = subprocess.run(["mysqlcdc", "check"], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2
    assert "--mysql-url" in result.stderr and "MYSQLCDC_MYSQL_URL" in result.stderr


def test_connection_type_and_its_test_through_airflow(airflow_home, mysql_server):
    """`airflow connections test` (what the UI's Test button runs) reaches our hook's CDC check."""
    import json
    import os

    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    hooks = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "hooks", "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "mysqlcdc" in hooks and "MySqlCdcHook" in hooks
    cdc = MySQLSettings.from_url(mysql_server.cdc_url)
    conn = {"conn_type": "mysqlcdc", "host": cdc.host, "port": cdc.port, "login": cdc.user,
            "password": cdc.password}
    env = {**os.environ, "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
           "AIRFLOW_CONN_CDC_SOURCE": json.dumps(conn)}
    result = subprocess.run([sys.executable, "-m", "airflow", "connections", "test", "cdc_source"],
                            capture_output=True, text=True, env=env, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "Connection success" in out, out[-3000:]
    env["AIRFLOW_CONN_CDC_SOURCE"] = json.dumps({**conn, "password": "not-the-password"})
    result = subprocess.run([sys.executable, "-m", "airflow", "connections", "test", "cdc_source"],
                            capture_output=True, text=True, env=env, check=False)
    out += result.stdout + result.stderr
    assert "Connection failed" in out and "access denied" in out, out[-3000:]
    assert cdc.password not in out and "not-the-password" not in out
