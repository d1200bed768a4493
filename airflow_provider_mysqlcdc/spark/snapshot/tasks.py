"""The Spark tasks of a snapshot run: which chunks each task reads, and what comes back to the driver.

A snapshot run is one Spark action over the chunks of every table in it (``chunk_group.run_snapshot``): an
RDD of (table index, chunk id) pairs whose tasks read and write their chunks (``SnapshotWriter.write_chunks``)
and return the written chunks to the driver, which commits them itself. Why not ``df.write`` through the
``mysql_cdc_snapshot`` data source, which does the same? Spark runs a data source's ``writer()`` and
``commit()`` in Python processes of their own on the driver, each importing the engine and loading every
table's plan and schema again: about 4 s of every application, more with many tables (measured by hand:
CHANGELOG.md). Here the driver's own process commits what it planned, with the objects it already has.

A task reads several chunks one after another when there are many (a Spark task costs ~50 ms on a 2-core
machine before any work), at most ``MAX_CHUNKS_PER_TASK`` full chunks' worth: a chunk of a small table (fewer
rows than the chunk size, by the plan's count) weighs its share of a full chunk, but at least
``SMALL_CHUNK_COST`` (its fixed cost: a connection, checks, a file), so 500 tables of 2,000 rows take 8 tasks,
not 32. There are at least ``TASKS_PER_CORE`` tasks per core so that uneven chunks even out.

The driver waits for the job on a thread of its own and meanwhile hands what the finished tasks wrote
(``while_running``) to the caller, which commits each table whose chunks are all written: the commits run
while the other tables are still read. The chunks of a failed task are deleted by the task; those of tasks
that succeeded come back through an accumulator (a successful task's updates reach the driver even when the
job fails later), so the driver commits or deletes them too: nothing uncommitted stays behind but the
directory of a task killed hard, which no manifest names.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, groupby
from typing import Any

from pyspark import InheritableThread
from pyspark.accumulators import AccumulatorParam

from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions
from airflow_provider_mysqlcdc.spark.snapshot.writer import SnapshotCommitMessage, SnapshotWriter

TASKS_PER_CORE = 4
MAX_CHUNKS_PER_TASK = 16  # full chunks' worth of rows
SMALL_CHUNK_COST = 1 / 8  # the least a chunk weighs, in full chunks: its fixed cost
POLL_SECONDS = 0.25  # how often the driver looks at what finished tasks wrote

Written = list[tuple[int, SnapshotCommitMessage]]  # (table index, its chunks written by one task)


def task_count(chunks: int, cores: int, chunks_per_task: int = MAX_CHUNKS_PER_TASK,
               cost: float | None = None) -> int:
    """Tasks for ``chunks`` chunks weighing ``cost`` full chunks in all (default: one each) on ``cores``
    cores: one chunk each while there are few, else at least ``TASKS_PER_CORE`` per core and at most
    ``chunks_per_task`` full chunks' worth each."""
    if chunks <= 0:
        return 0
    weight = chunks if cost is None else cost
    return min(chunks, max(cores * TASKS_PER_CORE, math.ceil(weight / max(1, chunks_per_task) - 1e-9)))


def chunk_cost(plan: ChunkPlan) -> float:
    """What one chunk of ``plan`` weighs, in full chunks: its rows by the plan's count over the chunk size,
    between ``SMALL_CHUNK_COST`` and 1."""
    rows = plan.row_estimate / max(1, len(plan.chunks))
    return min(1.0, max(SMALL_CHUNK_COST, rows / max(1, plan.chunk_size)))


