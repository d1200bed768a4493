"""Run a snapshot on Spark: start the chunk attempts, read and write every chunk in one Spark action, commit.

``run_snapshot`` takes the chunks of any number of tables (one ``SnapshotOptions`` each) and runs them as one
Spark job (``tasks.run_tasks``), so a snapshot run of 500 small tables pays Spark's fixed costs once, not 500
times. It is what ``spark_apps/snapshot_chunks.py`` (one chunk group per ``spark-submit``, one mapped Airflow
task), ``mysqlcdc snapshot`` and a stream's re-snapshots call; ``run_chunk_group`` is its one-table form. The
driver commits the written chunks itself, a table's chunks in one chunk store transaction with its manifest,
as soon as all of them are written, while the job still reads the other tables; the tables are independent:
one table's failed commit, or a failed task of another table, does not hold back a table whose chunks are
all written.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import group_label
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.layout import ensure_writable
from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.source.connection import connect
from airflow_provider_mysqlcdc.spark.errors import task_failure_summary
from airflow_provider_mysqlcdc.spark.session import ensure_no_speculation
from airflow_provider_mysqlcdc.spark.snapshot import tasks
from airflow_provider_mysqlcdc.spark.snapshot.writer import SnapshotCommitMessage, SnapshotWriter

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


def run_chunk_group(spark: SparkSession, options: SnapshotOptions, *, progress: Progress | None = None,
                    raise_on_failure: bool = True, job_group: str | None = None,
                    chunks_per_task: int = tasks.MAX_CHUNKS_PER_TASK) -> ChunkGroupResult:
    """Snapshot the chunks of ``options`` (all chunks of
    the plan if ``chunk_ids`` is None) in one Spark job."""
    return run_snapshot(spark, [options], progress=progress, raise_on_failure=raise_on_failure,
                        job_group=job_group, chunks_per_task=chunks_per_task)[0]


def run_snapshot(spark: SparkSession, options: Sequence[SnapshotOptions], *, progress: Progress | None = None,
                 raise_on_failure: bool = True, job_group: str | None = None,
                 chunks_per_task: int = tasks.MAX_CHUNKS_PER_TASK) -> list[ChunkGroupResult]:
    """Snapshot the chunks of every ``options`` (one per table, one chunk store) in one Spark job; one result
    per table, in order.

    ``job_group``: the Spark job group to run it in (``cancelJobGroup`` then stops it; the tables whose
    chunks were all written are committed, the others recorded failed). ``raise_on_failure``: raise
    ``SnapshotFailed`` naming every table that failed. ``chunks_per_task``: at most this many full chunks'
    worth of rows read one after another by one Spark task (1: about a chunk a task, for a job that shares its
    cores with a stream's batches)."""
    if not options:
        return []
    stores = {o.store_url() for o in options}
    if len(stores) > 1:
        raise ConfigurationError(f"one snapshot run writes to one chunk store, got {len(stores)}")
    ensure_no_speculation(spark)
    for output in dict.fromkeys(o.output for o in options):
        ensure_writable(output)  # before any chunk starts: an unusable output must not cost a read
    started = time.monotonic()
    say = progress or (lambda _msg: None)
    with ChunkStore(stores.pop()) as store:
        with connect(options[0].settings()) as conn:  # one session loads every table's schema
            loaded = ChunkGroupJob.load_all(options, store, conn)
        jobs = _start(store, loaded)  # every table checked before any chunk starts
        label = _label(jobs)
        writers = [SnapshotWriter(job) for job in jobs]
        work = [(i, c) for i, job in enumerate(jobs) for c in job.chunk_ids]
        say(f"snapshot {label}: {len(work)} chunk(s) started")
        commits = _TableCommits(store, writers, jobs)
        group = job_group or f"mysqlcdc-snapshot-{uuid.uuid4().hex[:12]}"
        sc = spark.sparkContext
        sc.setJobGroup(group, f"mysqlcdc snapshot {label}", interruptOnCancel=True)
        watcher = _ProgressWatcher(spark, group, len(work), label, say)
        watcher.start()
        written = tasks.written_accumulator(spark)
        try:
            out = tasks.run_tasks(spark, writers, work, written, chunks_per_task,
                                  while_running=commits.complete)
        except Exception as exc:  # noqa: BLE001 - recorded per chunk, then raised as SnapshotFailed
            commits.failed(written.value, task_failure_summary(exc))
        else:
            commits.all(out)
        finally:
            watcher.stop()
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        errors = commits.errors
        results = [_result(store, job, error, time.monotonic() - started) for job, error in zip(jobs, errors)]
    failed = [r for r in results if not r.ok]
    if not failed:
        say(f"snapshot {label}: committed {sum(r.rows for r in results)} rows in "
            f"{time.monotonic() - started:.1f}s")
    elif raise_on_failure:
        raise SnapshotFailed("; ".join(
            f"snapshot {group_label(r.table, r.generation, [c.chunk_id for c in r.chunks])} failed: "
            f"{r.error or 'some chunks did not commit'}" for r in failed))
    return results


def _start(store: ChunkStore, jobs: Sequence[ChunkGroupJob]) -> list[ChunkGroupJob]:
    """The jobs with a new attempt of each of their chunks started (the stream treats them as HW = -inf): one
    chunk store transaction per run id (a run has one), all of them or none."""
    by_run: dict[str | None, list[int]] = {}
    for i, job in enumerate(jobs):
        by_run.setdefault(job.options.run_id, []).append(i)
    started = list(jobs)
    for run_id, indexes in by_run.items():
        groups = [(jobs[i].options.table, jobs[i].plan.generation, jobs[i].chunk_ids) for i in indexes]
        for i, states in zip(indexes, store.start_tables(groups, run_id=run_id)):
            job = jobs[i]
            attempts = {c: state.attempts for c, state in zip(job.chunk_ids, states)}
            started[i] = ChunkGroupJob(job.options.with_(attempts=attempts), job.plan, job.schema)
    return started


def _label(jobs: Sequence[ChunkGroupJob]) -> str:
    if len(jobs) == 1:
        return group_label(jobs[0].options.table, jobs[0].plan.generation, jobs[0].chunk_ids)
    chunks = sum(len(j.chunk_ids) for j in jobs)
    return f"{len(jobs)} tables ({jobs[0].options.table} .. {jobs[-1].options.table}, {chunks} chunks)"


class _TableCommits:
    """Commits each table of a run once, as soon as every one of its chunks is written: while the job still
    reads the other tables (``complete``), after it (``all``), or, when it failed, the tables it finished
    before the failure (``failed``: the others are discarded and recorded failed). A table's commit is its own
    chunk store transaction; one table's failure holds back no other."""

    def __init__(self, store: ChunkStore, writers: Sequence[SnapshotWriter],
                 jobs: Sequence[ChunkGroupJob]) -> None:
        self.store, self.writers, self.jobs = store, writers, jobs
        self.errors: list[str | None] = [None] * len(jobs)
        self.done: set[int] = set()

    def complete(self, written: tasks.Written) -> None:
        """Commit the tables not yet committed whose chunks ``written`` holds, every one of them."""
        for i, mine in enumerate(tasks.by_table(written, len(self.jobs))):
            ids = {c.chunk_id for message in mine for c in message.chunks}
            if i not in self.done and mine and ids >= set(self.jobs[i].chunk_ids):
                self._commit(i, mine)

    def all(self, written: tasks.Written) -> None:
        for i, mine in enumerate(tasks.by_table(written, len(self.jobs))):
            if i not in self.done:
                self._commit(i, mine)

    def failed(self, written: tasks.Written, error: str) -> None:
        self.complete(written)
        for i, mine in enumerate(tasks.by_table(written, len(self.jobs))):
            if i not in self.done:
                self.done.add(i)
                self.errors[i] = error
                self.writers[i].abort(mine, self.store)
                _record_failure(self.store, self.jobs[i], error)

    def _commit(self, i: int, messages: Sequence[SnapshotCommitMessage]) -> None:
        """Commit one table's written chunks; on failure discard what did not commit and keep the error."""
        self.done.add(i)
        writer, job = self.writers[i], self.jobs[i]
        try:
            writer.commit(messages, self.store)
        except Exception as exc:  # noqa: BLE001 - this table failed; the others still commit
            writer.abort(messages, self.store)
            error = f"{type(exc).__name__}: {exc}"[:500]
            self.errors[i] = error
            _record_failure(self.store, job, error)


def _result(store: ChunkStore, job: ChunkGroupJob, error: str | None, seconds: float) -> ChunkGroupResult:
    table, generation = job.options.table, job.plan.generation
    states = {s.chunk_id: s for s in store.chunks(table, generation)}
    attempts = job.options.attempts
    outcomes = tuple(
        ChunkOutcome(
            chunk_id=c, status=states[c].status, attempt=attempts[c],
            rows=states[c].rows, lw=str(states[c].lw) if states[c].lw else None,
            hw=str(states[c].hw) if states[c].hw else None, output_version=states[c].output_version,
            error=states[c].error,
        )
        for c in job.chunk_ids
    )
    return ChunkGroupResult(table, generation, outcomes, seconds, error)


def _record_failure(store: ChunkStore, job: ChunkGroupJob, error: str) -> None:
    """Put the real error on chunks still marked as running
    by this attempt (``abort`` wrote a generic one)."""
    for state in store.chunks(job.options.table, job.plan.generation):
        attempt = job.options.attempts.get(state.chunk_id)
        if attempt is None or state.attempts != attempt:
            continue
        if state.status in (RUNNING, "failed"):
            store.fail_chunk(job.options.table, job.plan.generation, state.chunk_id, error,
                             run_id=job.options.run_id, attempt=attempt)


class _ProgressWatcher:
    """Prints how many Spark tasks finished, from Spark's status tracker (no extra action, no re-read)."""

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
                done = count = 0
                for job_id in self.tracker.getJobIdsForGroup(self.group):
                    info = self.tracker.getJobInfo(job_id)
                    for stage_id in info.stageIds if info else []:
                        stage = self.tracker.getStageInfo(stage_id)
                        done += stage.numCompletedTasks if stage else 0
                        count += stage.numTasks if stage else 0
            except Exception:  # noqa: BLE001 - progress is best effort
                return
            if done != self._last:
                self._last = done
                self.say(f"snapshot {self.label}: {done}/{count} Spark task(s) done "
                         f"({self.total} chunks in all)")
