"""One canonical Python value per MySQL type, whether a row came from a snapshot SELECT or from the binlog.

The snapshot reads through pymysql (session ``time_zone = '+00:00'``) with the select expressions of
``select_list``; the binlog is decoded by mysql-replication. The two libraries disagree on several types, so
each side gets its own normalizer and both produce:

=====================  ==========================================================  ===========================
MySQL type             canonical Python value                                      Arrow type
=====================  ==========================================================  ===========================
TINYINT..BIGINT        ``int`` (unsigned exact, BIGINT UNSIGNED up to 2**64-1)     int64; BIGINT UNSIGNED
                                                                                   decimal128(20, 0)
DECIMAL(p, s)          ``decimal.Decimal`` with the column scale                   decimal128(p, s); string
                                                                                   if p > 38
FLOAT                  ``float``: the exact single-precision value                 float32
DOUBLE                 ``float``                                                   float64
DATE                   ``datetime.date``                                           date32
DATETIME(n)            naive ``datetime.datetime`` (wall clock, microseconds)      timestamp('us')
TIMESTAMP(n)           aware ``datetime.datetime`` in UTC                          timestamp('us', tz='UTC')
TIME(n)                ``datetime.timedelta`` (may be negative)                    duration('us')
YEAR                   ``int`` (0 for YEAR 0000)                                   int16
CHAR/VARCHAR/TEXT      ``str`` (CHAR without trailing spaces, as MySQL returns it)  string
ENUM                   ``str`` ('' for the invalid-value index 0)                  string
SET                    ``str`` with members in definition order: ``'a,c'``         string
BIT(n)                 ``int``                                                     int64; BIT(64)
                                                                                   decimal128(20, 0)
BINARY(n)              ``bytes`` right-padded with 0x00 to n (as the server pads)  binary
VARBINARY/BLOB         ``bytes``                                                   binary
GEOMETRY types         ``bytes`` (MySQL's internal SRID + WKB)                     binary
JSON                   canonical text: ``json.dumps(parsed, sort_keys=True,        string
                       separators=(',', ':'), ensure_ascii=False)``
UUID/INET4/INET6       ``str``: the server's text (``'123e4567-...'``,             string
(MariaDB)              ``'1.2.3.4'``, ``'::ffff:1.2.3.4'``)
zero dates             ``ZeroDate``: MySQL's text (``'0000-00-00'``)               NULL + ``<col>__zero_date``
=====================  ==========================================================  ===========================

Character sets: a string column of any character set is the server's conversion of it to Unicode; the binlog
carries the column's own bytes, decoded with tables the server produced (``model.charsets``).

Zero dates: MySQL stores ``'0000-00-00'``, dates with a zero month or day (``'2020-00-15'``), year-0 dates
and TIMESTAMP 0 when the sql_mode allows it. No calendar type of Python, Arrow's readers or Spark holds them,
and they are distinct values (they may sit in a primary key), so the canonical value is ``ZeroDate``: MySQL's
own text of the value (a ``str``), the same from both sources. In Arrow the column keeps its calendar type
and holds NULL there, and a companion string column ``<name>__zero_date`` holds the text (NULL for every
other row): readers that know nothing of it see NULL, as with other CDC tools; ``coalesce`` of the two gives
the exact value, and the mirror keys rows by both.

JSON on MariaDB: MariaDB's JSON is an alias of LONGTEXT (``information_schema`` says ``longtext``), so such a
column is read as the text it stores, which is identical on both paths. Only columns whose ``data_type`` is
``json`` (Oracle MySQL, or a schema that marks MariaDB's JSON columns so) are canonicalized.

A type this module does not know raises UnsupportedType when a normalizer is built, naming the column,
rather than producing values that differ between the snapshot and the stream.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model import mysql_json
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder, is_unicode
from airflow_provider_mysqlcdc.engine.model.tables import (
    BINARY_TYPES,
    INTEGER_TYPES,
    Column,
    TableSchema,
    quote_ident,
)

UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1)
_EMPTY_SET = "empty set"  # pymysqlreplication.constants.NONE_SOURCE.EMPTY_SET
_ONE_SECOND_US = 1_000_000

TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"}
GEOMETRY_TYPES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", "geomcollection",  # Oracle MySQL's catalog says the latter
}
ZERO_DATE_TYPES = {"date", "datetime", "timestamp"}
MARIADB_NATIVE_TYPES = {"uuid": 16, "inet4": 4, "inet6": 16}  # binary width in the binlog
ARROW_MAX_DECIMAL_PRECISION = 38
ZERO_DATE_SUFFIX = "__zero_date"


class ZeroDate(str):
    """A DATE/DATETIME/TIMESTAMP value no calendar type holds, as MySQL's own text: ``'0000-00-00'``,
    ``'2020-00-15 10:11:12.000'``, ``'0000-01-01'``. A ``str``, so it hashes, compares and travels as text."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ZeroDate({str.__repr__(self)})"