def split_work(work: Sequence[tuple[int, int]], costs: Sequence[float], cores: int,
               chunks_per_task: int = MAX_CHUNKS_PER_TASK) -> list[list[tuple[int, int]]]:
    """``work`` in order, cut into ``task_count`` runs of about equal cost, none empty."""
    total = sum(costs)
    count = task_count(len(work), cores, chunks_per_task, total)
    groups: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    done = 0.0
    for position, (item, cost) in enumerate(zip(work, costs)):
        current.append(item)
        done += cost
        left_items, left_groups = len(work) - position - 1, count - len(groups) - 1
        due = done >= total * (len(groups) + 1) / count - 1e-9
        if left_groups > 0 and (due or left_items == left_groups):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


class _Appending(AccumulatorParam):
    """A list accumulator: what each finished task wrote."""

    def zero(self, value: Written) -> Written:
        return []

    def addInPlace(self, value1: Written, value2: Written) -> Written:
        value1.extend(value2)
        return value1


def written_accumulator(spark: Any) -> Any:
    return spark.sparkContext.accumulator([], _Appending())


def run_tasks(spark: Any, writers: Sequence[SnapshotWriter], work: Sequence[tuple[int, int]],
              written: Any, chunks_per_task: int = MAX_CHUNKS_PER_TASK,
              while_running: Callable[[Written], None] | None = None) -> Written:
    """Run the chunk reads ``work`` ((table index, chunk id), in order) as Spark tasks (``split_work``);
    returns what every task wrote. ``written`` (``written_accumulator``) collects the same from each task that
    finished, for the driver to commit or clean up after a failed job; ``while_running`` is called with it
    every ``POLL_SECONDS`` while the job runs, on the calling thread."""
    costs = [chunk_cost(writers[table_index].job.plan) for table_index, _ in work]
    groups = split_work(work, costs, max(1, spark.sparkContext.defaultParallelism), chunks_per_task)

    def task(index: int,
             items: Iterator[list[tuple[int, int]]]) -> Iterator[tuple[int, SnapshotCommitMessage]]:
        out = write_items(writers, index, chain.from_iterable(items))
        written.add(out)
        return iter(out)

    rdd = spark.sparkContext.parallelize(groups, max(1, len(groups))).mapPartitionsWithIndex(task)
    return _collect_polling(spark, rdd, written, while_running)


def _collect_polling(spark: Any, rdd: Any, written: Any,
                     while_running: Callable[[Written], None] | None) -> Written:
    """``rdd.collect()`` on a thread that inherits this one's job group; this thread polls meanwhile. If this
    thread is interrupted, the job group is cancelled first, so no task outlives the run."""
    if while_running is None:
        return rdd.collect()
    outcome: dict[str, Any] = {}

    def collect() -> None:
        try:
            outcome["rows"] = rdd.collect()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc

    thread = InheritableThread(target=collect, name="mysqlcdc-snapshot-job", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(POLL_SECONDS)
            while_running(list(written.value))
    except BaseException:
        group = spark.sparkContext.getLocalProperty("spark.jobGroup.id")
        if group:
            spark.sparkContext.cancelJobGroup(group)
        thread.join()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def write_items(writers: Sequence[SnapshotWriter], partition: int,
                items: Iterable[tuple[int, int]]) -> Written:
    """Read and write the chunks of one task, table after table, each with this task's reader slot and one
    MySQL session for its checks (``ReadSessions``); if one fails, the chunks this task wrote before it are
    deleted too."""
    out: Written = []
    try:
        with ReadSessions() as sessions:
            for table_index, pairs in groupby(items, key=lambda item: item[0]):
                writer = writers[table_index]
                ids = [chunk_id for _, chunk_id in pairs]
                slot = writer.job.options.reader_slot_base + partition
                out.append((table_index, writer.write_chunks(ids, slot, sessions)))
    except BaseException:
        for table_index, message in out:
            writers[table_index].discard(message)
        raise
    return out


def by_table(written: Written, tables: int) -> list[list[SnapshotCommitMessage]]:
    """The commit messages of each table index."""
    out: list[list[SnapshotCommitMessage]] = [[] for _ in range(tables)]
    for table_index, message in written:
        out[table_index].append(message)
    return out
