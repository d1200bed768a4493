"""The per-column layout of a rows event: how each value is read (the TABLE_MAP's type and metadata, as
mysql-replication parses them) and what it becomes (the normaliser ``model.values.binlog_normalizer`` of
the captured schema).

Why both: the Python path's value of a cell is ``normalize(mysql-replication's value)``. The first half
depends on the TABLE_MAP only (type code, lengths, fsp, precision/decimals, ENUM/SET members, the
signedness metadata), the second on the schema's column (its kind, TIMESTAMP/TIME precision, BINARY(n)
length, SET member order, charset decoder). A column whose pair of halves the compiled decoder does not
reproduce exactly gets no layout, with the reason: the caller keeps the pure-Python path for that table
version (and logs it once). Nothing is ever skipped.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pymysqlreplication.constants import FIELD_TYPE as T

from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import compiled
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.codes import Flag, Out, Wire
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder
from airflow_provider_mysqlcdc.engine.model.mysql_json import MySQLJsonBinary
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema

Decoders = Callable[[str], CharsetDecoder]

_INTS = {
    T.TINY: (Wire.INT8, Wire.UINT8),
    T.SHORT: (Wire.INT16, Wire.UINT16),
    T.INT24: (Wire.INT24, Wire.UINT24),
    T.LONG: (Wire.INT32, Wire.UINT32),
    T.LONGLONG: (Wire.INT64, Wire.UINT64),
}
_FIXED = {
    T.FLOAT: Wire.FLOAT,
    T.DOUBLE: Wire.DOUBLE,
    T.DATE: Wire.DATE,
    T.DATETIME: Wire.DATETIME,
    T.TIME: Wire.TIME,
    T.TIMESTAMP: Wire.TIMESTAMP,
    T.YEAR: Wire.YEAR,
}
_FRACTIONAL = {T.DATETIME2: Wire.DATETIME2, T.TIME2: Wire.TIME2, T.TIMESTAMP2: Wire.TIMESTAMP2}
_CODECS = {"utf-8": Out.UTF8, "utf-16-be": Out.UTF16BE, "utf-16-le": Out.UTF16LE, "utf-32-be": Out.UTF32BE}
_NATIVE = {"uuid": Out.UUID, "inet4": Out.INET4, "inet6": Out.INET6}


class Unsupported(Exception):
    """A column (or table map) the compiled decoder does not reproduce exactly; the message says why."""


@dataclass(frozen=True)
class ColumnPlan:
    """One column: how its value is read (``wire``, ``size``, ``fsp``, ...) and what it becomes (``out``,
    ``flags``), plus the Python object some need (ENUM members, SET text builder, charset table, the
    TIMESTAMP zero) and the column's Python converter (error path of text, JSON)."""

    name: str
    wire: Wire
    out: Out = Out.RAW
    size: int = 0
    fsp: int = 0
    precision: int = 0
    decimals: int = 0
    pad: int = 0
    flags: int = 0
    first_mask: int = 0
    nmembers: int = 0
    obj: Any = None
    conv: Callable[[Any], Any] | None = None

    def spec(self) -> tuple:
        return (int(self.wire), int(self.out), self.size, self.fsp, self.precision, self.decimals, self.pad,
                self.flags, self.first_mask, self.nmembers, self.obj, self.conv)


class LayoutChoice(NamedTuple):
    """``EventLayout.of``'s answer: a layout, or None and the reason the table keeps the Python path."""

    layout: EventLayout | None
    reason: str | None


class EventLayout:
    """The compiled decoding of the rows events of one TABLE_MAP layout, normalised for one schema."""

    __slots__ = ("_seen", "column_names", "columns", "compiled", "signature", "table")

    def __init__(self, table: TableId, columns: tuple[ColumnPlan, ...], signature: list[dict],
                 compiled_layout: Any):
        self.table = table
        self.column_names = tuple(c.name for c in columns)
        self.columns = columns
        self.signature = signature
        self.compiled = compiled_layout
        self._seen: object = None  # the last table map columns list that matched (kept alive: ids are unique)

    @property
    def column_count(self) -> int:
        return len(self.columns)

    @classmethod
    def of(cls, table_map_event: Any, schema: TableSchema, decoders: Decoders | None = None) -> LayoutChoice:
        """The layout of ``table_map_event``'s columns normalised as ``schema`` (the CapturedVersion's schema
        of that TABLE_MAP) says, with ``decoders`` the legacy charsets' decoders (source.charset_tables)."""
        module = compiled.module()
        if module is None:
            return LayoutChoice(None, compiled.missing_reason())
        try:
            plans = plan_columns(table_map_event.columns, schema, decoders)
            layout = module.CompiledLayout([p.spec() for p in plans])
        except Unsupported as exc:
            return LayoutChoice(None, f"table {schema.table}: {exc}")
        return LayoutChoice(cls(schema.table, plans, column_signature(table_map_event.columns), layout), None)

    def matches(self, columns: Sequence[Any]) -> bool:
        """Whether a rows event's table map columns are those this layout was built from."""
        if columns is self._seen:
            return True
        if len(columns) != len(self.signature) or any(
            _decoding_attributes(c) != want for c, want in zip(columns, self.signature)
        ):
            return False
        self._seen = columns
        return True