def zero_date_field(name: str) -> str:
    """The companion Arrow column that holds ``name``'s zero dates."""
    return name + ZERO_DATE_SUFFIX


def holds_zero_dates(column: Column) -> bool:
    return column.data_type in ZERO_DATE_TYPES


# How a lake writes zero dates (the plan's ``zero_dates``, so the snapshot and the stream agree): "keep" (the
# default) writes each in its column's companion; "null" leaves them NULL only (no companion), as most CDC
# tools do, except in key columns.
ZERO_DATE_MODES = ("keep", "null")


def check_zero_date_mode(mode: str) -> str:
    if mode not in ZERO_DATE_MODES:
        raise ConfigurationError(f"zero_dates must be one of {', '.join(ZERO_DATE_MODES)}, got {mode!r}")
    return mode


def unwritten_companions(schema: TableSchema, mode: str, key_columns: Iterable[str]) -> tuple[str, ...]:
    """The zero-date companions a lake in ``mode`` leaves out: none under "keep"; under "null" those of every
    date column but the key columns (primary key and chunk key), whose zero dates keep rows apart in the
    mirror and place them in their chunks: those keep their companion."""
    if check_zero_date_mode(mode) == "keep":
        return ()
    keys = set(schema.primary_key) | set(key_columns)
    return tuple(zero_date_field(c.name) for c in schema.columns
                 if holds_zero_dates(c) and c.name not in keys)


class UnsupportedType(CdcError):
    """A column type we cannot (yet) read identically from a snapshot and from the binlog."""


Converter = Callable[[Any], Any]


