"""Whether the native reader reads a table's DATE/DATETIME/TIMESTAMP columns as they are, or behind the guard.

connectorx cannot return a zero, partial-zero or invalid date ('0000-00-00', '2024-00-15', '2024-02-31' under
ALLOW_INVALID_DATES): it fails the read (a ``PanicException``: "Couldn't convert the value Date(...)"); and it
returns a date of year 0 as a calendar date, where the reference reader gives the text. The guard
(``columns.ZERO_DATE_TEST``: the value or NULL, and the value's text in a companion column) makes all of them
exact, but the server evaluates it for every value, twice: on the bench table (two DATETIME columns of six)
connectorx reads 1M rows in 0.72 s with it and 0.38 s without.

Most tables never hold such a date. So a table's dates are read as they are until one shows: connectorx fails,
or a batch holds a date before 0001-01-01. The table is then guarded for the rest of this process, and the
chunk is read again with the guard: by ``ChunkRead`` itself when nothing was handed out yet, else by whoever
consumes the read (``ZeroDateSeen``; ``read_again_if_zero_date``), which discards what it wrote first.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import date
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.engine.common.errors import CdcError

log = logging.getLogger(__name__)
T = TypeVar("T")

_guarded: set[str] = set()
_lock = threading.Lock()
_YEAR_ONE_DAYS = (date(1, 1, 1) - date(1970, 1, 1)).days  # 0001-01-01 in days since the epoch
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


class UnfitDate(Exception):
    """Inside a read: an unguarded date column met a value connectorx cannot return exactly."""


class ZeroDateSeen(CdcError):
    """An unguarded read met a date connectorx cannot return exactly, after it had handed out rows: read the
    chunk again (its table is guarded now) and discard what this read gave."""


def guarded(table: str) -> bool:
    with _lock:
        return table in _guarded


def guard(table: str, why: str) -> None:
    """Guard ``table``'s dates from now on (in this process); said once."""
    with _lock:
        if table in _guarded:
            return
        _guarded.add(table)
    log.info("%s: %s; its dates are read behind the zero-date guard from now on (this process)", table, why)


def before_year_one(array: pa.Array) -> bool:
    """Whether a date or timestamp array (as connectorx returns DATE/DATETIME/TIMESTAMP) holds a value before
    0001-01-01: year 0, which connectorx returns as a date."""
    kind = array.type
    if pa.types.is_date32(kind):
        raw, per_day = array.view(pa.int32()), 1
    elif pa.types.is_date64(kind):
        raw, per_day = array.view(pa.int64()), 86_400_000
    elif pa.types.is_timestamp(kind):
        raw, per_day = array.view(pa.int64()), 86_400 * _PER_SECOND[kind.unit]
    else:
        return False
    low = pc.min(raw).as_py()
    return low is not None and low < _YEAR_ONE_DAYS * per_day


def read_again_if_zero_date(attempt: Callable[[], T]) -> T:
    """Run ``attempt`` (a chunk read and whatever consumes it) once more if its read met a zero date after
    handing out rows: the table is guarded by then, so the second read cannot meet one."""
    try:
        return attempt()
    except ZeroDateSeen as exc:
        log.info("%s; reading the chunk again", exc)
        return attempt()
