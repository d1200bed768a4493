"""The values to send, from what the engine reports: pure functions, no Airflow (the emitter sends them).

Counters are exact: they are the difference between two looks at the running totals of the stream's progress
record (``engine.lake.stream_figures``), so batches that commit between two looks are all counted.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.stream_figures import StreamTotals
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.status.progress import snapshot_progress
from airflow_provider_mysqlcdc.engine.status.stream_health import StreamHealth
from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus
from airflow_provider_mysqlcdc.metrics import names
from airflow_provider_mysqlcdc.metrics.names import Metric


@dataclass(frozen=True)
class Sample:
    metric: Metric
    value: float
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.metric.name


def table_tags(table: str, tags: Mapping[str, str]) -> dict[str, str]:
    try:
        db = TableId.parse(table).database
    except Exception:  # noqa: BLE001 - a name the parser does not take still gets its table tag
        db = table.split(".", 1)[0]
    return {**tags, "table": table, "db": db}


def health_samples(health: StreamHealth, tags: Mapping[str, str]) -> list[Sample]:
    """Lag (seconds, bytes) and headroom: sent at every look, also while no batch commits."""
    out = []
    if health.needed_by == "stream" and health.lag_seconds is not None:
        out.append(Sample(names.LAG_SECONDS, health.lag_seconds, tags))
    if health.needed_by == "stream" and health.lag_bytes is not None:
        out.append(Sample(names.LAG_BYTES, health.lag_bytes, tags))
    if health.headroom is not None and health.headroom.seconds is not None:
        out.append(Sample(names.HEADROOM, health.headroom.seconds, tags))
    return out


def totals_samples(before: StreamTotals, now: StreamTotals, tags: Mapping[str, str]) -> list[Sample]:
    """Counters: what was committed between two looks at the totals."""
    out = []
    if now.batches > before.batches:
        out.append(Sample(names.BATCHES, now.batches - before.batches, tags))
    for metric, after, earlier in ((names.ROWS_WRITTEN, now.rows, before.rows),
                                   (names.BYTES_WRITTEN, now.bytes, before.bytes)):
        for table, n in sorted(after.items()):
            grown = n - earlier.get(table, 0)
            if grown > 0:
                out.append(Sample(metric, grown, table_tags(table, tags)))
    if now.dropped > before.dropped:
        out.append(Sample(names.EVENTS_DROPPED, now.dropped - before.dropped, tags))
    return out


def batch_samples(batch: Any, tags: Mapping[str, str]) -> list[Sample]:
    """The latest batch's duration, mirror refresh time, rows and bytes (a ``BatchFigures``)."""
    out = [Sample(names.BATCH_ROWS, sum(batch.rows.values()), tags),
           Sample(names.BATCH_BYTES, sum(batch.bytes.values()), tags)]
    if batch.seconds is not None:
        out.append(Sample(names.BATCH_DURATION, batch.seconds, tags))
    if batch.mirror_refresh_seconds is not None:
        out.append(Sample(names.MIRROR_REFRESH, batch.mirror_refresh_seconds, tags))
    return out


def snapshot_samples(statuses: Iterable[TableStatus], tags: Mapping[str, str]) -> list[Sample]:
    """Chunks done, remaining and failed, and the snapshot rate, per table of the latest plan."""
    out = []
    for t in statuses:
        if not t.chunks:
            continue
        tagged = table_tags(t.table, tags)
        out += [Sample(names.CHUNKS_DONE, t.committed, tagged),
                Sample(names.CHUNKS_REMAINING, t.chunks - t.committed, tagged),
                Sample(names.CHUNKS_FAILED, t.failed, tagged)]
        rate = snapshot_progress([t]).rows_per_second
        if rate is not None:
            out.append(Sample(names.ROWS_PER_SECOND, rate, tagged))
    return out
