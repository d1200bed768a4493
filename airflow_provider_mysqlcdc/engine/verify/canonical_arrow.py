"""The lake side of a digest: each column's canonical text computed from the lake's Arrow values, byte for
byte the text ``canonical_sql`` has the server compute from its own (see there for the forms).

Columns become Arrow arrays of text with Arrow compute where Arrow prints the value as the server does
(integers, dates, date-times, strings, bytes); FLOAT, DOUBLE, TIME, the DECIMALs Arrow prints in exponent
notation and Oracle MySQL's JSON are printed in Python, value by value. The per-row SHA-256 is Python's
``hashlib`` (C), one call per row.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import Column
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import NULL_TEXT, SEPARATOR, VALUE_MARK
from airflow_provider_mysqlcdc.engine.verify.float_text import MYSQL_WIDTH, WIDE, server_double_text
from airflow_provider_mysqlcdc.engine.verify.json_text import server_json_text


@dataclass(frozen=True)
class Digest:
    """A set of rows, order-independently: how many, and the sum of their 64-bit row hashes."""

    rows: int
    hash_sum: int

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "hash_sum": str(self.hash_sum)}


def lake_digest(data: pa.Table, columns: Sequence[Column], flavor: str,
                zero_dates_kept: Sequence[bool] | None = None) -> Digest:
    """The digest of the lake rows ``data`` (the mirror's columns) over ``columns``."""
    return Digest(data.num_rows, sum(row_hashes(data, columns, flavor, zero_dates_kept)))


def row_hashes(data: pa.Table, columns: Sequence[Column], flavor: str,
               zero_dates_kept: Sequence[bool] | None = None) -> list[int]:
    """Each row's 64-bit hash, in the order of ``data``."""
    if data.num_rows == 0:
        return []
    kept = list(zero_dates_kept) if zero_dates_kept is not None else [True] * len(columns)
    texts = row_texts(data, columns, flavor, kept)
    return [int.from_bytes(hashlib.sha256(t).digest()[:8], "big") for t in texts.to_pylist()]


def row_texts(data: pa.Table, columns: Sequence[Column], flavor: str, kept: Sequence[bool]) -> pa.Array:
    """Each row's canonical text (binary)."""
    parts = []
    for column, zero_dates in zip(columns, kept):
        text = pc.cast(column_text(data, column, flavor, zero_dates), pa.binary())
        marked = pc.binary_join_element_wise(pa.scalar(VALUE_MARK), text, pa.scalar(b""))
        parts.append(pc.fill_null(marked, pa.scalar(NULL_TEXT)))
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, pa.scalar(SEPARATOR))


def column_text(data: pa.Table, column: Column, flavor: str, zero_dates_kept: bool = True) -> pa.Array:
    """``column``'s canonical text for each row of ``data`` (NULL for NULL)."""
    array = data.column(column.name).combine_chunks()
    kind = values.value_kind(column)
    if kind in ("float", "double"):
        width = MYSQL_WIDTH if flavor == "mysql" else WIDE
        return _each(array, lambda v: server_double_text(float(v), width))
    if kind == "time":
        return _each(array, lambda v: _time_text(v, column.datetime_precision or 0))
    if kind == "json":
        return _each(array, server_json_text)
    if kind == "decimal":
        return _decimal_text(array)
    if kind in ("date", "datetime", "timestamp"):
        text = _calendar_text(array, kind, column.datetime_precision or 0)
        companion = values.zero_date_field(column.name)
        if zero_dates_kept and companion in data.column_names:
            return pc.coalesce(data.column(companion).combine_chunks(), text)
        return text
    if kind in ("binary", "bytes"):
        return array
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array
    return pc.cast(array, pa.string())


def _each(array: pa.Array, render: Callable[[Any], str]) -> pa.Array:
    return pa.array([None if v is None else render(v) for v in array.to_pylist()], pa.string())


def _decimal_text(array: pa.Array) -> pa.Array:
    """Arrow prints a DECIMAL as the server does, except small magnitudes, in exponent notation
    (``-1E-30``): those are printed in Python."""
    if pa.types.is_string(array.type):  # wider than Arrow's 38 digits: Python's text ('0E-30' for zero)
        return _each(array, lambda v: format(Decimal(v), "f"))
    text = pc.cast(array, pa.string())
    odd = pc.match_substring(text, "E")
    if not pc.any(odd).as_py():
        return text
    return _each(array, lambda v: format(v, "f"))


def _calendar_text(array: pa.Array, kind: str, precision: int) -> pa.Array:
    if kind == "date":
        return pc.cast(array, pa.string())
    full = pc.cast(array, pa.string())  # 'YYYY-MM-DD hh:mm:ss.ffffff' (+ 'Z' in UTC): 30x strftime's speed
    return pc.utf8_slice_codeunits(full, 0, 19 + (precision + 1 if precision else 0))


def _time_text(value: dt.timedelta, precision: int) -> str:
    """TIME as the server prints it: ``[-]hh:mm:ss[.f]``, hours of two digits or more (up to 838)."""
    micros = value // dt.timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    return text + f".{fraction:06d}"[: precision + 1] if precision else text
