"""Changelog garbage: part files of stream attempts that were killed and never committed.

The sink names each file after its attempt and Spark task (``part-<partition>-<attempt>-t<task>...``), so a
replayed batch writes other names than the killed attempt, and a retried task other names than its failed
try. A file under ``changelog/batch=<id>/`` (or ``changelog-json/batch=<id>/``) is garbage when

* no marker names it (``files``, ``changelog_json_files``; a marker without a list names its whole
  directory, as readers then list it) and the changelog's Delta table does not hold it;
* its batch is older than the stream's latest committed batch (``_mysqlcdc_stream_progress.json``): that
  batch, and any after it, may be being written or replayed right now, and a replay cleans up after itself;
* it was last written longer ago than the retention.

Batches before the latest committed one are never written again, so a batch directory found holding only
named files stays clean: ``clean_through`` (kept in the GC report between runs) lets the next run start after
the last such batch instead of reading every marker again.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from airflow_provider_mysqlcdc.engine.lake.batch_marker import BatchMarker, read_batch_marker
from airflow_provider_mysqlcdc.engine.lake.gc.files import (
    CHANGELOG,
    CHANGELOG_JSON,
    Garbage,
    list_files,
    subdirs,
)
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG as CHANGELOG_DIR
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG_JSON as CHANGELOG_JSON_DIR
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.lake.table_format import changelog_table
from airflow_provider_mysqlcdc.engine.model.tables import TableId

_BATCH = re.compile(r"^batch=(\d+)$")


@dataclass(frozen=True)
class ChangelogGarbage:
    """The killed attempts' files found, and the last batch up to which every batch holds named files only
    once they are deleted (None: none scanned)."""

    garbage: list[Garbage]
    clean_through: int | None


def changelog_garbage(root: str, table: TableId, cutoff: float, after: int | None = None) -> ChangelogGarbage:
    """Part files of killed attempts in the table's changelog and changelog-json, garbage at ``cutoff``;
    batches up to ``after`` (an earlier run's ``clean_through``) are not looked at again."""
    progress = read_stream_progress(root)
    if progress is None:
        return ChangelogGarbage([], after)  # no batch committed yet: every attempt may still be replayed
    changelog = changelog_table(root, table)
    held: set[str] | None = None
    out: list[Garbage] = []
    dirty: list[int] = []  # batches that keep an unnamed file (too young yet)
    for kind, directory, listed in ((CHANGELOG, CHANGELOG_DIR, _files),
                                    (CHANGELOG_JSON, CHANGELOG_JSON_DIR, _json_files)):
        for name, batch_path in subdirs(posixpath.join(table_dir(root, table), directory)):
            match = _BATCH.match(name)
            if match is None:
                continue
            batch_id = int(match.group(1))
            if batch_id >= progress.batch_id or (after is not None and batch_id <= after):
                continue
            marker = read_batch_marker(root, table, batch_id)
            names = None if marker is None else listed(marker)
            if marker is not None and names is None:
                continue  # a marker without its file list names the whole directory
            named = {posixpath.basename(f) for f in names or ()}
            for f in list_files(batch_path):
                base = posixpath.basename(f.path)
                if base in named or base.startswith(("_", ".")):
                    continue
                if held is None:
                    held = changelog.files()
                if f"{name}/{base}" in held:
                    continue
                if f.mtime < cutoff:
                    out.append(Garbage(str(table), kind, f.path, 1, f.size))
                else:
                    dirty.append(batch_id)
    # every batch before the first one still holding a young unnamed file is clean once ``out`` is deleted
    clean = min(dirty) - 1 if dirty else progress.batch_id - 1
    if clean < 0:
        return ChangelogGarbage(out, after)
    return ChangelogGarbage(out, clean if after is None or clean > after else after)


def _files(marker: BatchMarker) -> tuple[str, ...] | None:
    return marker.files


def _json_files(marker: BatchMarker) -> tuple[str, ...] | None:
    return marker.changelog_json_files