# --- helpers ------------------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """The one text form of a JSON document: sorted keys, no spaces, unicode kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_plain(value: Any) -> Any:
    """mysql-replication's binary JSON uses bytes for keys and strings and Decimal for opaque decimals."""
    if isinstance(value, dict):
        return {_json_key(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, Decimal):
        return float(value)  # what json.loads makes of the same number in the SELECT text
    if isinstance(value, (dt.date, dt.time, dt.timedelta)):
        return str(value)
    return value


def _json_key(key: Any) -> str:
    return key.decode("utf-8") if isinstance(key, bytes) else str(key)


def _json_from_text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    return canonical_json(json.loads(value))


def _json_from_binlog(value: Any) -> str:
    if isinstance(value, mysql_json.MySQLJsonBinary):  # Oracle MySQL's binary JSON
        return canonical_json(mysql_json.decode(value.data))
    if isinstance(value, (str, bytes)):  # MariaDB's JSON is text
        return _json_from_text(value)
    return canonical_json(_json_plain(value))


def enum_members(column_type: str) -> list[str]:
    """Members of ``enum('a','b')`` / ``set('a','b')`` as information_schema writes them (quotes doubled)."""
    body = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", body)]


def _snapshot_date(value: Any) -> Any:
    """pymysql returns the server's text when a DATE/DATETIME cannot be a Python date ('0000-00-00')."""
    return ZeroDate(value) if isinstance(value, str) else value


def _snapshot_timestamp(value: Any) -> Any:
    if isinstance(value, str):
        return ZeroDate(value)
    return value.replace(tzinfo=UTC)


def _binlog_timestamp(precision: int) -> Converter:
    zero = ZeroDate("0000-00-00 00:00:00" + ("." + "0" * precision if precision else ""))

    def convert(value: Any) -> Any:
        # mysql-replication decodes TIMESTAMP as naive UTC; TIMESTAMP 0 is MySQL's zero date.
        if value == _EPOCH:
            return zero
        return value.replace(tzinfo=UTC)

    return convert


def inet6_text(data: bytes) -> str:
    """An INET6 value as MariaDB prints it: the longest run of zero groups (even a single one) is ``::``,
    and IPv4-compatible (``::1.2.3.4``) and IPv4-mapped (``::ffff:1.2.3.4``) addresses end in dotted form."""
    words = [int.from_bytes(data[i:i + 2], "big") for i in range(0, 16, 2)]
    gap_at, gap_len, run_at = -1, 0, None
    for i in range(9):
        if i < 8 and words[i] == 0:
            run_at = i if run_at is None else run_at
        elif run_at is not None:
            if i - run_at > gap_len:
                gap_at, gap_len = run_at, i - run_at
            run_at = None
    if gap_at == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        return ("::" if gap_len == 6 else "::ffff:") + ".".join(str(b) for b in data[12:16])
    if gap_at < 0:
        return ":".join(f"{w:x}" for w in words)
    head = ":".join(f"{w:x}" for w in words[:gap_at])
    tail = ":".join(f"{w:x}" for w in words[gap_at + gap_len:])
    return f"{head}::{tail}"


def _native_text(kind: str, width: int) -> Converter:
    """MariaDB's UUID/INET4/INET6 arrive as their binary form (trailing zero bytes stripped)."""

    def convert(value: Any) -> str:
        if isinstance(value, str):
            return value
        data = bytes(value).ljust(width, b"\x00")
        if kind == "uuid":
            return str(uuid.UUID(bytes=data))
        if kind == "inet4":
            return ".".join(str(b) for b in data)
        return inet6_text(data)

    return convert


def _text(decode: Callable[[bytes], str], table: Any, column: Column) -> Converter:
    def convert(value: Any) -> str:
        if isinstance(value, str):  # ENUM members come as text
            return value
        try:
            return decode(bytes(value))
        except UnicodeDecodeError as exc:
            raise UndecodableText(table, column, bytes(value), exc) from None

    return convert


class UndecodableText(CdcError):
    """A string value with no Unicode form: ucs2 and utf32 columns accept lone UTF-16 surrogates (U+D800 to
    U+DFFF) under a non-strict sql_mode, and the server hands them out as invalid UTF-8. No Arrow, Parquet or
    Spark string can hold one, and replacing it would change the value, so reading stops here."""

    def __init__(self, table: Any, column: Column, value: bytes, exc: UnicodeDecodeError) -> None:
        charset = (column.charset or "").lower()
        bad = value[exc.start:exc.end].hex().upper()
        if charset in _BYTES_READ_CHARSETS:
            unit = 8 if charset == "utf32" else 4  # hex digits per code unit
            pattern = "^(" + "." * unit + ")*" + "0" * (unit - 4) + "D[89A-F]"
            what = "a lone UTF-16 surrogate"
            find = f" (find them with SELECT ... WHERE HEX({column.quoted}) REGEXP '{pattern}')"
        else:
            what, find = f"not valid {charset or 'utf8mb4'}", ""
        super().__init__(
            f"table {table}, column {column.name!r} ({column.charset}): a value holds bytes {bad} (at byte "
            f"{exc.start}), {what}: no Unicode character, so no Arrow, Parquet or Spark string can hold it. "
            f"Fix such values at the source{find}, then rerun; a strict sql_mode prevents new ones. The "
            "stream cannot pass a change that holds one (docs/output.md, Character sets)"
        )


# ucs2 and utf32 admit code points with no UTF-8 form, which the server would send as invalid UTF-8: the
# snapshot reads their bytes and decodes them as the binlog path does, so both fail (or agree) alike.
_BYTES_READ_CHARSETS = {"ucs2", "utf32"}


def _read_as_bytes(column: Column) -> bool:
    return column.data_type != "enum" and (column.charset or "").lower() in _BYTES_READ_CHARSETS


def _binlog_time(value: dt.timedelta) -> dt.timedelta:
    """Undo mysql-replication 1.0.17's decoding of negative TIME(n) values with a fraction.

    It reads the integer part and the fraction of the two's-complement TIME2 encoding separately and gets
    ``-(T + 1s - f)`` for the true value ``-(T + f)`` (e.g. '-12:34:56.789' decodes as -12:34:56.211).
    A negative value without a fraction is decoded correctly. The mapping is its own inverse.
    """
    if value >= dt.timedelta(0):
        return value
    magnitude = -value
    fraction = magnitude.microseconds
    if not fraction:
        return value
    whole = magnitude - dt.timedelta(microseconds=fraction)
    return -(whole + dt.timedelta(microseconds=_ONE_SECOND_US - fraction))


def _binlog_year(value: int) -> int:
    return 0 if value == 1900 else value  # YEAR 0000 is stored as 0 and decoded as 1900 + 0


def _bit_from_binlog(value: Any) -> int:
    return int(value, 2) if isinstance(value, str) else int(value)


def _set_from_binlog(order: dict[str, int]) -> Converter:
    def convert(value: Any) -> str:
        if isinstance(value, str):
            return value
        return ",".join(sorted(value, key=order.__getitem__))

    return convert


def _bytes(value: Any) -> bytes:
    # mysql-replication returns '' (str) for an empty binary string: Python skips the codec for b''.
    return value.encode("latin-1") if isinstance(value, str) else value


def _padded(length: int) -> Converter:
    def convert(value: Any) -> bytes:
        value = _bytes(value)
        return value if len(value) >= length else value.ljust(length, b"\x00")

    return convert


def _kind(column: Column) -> str:
    """The value family of a column; raises UnsupportedType for what we cannot read identically."""
    t = column.data_type
    if t in INTEGER_TYPES:
        return "int"
    if t in ("decimal", "numeric"):
        return "decimal"
    if t in ("float", "double", "real"):
        return t if t != "real" else "double"
    if t in ("date", "datetime", "timestamp", "time", "year", "bit", "set", "json"):
        return t
    if t in TEXT_TYPES:
        return "text"
    if t in BINARY_TYPES:
        return "binary" if t == "binary" else "bytes"
    if t in GEOMETRY_TYPES or t == "vector":  # VECTOR(n): n float32s, as bytes (the SELECT's and binlog's)
        return "bytes"
    if t in MARIADB_NATIVE_TYPES:
        return t
    raise UnsupportedType(
        f"column {column.name!r} has type {column.column_type!r}, which mysqlcdc cannot yet read identically "
        "from a snapshot and from the binlog; exclude the table or convert the column"
    )


# --- SQL ----------------------------------------------------------------------------------------------------


def select_expression(column: Column) -> str:
    """The expression whose pymysql value the snapshot normalizer expects for this column."""
    kind = _kind(column)
    q = column.quoted
    if kind == "bit":
        return f"{q} + 0"  # an unsigned integer instead of a big-endian byte string
    if kind in ("float", "double"):
        # The server prints FLOAT with 6 significant digits; as DOUBLE it prints the exact single-precision
        # value (shortest round-trip form), which is what the binlog carries.
        return f"CAST({q} AS DOUBLE)"
    if (kind == "text" and _read_as_bytes(column)) or column.data_type == "vector":
        return f"CAST({q} AS BINARY)"  # a VECTOR's own field type is one pymysql decodes as text
    return q


def select_list(schema: TableSchema) -> str:
    """``SELECT`` expressions for every column, in schema order, each aliased to its column name."""
    return ", ".join(f"{select_expression(c)} AS {quote_ident(c.name)}" for c in schema.columns)


# --- normalizers --------------------------------------------------------------------------------------------


def _snapshot_converter(column: Column, table: Any) -> Converter | None:
    kind = _kind(column)
    if kind == "text" and _read_as_bytes(column):
        return _text(_decoder(column, None), table, column)
    if kind in ("date", "datetime"):
        return _snapshot_date
    if kind == "timestamp":
        return _snapshot_timestamp
    if kind == "json":
        return _json_from_text
    return None  # pymysql already returns BINARY(n) padded, and bytes for every binary type


def _binlog_converter(
    column: Column, decoders: Callable[[str], CharsetDecoder] | None, table: Any
) -> Converter | None:
    kind = _kind(column)
    if kind == "timestamp":
        return _binlog_timestamp(column.datetime_precision or 0)
    if kind == "text":
        return _text(_decoder(column, decoders), table, column)
    if kind in MARIADB_NATIVE_TYPES:
        return _native_text(kind, MARIADB_NATIVE_TYPES[kind])
    if kind == "time" and (column.datetime_precision or 0) > 0:
        return _binlog_time
    if kind == "year":
        return _binlog_year
    if kind == "bit":
        return _bit_from_binlog
    if kind == "set":
        return _set_from_binlog({m: i for i, m in enumerate(enum_members(column.column_type))})
    if kind == "json":
        return _json_from_binlog
    if kind == "binary" and column.char_max_length:
        return _padded(int(column.char_max_length))  # the binlog strips trailing 0x00 of BINARY(n)
    if kind in ("binary", "bytes"):
        return _bytes
    return None


def snapshot_normalizer(schema: TableSchema) -> Callable[[tuple], tuple]:
    """Canonical values of a row fetched with ``SELECT {select_list(schema)}``; identity if nothing to do."""
    converters = [
        (i, conv) for i, c in enumerate(schema.columns) if (conv := _snapshot_converter(c, schema.table))
    ]
    if not converters:
        return _identity

    def normalize(row: tuple) -> tuple:
        out = list(row)
        for i, conv in converters:
            value = out[i]
            if value is not None:
                out[i] = conv(value)
        return tuple(out)

    return normalize


def _decoder(column: Column, decoders: Callable[[str], CharsetDecoder] | None) -> Callable[[bytes], str]:
    charset = (column.charset or "utf8mb4").lower()
    if is_unicode(charset):
        return CharsetDecoder(charset)
    if decoders is None:
        raise CdcError(f"column {column.name!r} ({charset}) needs the server's conversion table to decode")
    return decoders(charset)


def binlog_normalizer(
    schema: TableSchema, decoders: Callable[[str], CharsetDecoder] | None = None
) -> Callable[..., dict]:
    """Canonical values for one row image of mysql-replication (as ``binlog.row_decoding`` patches it:
    strings as bytes, zero dates as ``ZeroDate``): ``normalize(values, none_sources=None)``.

    ``decoders`` gives the decoder of a legacy charset (``source.charset_tables``). ``none_sources`` (the
    row's ``none_sources``/``before_none_sources``/``after_none_sources``) tells an empty SET (``''``)
    apart from NULL: mysql-replication decodes both as None.
    """
    converters = [
        (c.name, conv) for c in schema.columns if (conv := _binlog_converter(c, decoders, schema.table))
    ]
    set_columns = [c.name for c in schema.columns if c.data_type == "set"]
    if not converters and not set_columns:
        return _identity_dict

    def normalize(values: dict[str, Any], none_sources: dict[str, str] | None = None) -> dict[str, Any]:
        out = dict(values)
        for name, conv in converters:
            value = out[name]
            if value is not None:
                out[name] = conv(value)
        if none_sources:
            for name in set_columns:
                if out[name] is None and none_sources.get(name) == _EMPTY_SET:
                    out[name] = ""
        return out

    return normalize


def _identity(row: tuple) -> tuple:
    return row


def _identity_dict(values: dict[str, Any], none_sources: dict[str, str] | None = None) -> dict[str, Any]:
    return values


# --- Arrow --------------------------------------------------------------------------------------------------


def arrow_type(column: Column) -> pa.DataType:
    kind = _kind(column)
    if kind == "int":
        return pa.decimal128(20, 0) if column.data_type == "bigint" and column.unsigned else pa.int64()
    if kind == "decimal":
        precision = column.numeric_precision or 10
        if precision > ARROW_MAX_DECIMAL_PRECISION:
            return pa.string()
        return pa.decimal128(precision, column.numeric_scale or 0)
    if kind == "float":
        return pa.float32()
    if kind == "double":
        return pa.float64()
    if kind == "date":
        return pa.date32()
    if kind == "datetime":
        return pa.timestamp("us")
    if kind == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if kind == "time":
        return pa.duration("us")
    if kind == "year":
        return pa.int16()
    if kind == "bit":
        bits = column.numeric_precision or 64
        return pa.int64() if bits < 64 else pa.decimal128(20, 0)
    if kind in ("text", "set", "json", *MARIADB_NATIVE_TYPES):
        return pa.string()
    return pa.binary()


_ARROW_SCHEMAS: dict[str, pa.Schema] = {}  # by TableSchema.schema_id (which names the Arrow layout)


def arrow_schema(schema: TableSchema) -> pa.Schema:
    """The Arrow schema of canonical rows: each column, and after each DATE/DATETIME/TIMESTAMP column its
    zero-date companion (those columns are nullable: a zero date is NULL in the calendar column)."""
    found = _ARROW_SCHEMAS.get(schema.schema_id)
    if found is None:
        found = _arrow_schema(schema)
        if len(_ARROW_SCHEMAS) >= 4096:
            _ARROW_SCHEMAS.clear()
        _ARROW_SCHEMAS[schema.schema_id] = found
    return found


def _arrow_schema(schema: TableSchema) -> pa.Schema:
    fields = []
    for c in schema.columns:
        fields.append(pa.field(c.name, arrow_type(c), nullable=c.nullable or holds_zero_dates(c)))
        if holds_zero_dates(c):
            companion = zero_date_field(c.name)
            if companion in schema.column_by_name:
                raise UnsupportedType(
                    f"table {schema.table}: column {companion!r} has the name of the zero-date column of "
                    f"{c.name!r} in the output; rename the column (ALTER TABLE ... RENAME COLUMN) or leave "
                    "the table out"
                )
            fields.append(pa.field(companion, pa.string()))
    return pa.schema(fields)


def identity_names(schema: TableSchema, names: Iterable[str]) -> list[str]:
    """Arrow columns that identify values of ``names``: each, plus its zero-date companion."""
    out = []
    for name in names:
        out.append(name)
        column = schema.column_by_name.get(name)
        if column is not None and holds_zero_dates(column):
            out.append(zero_date_field(name))
    return out


def canonical_pylist(table: Any) -> list[dict[str, Any]]:
    """``table.to_pylist()`` with each zero-date companion folded into its column (as ``ZeroDate``)."""
    names = table.schema.names
    pairs = [(n[: -len(ZERO_DATE_SUFFIX)], n) for n in names
             if n.endswith(ZERO_DATE_SUFFIX) and n[: -len(ZERO_DATE_SUFFIX)] in names]
    rows = table.to_pylist()
    for row in rows:
        for name, companion in pairs:
            text = row.pop(companion)
            if text is not None:
                row[name] = ZeroDate(text)
    return rows


def python_rows(table: Any, schema: TableSchema, names: Sequence[str]) -> list[tuple]:
    """Canonical values of ``names`` from an Arrow table or batch in ``arrow_schema`` layout: a zero date
    comes back as ``ZeroDate`` from its companion column (absent in files written before companions)."""
    columns = []
    for name in names:
        values_ = table.column(name).to_pylist()
        column = schema.column_by_name.get(name)
        companion = zero_date_field(name)
        if column is not None and holds_zero_dates(column) and companion in table.schema.names:
            texts = table.column(companion).to_pylist()
            values_ = [ZeroDate(t) if t is not None else v for v, t in zip(values_, texts)]
        columns.append(values_)
    return list(zip(*columns)) if columns else [() for _ in range(table.num_rows)]


def to_arrow_batch(schema: TableSchema, rows: list[tuple]) -> pa.RecordBatch:
    """A RecordBatch of canonical rows (tuples in schema order), converted column by column by pyarrow."""
    columns = list(zip(*rows)) if rows else [()] * len(schema.columns)
    return columns_to_arrow(schema, columns)


def columns_to_arrow(schema: TableSchema, columns: Sequence[Sequence[Any]]) -> pa.RecordBatch:
    """A RecordBatch of canonical values given column by column (schema order), converted by pyarrow."""
    target = arrow_schema(schema)
    arrays = []
    for column, values in zip(schema.columns, columns):
        field = target.field(column.name)
        if column.is_decimal and pa.types.is_string(field.type):
            values = [None if v is None else str(v) for v in values]  # wider than decimal128: exact text
        if holds_zero_dates(column):
            if any(type(v) is ZeroDate for v in values):
                zeros = pa.array([v if type(v) is ZeroDate else None for v in values], type=pa.string())
                values = [None if type(v) is ZeroDate else v for v in values]
            else:  # the usual case: no zero date in the batch
                zeros = pa.nulls(len(values), pa.string())
            arrays.append(pa.array(values, type=field.type))
            arrays.append(zeros)
            continue
        arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# --- for the compiled rows decoder (engine/binlog/rows_decoder), which normalises exactly as this module ----


def value_kind(column: Column) -> str:
    """The value family of a column (int, decimal, text, timestamp, ...); UnsupportedType where none."""
    return _kind(column)


def binlog_converter(
    column: Column, decoders: Callable[[str], CharsetDecoder] | None, table: Any
) -> Converter | None:
    """The normaliser's conversion of one column's mysql-replication value (None: taken as it is)."""
    return _binlog_converter(column, decoders, table)


def text_decoder(column: Column, decoders: Callable[[str], CharsetDecoder] | None) -> Callable[[bytes], str]:
    """The decoder of a text column's bytes, as the server converts them."""
    return _decoder(column, decoders)
