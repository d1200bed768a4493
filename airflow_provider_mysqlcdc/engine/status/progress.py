"""Overall snapshot progress of a pipeline: chunks and rows done of the total, the rate, and the time left.

What an on-call engineer asks first during a long snapshot: how far, how fast, how long still. Counted over
the latest plan generation of each table, from the tables' statuses (the planner's row estimate gives the
total; committed chunks give the rows read). The rate is measured over this generation's work so far (first
start to latest commit); the time left assumes the remaining chunks go at that pace, and is given only while
something is left that is not failed (failed chunks wait for a rerun, which no rate predicts).
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
    elapsed_s: float | None = None  # first chunk start to the latest commit
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
    chunks, committed = sum(t.chunks for t in tables), sum(t.committed for t in tables)
    failed, rows = sum(t.failed for t in tables), sum(t.rows for t in tables)
    first_start = min((t.first_started_at for t in tables if t.first_started_at), default=None)
    last_commit = max((t.last_committed_at for t in tables if t.last_committed_at), default=None)
    elapsed = rate = eta = None
    if first_start is not None and last_commit is not None and last_commit > first_start:
        elapsed = (last_commit - first_start).total_seconds()
        rate = rows / elapsed
        left = chunks - committed - failed
        if left > 0 and committed:
            since = ((now or datetime.now(UTC)) - last_commit).total_seconds()
            eta = max(left * elapsed / committed - max(since, 0.0), 0.0)
    estimated = max(sum(t.row_estimate for t in tables), rows)
    return SnapshotProgress(chunks, committed, sum(t.running for t in tables), failed, rows, estimated,
                            elapsed, rate, eta)
