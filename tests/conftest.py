"""Shared test harness: one MySQL-compatible server, one Spark session and one Airflow home per test session.

Real parts only: a throwaway MariaDB with the binlog on (or MYSQLCDC_TEST_MYSQL_URL), local Spark, and
Airflow with a SQLite metadata DB.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import COMPARE
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from tests.support.spark_jvm import jvm_environment

pytest_plugins = ["tests.support.suite_timing"]

REPO = Path(__file__).resolve().parents[1]
# The process runs in a third zone (server: -07:00, sessions: UTC) so zone mistakes show up as wrong values.
PROCESS_TZ = "Asia/Kolkata"
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="mysqlcdc-airflow-"))
MIGRATED_DB = "airflow-migrated.db"  # in the Airflow home: the metadata DB as `airflow db migrate` left it
_LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
# The project's dags/ (as users get it) plus the tests' own DAGs (smoke scaffolding) as a second bundle.
DAG_BUNDLES = [
    {"name": "dags-folder", "classpath": _LOCAL_BUNDLE, "kwargs": {}},
    {"name": "tests-dags", "classpath": _LOCAL_BUNDLE,
     "kwargs": {"path": str(REPO / "tests" / "airflow" / "dags")}},
]


def pytest_configure(config: pytest.Config) -> None:
    # py4j logs from __del__ at interpreter exit, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Airflow reads its configuration on first import, so this must happen before any test module loads.
    os.environ["TZ"] = PROCESS_TZ
    time.tzset()
    os.environ.update(
        {
            "AIRFLOW_HOME": str(_AIRFLOW_HOME),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(DAG_BUNDLES),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # every binlog read of the suite decodes each rows event with the compiled decoder and with
            # mysql-replication, and stops at the first difference (engine/binlog/decoder_choice.py)
            ROWS_DECODER_ENV: os.environ.get(ROWS_DECODER_ENV, COMPARE),
        }
    )
    # every Spark JVM of the suite starts with less than half the CPU time (tests/support/spark_jvm.py)
    os.environ.update(jvm_environment())
    # spark-submit and the mysqlcdc script live next to this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


# --- MySQL -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[object]:
    """The shared CDC-ready server; ``.admin()`` opens a root session, ``.cdc_url`` is the least-privilege
    user."""
    url = os.environ.get("MYSQLCDC_TEST_MYSQL_URL")
    if url:
        from tests.support.external_server import ExternalServer

        server: object = ExternalServer(url).start()
    else:
        from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

        server = MariaDBServer().start()
    try:
        yield server
    finally:
        server.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def server_flavor(mysql_server) -> str:
    from airflow_provider_mysqlcdc.engine.source.server import server_info

    with mysql_server.admin() as conn:
        return server_info(conn).flavor


@pytest.fixture
def mysql_db(mysql_server, request) -> Iterator[str]:
    """A fresh database for one test, dropped afterwards."""
    name = "t_" + re.sub(r"\W", "_", request.node.name)[:50]
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    yield name
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="module")
def private_mariadb(server_flavor) -> Iterator[object]:
    """A MariaDB of the test module's own, for tests that purge binlogs or change global settings."""
    if server_flavor != "mariadb":
        pytest.skip("needs a private MariaDB (purges binlogs, changes global settings)")
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    server = MariaDBServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def limited_user(mysql_server) -> Iterator:
    """Makes users with only the given grants (password limited-pw-123); drops them afterwards."""
    created = []

    def make(name: str, grants: str) -> str:
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (name,))
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY 'limited-pw-123'", (name,))
            cur.execute(f"GRANT {grants} ON *.* TO %s@'%%'", (name,))
        created.append(name)
        return f"mysql://{name}:limited-pw-123@127.0.0.1:{mysql_server.port}/"

    yield make
    with mysql_server.admin() as conn, conn.cursor() as cur:
        for name in created:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (name,))


@pytest.fixture
def mariadb_only(server_flavor) -> None:
    if server_flavor != "mariadb":
        pytest.skip("needs the MariaDB flavor (runtime-changeable variables differ on MySQL)")


# --- Spark -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("mysqlcdc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.speculation", "false")
        .config("spark.scheduler.mode", "FAIR")  # as the stream's applications: background re-snapshots
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    yield session
    session.stop()


# --- Airflow -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """An Airflow home in a temp dir with a migrated SQLite metadata DB, examples off, ``dags/`` as DAGs
    folder."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], check=False, capture_output=True, text=True,
        env=os.environ,
    )
    assert result.returncode == 0, f"airflow db migrate failed:\n{result.stdout}\n{result.stderr}"
    # an untouched copy: a whole Airflow deployment (tests/support/airflow_services.py) starts from it
    # instead of migrating a DB of its own
    shutil.copyfile(_AIRFLOW_HOME / "airflow.db", _AIRFLOW_HOME / MIGRATED_DB)
    return _AIRFLOW_HOME
