"""Committed stream batches of one table's changelog: which exist, which files hold them, where each ended.

A batch exists for readers only once its marker ``changelog/_committed/batch=<id>.json`` exists: the stream
writes the marker after the batch's files, so a batch killed half way is invisible, and a replayed batch
rewrites the same directory and marker. The marker should carry ``end_offset`` (the engine's resume offset
after the batch, as ``BinlogOffset.to_dict()``): it tells how far the stream has read even when the batch had
no records of this table. It is optional here; without it the stream position is estimated from the records.
A marker may also list its ``files`` (relative to the batch directory, or absolute), and should when a killed
attempt can leave unreferenced files behind; otherwise the batch directory is listed. ``last_position`` (the
latest record's ``_position``) is used when ``end_offset`` is missing.

Markers exist only for tables a batch changed. ``<root>/_mysqlcdc_stream_progress.json`` (``StreamProgress``)
records every committed batch's end offset and the tables the stream covers, so an idle table's position
still advances: none of its changes lies before that offset outside the batches already committed. It also
carries ``last_event_at`` (the commit time of the last transaction the stream read up to ``end_offset``: the
stream's lag in seconds counts from it), the latest batch's figures and running totals
(``stream_figures``); all three are optional, a file of an earlier release has none (lag in seconds unknown).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import (
    CHANGELOG,
    COMMITTED,
    changelog_dir,
    changelog_marker,
    filesystem,
    read_json,
    stream_progress_path,
    table_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

_MARKER = re.compile(r"^batch=(\d+)\.json$")


@dataclass(frozen=True)
class BatchMarker:
    """One committed batch of one table, read back from its marker: the marker's content, the data files and
    the end offset."""

    batch_id: int
    files: tuple[str, ...]  # full paths (or URIs), as the layout's root was given
    end_offset: BinlogOffset | None
    last_position: str | None = None  # the latest record's ``_position`` (the marker's ``last_position``)
    marker: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def committed_batch_ids(root: str, table: TableId,
                        storage_options: dict[str, str] | None = None) -> list[int]:
    """Ids of the batches whose marker exists, ascending (one directory listing, no file read)."""
    marker_dir = posixpath.join(table_dir(root, table), CHANGELOG, COMMITTED)
    fs, inner = filesystem(marker_dir, storage_options)
    ids = []
    for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)):
        match = _MARKER.match(info.base_name)
        if match and info.type == pafs.FileType.File:
            ids.append(int(match.group(1)))
    return sorted(ids)


def read_batch(root: str, table: TableId, batch_id: int) -> BatchMarker:
    """The marker of a committed batch and the Parquet files it names (or its directory holds)."""
    marker = read_json(changelog_marker(root, table, batch_id)) or {}
    data_dir = changelog_dir(root, table, batch_id)
    listed = marker.get("files")
    if isinstance(listed, list) and listed:
        files = [
            f if ("://" in f or f.startswith("/")) else posixpath.join(data_dir, f) for f in map(str, listed)
        ]
    else:
        files = parquet_files(data_dir)
    last = marker.get("last_position")
    return BatchMarker(
        batch_id, tuple(files), parse_offset(marker.get("end_offset")), str(last) if last else None, marker
    )


def parquet_files(directory: str) -> list[str]:
    """Data files under a directory (recursively), skipping hidden and bookkeeping files (``.crc``,
    ``_SUCCESS``)."""
    fs, inner = filesystem(directory)
    prefix = directory[: len(directory) - len(inner)] if directory.endswith(inner) else ""
    out = []
    for info in fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True)):
        parts = info.path[len(inner) :].split("/")
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        if any(p.startswith((".", "_")) for p in parts if p):
            continue
        out.append(prefix + info.path)
    return sorted(out)


def parse_offset(value: Any) -> BinlogOffset | None:
    """``end_offset`` as the stream wrote it: an offset dict, its JSON text, or ``file:pos``; else None."""
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
        return None  # a malformed optional field must not stop readers: the position is then estimated
    return None


@dataclass(frozen=True)
class StreamProgress:
    """The latest batch the stream committed into an output root, and the tables it reads."""

    batch_id: int
    end_offset: BinlogOffset
    tables: tuple[str, ...]
    committed_at: str | None = None
    last_event_at: str | None = None  # ISO time (UTC) of the last transaction read up to end_offset
    batch: BatchFigures | None = None  # the figures of batch ``batch_id``
    totals: StreamTotals | None = None  # over every batch committed into the output root

    def covers(self, table: TableId | str) -> bool:
        return str(table) in self.tables

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "end_offset": self.end_offset.to_dict(),
            "tables": list(self.tables),
            "committed_at": self.committed_at,
            "last_event_at": self.last_event_at,
            "batch": None if self.batch is None else self.batch.to_dict(),
            "totals": None if self.totals is None else self.totals.to_dict(),
        }


def write_stream_progress(root: str, progress: StreamProgress) -> None:
    write_json_atomic(stream_progress_path(root), progress.to_dict())


def read_stream_progress(root: str, storage_options: dict[str, str] | None = None) -> StreamProgress | None:
    """The stream's progress file, or None (no stream yet, or a file this release cannot read)."""
    data = read_json(stream_progress_path(root), storage_options)
    if not data:
        return None
    offset = parse_offset(data.get("end_offset"))
    if offset is None or not isinstance(data.get("batch_id"), int):
        return None
    last = data.get("last_event_at")
    return StreamProgress(
        data["batch_id"], offset, tuple(map(str, data.get("tables") or ())), data.get("committed_at"),
        last if isinstance(last, str) else None, BatchFigures.from_dict(data.get("batch")),
        StreamTotals.from_dict(data.get("totals")),
    )
