"""The package installs as an Airflow provider with a working CLI, and PySpark's Python side matches its jars."""
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
    result = subprocess.run(["mysqlcdc", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "check" in result.stdout


def test_cli_without_url_says_what_to_pass(monkeypatch):
    env = {k: v for k, v in __import__("os").environ.items() if k != "MYSQLCDC_MYSQL_URL"}
    result = subprocess.run(["mysqlcdc", "check"], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert "--mysql-url" in result.stderr and "MYSQLCDC_MYSQL_URL" in result.stderr