# Column attributes of mysql-replication that do not change how a value is read or normalised.
_NOT_DECODING = frozenset({"is_primary", "visibility"})


def _decoding_attributes(column: Any) -> dict:
    return {k: v for k, v in vars(column).items() if k not in _NOT_DECODING}


def column_signature(columns: Sequence[Any]) -> list[dict]:
    """What mysql-replication knows of the table map's columns that decoding depends on (name, type,
    metadata, signedness, charset, members): its Column objects' attributes, compared as dicts (cheap)."""
    return [_decoding_attributes(c) for c in columns]


def plan_columns(columns: Sequence[Any], schema: TableSchema,
                 decoders: Decoders | None) -> tuple[ColumnPlan, ...]:
    """A plan per column, or Unsupported naming the first column the compiled decoder cannot reproduce."""
    names = [c.name for c in columns]
    if any(not isinstance(n, str) or not n for n in names):
        raise Unsupported("the table map has no column names (binlog_row_metadata is not FULL)")
    if names != schema.column_names:
        raise Unsupported(f"the table map's columns {names} are not the schema's {schema.column_names}")
    return tuple(_plan(c, schema.column_by_name[c.name], schema.table, decoders) for c in columns)


def _plan(tm: Any, column: Column, table: TableId, decoders: Decoders | None) -> ColumnPlan:
    try:
        kind = values.value_kind(column)
        conv = values.binlog_converter(column, decoders, table)
    except CdcError as exc:  # the normaliser itself refuses the column (UnsupportedType, no charset table)
        raise Unsupported(f"column {column.name!r}: {exc}") from None
    wire, size, extra = _wire(tm)
    what = f"column {column.name!r} ({column.column_type}, binlog type {tm.type})"
    if conv is None:
        if wire in (Wire.BIT, Wire.SET):
            raise Unsupported(f"{what}: mysql-replication's raw {wire.name} value is not a normalised one")
        out = Out.BYTES if wire is Wire.STRING else Out.RAW
        return ColumnPlan(tm.name, wire, out, size, **extra)
    if kind == "timestamp" and wire in (Wire.TIMESTAMP, Wire.TIMESTAMP2):
        precision = column.datetime_precision or 0
        zero = values.ZeroDate("0000-00-00 00:00:00" + ("." + "0" * precision if precision else ""))
        return ColumnPlan(tm.name, wire, Out.RAW, size, flags=Flag.UTC, obj=zero, conv=conv, **extra)
    if kind == "time" and wire in (Wire.TIME, Wire.TIME2):
        return ColumnPlan(tm.name, wire, Out.RAW, size, flags=Flag.TIME_FIX, conv=conv, **extra)
    if kind == "year" and wire is Wire.YEAR:
        return ColumnPlan(tm.name, wire, Out.RAW, size, flags=Flag.YEAR_ZERO, conv=conv, **extra)
    if kind == "bit" and wire is Wire.BIT:
        return ColumnPlan(tm.name, wire, Out.RAW, size, flags=Flag.BIT_INT, conv=conv, **extra)
    if kind == "set" and wire is Wire.SET and column.data_type == "set":
        builder = _set_text(list(tm.set_values or ()), conv)
        return ColumnPlan(tm.name, wire, Out.RAW, size, flags=Flag.SET_TEXT, obj=builder, conv=conv, **extra)
    if kind == "text" and wire is Wire.ENUM:
        return ColumnPlan(tm.name, wire, Out.RAW, size, conv=conv, **extra)  # members come as text
    if wire is not Wire.STRING:
        raise Unsupported(f"{what}: a {kind} column the compiled decoder does not read from this binlog type")
    if kind == "text":
        out, obj = _text_out(values.text_decoder(column, decoders))
        return ColumnPlan(tm.name, wire, out, size, obj=obj, conv=conv)
    if kind in _NATIVE:
        return ColumnPlan(tm.name, wire, _NATIVE[kind], size, conv=conv)
    if kind == "json" and tm.type == T.JSON:  # Oracle MySQL's binary JSON: its bytes, decoded per value
        return ColumnPlan(tm.name, wire, Out.PYCALL, size, conv=_mysql_json(conv))
    if kind == "json":
        return ColumnPlan(tm.name, wire, Out.PYCALL, size, conv=conv)
    if kind == "binary" and column.char_max_length:
        return ColumnPlan(tm.name, wire, Out.PADDED, size, pad=int(column.char_max_length), conv=conv)
    if kind in ("binary", "bytes"):
        return ColumnPlan(tm.name, wire, Out.BYTES, size, conv=conv)
    raise Unsupported(f"{what}: no compiled normalisation for a {kind} column")


