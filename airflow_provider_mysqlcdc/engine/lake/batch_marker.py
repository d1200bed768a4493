"""The changelog batch marker: the stored record that makes one stream batch of one table visible.

``<root>/<db>/<table>/changelog/_committed/batch=<id>.json``, written atomically by the batch commit
(``changelog_commit``) after the batch's files and before its Delta commit; read by everything that follows
markers (the mirror refresh, ``status``, ``verify``, garbage collection, the changelog reader, the Delta
changelog's adoption of an earlier output root). This module is the one definition of its fields:

``batch_id``, ``table``, ``attempt`` (the sink attempt whose files these are), ``files`` and
``changelog_json_files`` (names in the batch directory, or absolute paths; a marker without ``files``
means: list the directory), ``rows``, ``first_position``/``last_position`` (the ``_position`` of the batch's
first and latest record of the table), ``start_offset``/``end_offset`` (the binlog range the batch covered,
``BinlogOffset`` dicts), ``committed_at`` (ISO, UTC) and ``format_version``.

Version 0 (no ``format_version``) is what earlier releases wrote: the same fields. Every field but the batch
id is optional when read (markers written by hand or by older code may name only ``files``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.layout import changelog_marker, read_json, write_json_atomic
from airflow_provider_mysqlcdc.engine.lake.record_format import (
    FORMAT_VERSION,
    offset_dict,
    optional_str,
    parse_offset,
    record_version,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId

MARKER_VERSION = 1  # 1: format_version added (version 0: the same fields without it)


@dataclass(frozen=True)
class BatchMarker:
    """One committed batch of one table, as stored in its marker."""

    batch_id: int
    table: str | None = None
    attempt: str | None = None
    files: tuple[str, ...] | None = None  # None: the marker lists no files (read the batch directory)
    changelog_json_files: tuple[str, ...] | None = None
    rows: int | None = None
    first_position: str | None = None
    last_position: str | None = None
    start_offset: BinlogOffset | None = None
    end_offset: BinlogOffset | None = None
    committed_at: str | None = None
    version: int = MARKER_VERSION  # as read; always written as MARKER_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            FORMAT_VERSION: MARKER_VERSION,
            "batch_id": self.batch_id,
            "table": self.table,
            "attempt": self.attempt,
            "files": None if self.files is None else list(self.files),
            "changelog_json_files": (None if self.changelog_json_files is None
                                     else list(self.changelog_json_files)),
            "rows": self.rows,
            "first_position": self.first_position,
            "last_position": self.last_position,
            "start_offset": offset_dict(self.start_offset),
            "end_offset": offset_dict(self.end_offset),
            "committed_at": self.committed_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], batch_id: int | None = None) -> BatchMarker:
        """A marker as stored (any version this release reads); ``batch_id``: the id its file name says, for
        a marker that does not carry one."""
        what = f"the changelog batch marker of batch {data.get('batch_id', batch_id)}"
        version = record_version(data, what, MARKER_VERSION)
        stored_id = data.get("batch_id")
        rows = data.get("rows")
        return cls(
            batch_id=int(stored_id) if isinstance(stored_id, int) else int(batch_id or 0),
            table=optional_str(data.get("table")),
            attempt=optional_str(data.get("attempt")),
            files=_names(data.get("files")),
            changelog_json_files=_names(data.get("changelog_json_files")),
            rows=int(rows) if isinstance(rows, (int, float)) and not isinstance(rows, bool) else None,
            first_position=optional_str(data.get("first_position")),
            last_position=optional_str(data.get("last_position")),
            start_offset=parse_offset(data.get("start_offset")),
            end_offset=parse_offset(data.get("end_offset")),
            committed_at=optional_str(data.get("committed_at")),
            version=version,
        )


def _names(value: Any) -> tuple[str, ...] | None:
    return tuple(map(str, value)) if isinstance(value, list) else None


def write_batch_marker(root: str, table: TableId, marker: BatchMarker) -> None:
    """Write (atomically) the marker that makes batch ``marker.batch_id`` of ``table`` visible."""
    write_json_atomic(changelog_marker(root, table, marker.batch_id), marker.to_dict())


def read_batch_marker(root: str, table: TableId, batch_id: int,
                      storage_options: dict[str, str] | None = None) -> BatchMarker | None:
    """The marker of batch ``batch_id`` of ``table``, or None when there is none (the batch is not
    committed for this table)."""
    data = read_json(changelog_marker(root, table, batch_id), storage_options)
    return None if data is None else BatchMarker.from_dict(data, batch_id)
