"""What the native chunk reader SELECTs for each column,
and how connectorx's Arrow becomes our canonical Arrow.

connectorx returns most MySQL types exactly, but not all (``../shared/research/fast-reads.md``): DECIMAL above
precision 28 or scale 10 crashes or loses digits, TIME outside a day crashes, zero dates crash, GEOMETRY is
not implemented. Those columns are read through SQL expressions that connectorx does return exactly (text,
integer microseconds, guarded calendar values plus the zero date's text), and every column is then cast to
``values.arrow_type``: the values equal the pure-Python reader's (``values.snapshot_normalizer``), which the
tests check type by type.

A column this module cannot serve exactly (ucs2/utf32 text that may hold lone surrogates, Oracle MySQL's
binary JSON) makes ``plan_columns`` return a reason: the table is read by the pure-Python reader.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.native_read.date_guard import UnfitDate, before_year_one

# connectorx reads DECIMAL as decimal128(38, 10): exact up to these (research: fast-reads.md)
NATIVE_DECIMAL_PRECISION, NATIVE_DECIMAL_SCALE = 28, 10
# A DATE/DATETIME/TIMESTAMP no calendar type holds: year 0, a zero month or day, or an invalid day
# (ALLOW_INVALID_DATES): date arithmetic on the last two gives NULL. Only for tables that hold one
# (``date_guard.py``): the server evaluates it for every value.
ZERO_DATE_TEST = "(YEAR({q}) = 0 OR DATE_ADD({q}, INTERVAL 0 DAY) IS NULL)"

# A TIME (up to +-838:59:59.999999) as signed microseconds, the same on both flavors
TIME_MICROS = ("CAST(IF({q} < TIME '00:00:00', -1, 1) * ((HOUR({q}) * 3600 + MINUTE({q}) * 60 + SECOND({q}))"
               " * 1000000 + MICROSECOND({q})) AS SIGNED)")


@dataclass(frozen=True)
class NativeColumn:
    """One column's SELECT expression, and its zero-date text expression for a guarded DATE/DATETIME/TIMESTAMP
    (unguarded: the column as it is, its zero-date companion all NULL, checked for year 0)."""

    column: Column
    kind: str  # values.value_kind
    expression: str
    zero_text: str | None = None

    @property
    def unguarded_date(self) -> bool:
        return self.kind in values.ZERO_DATE_TYPES and self.zero_text is None


def _native_column(column: Column, guard_dates: bool) -> NativeColumn | str:
    """The column's expressions, or why the native reader cannot read it exactly."""
    kind = values.value_kind(column)
    q = column.quoted
    if kind == "text" and (column.charset or "").lower() in ("ucs2", "utf32"):
        return (f"column {column.name!r} is {column.charset}, which can hold lone UTF-16 surrogates the "
                "server would send as invalid UTF-8")
    if kind == "json":
        return f"column {column.name!r} is MySQL's binary JSON, which is canonicalised value by value"
    if kind == "decimal":
        precise = ((column.numeric_precision or 10) <= NATIVE_DECIMAL_PRECISION
                   and (column.numeric_scale or 0) <= NATIVE_DECIMAL_SCALE)
        return NativeColumn(column, kind, q if precise else f"CAST({q} AS CHAR)")
    if kind in values.ZERO_DATE_TYPES and not guard_dates:
        return NativeColumn(column, kind, q)
    if kind in values.ZERO_DATE_TYPES:
        zero = ZERO_DATE_TEST.format(q=q)
        return NativeColumn(column, kind, f"IF({zero}, NULL, {q})", f"IF({zero}, CAST({q} AS CHAR), NULL)")
    if kind == "time":  # not TIME_TO_SEC(): MySQL's drops the fraction (MariaDB's keeps it)
        return NativeColumn(column, kind, TIME_MICROS.format(q=q))
    if kind == "bit":
        return NativeColumn(column, kind, f"{q} + 0")
    if kind in values.MARIADB_NATIVE_TYPES:
        return NativeColumn(column, kind, f"CAST({q} AS CHAR)")
    if kind == "bytes" and (column.data_type in values.GEOMETRY_TYPES or column.data_type == "vector"):
        return NativeColumn(column, kind, f"CAST({q} AS BINARY)")
    return NativeColumn(column, kind, q)


def plan_columns(schema: TableSchema,
                 guard_dates: bool = True) -> tuple[list[NativeColumn], None] | tuple[None, str]:
    """Every column's expressions, or (None, why the table needs the pure-Python reader). ``guard_dates``:
    read DATE/DATETIME/TIMESTAMP behind the zero-date guard (``date_guard.py``)."""
    planned = []
    for column in schema.columns:
        native = _native_column(column, guard_dates)
        if isinstance(native, str):
            return None, native
        planned.append(native)
    return planned, None


def select_list(columns: list[NativeColumn]) -> str:
    """The SELECT expressions, aliased by position (``c0``, ``c0z`` for its zero-date text, ...): column
    names of any spelling stay out of connectorx's way."""
    parts = []
    for i, native in enumerate(columns):
        parts.append(f"{native.expression} AS c{i}")
        if native.zero_text is not None:
            parts.append(f"{native.zero_text} AS c{i}z")
    return ", ".join(parts)


def _decimal_text(array: pa.Array) -> pa.Array:
    """DECIMAL wider than Arrow's decimal128 stays text, as ``str(Decimal)`` writes it (the pure-Python
    reader's form): rare columns, converted value by value."""
    return pa.array([None if t is None else str(Decimal(t)) for t in array.to_pylist()], pa.string())


def _canonical(native: NativeColumn, array: pa.Array, target: pa.DataType) -> pa.Array:
    if native.kind == "decimal" and pa.types.is_string(target):
        return _decimal_text(array)
    if native.kind == "time":
        return array.cast(pa.int64()).view(pa.duration("us"))
    return pc.cast(array, target)


def to_canonical(schema: TableSchema, columns: list[NativeColumn], batch: pa.RecordBatch,
                 first: int) -> pa.RecordBatch:
    """connectorx's batch (the planned columns from index ``first`` on) in ``values.arrow_schema`` layout."""
    target = values.arrow_schema(schema)
    arrays = []
    at = first
    for native in columns:
        field = target.field(native.column.name)
        raw = batch.column(at)
        if native.unguarded_date and before_year_one(raw):
            raise UnfitDate(f"column {native.column.name!r} holds a date of year 0")
        arrays.append(_canonical(native, raw, field.type))
        at += 1
        if native.zero_text is not None:
            arrays.append(pc.cast(batch.column(at), pa.string()))
            at += 1
        elif native.kind in values.ZERO_DATE_TYPES:
            arrays.append(pa.nulls(batch.num_rows, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=target)
