"""Which Arrow types the lake's own Parquet files hold, where they differ from the engine's (any table format
over them sees these types; the Delta schema of the changelog and mirror is derived from them).

Delta has no TIME type. A TIME column, ``duration[us]`` in the engine, is written to the changelog and mirror
files as int64 microseconds, so every reader finds the Delta type in the Parquet file itself (Polars reads the
file's own Arrow schema, delta-rs and Spark the Delta one). The field keeps a note of its engine type
(``ENGINE_TYPE`` in the field metadata), from which our readers cast it back (``engine_types``).
"""

from __future__ import annotations

import pyarrow as pa

ENGINE_TYPE = b"mysqlcdc.engine_type"
_DURATION = b"duration[us]"


def file_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a lake file is written in: TIME as int64 microseconds, noted as such."""
    fields = []
    for f in schema:
        if pa.types.is_duration(f.type):
            f = f.with_type(pa.int64()).with_metadata({**(f.metadata or {}), ENGINE_TYPE: _DURATION})
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def to_file_types(table: pa.Table) -> pa.Table:
    """``table`` in its file schema (no copy of columns that keep their type)."""
    target = file_schema(table.schema)
    return table if target.equals(table.schema, check_metadata=True) else table.cast(target)


def engine_types(table: pa.Table) -> pa.Table:
    """A table read from lake files with each noted column back in its engine type."""
    for index, f in enumerate(table.schema):
        if (f.metadata or {}).get(ENGINE_TYPE) == _DURATION and pa.types.is_integer(f.type):
            table = table.set_column(index, pa.field(f.name, pa.duration("us"), f.nullable),
                                     table.column(index).cast(pa.duration("us")))
    return table


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """The Delta table schema for files of ``schema``: the file types, every column nullable (files written
    before an ADD COLUMN lack it), no metadata."""
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in file_schema(schema)])


_PLAIN = {pa.large_string(): pa.string(), pa.string_view(): pa.string(), pa.large_binary(): pa.binary(),
          pa.binary_view(): pa.binary()}


def plain_type(kind: pa.DataType) -> pa.DataType:
    """A large or view string or binary as its plain form (delta-rs reports either; our files hold plain)."""
    return _PLAIN.get(kind, kind)


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal types, reading a large or view string or binary as its plain form."""
    return plain_type(a) == plain_type(b)
