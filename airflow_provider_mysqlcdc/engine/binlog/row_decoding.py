"""What we change in mysql-replication's decoding of row images, and why (pinned: mysql-replication 1.0.17).

* **Strings stay bytes.** It decodes CHAR/VARCHAR/TEXT with Python's codec of the column's charset where
  Python has one (and fails or differs from the server where the two disagree: latin1 0x81, cp866 0xFC,
  sjis 0x815F, ...) and returns bytes where it has none. We take the bytes as the binlog carries them, in the
  column's own character set, and ``model.values`` decodes them exactly as the server converts them
  (``model.charsets``, tables read off the server: ``source.charset_tables``).
* **Zero dates keep their value.** It turns DATE/DATETIME values with a zero year, month or day into None,
  which loses a key's identity. We return ``model.values.ZeroDate`` (MySQL's own text of the value) instead.

* **A pre-5.6 TIME keeps its sign.** That format (tables created under ``mysql56_temporal_format=OFF``, or
  upgraded from MySQL 5.5) stores hhmmss as a signed 3-byte integer; it reads it as unsigned, so
  ``'-12:34:56'`` became 69 days. We sign-extend it.
* **ENUM/SET member names stay bytes.** The TABLE_MAP names them in the column's own character set; it
  decodes them as UTF-8, turning a latin1 ``'é'`` into ``''`` (and ``'Ã©'`` into ``'é'``). We keep the bytes,
  and ``binlog.table_map.decode_member_names`` decodes them in the column's character set (as the server does)
  before any row of the table is read.

* **Oracle MySQL's binary JSON stays bytes.** It decodes it lossily (a top-level string as bare text, JSON
  null as SQL NULL, TIME without its sign, binary values as text); we hand the bytes on
  (``model.mysql_json.MySQLJsonBinary``), which ``model.mysql_json`` decodes exactly.

* **Oracle MySQL 9's VECTOR is a BLOB of float32s.** mysql-replication does not know its type (242): it would
  misread the table map's metadata and fail on the rows. Its metadata and its values are a BLOB's (a length
  size, then length-prefixed bytes), so it is read as one; the values are the bytes the SELECT returns.
* **Optional metadata it does not know is skipped.** MySQL 9 adds a field (13, a VECTOR's dimensions) that
  mysql-replication refuses with a ValueError, killing the stream at the table map: the fields it knows are
  parsed as before, the others (type, length, value) passed over.

``install()`` patches the decoder once per process; the binlog reader calls it before it reads.
"""
from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from pymysqlreplication import row_event
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import MetadataFieldType, TableMapEvent

from airflow_provider_mysqlcdc.engine.model.mysql_json import MySQLJsonBinary
from airflow_provider_mysqlcdc.engine.model.values import ZeroDate

_lock = threading.Lock()
_installed = False


def install() -> None:
    """Patch mysql-replication's row decoding (idempotent, thread-safe)."""
    global _installed
    with _lock:
        if _installed:
            return
        cls = row_event.RowsEvent
        cls._RowsEvent__read_string = _read_string_bytes
        cls._RowsEvent__read_date = _read_date
        cls._RowsEvent__read_datetime = _read_datetime
        cls._RowsEvent__read_datetime2 = _read_datetime2
        cls._RowsEvent__read_time = _read_time
        TableMapEvent._read_type_values = _read_member_names
        global _library_read_binary_json, _library_column_init
        _library_read_binary_json = BinLogPacketWrapper.read_binary_json
        BinLogPacketWrapper.read_binary_json = _read_binary_json
        _library_column_init = Column.__init__
        Column.__init__ = _column_init
        global _library_optional_metadata
        _library_optional_metadata = TableMapEvent._get_optional_meta_data
        TableMapEvent._get_optional_meta_data = _known_optional_metadata
        _installed = True


_library_optional_metadata: Any = None
_KNOWN_METADATA_FIELDS = frozenset(f.value for f in MetadataFieldType) - {
    MetadataFieldType.UNKNOWN_METADATA_FIELD_TYPE.value}


