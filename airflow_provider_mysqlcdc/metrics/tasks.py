"""What the operators call: the stream task's watcher, a snapshot task's chunk progress. Both do nothing when
Airflow's metrics are off: no thread, no read, not even the import of what they would read with."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.metrics.emitter import metrics_on

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.metrics.stream_watcher import StreamWatcher

log = logging.getLogger(__name__)


def task_tags(context: Mapping[str, Any]) -> dict[str, str]:
    """The tags every metric of a task carries: its DAG's id."""
    dag_id = getattr(context.get("dag"), "dag_id", None) or getattr(context.get("ti"), "dag_id", None)
    return {"dag_id": str(dag_id)} if dag_id else {}


def start_stream_watcher(output: str, settings: MySQLSettings, store_url: str, tables: Sequence[str],
                         context: Mapping[str, Any], interval: float) -> StreamWatcher | None:
    """The started watcher of a stream task, or None when metrics are off."""
    if not metrics_on():
        return None
    from airflow_provider_mysqlcdc.metrics.emitter import Emitter
    from airflow_provider_mysqlcdc.metrics.stream_watcher import StreamWatcher

    watcher = StreamWatcher(output, settings, store_url, tables, task_tags(context), Emitter().emit, interval)
    watcher.start()
    log.info("metrics: the stream's lag, binlog headroom and batches are sent every %g s", interval)
    return watcher


def send_snapshot_progress(store_url: str, tables: Sequence[str], context: Mapping[str, Any]) -> None:
    """The chunk progress of ``tables`` (after a snapshot task's group)."""
    if not metrics_on():
        return
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.status.table_status import table_status
    from airflow_provider_mysqlcdc.metrics.emitter import Emitter
    from airflow_provider_mysqlcdc.metrics.samples import snapshot_samples

    try:
        with ChunkStore(store_url) as store:
            statuses = [table_status(store, name) for name in tables]
    except Exception as exc:  # noqa: BLE001 - metrics never fail the task
        log.warning("metrics: the chunk store could not be read (%s): no snapshot progress sent", exc)
        return
    Emitter().emit(snapshot_samples(statuses, task_tags(context)))
