"""The source side of a digest: each column's canonical text as a SQL expression, and the digest query.

A chunk's digest is its row count and the sum of a 64-bit hash per row (the first 16 hex digits of the SHA-256
of the row's canonical text; Oracle MySQL 9 has no MD5), computed by the server: no row crosses the wire, and
a sum, unlike an XOR, keeps two equal rows of a table without a primary key from cancelling out. The
canonical text of a row is its columns' texts, each ``=`` + text or ``N`` for NULL, joined by the byte 0x1E;
a column's text is the server's own bytes of the value (``canonical_arrow`` computes the same bytes from
the lake's value):

* strings of any character set: the value converted to utf8mb4 (the lake's text is the server's conversion to
  Unicode), exactly, trailing spaces included: a PAD SPACE collation compares ``'a'`` and ``'a '`` equal,
  the digest does not;
* numbers, dates, times, YEAR, BIT, MariaDB's UUID/INET: the server's text (a zero date is its own text, as
  the lake's zero-date companion holds it); FLOAT and DOUBLE as DOUBLE text (``float_text``);
* binary strings, spatial values, VECTOR: their bytes;
* Oracle MySQL's JSON: its text (``json_text`` prints the lake's document the same way).
"""
from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import Column

SEPARATOR = b"\x1e"
NULL_TEXT = b"N"
VALUE_MARK = b"="


def column_text(column: Column, zero_dates_kept: bool = True) -> str:
    """The SQL expression of ``column``'s canonical text (NULL for NULL). ``zero_dates_kept``: the lake keeps
    this column's zero dates (else it holds NULL there, and so does the expression)."""
    kind = values.value_kind(column)
    q = column.quoted
    if kind == "text":
        return f"CONVERT({q} USING utf8mb4)"
    if kind in ("float", "double"):
        return f"CAST(CAST({q} AS DOUBLE) AS CHAR)"
    if kind in ("bit", "year", "int"):
        return f"CAST({q} + 0 AS CHAR)"  # + 0: ZEROFILL's padding is display, not value
    if kind == "decimal":  # the CAST drops ZEROFILL's padding (+ 0 would cut DECIMAL(65,30)'s scale)
        precision, scale = column.numeric_precision or 10, column.numeric_scale or 0
        return f"CAST(CAST({q} AS DECIMAL({precision}, {scale})) AS CHAR)"
    if kind in ("binary", "bytes"):
        return f"CAST({q} AS BINARY)"
    if kind in values.ZERO_DATE_TYPES and not zero_dates_kept:
        return (f"IF(YEAR({q}) = 0 OR MONTH({q}) = 0 OR DAYOFMONTH({q}) = 0, NULL, CAST({q} AS CHAR))")
    if kind == "set":
        return f"CONVERT({q} USING utf8mb4)"
    return f"CAST({q} AS CHAR)"


def row_text(columns: Sequence[Column], zero_dates_kept: Sequence[bool] | None = None) -> str:
    """The SQL expression of a row's canonical text."""
    kept = list(zero_dates_kept) if zero_dates_kept is not None else [True] * len(columns)
    parts = [f"IFNULL(CONCAT('=', {column_text(c, k)}), 'N')" for c, k in zip(columns, kept)]
    return f"CONCAT_WS(0x1e, {', '.join(parts)})" if len(parts) > 1 else parts[0]


def row_hash(columns: Sequence[Column], zero_dates_kept: Sequence[bool] | None = None) -> str:
    """The SQL expression of a row's 64-bit hash: the first 16 hex digits of the SHA-256 of its text."""
    return f"CAST(CONV(LEFT(SHA2({row_text(columns, zero_dates_kept)}, 256), 16), 16, 10) AS UNSIGNED)"


def digest_select(table_sql: str, columns: Sequence[Column], where: str,
                  zero_dates_kept: Sequence[bool] | None = None) -> str:
    """``SELECT COUNT(*), SUM(hash)`` over the rows of ``table_sql`` that satisfy ``where``."""
    return (f"SELECT COUNT(*), COALESCE(SUM({row_hash(columns, zero_dates_kept)}), 0) FROM {table_sql} "
            f"WHERE {where}")


def hashes_select(table_sql: str, columns: Sequence[Column], where: str,
                  zero_dates_kept: Sequence[bool] | None = None) -> str:
    """Each row's hash, of the rows of ``table_sql`` that satisfy ``where``."""
    return f"SELECT {row_hash(columns, zero_dates_kept)} FROM {table_sql} WHERE {where}"
