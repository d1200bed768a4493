"""Executors' Python workers warmed while the driver starts the stream's query.

The first micro-batch's task found no Python worker ready on its executor: it waited for two (the source's
read and the sink's writer), each started, then importing the engine (the binlog reader, the chunk store, the
Arrow transport) before reading a byte. Meanwhile the driver spends seconds starting the query (Spark starts a
Python process for the data source lookup, one to create the source, one for the stream's offsets, one to plan
its reads), with the executors idle. ``warm_executors`` fills that gap: a small background job whose tasks
each run two chained ``mapInArrow`` steps (two Python workers at once, as a batch's task uses) that import
what the stream's tasks import. Spark keeps idle Python workers for reuse (``spark.python.worker.reuse``, on
by default), so the first batch's task takes warm ones.

Best effort: a failed or slow warm-up changes nothing but the first batch's time (its errors are logged at
debug level), and a stream never waits for it.
"""

from __future__ import annotations

import importlib
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

# what a stream task's Python workers import: the source's read and the sink's writer, in either worker
EXECUTOR_MODULES = (
    "airflow_provider_mysqlcdc.spark.stream.binlog_source",
    "airflow_provider_mysqlcdc.spark.stream.changelog_sink",
    "airflow_provider_mysqlcdc.engine.chunk_store",
    "airflow_provider_mysqlcdc.engine.stream.change_stream",
    "airflow_provider_mysqlcdc.engine.stream.batch_failover",
    "airflow_provider_mysqlcdc.engine.stream.transport",
    "airflow_provider_mysqlcdc.engine.binlog.server_ids",
    "airflow_provider_mysqlcdc.engine.binlog.event_framer",
    "airflow_provider_mysqlcdc.engine.binlog.rows_decoder",
    "airflow_provider_mysqlcdc.engine.lake.changelog_files",
)
WARMUP_JOB = "mysqlcdc: warming the executors' Python workers for the stream"

_WARMED: weakref.WeakSet[Any] = weakref.WeakSet()  # sessions warmed once already (a restart needs no more)


def import_executor_modules(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` step: import the stream's executor modules in this worker; rows pass through."""
    for name in EXECUTOR_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - an optional compiled module; the stream reports its own
            continue
    yield from batches


def warm_executors(spark: Any) -> threading.Thread | None:
    """Start the warm-up job in a background thread (None: this session was warmed already)."""
    if spark in _WARMED:
        return None
    _WARMED.add(spark)
    slots = max(1, int(spark.sparkContext.defaultParallelism))
    thread = threading.Thread(target=_run, args=(spark, slots), name="mysqlcdc-warm-executors", daemon=True)
    thread.start()
    return thread


def _run(spark: Any, slots: int) -> None:
    try:
        from airflow_provider_mysqlcdc.spark.session import activate_in_thread

        activate_in_thread(spark)
        spark.sparkContext.setLocalProperty("spark.job.description", WARMUP_JOB)
        frame = spark.range(slots, numPartitions=slots)
        schema = frame.schema
        # two chained Python steps: a task runs two workers at once, as the read and the writer of a batch
        warmed = frame.mapInArrow(import_executor_modules, schema)
        warmed.mapInArrow(import_executor_modules, schema).collect()
    except Exception as exc:  # noqa: BLE001 - best effort: the first batch starts its workers itself
        log.debug("warming the executors' Python workers failed: %s", exc)
