"""Committed stream batches of one table's changelog: which exist, which files hold them, where each ended.

A batch exists for readers only once its marker ``changelog/_committed/batch=<id>.json`` exists
(``batch_marker``: the record's one definition): the batch commit (``changelog_commit``) writes the marker
after the batch's files, so a batch killed half way is invisible, and a replayed batch rewrites the same
directory and marker. The marker's ``end_offset`` tells how far the stream has read even when the batch had no
records of this table; without it the stream position is estimated from the records (``last_position``). A
marker that lists no ``files`` means the batch directory's files (markers of hand-made or older outputs).

Markers exist only for tables a batch changed; the stream's progress record (``stream_progress``) advances
idle tables.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.lake.batch_marker import BatchMarker, read_batch_marker
from airflow_provider_mysqlcdc.engine.lake.layout import (
    CHANGELOG,
    COMMITTED,
    changelog_dir,
    filesystem,
    table_dir,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId

_MARKER = re.compile(r"^batch=(\d+)\.json$")


@dataclass(frozen=True)
class CommittedBatch:
    """One committed batch of one table, read back from its marker: the data files as full paths, the end
    offset, and the marker itself."""

    batch_id: int
    files: tuple[str, ...]  # full paths (or URIs), as the layout's root was given
    end_offset: BinlogOffset | None
    last_position: str | None = None  # the latest record's ``_position`` (the marker's ``last_position``)
    record: BatchMarker | None = field(default=None, compare=False, repr=False)  # None: no marker

    @property
    def marker(self) -> dict[str, Any]:
        """The marker as stored (``BatchMarker.to_dict``), empty when there is none."""
        return {} if self.record is None else self.record.to_dict()


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


def read_batch(root: str, table: TableId, batch_id: int) -> CommittedBatch:
    """The marker of a committed batch and the Parquet files it names (or its directory holds)."""
    marker = read_batch_marker(root, table, batch_id)
    data_dir = changelog_dir(root, table, batch_id)
    if marker is not None and marker.files:
        files = [f if ("://" in f or f.startswith("/")) else posixpath.join(data_dir, f)
                 for f in marker.files]
    else:
        files = parquet_files(data_dir)
    return CommittedBatch(batch_id, tuple(files), None if marker is None else marker.end_offset,
                          None if marker is None else marker.last_position, marker)


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
