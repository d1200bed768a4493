"""Records as Arrow batches: metadata columns first, then the table's columns (the hot path moves these).

Metadata columns (one name per concept, used by every output):
``_op`` (+I/-U/+U/-D), ``_phase`` (snapshot/stream), ``_position`` (fixed-width string that sorts like the
row order key), ``_chunk_id`` and ``_generation`` (snapshot records), ``_commit_ts`` (UTC, stream records).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.position_text import format_row_key
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, snapshot_row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema

METADATA_FIELDS = [
    pa.field("_op", pa.string(), nullable=False),
    pa.field("_phase", pa.string(), nullable=False),
    pa.field("_position", pa.string(), nullable=False),
    pa.field("_chunk_id", pa.int32()),
    pa.field("_generation", pa.int32()),
    pa.field("_commit_ts", pa.timestamp("us", tz="UTC")),
]
METADATA_NAMES = [f.name for f in METADATA_FIELDS]


def record_schema(schema: TableSchema) -> pa.Schema:
    data = values.arrow_schema(schema)
    return pa.schema([*METADATA_FIELDS, *data])


def snapshot_batch(
    schema: TableSchema, rows: list[tuple], high_watermark: BinlogPosition, chunk_id: int, generation: int
) -> pa.RecordBatch:
    """Normalized snapshot rows of one chunk as ``+I`` records at the chunk's HW."""
    return snapshot_data_batch(schema, values.to_arrow_batch(schema, rows), high_watermark, chunk_id,
                               generation)


def snapshot_data_batch(
    schema: TableSchema, data: pa.RecordBatch, high_watermark: BinlogPosition, chunk_id: int, generation: int
) -> pa.RecordBatch:
    """A chunk's rows already in ``values.arrow_schema`` layout as ``+I`` records at the chunk's HW."""
    n = data.num_rows
    position = format_row_key(snapshot_row_key(high_watermark))
    meta = [
        pa.repeat(pa.scalar("+I", pa.string()), n),
        pa.repeat(pa.scalar("snapshot", pa.string()), n),
        pa.repeat(pa.scalar(position, pa.string()), n),
        pa.repeat(pa.scalar(chunk_id, pa.int32()), n),
        pa.repeat(pa.scalar(generation, pa.int32()), n),
        pa.nulls(n, pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays([*meta, *data.columns], schema=record_schema(schema))


def records_batch(schema: TableSchema, records: Iterable[Record]) -> pa.RecordBatch:
    """Changelog records of one table as a batch."""
    records = list(records)
    names = schema.column_names
    data = values.to_arrow_batch(schema, [tuple(r.values.get(c) for c in names) for r in records])
    meta = [
        pa.array([r.op for r in records], pa.string()),
        pa.array([r.phase for r in records], pa.string()),
        pa.array([r.position for r in records], pa.string()),
        pa.array([r.chunk_id for r in records], pa.int32()),
        pa.array([r.generation for r in records], pa.int32()),
        pa.array([r.commit_ts for r in records], pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays([*meta, *data.columns], schema=record_schema(schema))


def changes_batch(
    schema: TableSchema, ops: Sequence[str], positions: list[str], commit_ts: Any, columns: list[list[Any]],
    keep: list[bool] | None = None,
) -> pa.RecordBatch:
    """Stream records of one table given column by column (``columns`` in schema order, one value per
    change; ``positions`` their ``_position`` texts; one commit time, or a list of one per change): what
    ``records_batch`` makes of the same records, without a Python object per change. ``keep``: only the
    changes marked True."""
    data = values.columns_to_arrow(schema, columns)
    n = data.num_rows
    meta = [
        pa.array(ops, pa.string()),
        pa.array(["stream"] * n, pa.string()),
        pa.array(positions, pa.string()),
        pa.nulls(n, pa.int32()),
        pa.nulls(n, pa.int32()),
        pa.array(commit_ts if type(commit_ts) is list else [commit_ts] * n, pa.timestamp("us", tz="UTC")),
    ]
    batch = pa.RecordBatch.from_arrays([*meta, *data.columns], schema=record_schema(schema))
    return batch if keep is None else batch.filter(pa.array(keep, pa.bool_()))
