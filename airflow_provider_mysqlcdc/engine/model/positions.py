"""Binlog positions and the total order of row changes.

An event's position is its *end* (the header's ``log_pos``: where the next event starts). Event e is at or
before watermark W iff ``e.end <= W``. Binlog files compare by their *number*, numerically
(``mysql-bin.999999`` < ``mysql-bin.1000000``).

Rows get the order key ``(file number, end position, row index in the event, half)``; ``half`` puts the before
image of an update (``-U``) or a delete (``-D``) ahead of the after image (``+U``/``+I``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

_FILE_NUMBER = re.compile(r"\.(\d+)$")

BEFORE = 0  # half of a -U / -D row image
AFTER = 1  # half of a +U / +I row image


@functools.lru_cache(maxsize=256)  # every offset checks its file name: once per row image in a busy stream
def file_number(file: str) -> int:
    match = _FILE_NUMBER.search(file)
    if not match:
        raise ConfigurationError(f"binlog file name {file!r} does not end in .<number>")
    return int(match.group(1))


@functools.total_ordering
@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: ``file`` and byte offset ``pos`` (a watermark, or an event's end)."""

    file: str
    pos: int

    @property
    def key(self) -> tuple[int, int]:
        return file_number(self.file), self.pos

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self.key < other.key

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinlogPosition:
        return cls(str(data["file"]), int(data["pos"]))

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        """``mysql-bin.000003:1234``."""
        file, sep, pos = text.rpartition(":")
        if not sep or not pos.isdigit():
            raise ConfigurationError(f"binlog position {text!r} must look like mysql-bin.000003:1234")
        return cls(file, int(pos))


# A row's place in the total order: (file number, event end, row index, half).
RowKey = tuple[int, int, int, int]


def row_key(end: BinlogPosition, row_index: int = 0, half: int = AFTER) -> RowKey:
    number, pos = end.key
    return number, pos, row_index, half


def snapshot_row_key(high_watermark: BinlogPosition) -> RowKey:
    """Snapshot records sit at their chunk's HW: every changelog row after HW orders after them."""
    number, pos = high_watermark.key
    return number, pos, -1, AFTER


def is_after(key: RowKey, watermark: BinlogPosition) -> bool:
    """True iff the event holding this row ends after the watermark (``e.end > W``)."""
    return (key[0], key[1]) > watermark.key
