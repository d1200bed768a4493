"""Overall snapshot progress of a pipeline: chunks and rows done of the total, the rate, and the time left.

What an on-call engineer asks first during a long snapshot: how far, how fast, how long still. Counted over the
latest plan generation of each table, from the chunk store only (the planner's row estimate gives the total;
committed chunks give the rows read). The rate is measured over this generation's work so far (first start to
latest commit); the time left assumes the remaining chunks go at that pace, and is given only while something
is left that is not failed (failed chunks wait for a rerun, which no rate predicts).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, FAILED, RUNNING, ChunkStore, UnknownChunk


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


def snapshot_progress(store: ChunkStore, tables: Iterable[str], now: datetime | None = None) -> SnapshotProgress:
    """Progress over the latest generation of each of ``tables`` (a table without a plan counts nothing)."""
    chunks = committed = running = failed = rows = estimated = 0
    first_start: datetime | None = None
    last_commit: datetime | None = None
    for table in tables:
        try:
            plan = store.plan(table)
        except UnknownChunk:
            continue
        estimated += int(plan.plan.get("row_estimate") or 0)
        for c in store.chunks(table, plan.generation):
            chunks += 1
            running += c.status == RUNNING
            failed += c.status == FAILED
            if c.status == COMMITTED:
                committed += 1
                rows += c.rows or 0
                if c.committed_at and (last_commit is None or c.committed_at > last_commit):
                    last_commit = c.committed_at
            if c.started_at and (first_start is None or c.started_at < first_start):
                first_start = c.started_at
    elapsed = rate = eta = None
    if first_start is not None and last_commit is not None and last_commit > first_start:
        elapsed = (last_commit - first_start).total_seconds()
        rate = rows / elapsed
        left = chunks - committed - failed
        if left > 0 and committed:
            since = ((now or datetime.now(timezone.utc)) - last_commit).total_seconds()
            eta = max(left * elapsed / committed - max(since, 0.0), 0.0)
    return SnapshotProgress(chunks, committed, running, failed, rows, max(estimated, rows), elapsed, rate, eta)
