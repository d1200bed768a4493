"""Overall snapshot progress of a pipeline: chunks and rows done of the total, the rate, and the time left.

What an on-call engineer asks first during a long snapshot: how far, how fast, how long still. Counted over
the latest plan generation of each table, from the tables' statuses (the planner's row estimate gives the
total; committed chunks give the rows read). The rate is the rows over the time chunks were being read (the
union of each chunk's latest attempt, start to commit): idle time between the snapshot and a later rerun of
some chunks, or after the snapshot ended, does not lower it. The time left assumes the remaining chunks go at
that pace, and is given only while something is left that is not failed (failed chunks wait for a rerun,
which no rate predicts).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus


@dataclass(frozen=True)
class SnapshotProgress:
    chunks: int = 0
    committed: int = 0
    running: int = 0
    failed: int = 0
    rows: int = 0  # committed snapshot rows
    rows_estimated: int = 0  # the planner's estimate of all rows (InnoDB statistics or a count)
    elapsed_s: float | None = None  # time chunks were being read (the union of their reads so far)
    rows_per_second: float | None = None
    eta_s: float | None = None  # None: nothing left, nothing done yet, or only failed chunks left

    @property
    def done(self) -> bool:
        return self.chunks > 0 and self.committed == self.chunks

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_progress(tables: Iterable[TableStatus], now: datetime | None = None) -> SnapshotProgress:
    """Progress over the tables' statuses (their latest generation; a table without a plan counts nothing)."""
    tables = list(tables)
    now = now or datetime.now(UTC)
    chunks, committed = sum(t.chunks for t in tables), sum(t.committed for t in tables)
    failed, rows = sum(t.failed for t in tables), sum(t.rows for t in tables)
    last_commit = max((t.last_committed_at for t in tables if t.last_committed_at), default=None)
    spans = [(start, end or now) for t in tables for start, end in t.read_spans]
    done_spans = [(start, end) for t in tables for start, end in t.read_spans if end is not None]
    elapsed = rate = eta = None
    busy = _union_seconds(done_spans)
    if busy > 0 and last_commit is not None:
        elapsed = _union_seconds(spans)
        rate = rows / busy
        left = chunks - committed - failed
        if left > 0 and committed:
            since = (now - last_commit).total_seconds()
            eta = max(left * busy / committed - max(since, 0.0), 0.0)
    estimated = max(sum(t.row_estimate for t in tables), rows)
    return SnapshotProgress(chunks, committed, sum(t.running for t in tables), failed, rows, estimated,
                            elapsed, rate, eta)


def _union_seconds(spans: Iterable[tuple[datetime, datetime]]) -> float:
    """How long at least one of the spans was open."""
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += max((stop - start).total_seconds(), 0.0)
            end = stop
        elif stop > end:
            total += (stop - end).total_seconds()
            end = stop
    return total
