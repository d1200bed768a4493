"""What every stored record of the lake shares: its format version, and binlog offsets as they are stored.

The lake's small JSON records (the changelog batch marker, the stream's progress record, the checkpoint's
batch ledger, the snapshot manifest) are each defined once, as a dataclass with ``to_dict``/``from_dict`` that
the writer and every reader use. Each carries ``format_version``: a record without one was written by an
earlier release (version 0: the same fields, no version), and reads as before. A record of a version newer
than this release knows is refused with a message saying so (never guessed at: the fields may mean more).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

FORMAT_VERSION = "format_version"  # the key every versioned record carries
UNVERSIONED = 0  # a record written before records carried a version


class StoredFormatError(CdcError):
    """A stored record this release cannot read (written by a newer release)."""


def record_version(data: dict[str, Any], what: str, current: int) -> int:
    """The format version of a stored record (``UNVERSIONED`` when it has none); a version newer than
    ``current``, or one that is not an integer, is refused."""
    version = data.get(FORMAT_VERSION, UNVERSIONED)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise StoredFormatError(f"{what} has format_version {version!r}, which is not a version number")
    if version > current:
        raise StoredFormatError(
            f"{what} has format_version {version}, written by a newer mysqlcdc release; this release reads "
            f"versions up to {current}: upgrade mysqlcdc to read it"
        )
    return version


def parse_offset(value: Any) -> BinlogOffset | None:
    """An offset as stored: an offset dict, its JSON text, or ``file:pos``; else None (a malformed optional
    field must not stop readers: the position is then estimated)."""
    if value is None:
        return None
    try:
        if isinstance(value, dict):
            return BinlogOffset.from_dict(value)
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                return BinlogOffset.from_json(text)
            return BinlogOffset.at(BinlogPosition.parse(text))
    except (CdcError, ValueError, TypeError, KeyError):
        return None
    return None


def offset_dict(offset: BinlogOffset | None) -> dict[str, Any] | None:
    return None if offset is None else offset.to_dict()


def optional_str(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None
