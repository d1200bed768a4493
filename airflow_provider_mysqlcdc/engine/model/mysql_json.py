"""Oracle MySQL's binary JSON (the binlog's form of a JSON column), decoded to what the SELECT's text
parses to.

A JSON value's canonical text (``values.canonical_json``) is that of ``json.loads`` of the text the server
prints for it. The binlog carries MySQL's binary form instead (``sql-common/json_binary.cc``), which
mysql-replication decodes lossily: a top-level string comes out as bare text (then read as a document),
``'"123"'`` as the number 123, JSON ``null`` as SQL NULL, TIME without its sign, binary values as text. This
module reads the binary form itself and gives, value for value, what ``json.loads`` gives for the server's
text: opaque DATE/TIME/DATETIME/TIMESTAMP as the server prints them (six fractional digits), DECIMAL as the
float ``json.loads`` makes of its digits, other opaque values as ``"base64:type<N>:<base64>"``.

The layout: a type byte, then the value. Objects and arrays (small: 2-byte counts and offsets, large: 4-byte)
hold ``count``, ``size``, key entries (offset, 2-byte length) for objects, then value entries (type and an
offset, or the value itself for literals and 16-bit integers, and 32-bit ones in the large form); offsets
count from the byte after the container's type byte. Strings and opaque data carry a variable-length size
(7 bits a byte, low bits first).
"""
from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0F)
_LITERALS = {0x00: None, 0x01: True, 0x02: False}
# MySQL field types of opaque values the server prints as text of their own
_DECIMAL_TYPES = {0, 246}  # DECIMAL, NEWDECIMAL
_DATE, _TIME, _TIMESTAMP, _DATETIME = 10, 11, 7, 12
_TIME2, _DATETIME2, _TIMESTAMP2 = 19, 18, 17


class BadBinaryJson(CdcError):
    """A binary JSON value this decoder cannot read exactly (never guessed)."""


@dataclass(frozen=True, slots=True)
class MySQLJsonBinary:
    """A JSON column's value as the binlog carries it (``engine/binlog/row_decoding.py`` hands these out)."""

    data: bytes


def decode(data: bytes) -> Any:
    """The Python value ``json.loads`` makes of the server's text of this binary JSON value."""
    if not data:  # an empty value is JSON null (MySQL writes one for a NOT NULL column's implicit default)
        return None
    return _Reader(bytes(data)).value(data[0], 1, len(data))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def value(self, kind: int, at: int, end: int) -> Any:
        if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
            return self.container(kind, at, end)
        if kind == LITERAL:
            return self.literal(self.data[at])
        if kind in (INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE):
            fmt = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q",
                   DOUBLE: "<d"}[kind]
            return self.unpack(fmt, at, end)
        if kind == STRING:
            size, at = self.length(at, end)
            return self.slice(at, size, end).decode("utf-8")
        if kind == OPAQUE:
            if at >= end:
                raise BadBinaryJson("binary JSON: an opaque value without its type")
            field_type = self.data[at]
            size, at = self.length(at + 1, end)
            return opaque(field_type, self.slice(at, size, end))
        raise BadBinaryJson(f"binary JSON: unknown value type 0x{kind:02x}")

    def literal(self, code: int) -> Any:
        if code not in _LITERALS:
            raise BadBinaryJson(f"binary JSON: unknown literal 0x{code:02x}")
        return _LITERALS[code]

    def unpack(self, fmt: str, at: int, end: int) -> Any:
        size = struct.calcsize(fmt)
        if at + size > end:
            raise BadBinaryJson("binary JSON: a number runs past its value")
        return struct.unpack_from(fmt, self.data, at)[0]

    def slice(self, at: int, size: int, end: int) -> bytes:
        if at + size > end:
            raise BadBinaryJson("binary JSON: a string runs past its value")
        return self.data[at:at + size]

    def length(self, at: int, end: int) -> tuple[int, int]:
        size = shift = 0
        while True:
            if at >= end or shift > 28:
                raise BadBinaryJson("binary JSON: a bad variable-length size")
            byte = self.data[at]
            at += 1
            size |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return size, at
            shift += 7

    def container(self, kind: int, start: int, end: int) -> Any:
        large = kind in (LARGE_OBJECT, LARGE_ARRAY)
        is_object = kind in (SMALL_OBJECT, LARGE_OBJECT)
        word = "<I" if large else "<H"
        width = 4 if large else 2
        count = self.unpack(word, start, end)
        size = self.unpack(word, start + width, end)
        if start + size > end:
            raise BadBinaryJson("binary JSON: a container larger than its value")
        limit = start + size
        entries = start + 2 * width
        keys: list[str] = []
        if is_object:
            for i in range(count):
                entry = entries + i * (width + 2)
                offset = self.unpack(word, entry, limit)
                key_size = self.unpack("<H", entry + width, limit)
                keys.append(self.slice(start + offset, key_size, limit).decode("utf-8"))
            entries += count * (width + 2)
        values = []
        for i in range(count):
            entry = entries + i * (1 + width)
            if entry + 1 + width > limit:
                raise BadBinaryJson("binary JSON: value entries run past their container")
            value_kind = self.data[entry]
            if value_kind == LITERAL:
                values.append(self.literal(self.data[entry + 1]))
            elif value_kind in (INT16, UINT16) or (large and value_kind in (INT32, UINT32)):
                values.append(self.value(value_kind, entry + 1, entry + 1 + width))
            else:
                offset = self.unpack(word, entry + 1, limit)
                values.append(self.value(value_kind, start + offset, limit))
        return dict(zip(keys, values)) if is_object else values


