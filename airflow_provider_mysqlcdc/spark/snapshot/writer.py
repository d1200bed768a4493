"""Chunk snapshots from Spark: the tasks read chunks into the lake's version files, the driver hands them to
the lake's commit (``engine/lake/snapshot_commit.py``: chunk store + manifest in one step).

Handoff of LW/HW: the *task itself performs the chunk read*. A snapshot run's job (``tasks.run_tasks``) is an
RDD of chunk ids; each task reads its chunks with the engine's ``ChunkRead``, streams the Arrow batches into
a fresh version directory per chunk, and returns a commit message with each chunk's rows, LW, HW, directory
and store attempt. Why not a reader that emits a control record for a writer to strip?

* LW/HW never leave the process that measured them except as a task's result, which Spark delivers only for
  a task that succeeded, once per partition; nothing in the data can be filtered, reordered or coalesced away
  by a planner rule, and no fake row exists that a consumer could see.
* Exactly one read per chunk attempt by construction: the read happens inside the only action of the job.
* The records go MySQL -> Arrow -> Parquet in one Python process, without a round trip through the JVM.

Commit protocol (per table; each chunk's attempt checked on its own):

1. driver, before the job: ``start_chunks`` (attempt n of each chunk; a committed chunk gets
   ``rerun_pending``, so the stream filter treats it as HW = -inf while the committed result stays in force
   for the mirror);
2. task: read, write a fresh version directory (``engine/lake/snapshot_files.py``); on error delete it. The
   files get the columns of the read (``output_schema(read.schema)``): when DDL made the read reload the
   table's schema and read the chunk again, only the final read view's batches reach the files;
3. driver ``commit``: ``SnapshotCommit.commit`` -- the store rows and the manifest switch together, or neither
   does (a stale attempt: then each chunk is committed alone, so the others still commit);
4. driver ``abort`` (a task failed, or a commit failed): ``SnapshotCommit.abort`` deletes the directories that
   did not get committed and records the failure; the previous version and HW stay in force.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import delete_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_commit import SnapshotCommit, WrittenChunk
from airflow_provider_mysqlcdc.engine.lake.snapshot_files import VersionFiles, new_chunk_version
from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
from airflow_provider_mysqlcdc.engine.snapshot.native_read.date_guard import read_again_if_zero_date
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions


class InjectedFault(RuntimeError):
    """Raised by the ``test_fault`` option: a write that dies half way, on purpose."""


@dataclass
class SnapshotCommitMessage:
    """What one task wrote (not yet visible): the driver commits or discards it."""

    chunks: list[WrittenChunk]


# --- executor side ------------------------------------------------------------------------------------------


def write_chunk(job: ChunkGroupJob, chunk_id: int, slot: int,
                sessions: ReadSessions | None = None) -> WrittenChunk:
    """Read one chunk and write it to a fresh version directory; on any error the directory is removed (and
    a read that met a zero date after handing out rows goes again: ``date_guard``). ``sessions``: the task's
    MySQL sessions, shared with its other reads (``read_session.py``)."""
    return read_again_if_zero_date(lambda: _write_chunk(job, chunk_id, slot, sessions))


def _write_chunk(job: ChunkGroupJob, chunk_id: int, slot: int, sessions: ReadSessions | None) -> WrittenChunk:
    options = job.options
    directory = new_chunk_version(options.output, job.plan.table, job.plan.generation, chunk_id)
    fault = _fault(options.test_fault, chunk_id)
    started = time.monotonic()
    try:
        read = job.read(chunk_id, slot, sessions)
        # The schema is taken when the first file opens: after the read settled on its columns.
        files, rows_written, size = _write_parquet(directory, lambda: job.output_schema(read.schema),
                                                   job.batches(read), options.rows_per_file, fault)
    except BaseException:
        delete_dir(directory)
        raise
    result = read.result
    if result.rows != rows_written or result.low_watermark is None or result.high_watermark is None:
        delete_dir(directory)
        raise CdcError(f"{options.table} chunk {chunk_id}: read {result.rows} rows but wrote {rows_written}")
    timings = {**result.timings, "write_total_s": time.monotonic() - started}
    return WrittenChunk(
        chunk_id=chunk_id, attempt=options.attempts.get(chunk_id), rows=rows_written,
        lw=str(result.low_watermark), hw=str(result.high_watermark), directory=directory, files=files,
        bytes=size, mode=result.mode, backfill_events=result.backfill_events, timings=timings,
        hw_server=result.hw_server, hw_gtid_position=result.hw_gtid_position,
    )


def _write_parquet(directory: str, schema: pa.Schema | Callable[[], pa.Schema],
                   batches: Iterator[pa.RecordBatch], rows_per_file: int,
                   fault: tuple[str, int] | None) -> tuple[list[str], int, int]:
    """Stream batches into the version directory; return (file names, rows, bytes)."""
    files = VersionFiles(directory, schema, rows_per_file)
    try:
        for batch in batches:
            files.write(batch)
            if fault and files.rows >= fault[1]:
                files.close()  # the partial output is on disk, as after a crash
                _fail(fault[0])
        files.close()
    except BaseException:
        files.discard()
        raise
    return files.names, files.rows, files.bytes


def _fault(spec: str | None, chunk_id: int) -> tuple[str, int] | None:
    if not spec:
        return None
    kind, chunk, rows = spec.split(":")
    return (kind, int(rows)) if int(chunk) == chunk_id else None


def _fail(kind: str) -> None:
    if kind == "exit":
        os._exit(17)  # a killed executor: no cleanup runs
    raise InjectedFault("test_fault: the chunk write fails half way")


# --- one table's writes and their commit --------------------------------------------------------------------


class SnapshotWriter:
    """One table's chunks of a snapshot run: written by the tasks (``write_chunks``), committed or discarded
    by the driver (``commit``, ``abort``). Created on the driver, pickled to the tasks; holds no secret."""

    def __init__(self, job: ChunkGroupJob) -> None:
        self.job = job

    def write_chunks(self, ids: Sequence[int], slot: int,
                     sessions: ReadSessions | None = None) -> SnapshotCommitMessage:
        """Read and write ``ids`` one after another with reader ``slot`` (and the task's ``sessions``); on
        failure nothing of them stays."""
        stray = sorted(set(ids) - set(self.job.chunk_ids))
        if stray:
            raise CdcError(f"chunk ids {stray} are not part of this job's chunks {self.job.chunk_ids}")
        written: list[WrittenChunk] = []
        try:
            for chunk_id in ids:
                written.append(write_chunk(self.job, chunk_id, slot, sessions))
        except BaseException:
            for chunk in written:
                chunk.discard()
            raise
        return SnapshotCommitMessage(written)

    @staticmethod
    def discard(message: SnapshotCommitMessage) -> None:
        """Delete the directories of written chunks that will not be committed."""
        for chunk in message.chunks:
            chunk.discard()

    def lake(self) -> SnapshotCommit:
        """The lake's commit of this table's chunks."""
        options = self.job.options
        return SnapshotCommit(options.output, self.job.plan.table, self.job.plan.generation, options.run_id,
                              tuple(options.exclude_columns))

    def commit(self, messages: Sequence[SnapshotCommitMessage | None],
               store: ChunkStore | None = None) -> None:
        """Commit every written chunk (``SnapshotCommit.commit``). ``store``: the driver's open chunk store
        (else one of its own)."""
        chunks = _written(messages)
        if not chunks:
            return
        with _store(self.job, store) as open_store:
            self.lake().commit(open_store, chunks)

    def abort(self, messages: Sequence[SnapshotCommitMessage | None],
              store: ChunkStore | None = None) -> None:
        """Discard what did not commit; record the failure; committed chunks (a partial commit) stay."""
        with _store(self.job, store) as opened:
            self.lake().abort(opened, _written(messages), self.job.chunk_ids, self.job.options.attempts)


def commit_written_chunks(store: ChunkStore, job: ChunkGroupJob, chunks: Sequence[WrittenChunk]) -> None:
    """Store rows + one manifest publish in one transaction (``SnapshotCommit.commit_together``)."""
    SnapshotWriter(job).lake().commit_together(store, chunks)


@contextmanager
def _store(job: ChunkGroupJob, store: ChunkStore | None) -> Iterator[ChunkStore]:
    """``store`` if given (left open), else the job's chunk store, closed after."""
    if store is not None:
        yield store
        return
    with ChunkStore(job.options.store_url()) as own:
        yield own


def _written(messages: Sequence[SnapshotCommitMessage | None]) -> list[WrittenChunk]:
    return [c for m in messages if m is not None for c in m.chunks]
