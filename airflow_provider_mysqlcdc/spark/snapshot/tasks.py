"""The Spark tasks of a snapshot run: which chunks each task reads, and what comes back to the driver.

A snapshot run is one Spark action over the chunks of every table in it (``chunk_group.run_snapshot``): an
RDD of (table index, chunk id) pairs whose tasks read and write their chunks (``SnapshotWriter.write_chunks``)
and return the written chunks to the driver, which commits them itself. Why not ``df.write`` through the
``mysql_cdc_snapshot`` data source, which does the same? Spark runs a data source's ``writer()`` and
``commit()`` in Python processes of their own on the driver, each importing the engine and loading every
table's plan and schema again: about 4 s of every application, more with many tables (measured by hand:
CHANGELOG.md). Here the driver's own process commits what it planned, with the objects it already has.

A task reads several chunks one after another when there are many (a Spark task costs ~50 ms on a 2-core
machine before any work), but never more than ``MAX_CHUNKS_PER_TASK``, and there are at least
``TASKS_PER_CORE`` tasks per core
so that uneven chunks even out. The chunks of a failed task are deleted by the task; those of tasks that
succeeded before the job failed come back through an accumulator (a successful task's updates reach the driver
even when the job fails later), so the driver deletes them too: nothing uncommitted stays behind but the
directory of a task killed hard, which no manifest names.
"""
from __future__ import annotations

from itertools import groupby
from typing import Any, Iterable, Iterator, Sequence

from pyspark.accumulators import AccumulatorParam

from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions
from airflow_provider_mysqlcdc.spark.snapshot.writer import SnapshotCommitMessage, SnapshotWriter

TASKS_PER_CORE = 4
MAX_CHUNKS_PER_TASK = 16

Written = list[tuple[int, SnapshotCommitMessage]]  # (table index, its chunks written by one task)


def task_count(chunks: int, cores: int, chunks_per_task: int = MAX_CHUNKS_PER_TASK) -> int:
    """Tasks for ``chunks`` chunks on ``cores`` cores: one chunk each while there are few, else at least
    ``TASKS_PER_CORE`` per core and at most ``chunks_per_task`` chunks each."""
    if chunks <= 0:
        return 0
    return min(chunks, max(cores * TASKS_PER_CORE, -(-chunks // max(1, chunks_per_task))))


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
              written: Any, chunks_per_task: int = MAX_CHUNKS_PER_TASK) -> Written:
    """Run the chunk reads ``work`` ((table index, chunk id), in order) as Spark tasks of at most
    ``chunks_per_task`` chunks; returns what every task wrote. ``written`` (``written_accumulator``) collects the
    same from each task that finished, for the driver to clean up after a failed job."""
    tasks = task_count(len(work), max(1, spark.sparkContext.defaultParallelism), chunks_per_task)

    def task(index: int, items: Iterator[tuple[int, int]]) -> Iterator[tuple[int, SnapshotCommitMessage]]:
        out = write_items(writers, index, items)
        written.add(out)
        return iter(out)

    return spark.sparkContext.parallelize(list(work), tasks).mapPartitionsWithIndex(task).collect()


def write_items(writers: Sequence[SnapshotWriter], partition: int, items: Iterable[tuple[int, int]]) -> Written:
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
