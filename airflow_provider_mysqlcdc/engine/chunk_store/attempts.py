"""Chunk attempts: start, commit, fail and invalidate a chunk, each write applied exactly once even when
retried."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, write_stamp
from airflow_provider_mysqlcdc.engine.chunk_store.errors import StaleAttempt, StaleGeneration, UnknownChunk
from airflow_provider_mysqlcdc.engine.chunk_store.records import (
    ChunkEvent,
    ChunkResult,
    ChunkState,
    aware_utc,
    binlog_position_of,
    chunk_state_of,
    dump_versioned,
    table_name_of,
)
from airflow_provider_mysqlcdc.engine.chunk_store.schema import (
    COMMITTED,
    FAILED,
    MAX_ERROR_CHARS,
    RUNNING,
    chunks_table,
    history_table,
    latest_query,
    resolve_generation,
)
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

log = logging.getLogger(__name__)


class ChunkAttempts(StoreDatabase):
    """Reading chunk rows and recording each attempt at a chunk."""

    # --- chunk reads ----------------------------------------------------------------------------------------

    def chunks(self, table: Any, generation: int | None = None) -> list[ChunkState]:
        """The chunks of one generation (None: the latest), by chunk id."""
        name = table_name_of(table)

        def read(conn: Connection) -> Sequence[RowMapping]:
            wanted = resolve_generation(conn, name, generation)
            return conn.execute(sa.select(chunks_table).where(
                chunks_table.c.table_name == name, chunks_table.c.generation == wanted,
            ).order_by(chunks_table.c.chunk_id)).mappings().all()

        return [chunk_state_of(r) for r in self._read_tx(read)]

    def chunk(self, table: Any, generation: int, chunk_id: int) -> ChunkState:
        name = table_name_of(table)
        row = self._read_tx(lambda conn: conn.execute(self._chunk_select(name, generation, chunk_id))
                            .mappings().first())
        if row is None:
            raise UnknownChunk(f"chunk store has no chunk {chunk_id} in generation {generation} of {name}")
        return chunk_state_of(row)

    def _reread(self, conn: Connection, table: str, generation: int, chunk_id: int) -> ChunkState:
        return chunk_state_of(conn.execute(self._chunk_select(table, generation, chunk_id)).mappings().one())

    @staticmethod
    def _chunk_select(table: str, generation: int, chunk_id: int) -> sa.Select:
        return sa.select(chunks_table).where(
            chunks_table.c.table_name == table, chunks_table.c.generation == int(generation),
            chunks_table.c.chunk_id == int(chunk_id))

    def history(self, table: Any, chunk_id: int, generation: int | None = None) -> list[ChunkEvent]:
        """Every start/commit/failure of one chunk (of one generation, or all), oldest first."""
        name = table_name_of(table)
        stmt = sa.select(history_table).where(history_table.c.table_name == name,
                                              history_table.c.chunk_id == int(chunk_id))
        if generation is not None:
            stmt = stmt.where(history_table.c.generation == int(generation))
        rows = self._read_tx(lambda conn: conn.execute(stmt.order_by(history_table.c.id)).mappings().all())
        return [ChunkEvent(
            table=r["table_name"], generation=r["generation"], chunk_id=r["chunk_id"], attempt=r["attempt"],
            event=r["kind"], at=aware_utc(r["happened_at"]), run_id=r["run_id"], rows=r["row_count"],
            hw=binlog_position_of(r["hw_file"], r["hw_pos"]), output_version=r["output_version"],
            detail=r["detail"],
        ) for r in rows]

    # --- chunk writes ---------------------------------------------------------------------------------------

    def _locked_chunk(self, conn: Connection, table: str, generation: int, chunk_id: int, *,
                      current_plan: bool) -> RowMapping:
        """The chunk row, locked; with ``current_plan``, also check (share-lock) that its plan is current."""
        if current_plan:
            latest = conn.execute(self._lock(latest_query(table), read=True)).scalar()
            if latest is None:
                raise UnknownChunk(f"chunk store has no plan for {table}")
            if int(generation) != latest:
                raise StaleGeneration(
                    f"{table} chunk {chunk_id} belongs to plan generation {generation}, but the table's "
                    f"current plan is generation {latest}: this task is from an old plan; run the snapshot "
                    "of the current plan instead"
                )
        row = conn.execute(self._lock(self._chunk_select(table, generation, chunk_id))).mappings().first()
        if row is None:
            raise UnknownChunk(f"chunk store has no chunk {chunk_id} in generation {generation} of {table}")
        return row

    def _history(self, conn: Connection, table: str, generation: int, chunk_id: int, attempt: int, what: str,
                 run_id: str | None, at: datetime, **values: Any) -> None:
        conn.execute(sa.insert(history_table).values(
            table_name=table, generation=int(generation), chunk_id=int(chunk_id), attempt=attempt, kind=what,
            happened_at=at, run_id=run_id, **values))

    def _applied(self, conn: Connection, table: str, generation: int, chunk_id: int, what: str,
                 run_id: str | None, at: datetime) -> int | None:
        """The attempt number of this write's own history row if an earlier try of it committed (call it with
        the chunk row locked, so an earlier try still in flight has finished). See ``_retrying``."""
        h = history_table.c
        found = conn.execute(sa.select(h.attempt).where(
            h.table_name == table, h.generation == int(generation), h.chunk_id == int(chunk_id),
            h.kind == what, h.happened_at == at, h.run_id == run_id)).scalars().first()
        if found is not None:
            log.info("chunk store: %s generation %d chunk %d: %s (attempt %d) was committed by an earlier "
                     "try", table, generation, chunk_id, what, found)
        return found

    def start_chunk(
        self, table: Any, generation: int, chunk_id: int, run_id: str | None = None
    ) -> ChunkState:
        """Mark an attempt as running (``attempts`` + 1); return the state (``attempts``: this attempt).

        A committed result stays in force for the mirror; the chunk gets ``rerun_pending`` so that the stream
        filter treats it as HW = -inf until this rerun commits.
        """
        return self.start_chunks(table, generation, [chunk_id], run_id=run_id)[0]

    def start_chunks(self, table: Any, generation: int, chunk_ids: Sequence[int],
                     run_id: str | None = None) -> list[ChunkState]:
        """``start_chunk`` for several chunks of one table in one transaction (a snapshot run starts all of a
        table's chunks at once: one transaction, not one per chunk); their states, in order."""
        return self.start_tables([(table, generation, chunk_ids)], run_id=run_id)[0]

    def start_tables(self, groups: Sequence[tuple[Any, int, Sequence[int]]],
                     run_id: str | None = None) -> list[list[ChunkState]]:
        """:meth:`start_chunks` of many tables' ``(table, generation, chunk_ids)`` in one transaction, all or
        none (a snapshot run of thousands of small tables: one transaction, not one per table); each table's
        states, in order."""
        named = [(table_name_of(table), generation, list(ids)) for table, generation, ids in groups]
        now = write_stamp()

        def work(conn: Connection, retry: bool) -> list[list[ChunkState]]:
            return [self._start_group(conn, name, generation, ids, run_id, now, retry)
                    for name, generation, ids in named]

        return self._write(work)

    def _start_group(self, conn: Connection, name: str, generation: int, chunk_ids: Sequence[int],
                     run_id: str | None, now: datetime, retry: bool) -> list[ChunkState]:
        states = []
        for i, chunk_id in enumerate(chunk_ids):
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=i == 0)
            if retry:
                done = self._applied(conn, name, generation, chunk_id, "started", run_id, now)
                if done is not None:  # report the attempt number that earlier try took
                    states.append(replace(self._reread(conn, name, generation, chunk_id), attempts=done))
                    continue
            where = self._chunk_where(name, generation, chunk_id)
            conn.execute(sa.update(chunks_table).where(*where).values(
                status=RUNNING, attempts=chunks_table.c.attempts + 1, started_at=now, finished_at=None,
                run_id=run_id, error=None, rerun_pending=row["rerun_pending"] or row["hw_pos"] is not None))
            state = self._reread(conn, name, generation, chunk_id)
            self._history(conn, name, generation, chunk_id, state.attempts, "started", run_id, now)
            states.append(state)
        return states

    @staticmethod
    def _chunk_where(table: str, generation: int, chunk_id: int) -> tuple[Any, ...]:
        return (chunks_table.c.table_name == table, chunks_table.c.generation == int(generation),
                chunks_table.c.chunk_id == int(chunk_id))

    def commit_chunk(
        self,
        table: Any,
        generation: int,
        chunk_id: int,
        *,
        rows: int,
        lw: BinlogPosition,
        hw: BinlogPosition,
        output_version: str | None,
        run_id: str | None = None,
        timings: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        attempt: int | None = None,
        in_transaction: Callable[[Connection, ChunkState], Any] | None = None,
        hw_server: str | None = None,
        hw_gtid_position: str | None = None,
    ) -> ChunkState:
        """Replace the chunk's committed result (rows, LW, HW, output version) in one transaction.

        ``hw_server``: whose binlog LW and HW name (``ServerIdentity.token`` of the server the chunk was read
        from), with ``hw_gtid_position``, the GTID position at HW where that server has one: a stream started
        on another server refuses these HWs (``engine/stream/snapshot_server.py``).

        Refused (:class:`StaleGeneration`) unless ``generation`` is the table's current plan, and
        (:class:`StaleAttempt`) if ``attempt`` is given and a newer attempt has started since.
        ``in_transaction`` runs inside the same transaction after the update, with the connection and the
        new state (e.g. to write a manifest row or publish a manifest file); if it raises, nothing is
        committed and the previous result stays. Deadlocks and outages are retried until the callback has
        run; from then on they are raised to the caller (who owns the callback's side effects). Committing
        the same result again (same ``attempt`` and ``output_version``: a caller's retry after a lost COMMIT)
        changes nothing and runs the callback again.
        """
        result = ChunkResult(chunk_id, rows, lw, hw, output_version, attempt, timings, extra, hw_server,
                             hw_gtid_position)
        callback = None if in_transaction is None else (lambda conn, states: in_transaction(conn, states[0]))
        return self.commit_chunks(table, generation, [result], run_id=run_id, in_transaction=callback)[0]

    def commit_chunks(
        self, table: Any, generation: int, results: Sequence[ChunkResult], *, run_id: str | None = None,
        in_transaction: Callable[[Connection, list[ChunkState]], Any] | None = None,
    ) -> list[ChunkState]:
        """``commit_chunk`` for several chunks of one table in one transaction, all or none, with
        ``in_transaction`` run once after the last (a snapshot run commits a table's chunks with one
        transaction and one manifest, not one per chunk); their states, in order. One stale attempt refuses
        them all: the caller commits the others one by one."""
        name = table_name_of(table)
        for r in results:
            if not isinstance(r.lw, BinlogPosition) or not isinstance(r.hw, BinlogPosition):
                raise TypeError("lw and hw must be BinlogPosition")
            if r.hw < r.lw:
                raise ValueError(
                    f"{name} chunk {r.chunk_id}: high watermark {r.hw} is before low watermark {r.lw}"
                )
            if int(r.rows) < 0:
                raise ValueError(f"{name} chunk {r.chunk_id}: rows must be >= 0")
        now = write_stamp()
        callback_ran = False

        def work(conn: Connection, retry: bool) -> list[ChunkState]:
            nonlocal callback_ran
            states = [self._commit_one(conn, name, generation, r, run_id, now, retry, check_plan=i == 0)
                      for i, r in enumerate(results)]
            if in_transaction is not None:
                callback_ran = True
                in_transaction(conn, states)
            return states

        states = self._write(work, may_retry=lambda: not callback_ran)
        for r in results:
            log.info("chunk store: %s generation %d chunk %d committed: %d rows, LW %s, HW %s, output %s",
                     name, generation, r.chunk_id, r.rows, r.lw, r.hw, r.output_version)
        return states

    def _commit_one(self, conn: Connection, name: str, generation: int, r: ChunkResult, run_id: str | None,
                    now: datetime, retry: bool, *, check_plan: bool) -> ChunkState:
        """One chunk's commit inside ``commit_chunks``' transaction (see ``commit_chunk``)."""
        row = self._locked_chunk(conn, name, generation, r.chunk_id, current_plan=check_plan)
        if retry and self._applied(conn, name, generation, r.chunk_id, "committed", run_id, now) is not None:
            return chunk_state_of(row)
        if _already_committed(row, r):
            return chunk_state_of(row)
        if r.attempt is not None and row["attempts"] != r.attempt:
            raise StaleAttempt(
                f"{name} chunk {r.chunk_id} (generation {generation}): attempt {r.attempt} tried to "
                f"commit, but attempt {row['attempts']} has started since; this result is discarded"
            )
        conn.execute(sa.update(chunks_table).where(*self._chunk_where(name, generation, r.chunk_id))
                     .values(status=COMMITTED, attempts=max(row["attempts"], 1), finished_at=now,
                             run_id=run_id, error=None, rerun_pending=False, row_count=int(r.rows),
                             lw_file=r.lw.file, lw_pos=r.lw.pos, hw_file=r.hw.file, hw_pos=r.hw.pos,
                             output_version=r.output_version, committed_at=now, committed_run_id=run_id,
                             timings_json=dump_versioned(r.timings), extra_json=dump_versioned(r.extra),
                             hw_server=r.hw_server, hw_gtid_position=r.hw_gtid_position))
        state = self._reread(conn, name, generation, r.chunk_id)
        self._history(conn, name, generation, r.chunk_id, state.attempts, "committed", run_id, now,
                      row_count=int(r.rows), hw_file=r.hw.file, hw_pos=r.hw.pos,
                      output_version=r.output_version)
        return state

    def fail_chunk(self, table: Any, generation: int, chunk_id: int, error: BaseException | str,
                   run_id: str | None = None, *, attempt: int | None = None) -> ChunkState:
        """Record a failed attempt (status 'failed', the error text); the committed result is untouched.

        A stale ``attempt`` (a newer one has started) only adds a history entry.
        """
        name = table_name_of(table)
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        text = text[:MAX_ERROR_CHARS]
        now = write_stamp()

        def work(conn: Connection, retry: bool) -> ChunkState:
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=False)
            if retry and self._applied(conn, name, generation, chunk_id, "failed", run_id, now) is not None:
                return self._reread(conn, name, generation, chunk_id)
            stale = attempt is not None and row["attempts"] != attempt
            where = self._chunk_where(name, generation, chunk_id)
            if not stale:
                conn.execute(sa.update(chunks_table).where(*where).values(
                    status=FAILED, finished_at=now, run_id=run_id, error=text))
            number = attempt if attempt is not None else row["attempts"]
            self._history(conn, name, generation, chunk_id, number, "failed", run_id, now, detail=text)
            return self._reread(conn, name, generation, chunk_id)

        return self._write(work)

    def invalidate_chunk(self, table: Any, generation: int, chunk_id: int, reason: str,
                         run_id: str | None = None) -> ChunkState:
        """Mark a committed chunk for a reread (e.g. DDL inside its [LW, HW]): the stream filter then treats
        it as HW = -inf until the rerun commits; the mirror keeps using the committed snapshot."""
        name = table_name_of(table)
        now = write_stamp()

        def work(conn: Connection, retry: bool) -> ChunkState:
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=False)
            if retry and self._applied(conn, name, generation, chunk_id, "invalidated", run_id,
                                       now) is not None:
                return self._reread(conn, name, generation, chunk_id)
            conn.execute(sa.update(chunks_table).where(*self._chunk_where(name, generation, chunk_id)).values(
                rerun_pending=True))
            self._history(conn, name, generation, chunk_id, row["attempts"], "invalidated", run_id, now,
                          detail=reason[:MAX_ERROR_CHARS])
            return self._reread(conn, name, generation, chunk_id)

        return self._write(work)


def _already_committed(row: RowMapping, r: ChunkResult) -> bool:
    """The row holds exactly this result (a caller's retry after a lost COMMIT): nothing to change."""
    return (r.attempt is not None and r.output_version is not None and row["status"] == COMMITTED
            and row["attempts"] == r.attempt and not row["rerun_pending"]
            and row["output_version"] == r.output_version and row["row_count"] == int(r.rows)
            and binlog_position_of(row["lw_file"], row["lw_pos"]) == r.lw
            and binlog_position_of(row["hw_file"], row["hw_pos"]) == r.hw)
