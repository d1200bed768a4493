"""The ``_position`` column's text form: one codec for every output that stores a row's binlog order.

``NNNNNNNNNN:PPPPPPPPPPPPPPPPPPPP:IIIIIIIIII:H`` (file number, event end, row index + 1, half), fixed width so
that readers which sort strings (Parquet statistics, DuckDB, Spark) sort it like the row key itself.
"""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, RowKey


def format_row_key(key: RowKey) -> str:
    """A fixed-width string that sorts like the key (for outputs whose readers sort strings)."""
    number, pos, index, half = key
    return f"{number:010d}:{pos:020d}:{index + 1:010d}:{half}"


def format_row_keys(number: int, pos: int, rows: list[int], halves: list[int]) -> list[str]:
    """``format_row_key`` of the images of one rows event (one file number and position)."""
    prefix = f"{number:010d}:{pos:020d}:"
    return [f"{prefix}{index + 1:010d}:{half}" for index, half in zip(rows, halves)]


def parse_row_key(text: str) -> RowKey:
    """The inverse of ``format_row_key``."""
    try:
        number, pos, index, half = text.split(":")
        return int(number), int(pos), int(index) - 1, int(half)
    except ValueError:
        raise CdcError(f"malformed change position {text!r}: expected number:pos:index:half") from None


def after_bound(watermark: BinlogPosition) -> str:
    """A string S with ``_position > S`` iff the record's event ends after ``watermark``.

    ``;`` sorts right after ``:``, so every position of an event ending exactly at the watermark sorts below S
    and every later one above.
    """
    number, pos = watermark.key
    return f"{number:010d}:{pos:020d};"


def position_of(text: str, like: BinlogPosition) -> BinlogPosition:
    """The event end a record's ``_position`` names, with a file name shaped like ``like``'s (one server's
    binlog files share their basename; ``_position`` keeps only the file number)."""
    number, pos = text.split(":")[:2]
    base, _, digits = like.file.rpartition(".")
    return BinlogPosition(f"{base}.{int(number):0{len(digits)}d}", int(pos))
