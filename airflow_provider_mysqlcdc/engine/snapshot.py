"""The snapshot phase in plain Python: plan tables into the chunk store, then read and commit chunks.

A chunk's result (rows, LW, HW) lands in the chunk store when, and only when, its output is committed: the
caller's ``write`` consumes the batches and returns the output version it committed; only then does the store
record the HW. The Spark layer splits the same steps across executors (read) and the driver (commit).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from .chunk_reader import ChunkRead, ChunkReadOptions, ChunkReadResult
from .chunk_store import ChunkStore
from .connection import MySQLSettings, connect
from .errors import CdcError
from .planner import ChunkPlan, plan_table
from .source_limits import DEFAULT_MAX_CONCURRENT_READS
from .tables import TableId, TableSchema, find_tables, load_schema

log = logging.getLogger(__name__)
# Rows per second a snapshot phase reads, for the retention warning: ~40k per chunk read as measured on two
# cores (README benchmarks), times the default cap of concurrent reads.
EXPECTED_SNAPSHOT_ROWS_PER_SECOND = 40_000.0 * DEFAULT_MAX_CONCURRENT_READS

Writer = Callable[[Iterator[pa.RecordBatch]], str]


def plan_tables(
    settings: MySQLSettings,
    store: ChunkStore,
    patterns: Iterable[str],
    *,
    chunk_size: int = 8096,
    chunk_keys: dict[str, str] | None = None,
    distribution_factor_bounds: tuple[float, float] = (0.05, 1000.0),
    run_id: str | None = None,
    expected_rows_per_second: float = EXPECTED_SNAPSHOT_ROWS_PER_SECOND,
) -> list[ChunkPlan]:
    """Plan every table the patterns match into a new plan generation (never mixing old boundaries).

    Warns when binlog retention is shorter than the snapshot is expected to take at
    ``expected_rows_per_second`` (the whole snapshot phase, all groups together).
    """
    from .check import require_ready, retention_warning

    tables = find_tables(settings, patterns)
    report = require_ready(settings, f"planning {', '.join(map(str, tables))}")
    plans = []
    for table in tables:
        generation = store.next_generation(str(table))
        plan = plan_table(
            lambda: connect(settings), table, generation, chunk_size=chunk_size,
            chunk_key=(chunk_keys or {}).get(str(table)), distribution_factor_bounds=distribution_factor_bounds,
        )
        stored = store.create_plan(str(table), plan.to_dict(), run_id=run_id)
        if stored != generation:
            raise CdcError(
                f"table {table} was re-planned concurrently (generation {stored} instead of {generation}): "
                "run one planner per table at a time"
            )
        log.info("planned %s: generation %s, %s chunks (%s split)", table, generation, len(plan.chunks), plan.split)
        plans.append(plan)
    warning = retention_warning(report.retention_s, sum(p.row_estimate for p in plans), expected_rows_per_second)
    if warning:
        log.warning("%s", warning)
    return plans


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
    """Read one chunk and commit it: the store's HW changes only after ``write`` committed the output."""
    table = str(plan.table)
    if schema is None:
        with connect(settings) as conn:
            schema = load_schema(conn, plan.table)
    state = store.start_chunk(table, plan.generation, chunk_id, run_id=run_id)
    read = ChunkRead(settings, schema, plan, plan.chunk(chunk_id), options)
    try:
        output_version = write(read.batches())
    except Exception as exc:
        store.fail_chunk(table, plan.generation, chunk_id, f"{type(exc).__name__}: {exc}", run_id=run_id,
                         attempt=state.attempts)
        raise
    result = read.result
    assert result.low_watermark is not None and result.high_watermark is not None
    store.commit_chunk(
        table, plan.generation, chunk_id, rows=result.rows, lw=result.low_watermark, hw=result.high_watermark,
        output_version=output_version, run_id=run_id, timings=result.timings, attempt=state.attempts,
    )
    return result
