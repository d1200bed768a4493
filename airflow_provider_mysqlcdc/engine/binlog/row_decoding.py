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

``install()`` patches the decoder once per process; the binlog reader calls it before it reads.
"""
from __future__ import annotations

import datetime as dt
import threading

from pymysqlreplication import row_event
from pymysqlreplication.row_event import TableMapEvent

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
        _installed = True


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
