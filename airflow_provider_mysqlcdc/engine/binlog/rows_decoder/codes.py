"""The numbers the layout and the compiled decoder agree on: how a value's bytes are laid out in a rows event
(``Wire``) and what becomes of them (``Out``).

The compiled module declares the same values as C enums (a ``switch`` per value needs constants) and
refuses to load when they differ from these (``_rows.check_codes``), so the two cannot drift apart.
"""
from __future__ import annotations

from enum import IntEnum


class Wire(IntEnum):
    """The binary form of one value in a row image (mysql-replication's reading of each column type)."""

    INT8 = 1
    UINT8 = 2
    INT16 = 3
    UINT16 = 4
    INT24 = 5
    UINT24 = 6
    INT32 = 7
    UINT32 = 8
    INT64 = 9
    UINT64 = 10
    FLOAT = 11
    DOUBLE = 12
    DECIMAL = 13  # NEWDECIMAL: precision, decimals
    DATE = 14  # 3 bytes, year << 9 | month << 5 | day
    DATETIME = 15  # pre-5.6 DATETIME: an 8-byte integer YYYYMMDDhhmmss
    DATETIME2 = 16  # 5 bytes big-endian + fraction
    TIME = 17  # pre-5.6 TIME: a 3-byte integer hhmmss
    TIME2 = 18  # 3 bytes big-endian + fraction
    TIMESTAMP = 19  # pre-5.6 TIMESTAMP: 4-byte little-endian seconds
    TIMESTAMP2 = 20  # 4-byte big-endian seconds + fraction
    YEAR = 21
    ENUM = 22  # member index, ``size`` bytes
    SET = 23  # member bitmask, ``size`` bytes
    BIT = 24  # ``size`` bytes big-endian
    STRING = 25  # ``size``-byte little-endian length, then the bytes (CHAR/VARCHAR/TEXT/BLOB/GEOMETRY)


class Out(IntEnum):
    """What a value becomes: the normalised value ``model.values.binlog_normalizer`` makes of
    mysql-replication's value of that column."""

    RAW = 0  # mysql-replication's value is already the normalised one (or the wire fixes it, see flags)
    BYTES = 1  # STRING: the bytes
    PADDED = 2  # STRING: the bytes right-padded with 0x00 to ``pad`` (BINARY(n))
    UTF8 = 3  # STRING: strict UTF-8 text (utf8, utf8mb3, utf8mb4)
    UTF16BE = 4  # STRING: ucs2, utf16
    UTF16LE = 5  # STRING: utf16le
    UTF32BE = 6  # STRING: utf32
    CHARMAP = 7  # STRING: a single-byte charset's table read off the server
    MULTIBYTE = 8  # STRING: a multi-byte charset's table read off the server (longest match first)
    PYCALL = 9  # STRING: the column's Python converter, once per value (JSON, other decoders)
    UUID = 10  # STRING: MariaDB UUID text
    INET4 = 11  # STRING: MariaDB INET4 text
    INET6 = 12  # STRING: MariaDB INET6 text


class Flag(IntEnum):
    """Per-column switches of the normalisation of non-string wires."""

    UTC = 1  # TIMESTAMP: aware in UTC, the epoch (TIMESTAMP 0) as a ZeroDate
    TIME_FIX = 2  # TIME(n>0): undo mysql-replication's negative-fraction decoding
    YEAR_ZERO = 4  # YEAR: 0 for YEAR 0000 (decoded as 1900 + 0)
    SET_TEXT = 8  # SET: comma text in member order, '' for the empty set
    BIT_INT = 16  # BIT: the unsigned integer (mysql-replication's '0101' text, parsed)
