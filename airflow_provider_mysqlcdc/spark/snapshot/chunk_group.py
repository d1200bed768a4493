"""Run one chunk group on Spark: start the chunk attempts, run the single write action, report the chunks.

``run_chunk_group`` is what ``spark_apps/snapshot_chunks.py`` (one chunk group per ``spark-submit``, one mapped
Airflow task) and ``mysqlcdc snapshot`` call. The chunks of the group run in parallel, one per partition; the
job is one Spark action, so every chunk is read once per attempt.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import group_label
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import ensure_writable
from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.spark.errors import task_failure_summary
from airflow_provider_mysqlcdc.spark.session import ensure_no_speculation, register_data_source
from airflow_provider_mysqlcdc.spark.snapshot.source import SOURCE_NAME, SnapshotDataSource
from airflow_provider_mysqlcdc.spark.snapshot.writer import CHUNK_ID_COLUMN

Progress = Callable[[str], None]


class SnapshotFailed(CdcError):
    """The Spark job of a chunk group failed; its chunks keep their previous committed snapshots."""


@dataclass(frozen=True)
class ChunkOutcome:
    chunk_id: int
    status: str
    attempt: int
    rows: int | None
    lw: str | None
    hw: str | None
    output_version: str | None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ChunkGroupResult:
    table: str
    generation: int
    chunks: tuple[ChunkOutcome, ...]
    seconds: float
    error: str | None = None
    spark: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.status == COMMITTED for c in self.chunks)

    @property
    def rows(self) -> int:
        return sum(c.rows or 0 for c in self.chunks if c.status == COMMITTED)

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "generation": self.generation, "ok": self.ok, "rows": self.rows,
                "seconds": round(self.seconds, 3), "error": self.error,
                "chunks": [c.as_dict() for c in self.chunks]}


def chunk_id_frame(spark: SparkSession, chunk_ids: tuple[int, ...]) -> DataFrame:
    """One row per partition: ``range(n, numPartitions=n)`` puts exactly one id in each, without a shuffle."""
    ids = F.array(*[F.lit(int(c)) for c in chunk_ids])
    return (spark.range(len(chunk_ids), numPartitions=len(chunk_ids))
            .select(F.element_at(ids, (F.col("id") + 1).cast("int")).alias(CHUNK_ID_COLUMN)))


def run_chunk_group(spark: SparkSession, options: SnapshotOptions, *, progress: Progress | None = None,
                    raise_on_failure: bool = True, job_group: str | None = None) -> ChunkGroupResult:
    """Snapshot the chunks of ``options`` (all chunks of the plan if ``chunk_ids`` is None) in one Spark job.

    ``job_group``: the Spark job group to run it in (``cancelJobGroup`` then stops it; its chunks are
    recorded failed)."""
    ensure_no_speculation(spark)
    ensure_writable(options.output)  # before any chunk starts: an unusable output must not cost a read
    register_data_source(spark, SnapshotDataSource)
    started = time.monotonic()
    say = progress or (lambda _msg: None)
    with ChunkStore(options.store_url()) as store:
        job = ChunkGroupJob.load(options, store)
        table, generation = job.options.table, job.plan.generation
        attempts = {c: store.start_chunk(table, generation, c, run_id=options.run_id).attempts
                    for c in job.chunk_ids}
        job = ChunkGroupJob(job.options.with_(attempts=attempts), job.plan, job.schema)
        label = group_label(table, generation, job.chunk_ids)
        say(f"snapshot {label}: {len(job.chunk_ids)} chunk(s) started")
        error: str | None = None
        group = job_group or f"mysqlcdc-snapshot-{uuid.uuid4().hex[:12]}"
        sc = spark.sparkContext
        sc.setJobGroup(group, f"mysqlcdc snapshot {label}", interruptOnCancel=True)
        watcher = _ProgressWatcher(spark, group, len(job.chunk_ids), label, say)
        watcher.start()
        try:
            (chunk_id_frame(spark, job.chunk_ids).write.format(SOURCE_NAME).mode("append")
             .options(**job.options.to_options()).save())
        except Exception as exc:  # noqa: BLE001 - recorded per chunk, then raised as SnapshotFailed
            error = task_failure_summary(exc)
            _record_failure(store, job, error)
        finally:
            watcher.stop()
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        states = {s.chunk_id: s for s in store.chunks(table, generation)}
    outcomes = tuple(
        ChunkOutcome(
            chunk_id=c, status=states[c].status, attempt=attempts[c],
            rows=states[c].rows, lw=str(states[c].lw) if states[c].lw else None,
            hw=str(states[c].hw) if states[c].hw else None, output_version=states[c].output_version,
            error=states[c].error,
        )
        for c in job.chunk_ids
    )
    result = ChunkGroupResult(table, generation, outcomes, time.monotonic() - started, error)
    if result.ok:
        say(f"snapshot {label}: committed {result.rows} rows in {result.seconds:.1f}s")
    elif raise_on_failure:
        raise SnapshotFailed(f"snapshot {label} failed: {error or 'some chunks did not commit'}")
    return result


def _record_failure(store: ChunkStore, job: ChunkGroupJob, error: str) -> None:
    """Put the real error on chunks still marked as running by this attempt (``abort`` wrote a generic one)."""
    for state in store.chunks(job.options.table, job.plan.generation):
        attempt = job.options.attempts.get(state.chunk_id)
        if attempt is None or state.attempts != attempt:
            continue
        if state.status in (RUNNING, "failed"):
            store.fail_chunk(job.options.table, job.plan.generation, state.chunk_id, error,
                             run_id=job.options.run_id, attempt=attempt)


class _ProgressWatcher:
    """Prints how many chunk tasks finished, from Spark's status tracker (no extra action, no re-read)."""

    def __init__(self, spark: SparkSession, group: str, total: int, label: str, say: Progress,
                 every: float = 2.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.group, self.total, self.label, self.say, self.every = group, total, label, say, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mysqlcdc-progress")
        self._last = -1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                done = 0
                for job_id in self.tracker.getJobIdsForGroup(self.group):
                    info = self.tracker.getJobInfo(job_id)
                    for stage_id in info.stageIds if info else []:
                        stage = self.tracker.getStageInfo(stage_id)
                        done += stage.numCompletedTasks if stage else 0
            except Exception:  # noqa: BLE001 - progress is best effort
                return
            if done != self._last:
                self._last = done
                self.say(f"snapshot {self.label}: {done}/{self.total} chunk(s) read and written")
