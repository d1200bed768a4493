"""Read a table's changelog as the sink committed it: only batches with a marker, only the marker's files.

A batch directory can hold files of an attempt that was killed before its marker (a replay removes them);
globbing ``changelog/batch=*/`` would read them, following the markers (``engine.lake.changelog``) never
does. ``changelog_records`` turns the Parquet rows back into engine Records with canonical values, e.g. to
materialize them with ``tests.support.reference_mirror.materialize``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.file_types import engine_types
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES, record_schema
from airflow_provider_mysqlcdc.engine.model.position_text import parse_row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema
from airflow_provider_mysqlcdc.engine.model.values import canonical_pylist, holds_zero_dates, zero_date_field


def read_changelog(root: str, schema: TableSchema, *, after_batch: int | None = None) -> pa.Table:
    """The committed changelog records of a table as one Arrow table (metadata columns, then the table's).

    Each record holds the columns the table had at that change: after DDL, files differ, and a column is null
    in records written before it existed (a renamed column appears under both names, each where it held)."""
    tables = []
    for batch_id in committed_batch_ids(root, schema.table):
        if after_batch is not None and batch_id <= after_batch:
            continue
        for path in read_batch(root, schema.table, batch_id).files:
            fs, inner = filesystem(path)
            tables.append(pq.read_table(inner, filesystem=fs))
    if not tables:
        return record_schema(schema).empty_table()
    return pa.concat_tables([engine_types(t) for t in tables], promote_options="permissive")


def changelog_records(root: str, schema: TableSchema, *, after_batch: int | None = None) -> list[Record]:
    """The committed changelog as engine Records with canonical values (as the binlog reader made them)."""
    return arrow_records(read_changelog(root, schema, after_batch=after_batch), schema)


def arrow_records(table: pa.Table, schema: TableSchema) -> list[Record]:
    """Changelog rows (``arrow_batches.record_schema`` layout) as engine Records with canonical values."""
    converters = {
        c.name: _canonical(schema, c.name, table.schema.field(c.name).type)
        for c in schema.columns
        if c.name in table.schema.names
    }
    companions = {zero_date_field(c.name) for c in schema.columns if holds_zero_dates(c)}
    names = [n for n in table.schema.names if n not in METADATA_NAMES and n not in companions]
    out = []
    for row in canonical_pylist(table):  # zero dates folded back from their companions
        values = {n: converters.get(n, _identity)(row[n]) if row[n] is not None else None for n in names}
        out.append(
            Record(
                table=str(schema.table),
                op=row["_op"],
                phase=row["_phase"],
                key=parse_row_key(row["_position"]),
                values=values,
                commit_ts=row["_commit_ts"],
                chunk_id=row["_chunk_id"],
                generation=row["_generation"],
            )
        )
    return out


def _canonical(schema: TableSchema, name: str, arrow_type: pa.DataType) -> Any:
    """Arrow values back to the engine's canonical Python values where the two differ."""
    column = schema.column(name)
    if pa.types.is_decimal(arrow_type) and (column.is_integer or column.data_type == "bit"):
        return int  # BIGINT UNSIGNED / BIT(64) travel as decimal128(20, 0)
    if pa.types.is_string(arrow_type) and column.is_decimal:
        return Decimal  # DECIMAL wider than 38 digits travels as text
    return _identity


def _identity(value: Any) -> Any:
    return value
