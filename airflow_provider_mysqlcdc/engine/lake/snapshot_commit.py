"""Where a snapshot run's chunks are committed to the lake: the chunk store rows and the snapshot manifest in
one step, or neither.

Whoever reads the chunks (the Spark tasks of ``spark/snapshot/``) writes each into a fresh version directory
(``snapshot_files``) and hands back a ``WrittenChunk``; the driver hands those to ``SnapshotCommit``:

* ``commit``: ``ChunkStore.commit_chunks`` for the table's written chunks, with the snapshot manifest
  (``snapshot_manifest``) rebuilt from the store's rows inside that transaction; if the store refuses the
  chunks together (``StaleAttempt``: a newer attempt of one started meanwhile), each chunk commits alone so
  the others still do. A database error (a deadlock between concurrent chunk groups) is retried, after the
  manifest is rebuilt from what the store really holds (it may have been renamed into place before the
  store's COMMIT failed);
* ``abort`` (a task failed, or a commit failed): the manifest rebuilt first (it must not name a directory
  deleted next), then the directories that did not get committed are deleted and the failure recorded
  (``fail_chunk``); the previous version and HW of each chunk stay in force. A task killed hard leaves only an
  unreferenced directory, which no reader ever sees (garbage collection removes it).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkResult, ChunkStore, StaleAttempt
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import delete_dir
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import publish_snapshot_manifest
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

COMMIT_RETRIES = 3


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

    def discard(self) -> None:
        """Delete the chunk's version directory (it will not be committed)."""
        delete_dir(self.directory)


@dataclass(frozen=True)
class SnapshotCommit:
    """The commits of one table's chunks of one plan generation into an output root."""

    root: str
    table: TableId
    generation: int
    run_id: str | None = None
    exclude_columns: tuple[str, ...] = ()

    def commit(self, store: ChunkStore, chunks: Sequence[WrittenChunk]) -> None:
        """Commit every written chunk: all in one store transaction with one manifest publish; if that is
        refused (a stale attempt, say), each chunk in its own, so the others still commit."""
        if not chunks:
            return
        try:
            self.commit_together(store, chunks)
            return
        except Exception as exc:  # noqa: BLE001 - one by one below says which chunk it was
            log.info("%s: committing %d chunks together failed (%s); committing them one by one",
                     self.table, len(chunks), exc)
        errors: list[str] = []
        for chunk in chunks:
            try:
                self.commit_together(store, [chunk])
            except Exception as exc:  # noqa: BLE001 - the others still commit; abort() cleans this one
                errors.append(f"chunk {chunk.chunk_id}: {type(exc).__name__}: {exc}")
        if errors:
            raise CdcError(f"{self.table}: {len(errors)} chunk(s) not committed: " + "; ".join(errors))

    def commit_together(self, store: ChunkStore, chunks: Sequence[WrittenChunk]) -> None:
        """Store rows + one manifest publish in one transaction; deadlocks between concurrent groups are
        retried."""
        results = [self.result(chunk) for chunk in chunks]

        def publish(conn: Connection, _states: object) -> None:
            publish_snapshot_manifest(conn, self.root, self.table)

        for attempt in range(COMMIT_RETRIES):
            try:
                store.commit_chunks(self.table, self.generation, results, run_id=self.run_id,
                                    in_transaction=publish)
                return
            except StaleAttempt:
                raise
            except DBAPIError:
                self.republish(store)
                if attempt == COMMIT_RETRIES - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))

    def abort(self, store: ChunkStore, chunks: Sequence[WrittenChunk], chunk_ids: Sequence[int],
              attempts: dict[int, int] | None = None) -> None:
        """Discard what did not commit and record the failure of ``chunk_ids`` (the run's chunks) that are not
        committed; committed chunks (a partial commit) stay."""
        self.republish(store)  # first: the manifest must not name a directory deleted below
        committed: set[int] = set()
        for chunk in chunks:
            state = store.chunk(self.table, self.generation, chunk.chunk_id)
            if state.output_version == chunk.directory:
                committed.add(chunk.chunk_id)
            else:
                chunk.discard()
        for chunk_id in chunk_ids:
            if chunk_id not in committed:
                store.fail_chunk(self.table, self.generation, chunk_id,
                                 "the Spark write was aborted (a task or the commit failed; see the Spark "
                                 "job's error); the previous snapshot of the chunk stays in force",
                                 run_id=self.run_id, attempt=(attempts or {}).get(chunk_id))

    def republish(self, store: ChunkStore) -> None:
        """Rewrite the table's manifest from the store's committed rows (idempotent)."""
        with store.transaction() as conn:
            publish_snapshot_manifest(conn, self.root, self.table)

    def result(self, chunk: WrittenChunk) -> ChunkResult:
        """The chunk store's record of a written chunk (its files in ``extra``: the manifest lists them)."""
        extra = {"files": chunk.files, "bytes": chunk.bytes, "read_view_mode": chunk.mode,
                 "backfill_events": chunk.backfill_events, "excluded_columns": list(self.exclude_columns)}
        return ChunkResult(chunk.chunk_id, chunk.rows, BinlogPosition.parse(chunk.lw),
                           BinlogPosition.parse(chunk.hw), chunk.directory, chunk.attempt, chunk.timings,
                           extra, chunk.hw_server, chunk.hw_gtid_position)
