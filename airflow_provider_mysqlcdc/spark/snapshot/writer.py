"""Committing chunk snapshots from Spark: versioned Parquet
on the executors, chunk store + manifest on the driver.

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
2. task: read, write ``snapshot/generation=g/chunk=c/version=<new>/part-*.parquet``; on error delete it. The
   files get the columns of the read (``output_schema(read.schema)``): when DDL made the read reload the
   table's schema and read the chunk again, only the final read view's batches reach the files;
3. driver ``commit``: ``commit_chunks(the table's chunks, in_transaction=publish manifest)`` -- the store rows
   and the manifest switch together, or neither does (``StaleAttempt`` if a newer attempt of one started
   meanwhile: then each chunk is committed alone, so the others still commit);
4. driver ``abort`` (a task failed, or a commit failed): delete the directories that did not get committed and
   record ``fail_chunk``; the previous version and HW stay in force. A task killed hard leaves only an
   unreferenced directory, which no reader ever sees.
"""
from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.exc import DBAPIError

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkResult, ChunkStore, StaleAttempt
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import delete_dir, filesystem, new_version, snapshot_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import publish_snapshot_manifest
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
from airflow_provider_mysqlcdc.engine.snapshot.native_read.date_guard import read_again_if_zero_date
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions

log = logging.getLogger(__name__)

_COMMIT_RETRIES = 3


class InjectedFault(RuntimeError):
    """Raised by the ``test_fault`` option: a write that dies half way, on purpose."""


@dataclass
class WrittenChunk:
    """One chunk's output, not yet visible: what the driver needs to commit (or discard) it."""

    chunk_id: int
    attempt: int | None
    rows: int
    lw: str
    hw: str
    directory: str
    files: list[str]
    bytes: int
    mode: str
    backfill_events: int
    timings: dict[str, float] = field(default_factory=dict)
    hw_server: str | None = None  # whose binlog lw/hw name (``ServerIdentity.token``)
    hw_gtid_position: str | None = None


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
    directory = snapshot_dir(options.output, job.plan.table, job.plan.generation, chunk_id, new_version())
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


