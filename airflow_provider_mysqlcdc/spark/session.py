"""Spark sessions for mysqlcdc jobs: the settings our exactly-once argument depends on.

* ``spark.speculation`` must be off: a speculative copy of a chunk task would read the chunk a second time
  (another read view, another HW). Spark would still commit only one copy, but the extra read is load on the
  source and makes the LW/HW of the committed copy depend on timing.
* Python workers must run this interpreter (``PYSPARK_PYTHON``), or they fail to connect back.
* The session time zone is UTC, so TIMESTAMP (an instant) displays the same everywhere.
* A Python worker that dies of a native abort reports its Python stack in the task's error
  (``native_faults.WORKER_CONF``).
"""
from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.native_faults import WORKER_CONF, report_native_faults

DEFAULT_MASTER = "local[*]"


def build_session(master: str | None = DEFAULT_MASTER, app_name: str = "mysqlcdc",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session for the CLI and tests; under spark-submit pass ``master=None`` to keep submit's master."""
    report_native_faults()  # the driver's Python stack on a native abort; WORKER_CONF: the workers'
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.speculation": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        **WORKER_CONF,
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    ensure_no_speculation(spark)
    return spark


def ensure_no_speculation(spark: SparkSession) -> None:
    if spark.sparkContext.getConf().get("spark.speculation", "false").lower() == "true":
        raise ConfigurationError(
            "spark.speculation is on: a speculative chunk task would read the chunk twice; start the "
            "application with --conf spark.speculation=false"
        )


def activate_in_thread(spark: SparkSession) -> None:
    """Make ``spark`` the JVM's active session in this (new) thread: Spark 4 looks Python data sources up in
    the thread's active session, and a thread started by Python has none (``DATA_SOURCE_NOT_FOUND`` though
    the source is registered)."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]


# (session, source name) pairs already registered: a registration belongs to one session
_REGISTERED: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()


def register_data_source(spark: SparkSession, source: type[DataSource]) -> None:
    """Make ``format(source.name())`` known to this session, once (Spark warns on every re-registration)."""
    names = _REGISTERED.setdefault(spark, set())
    if source.name() not in names:
        spark.dataSource.register(source)
        names.add(source.name())