def opaque(field_type: int, data: bytes) -> Any:
    """An opaque value as the server prints it (and ``json.loads`` reads that)."""
    if field_type in _DECIMAL_TYPES:
        if len(data) < 2:
            raise BadBinaryJson("binary JSON: a DECIMAL without precision and scale")
        return float(_decimal(data[2:], data[0], data[1]))  # json.loads reads its digits as a float
    if field_type in (_DATE, _DATETIME, _DATETIME2, _TIMESTAMP, _TIMESTAMP2, _TIME, _TIME2):
        if len(data) != 8:
            raise BadBinaryJson(f"binary JSON: a temporal value of {len(data)} bytes")
        packed = struct.unpack("<q", data)[0]
        if field_type in (_TIME, _TIME2):
            return _time_text(packed)
        return _datetime_text(packed, date_only=field_type == _DATE)
    return f"base64:type{field_type}:{base64.b64encode(data).decode('ascii')}"


def _time_text(packed: int) -> str:
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    whole, micros = packed >> 24, packed % (1 << 24)
    hours, minutes, seconds = (whole >> 12) % (1 << 10), (whole >> 6) % (1 << 6), whole % (1 << 6)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def _datetime_text(packed: int, date_only: bool) -> str:
    packed = abs(packed)
    whole, micros = packed >> 24, packed % (1 << 24)
    ymd, hms = whole >> 17, whole % (1 << 17)
    year_month, day = ymd >> 5, ymd % (1 << 5)
    year, month = divmod(year_month, 13)
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if date_only:
        return date
    hour, minute, second = hms >> 12, (hms >> 6) % (1 << 6), hms % (1 << 6)
    return f"{date} {hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


_DIGITS_PER_WORD = 9
_BYTES_OF_DIGITS = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal(data: bytes, precision: int, scale: int) -> Decimal:
    """MySQL's packed DECIMAL (``decimal2bin``): big-endian words of nine digits, the sign in the top bit."""
    integral = precision - scale
    lead, whole_int = integral % _DIGITS_PER_WORD, integral // _DIGITS_PER_WORD
    whole_frac, tail = scale // _DIGITS_PER_WORD, scale % _DIGITS_PER_WORD
    size = _BYTES_OF_DIGITS[lead] + 4 * (whole_int + whole_frac) + _BYTES_OF_DIGITS[tail]
    if len(data) < size or size == 0:
        raise BadBinaryJson(f"binary JSON: a DECIMAL({precision},{scale}) of {len(data)} bytes")
    raw = bytearray(data[:size])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    at = 0
    digits = []

    def take(nbytes: int, ndigits: int) -> None:
        nonlocal at
        if nbytes:
            digits.append(f"{int.from_bytes(raw[at:at + nbytes], 'big'):0{ndigits}d}")
            at += nbytes

    take(_BYTES_OF_DIGITS[lead], lead)
    for _ in range(whole_int):
        take(4, 9)
    integer = "".join(digits) or "0"
    digits = []
    for _ in range(whole_frac):
        take(4, 9)
    take(_BYTES_OF_DIGITS[tail], tail)
    fraction = "".join(digits)
    text = f"{'-' if negative else ''}{integer}" + (f".{fraction}" if fraction else "")
    return Decimal(text)