class _MetadataFields:
    """The table map's optional metadata fields mysql-replication knows, for its own parser (the packet
    methods it calls on them, over a buffer)."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at, self.read_bytes = data, 0, 0

    def read(self, size: int) -> bytes:
        size = int(size)
        chunk = self._data[self._at:self._at + size]
        self._at += size
        self.read_bytes += size
        return chunk

    def bytes_to_read(self) -> int:  # its loop stops at the checksum's length
        return len(self._data) - self._at + BINLOG.BINLOG_CHECKSUM_LEN

    def read_length_coded_binary(self) -> int | None:
        first = self.read(1)[0]
        if first < 251:
            return first
        if first == 251:
            return None
        width = {252: 2, 253: 3, 254: 8}[first]
        return int.from_bytes(self.read(width), "little")

    def read_variable_length_string(self) -> bytes:
        length = shift = 0
        while True:
            byte = self.read(1)[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return self.read(length)


def _length_coded(value: int) -> bytes:
    if value < 251:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def _known_optional_metadata(self: Any) -> Any:
    """The library's parse of the fields it knows; the others read past (type, length, value)."""
    known = bytearray()
    while self.packet.bytes_to_read() > BINLOG.BINLOG_CHECKSUM_LEN:
        field = self.packet.read(1)[0]
        value = bytes(self.packet.read(self.packet.read_length_coded_binary()))
        if field in _KNOWN_METADATA_FIELDS:
            known += bytes([field]) + _length_coded(len(value)) + value
    real = self.packet
    self.packet = _MetadataFields(bytes(known))
    try:
        return _library_optional_metadata(self)
    finally:
        self.packet = real


MYSQL_TYPE_VECTOR = 242
_library_column_init: Any = None


def _column_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """A table map column; VECTOR's read as the BLOB it is stored as (``binlog_type`` keeps the real one)."""
    if len(args) == 2 and args[0] == MYSQL_TYPE_VECTOR:
        _library_column_init(self, FIELD_TYPE.BLOB, args[1])
        self.binlog_type = MYSQL_TYPE_VECTOR
        return
    _library_column_init(self, *args, **kwargs)


_library_read_binary_json: Any = None


def _read_binary_json(self: Any, size: int, is_partial: bool) -> Any:
    """A JSON column's value as bytes; a partial update (``binlog_row_value_options=PARTIAL_JSON``, which
    ``check`` refuses and the stream stops at) is left to the library."""
    if is_partial:
        return _library_read_binary_json(self, size, is_partial)
    length = self.read_uint_by_size(size)
    return MySQLJsonBinary(bytes(self.read(length)))


def _read_member_names(self, length: int) -> list[list[bytes]]:
    """The ENUM or SET member names of a TABLE_MAP's optional metadata, per column, as bytes."""
    result: list[list[bytes]] = []
    read_until = self.packet.read_bytes + length
    while self.packet.read_bytes < read_until:
        count = self.packet.read_length_coded_binary()
        result.append([bytes(self.packet.read_variable_length_string()) for _ in range(count)])
    return result


def _read_string_bytes(self, size: int, column: object) -> bytes:
    return bytes(self.packet.read_length_coded_pascal_string(size))


def _read_time(self) -> dt.timedelta:
    """TIME of the pre-5.6 format: hhmmss as a signed 3-byte integer (two's complement)."""
    value = self.packet.read_uint24()
    if value & 0x800000:
        value -= 0x1000000
    magnitude = abs(value)
    hours, rest = divmod(magnitude, 10_000)
    minutes, seconds = divmod(rest, 100)
    delta = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return -delta if value < 0 else delta


def _read_date(self) -> dt.date | ZeroDate:
    packed = self.packet.read_uint24()
    year, month, day = packed >> 9, (packed >> 5) & 0x0F, packed & 0x1F
    return _date_or_zero(year, month, day)


def _date_or_zero(year: int, month: int, day: int) -> dt.date | ZeroDate:
    if year and month and day:
        return dt.date(year, month, day)
    return ZeroDate(f"{year:04d}-{month:02d}-{day:02d}")


def _read_datetime(self) -> dt.datetime | ZeroDate:
    """DATETIME of the pre-5.6 format (an integer YYYYMMDDhhmmss)."""
    value = self.packet.read_uint64()
    date, time = divmod(value, 1_000_000)
    year, month, day = date // 10_000, (date // 100) % 100, date % 100
    hour, minute, second = time // 10_000, (time // 100) % 100, time % 100
    if year and month and day:
        return dt.datetime(year, month, day, hour, minute, second)
    return ZeroDate(f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}")


def _read_datetime2(self, column: object) -> dt.datetime | ZeroDate:
    """DATETIME(n) of the 5.6+ format: 40 bits (sign, year*13+month, day, hour, minute, second) + fraction."""
    data = self.packet.read_int_be_by_size(5)
    year, month = divmod((data >> 22) & 0x1FFFF, 13)
    day = (data >> 17) & 0x1F
    hour, minute, second = (data >> 12) & 0x1F, (data >> 6) & 0x3F, data & 0x3F
    micro = self._RowsEvent__read_fsp(column)
    if year and month and day:
        return dt.datetime(year, month, day, hour, minute, second, micro)
    fsp = getattr(column, "fsp", 0) or 0
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    if fsp:
        text += "." + f"{micro:06d}"[:fsp]
    return ZeroDate(text)