def _wire(tm: Any) -> tuple[Wire, int, dict]:
    """How mysql-replication 1.0.17 reads a value of this table map column (RowsEvent.__read_values_name)."""
    code = tm.type
    if code in _INTS:
        return _INTS[code][1 if tm.unsigned else 0], 0, {}
    if code in _FIXED:
        return _FIXED[code], 0, {}
    if code in _FRACTIONAL:
        return _FRACTIONAL[code], 0, {"fsp": int(tm.fsp or 0)}
    if code == T.NEWDECIMAL:
        precision, decimals = int(tm.precision), int(tm.decimals)
        if not 0 <= decimals <= precision <= 65 or precision == 0:
            raise Unsupported(f"column {tm.name!r}: DECIMAL({precision},{decimals}) is not a MySQL decimal")
        return Wire.DECIMAL, 0, {"precision": precision, "decimals": decimals}
    if code == T.ENUM:
        if tm.size not in (1, 2):
            raise Unsupported(f"column {tm.name!r}: ENUM of {tm.size} bytes")
        return Wire.ENUM, tm.size, {"obj": list(tm.enum_values) if tm.enum_values else None}
    if code == T.SET:
        if not 1 <= tm.size <= 8 or len(tm.set_values or ()) > 64:
            raise Unsupported(f"column {tm.name!r}: SET of {tm.size} bytes")
        return Wire.SET, tm.size, {"nmembers": len(tm.set_values or ())}
    if code == T.BIT:
        if not 1 <= tm.bytes <= 8:
            raise Unsupported(f"column {tm.name!r}: BIT of {tm.bytes} bytes")
        # RowsEvent.__read_bit: the first byte holds bits % 8
        # of the value (8 when that is 0; all of a 1-byte BIT)
        end = tm.bits if tm.bytes == 1 else (tm.bits % 8 or 8)
        return Wire.BIT, tm.bytes, {"first_mask": (1 << min(end, 8)) - 1}
    if code in (T.VARCHAR, T.STRING):
        return Wire.STRING, 2 if tm.max_length > 255 else 1, {}
    if code in (T.BLOB, T.GEOMETRY):
        if not 1 <= tm.length_size <= 4:
            raise Unsupported(f"column {tm.name!r}: a length of {tm.length_size} bytes")
        return Wire.STRING, tm.length_size, {}
    if code == T.JSON:  # length-prefixed like a BLOB; the value is MySQL's binary form (model/mysql_json.py)
        if not 1 <= tm.length_size <= 4:
            raise Unsupported(f"column {tm.name!r}: a JSON length of {tm.length_size} bytes")
        return Wire.STRING, tm.length_size, {}
    raise Unsupported(f"column {tm.name!r}: binlog type {code} is not decoded by the compiled decoder")


def _mysql_json(conv: Callable[[Any], Any]) -> Callable[[bytes], Any]:
    """The column's converter given what mysql-replication (as ``row_decoding`` patches it) would hand it."""

    def convert(raw: bytes) -> Any:
        return conv(MySQLJsonBinary(bytes(raw)))

    return convert


def _set_text(members: list[str], conv: Callable[[Any], Any]) -> Callable[[int], str]:
    """The normalised text of a SET bitmask (not empty): mysql-replication's Python set of the members,
    through the normaliser's converter. Computed once per distinct mask, then cached by the decoder."""

    def build(bits: int) -> str:
        return conv({m for i, m in enumerate(members) if bits & (1 << i)})

    return build


_tables_lock = threading.Lock()
_multibyte_tables: dict[int, tuple[CharsetDecoder, Any]] = {}


def _text_out(decoder: Any) -> tuple[Out, Any]:
    """The compiled equivalent of ``decoder`` (model.charsets.CharsetDecoder): the same codec function of
    CPython for the Unicode charsets, ``codecs.charmap_decode`` of the server's table for single-byte ones,
    its longest-match algorithm over C arrays for multi-byte ones; otherwise one Python call per value."""
    if type(decoder) is not CharsetDecoder:
        return Out.PYCALL, None
    codec = decoder.codec
    if codec is not None:
        return _CODECS.get(codec, Out.PYCALL), None
    table, single, width = decoder.table, decoder.single_map, decoder.max_sequence_bytes
    if table is None or not isinstance(single, str) or len(single) != 256:
        return Out.PYCALL, None
    if width == 1:
        return Out.CHARMAP, single
    if width in (2, 3):
        with _tables_lock:
            found = _multibyte_tables.get(id(decoder))
            if found is None or found[0] is not decoder:
                module = compiled.module()
                assert module is not None, "layouts are planned only where the compiled module loaded"
                try:
                    mb = module.MultibyteTable(single, dict(table.multi), width, decoder.ascii_identity)
                except ValueError:
                    return Out.PYCALL, None
                found = _multibyte_tables[id(decoder)] = (decoder, mb)
        return Out.MULTIBYTE, found[1]
    return Out.PYCALL, None
