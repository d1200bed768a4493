"""Shared test harness: a server per flavor, one Spark session and one Airflow home per test session.

Real parts only: throwaway servers with the binlog on (MariaDB and Oracle MySQL, or MYSQLCDC_TEST_MYSQL_URL),
local Spark, and Airflow with a SQLite metadata DB.
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
from typing import Any

import pytest

from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import COMPARE
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from airflow_provider_mysqlcdc.engine.common.native_faults import WORKER_CONF
from tests.support.servers import start_server
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


# --- MySQL-compatible servers ------------------------------------------------------------------------------
#
# Each test that uses a server runs on the flavors its markers allow: ``mariadb_only`` or ``mysql_only`` pin
# one, ``both_flavors`` asks for both. An unmarked test runs on MariaDB unless MYSQLCDC_TEST_FLAVORS says
# otherwise ("all": every test on every flavor its markers allow; "mysql": Oracle MySQL where allowed; a run
# to find what the next test to mark both_flavors needs). MYSQLCDC_TEST_MYSQL_URL replaces the started
# servers with one given server (its flavor read at collection).

FLAVORS = ("mariadb", "mysql")
FLAVORS_ENV = "MYSQLCDC_TEST_FLAVORS"
EXTERNAL = "external"
_external_flavor: str | None = None


def _external_server_flavor(url: str) -> str:
    global _external_flavor
    if _external_flavor is None:
        from tests.support.external_server import ExternalServer

        _external_flavor = ExternalServer(url).flavor()
    return _external_flavor


def flavors_of(markers: set[str], wanted: str) -> list[str]:
    """The flavors a test with these markers runs on, under MYSQLCDC_TEST_FLAVORS=``wanted``."""
    only = {f for f in FLAVORS if f"{f}_only" in markers}
    allowed = [f for f in FLAVORS if not only or f in only]
    if wanted == "all":
        return allowed
    if wanted in FLAVORS:
        return [wanted] if wanted in allowed else []
    return allowed if "both_flavors" in markers else allowed[:1]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mysql_server" not in metafunc.fixturenames:
        return
    markers = {m.name for m in metafunc.definition.iter_markers()}
    url = os.environ.get("MYSQLCDC_TEST_MYSQL_URL")
    if url:
        runs = [EXTERNAL] if _external_server_flavor(url) in flavors_of(markers, "all") else []
    else:
        runs = flavors_of(markers, os.environ.get(FLAVORS_ENV, "default"))
    if not runs:  # a flavor-only test in a run of the other flavor: reported, not silently dropped
        runs = [pytest.param("none", marks=pytest.mark.skip(reason="not for the flavors of this run"))]
    metafunc.parametrize("server_run", runs, indirect=True, scope="session")


@pytest.fixture(scope="session")
def server_run(request) -> str:
    """The flavor (or "external") this test's server is of: set by pytest_generate_tests, or, for a fixture
    that asks for the server only while it runs (``request.getfixturevalue``), the run's first flavor."""
    if hasattr(request, "param"):
        return request.param
    if os.environ.get("MYSQLCDC_TEST_MYSQL_URL"):
        return EXTERNAL
    return "mysql" if os.environ.get(FLAVORS_ENV) == "mysql" else "mariadb"


@pytest.fixture(scope="session")
def mysql_server(server_run) -> Iterator[object]:
    """The shared CDC-ready server of the test's flavor; ``.admin()`` opens a root session, ``.cdc_url`` is
    the least-privilege user."""
    server: Any
    if server_run == EXTERNAL:
        from tests.support.external_server import ExternalServer

        server = ExternalServer(os.environ["MYSQLCDC_TEST_MYSQL_URL"]).start()
    else:
        server = start_server(server_run)
    try:
        yield server
    finally:
        server.stop()


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
def private_server(server_flavor) -> Iterator[object]:
    """A server of the test module's own, of the test's flavor, for tests that purge binlogs or change global
    settings."""
    server = start_server(server_flavor)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def private_mariadb(server_flavor) -> Iterator[object]:
    """A MariaDB of the test module's own, for tests that purge binlogs or change global settings."""
    if server_flavor != "mariadb":
        pytest.skip("needs a private MariaDB (purges binlogs, changes global settings)")
    server = start_server("mariadb")
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
        .config(map=WORKER_CONF)  # as every session of the package (a worker's native abort shows its stack)
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
