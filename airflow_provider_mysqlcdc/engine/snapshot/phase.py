"""The snapshot phase in plain Python: plan tables into the chunk store, then read and commit chunks.

A chunk's result (rows, LW, HW) lands in the chunk store when, and only when, its output is committed: the
caller's ``write`` consumes the batches and returns the output version it committed; only then does the store
record the HW. The Spark layer splits the same steps across executors (read) and the driver (commit).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.chunks.planner import DEFAULT_CHUNK_SIZE, plan_batch
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern, matching_tables
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import (
    ChunkRead,
    ChunkReadOptions,
    ChunkReadResult,
)
from airflow_provider_mysqlcdc.engine.snapshot.native_read.date_guard import read_again_if_zero_date
from airflow_provider_mysqlcdc.engine.source.catalog import find_tables, load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.limits import DEFAULT_MAX_CONCURRENT_READS

log = logging.getLogger(__name__)
# Rows per second a snapshot phase reads, for the retention warning: ~40k per chunk read as measured on two
# cores (README benchmarks), times the default cap of concurrent reads.
EXPECTED_SNAPSHOT_ROWS_PER_SECOND = 40_000.0 * DEFAULT_MAX_CONCURRENT_READS

# Tables planned on one MySQL session and stored in one chunk store transaction: a failure loses at most this
# many tables' planning, and the schemas a batch was planned from are never older than its planning.
PLAN_BATCH = 100

Writer = Callable[[Iterator[pa.RecordBatch]], str]


def plan_tables(
    settings: MySQLSettings,
    store: ChunkStore,
    patterns: Iterable[str],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_keys: dict[str, str] | None = None,
    distribution_factor_bounds: tuple[float, float] = (0.05, 1000.0),
    run_id: str | None = None,
    expected_rows_per_second: float = EXPECTED_SNAPSHOT_ROWS_PER_SECOND,
    only_new: bool = False,
    zero_dates: str = "keep",
) -> list[ChunkPlan]:
    """Plan every table the patterns match into a new plan generation (never mixing old boundaries).

    ``only_new``: plan only the matched tables that are not in the pipeline yet (no plan in the store, or
    removed); every other table's plan stays as it is, and the result holds only the new plans (possibly
    none: then nothing is checked or written). A removed table is planned again (put back into the
    pipeline) only when a pattern names it exactly, never through a wildcard (see :func:`tables_to_plan`).

    Warns when binlog retention is shorter than the snapshot is expected to take at
    ``expected_rows_per_second`` (the whole snapshot phase, all groups together). ``zero_dates``: how the
    lake writes zero dates ("keep" or "null", ``values.ZERO_DATE_MODES``), stored in each plan.
    """
    from airflow_provider_mysqlcdc.engine.source.readiness import require_ready, retention_warning

    patterns = list(patterns)
    tables = tables_to_plan(store, find_tables(settings, patterns), patterns, only_new=only_new)
    if not tables:
        log.info("nothing to plan: the tables matching %s are in the pipeline already (or were removed)",
                 ", ".join(patterns))
        return []
    report = require_ready(settings, f"planning {', '.join(map(str, tables))}")
    plans: list[ChunkPlan] = []
    for i in range(0, len(tables), PLAN_BATCH):
        batch = tables[i:i + PLAN_BATCH]
        expected = store.next_generations(batch)
        planned = plan_batch(
            lambda: connect(settings), [(t, expected[str(t)]) for t in batch], chunk_size=chunk_size,
            chunk_keys=chunk_keys, distribution_factor_bounds=distribution_factor_bounds,
            zero_dates=zero_dates,
        )
        stored = store.create_plans([(str(p.table), p.to_dict()) for p in planned], run_id=run_id)
        for plan, generation in zip(planned, stored):
            if generation != plan.generation:
                raise CdcError(
                    f"table {plan.table} was re-planned concurrently (generation {generation} instead of "
                    f"{plan.generation}): run one planner per table at a time"
                )
            log.info("planned %s: generation %s, %s chunk(s) (%s split on %s, ~%s rows)", plan.table,
                     generation, len(plan.chunks), plan.split, ", ".join(plan.key_columns),
                     f"{plan.row_estimate:,}")
        plans.extend(planned)
    warning = retention_warning(report.retention_s, sum(p.row_estimate for p in plans),
                                expected_rows_per_second)
    if warning:
        log.warning("%s", warning)
    return plans


def tables_to_plan(store: ChunkStore, tables: Sequence[TableId], patterns: Sequence[str], *,
                   only_new: bool = False) -> list[TableId]:
    """Which of the matched ``tables`` a plan step plans.

    A table removed from the pipeline stays out unless a pattern names it exactly (``shop.orders``, not
    ``shop.*``): a wildcard that still covers it must not undo the removal. With ``only_new``, tables in
    the pipeline (an active plan) are left alone too.
    """
    entries = {e.table: e for e in store.table_entries()}
    named = {TablePattern.parse(p).exact for p in patterns}  # a pattern names only a table spelled like it
    selected, kept = [], []
    for table in tables:
        entry = entries.get(str(table))
        if entry is not None and not entry.active:
            if table not in named:
                log.info("%s matches %s but was removed from the pipeline at %s (run %s): not planned; name "
                         "it exactly to put it back", table, ", ".join(patterns), entry.removed_at,
                         entry.removed_run_id or "-")
                continue
        elif entry is not None and only_new:
            kept.append(f"{table} (generation {entry.latest_generation})")
            continue
        selected.append(table)
    if kept:
        log.info("in the pipeline already, their plans stay: %s", ", ".join(kept))
    return selected


def remove_tables(store: ChunkStore, patterns: Iterable[str], run_id: str | None = None, *,
                  reason: str | None = None) -> list[tuple[str, bool]]:
    """Take the planned tables the names or patterns match out of the pipeline
    (:meth:`ChunkStore.remove_table`): ``[(table, removed_now), ...]``, ``removed_now`` False for a table that
    already was. A name or pattern that matches no planned table is an error naming it (nothing is removed
    then)."""
    wanted = [p.strip() for p in patterns if p.strip()]
    planned = store.tables()
    tables: list[str] = []
    for pattern in wanted:
        matches = [str(t) for t in matching_tables(planned, [pattern])]
        if not matches:
            raise ConfigurationError(
                f"no planned table matches {pattern!r} in the chunk store {store.display_url}: nothing "
                "removed (planned tables: " + (", ".join(planned[:20]) + (" ..." if len(planned) > 20 else "")
                                               if planned else "none") + ")"
            )
        tables.extend(t for t in matches if t not in tables)
    return [(t, store.remove_table(t, run_id, reason=reason)) for t in tables]


def load_plan(store: ChunkStore, table: TableId, generation: int | None = None) -> ChunkPlan:
    info = store.plan(str(table), generation)
    return ChunkPlan.from_dict(info.plan)


def snapshot_chunk(
    settings: MySQLSettings,
    store: ChunkStore,
    plan: ChunkPlan,
    chunk_id: int,
    write: Writer,
    *,
    options: ChunkReadOptions | None = None,
    schema: TableSchema | None = None,
    run_id: str | None = None,
) -> ChunkReadResult:
    """Read one chunk and commit it: the store's HW changes only after ``write`` committed the output.
    ``write`` consumes the batches and returns the output's version; if they raise, it keeps nothing of them
    (the chunk may be read again: ``date_guard``)."""
    table = str(plan.table)
    if schema is None:
        with connect(settings) as conn:
            schema = load_schema(conn, plan.table)
    state = store.start_chunk(table, plan.generation, chunk_id, run_id=run_id)

    def read_and_write() -> tuple[ChunkRead, str]:
        read = ChunkRead(settings, schema, plan, plan.chunk(chunk_id), options)
        return read, write(read.batches())

    try:
        read, output_version = read_again_if_zero_date(read_and_write)
    except Exception as exc:
        store.fail_chunk(table, plan.generation, chunk_id, f"{type(exc).__name__}: {exc}", run_id=run_id,
                         attempt=state.attempts)
        raise
    result = read.result
    assert result.low_watermark is not None and result.high_watermark is not None
    store.commit_chunk(
        table, plan.generation, chunk_id, rows=result.rows, lw=result.low_watermark, hw=result.high_watermark,
        output_version=output_version, run_id=run_id, timings=result.timings, attempt=state.attempts,
        hw_server=result.hw_server, hw_gtid_position=result.hw_gtid_position,
    )
    return result