class VersionFiles:
    """``part-NNNNN.parquet`` files of at most ``rows_per_file`` rows in one version directory; at least one
    (maybe empty) file, so readers always find the schema. ``schema`` may be a function, called when the first
    file opens (the chunk read knows its columns only once it yields, or ends)."""

    def __init__(self, directory: str, schema: pa.Schema | Callable[[], pa.Schema],
                 rows_per_file: int) -> None:
        self.fs, self.inner = filesystem(directory)
        self.fs.create_dir(self.inner, recursive=True)
        self._schema, self.rows_per_file = schema, rows_per_file
        self.names: list[str] = []
        self.rows = self.bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream: Any = None
        self._in_file = 0

    @property
    def schema(self) -> pa.Schema:
        if callable(self._schema):
            self._schema = self._schema()
        return self._schema

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.schema.equals(self.schema):
            raise CdcError(f"a batch with columns {batch.schema.names} does not fit the chunk's files "
                           f"({self.schema.names})")
        offset = 0
        while offset < batch.num_rows:
            if self._writer is None or self._in_file >= self.rows_per_file:
                self._close_file()
                self._open_file()
            take = min(batch.num_rows - offset, self.rows_per_file - self._in_file)
            assert self._writer is not None
            self._writer.write_batch(batch.slice(offset, take))
            offset += take
            self._in_file += take
            self.rows += take

    def close(self) -> None:
        if not self.names:
            self._open_file()
        self._close_file()

    def discard(self) -> None:
        """Close quietly (the caller deletes the directory)."""
        try:
            self._close_file()
        except Exception:  # noqa: BLE001, S110 - the output is being thrown away
            pass

    def _open_file(self) -> None:
        name = f"part-{len(self.names):05d}.parquet"
        self.names.append(name)
        self._stream = self.fs.open_output_stream(posixpath.join(self.inner, name))
        self._writer = pq.ParquetWriter(self._stream, self.schema)
        self._in_file = 0

    def _close_file(self) -> None:
        if self._writer is None:
            return
        writer, stream, self._writer, self._stream = self._writer, self._stream, None, None
        writer.close()
        stream.close()
        self.bytes += self.fs.get_file_info(posixpath.join(self.inner, self.names[-1])).size


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
                delete_dir(chunk.directory)
            raise
        return SnapshotCommitMessage(written)

    @staticmethod
    def discard(message: SnapshotCommitMessage) -> None:
        """Delete the directories of written chunks that will not be committed."""
        for chunk in message.chunks:
            delete_dir(chunk.directory)

    def commit(self, messages: Sequence[SnapshotCommitMessage | None],
               store: ChunkStore | None = None) -> None:
        """Commit every written chunk: all in one store transaction with one manifest publish; if that is
        refused (a stale attempt, say), each chunk in its own, so the others still commit. ``store``: the
        driver's open chunk store (else one of its own)."""
        chunks = _written(messages)
        if not chunks:
            return
        with _store(self.job, store) as open_store:
            try:
                commit_written_chunks(open_store, self.job, chunks)
                return
            except Exception as exc:  # noqa: BLE001 - one by one below says which chunk it was
                log.info("%s: committing %d chunks together failed (%s); committing them one by one",
                         self.job.options.table, len(chunks), exc)
            errors: list[str] = []
            for chunk in chunks:
                try:
                    commit_written_chunks(open_store, self.job, [chunk])
                except Exception as exc:  # noqa: BLE001 - the others still commit; abort() cleans this one
                    errors.append(f"chunk {chunk.chunk_id}: {type(exc).__name__}: {exc}")
        if errors:
            raise CdcError(f"{self.job.options.table}: {len(errors)} chunk(s) not committed: "
                           + "; ".join(errors))

    def abort(self, messages: Sequence[SnapshotCommitMessage | None],
              store: ChunkStore | None = None) -> None:
        """Discard what did not commit; record the failure; committed chunks (a partial commit) stay."""
        options = self.job.options
        with _store(self.job, store) as opened:
            # first: the manifest must not name a directory deleted below
            republish_manifest(opened, self.job)
            committed: set[int] = set()
            for chunk in _written(messages):
                state = opened.chunk(options.table, self.job.plan.generation, chunk.chunk_id)
                if state.output_version == chunk.directory:
                    committed.add(chunk.chunk_id)
                else:
                    delete_dir(chunk.directory)
            for chunk_id in self.job.chunk_ids:
                if chunk_id not in committed:
                    opened.fail_chunk(options.table, self.job.plan.generation, chunk_id,
                                      "the Spark write was aborted (a task or the commit failed; see the "
                                      "Spark job's error); the previous snapshot of the chunk stays in force",
                                      run_id=options.run_id, attempt=options.attempts.get(chunk_id))


def commit_written_chunks(store: ChunkStore, job: ChunkGroupJob, chunks: Sequence[WrittenChunk]) -> None:
    """Store rows + one manifest publish in one transaction;
    deadlocks between concurrent groups are retried."""
    options = job.options
    results = [_result(options, chunk) for chunk in chunks]
    for attempt in range(_COMMIT_RETRIES):
        try:
            store.commit_chunks(
                options.table, job.plan.generation, results, run_id=options.run_id,
                in_transaction=lambda conn, _states: publish_snapshot_manifest(conn, options.output,
                                                                               job.plan.table),
            )
            return
        except StaleAttempt:
            raise
        except DBAPIError:
            # The manifest may have been renamed into place before the store's COMMIT failed: rebuild it from
            # what the store really holds before retrying (or giving up).
            republish_manifest(store, job)
            if attempt == _COMMIT_RETRIES - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def _result(options: Any, chunk: WrittenChunk) -> ChunkResult:
    extra = {"files": chunk.files, "bytes": chunk.bytes, "read_view_mode": chunk.mode,
             "backfill_events": chunk.backfill_events, "excluded_columns": list(options.exclude_columns)}
    return ChunkResult(chunk.chunk_id, chunk.rows, BinlogPosition.parse(chunk.lw),
                       BinlogPosition.parse(chunk.hw), chunk.directory, chunk.attempt, chunk.timings, extra,
                       chunk.hw_server, chunk.hw_gtid_position)


def republish_manifest(store: ChunkStore, job: ChunkGroupJob) -> None:
    """Rewrite the table's manifest from the store's committed rows (idempotent)."""
    with store.transaction() as conn:
        publish_snapshot_manifest(conn, job.options.output, job.plan.table)


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
