"""Which columns each lake dataset of a table holds, and which source column each comes from: the schema and
column-lineage facets of the outputs, from the source schema and the table's plan, without reading the lake.

The same rules the writers follow (``engine.snapshot.chunk_group_job.ChunkGroupJob.output_schema`` and the
stream's sink): metadata columns first (not the mirror's), then the table's columns minus the excluded ones,
each DATE/DATETIME/TIMESTAMP column followed by its zero-date companion unless the plan's ``zero_dates`` mode
leaves it out; the changelog's and mirror's files hold TIME as int64 microseconds (Delta has no TIME type).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.file_types import file_schema
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, MIRROR, SNAPSHOT
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import record_schema
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema

LAKE_KINDS = (SNAPSHOT, CHANGELOG, MIRROR)


@dataclass(frozen=True)
class OutputColumn:
    """One column of a lake dataset; ``source``: the source column whose value it carries (None for a
    metadata column); ``companion``: it holds the source column's zero dates, not the column itself."""

    name: str
    type: str
    source: str | None
    companion: bool = False


def lake_columns(schema: TableSchema, kind: str, *, excluded: Iterable[str] = (), zero_dates: str = "keep",
                 key_columns: Iterable[str] = ()) -> list[OutputColumn]:
    """The columns of the table's ``kind`` dataset (``snapshot``, ``changelog`` or ``mirror``)."""
    if kind not in LAKE_KINDS:
        raise ValueError(f"no lake dataset kind {kind!r} (one of {', '.join(LAKE_KINDS)})")
    arrow = values.arrow_schema(schema) if kind == MIRROR else record_schema(schema)
    if kind != SNAPSHOT:
        arrow = file_schema(arrow)
    left_out = set(values.identity_names(schema, excluded))
    left_out.update(values.unwritten_companions(schema, zero_dates, key_columns))
    return [_column(schema, f) for f in arrow if f.name not in left_out]


def _column(schema: TableSchema, f: pa.Field) -> OutputColumn:
    if f.name in schema.column_by_name:
        return OutputColumn(f.name, str(f.type), f.name)
    base = f.name.removesuffix(values.ZERO_DATE_SUFFIX)
    if base != f.name and base in schema.column_by_name:
        return OutputColumn(f.name, str(f.type), base, companion=True)
    return OutputColumn(f.name, str(f.type), None)
