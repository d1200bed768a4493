"""Delta garbage: the mirror's superseded files (Delta VACUUM), and expired Delta log entries.

Each refresh removes the chunk files it replaces from the mirror's Delta table (a ``remove`` action) and
deletes nothing; a file is garbage once its ``remove`` is older than the retention, so Delta time travel and
readers of an older manifest keep working that long. delta-rs's VACUUM lists the candidates (a dry run,
``full=True``: also files the log never named, such as a killed refresh's); which of them are old enough is
decided here, from the ``remove`` actions' timestamps in the log:

* a file the current ``mirror/_manifest.json`` names is never deleted (a refresh killed between its manifest
  and its Delta commit: the next refresh adds it);
* a removed file counts from its ``remove``; a file the log never named counts from its own modification time;
* a deletion vector file (``mirror_updates=deletion_vectors``) counts from the last ``remove`` that names a
  vector stored in it, and is never deleted while the current Delta version or manifest names one (delta-rs
  1.6's VACUUM lists every vector file as a candidate, the live ones too: they are filtered out here).

We delete the files ourselves rather than let VACUUM do it: VACUUM commits ``VACUUM START``/``END`` entries
to the table, and the stream's refresher is the only writer of the mirror's log (readers map every commit to
a binlog position). ``_``-prefixed files (the manifest, the lock, ``_delta_log``) are never candidates.

Removal times come from the ``remove`` actions of the commits made since the cutoff and, once those have
expired from the log, from the tombstones of the latest checkpoint: a checkpoint keeps every ``remove``
younger than ``delta.deletedFileRetentionDuration`` (3 days, set by ``delta_log``; Delta's default 1 week),
with its time. A removed file found in neither was removed before the earlier of the oldest commit left and
the checkpoint's time less that retention, and counts from there: never deleted early. With a GC retention
above the tombstone retention such files would be kept for good: set a longer
``delta.deletedFileRetentionDuration`` on the mirror (the package keeps a longer one).

The log itself: ``delta.logRetentionDuration`` (``delta_log.LOG_RETENTION``, 10 minutes, set on every table
the package writes) is the time-travel horizon; delta-rs deletes expired entries each time it writes a
checkpoint (every 10 commits), never one a kept version needs, and ``cleanup_metadata`` here does the same for
tables no stream writes any more. GC therefore needs no log entry older than that: removal times survive in
the checkpoints' tombstones.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import file_of_z85
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_dv_commit import FEATURE, current_vectors
from airflow_provider_mysqlcdc.engine.lake.delta_log import interval_seconds
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.gc.files import DELTA_LOG, MIRROR, Garbage, list_files
from airflow_provider_mysqlcdc.engine.lake.layout import MIRROR as MIRROR_DIR
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLOCK_SLACK_S = 3600.0  # a commit file's time and its entries' timestamps come from different clocks


@dataclass
class RemoveLog:
    """The ``remove`` actions read from Delta commit files, kept between GC runs of one process (a commit
    file never changes), so the stream's periodic runs read only the commits made since."""

    _commits: dict[str, dict[str, float]] = field(default_factory=dict)

    def removes(self, path: str) -> dict[str, float]:
        """The files a commit file removes (decoded relative paths) and when (epoch seconds)."""
        found = self._commits.get(path)
        if found is None:
            found = self._commits[path] = _read_removes(path)
        return found


def mirror_garbage(
    root: str, table: TableId, cutoff: float, removes: RemoveLog | None = None
) -> list[Garbage]:
    """The mirror files that are garbage at ``cutoff`` (epoch seconds): superseded longer ago than that."""
    from deltalake import DeltaTable

    uri = mirror_table_uri(root, table)
    if not DeltaTable.is_deltatable(uri):
        return []  # no Delta table (an empty mirror, an output root from before it): nothing is known removed
    candidates = DeltaTable(uri).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False,
                                        full=True)
    manifest = read_manifest(root, table)  # after the listing: a manifest switched meanwhile is seen
    prefix = MIRROR_DIR + "/"
    named = {f.removeprefix(prefix) for f in (manifest.files if manifest else ())}
    if manifest is not None:
        named |= {v.file for v in manifest.deletion_vectors.values()}
    named |= _live_vector_files(uri)
    wanted = [unquote(c) for c in candidates if unquote(c) not in named]
    if not wanted:
        return []
    sizes = {f.path[len(uri.rstrip("/")) + 1:]: f for f in list_files(uri)}
    old = {c: sizes[c] for c in wanted if c in sizes and sizes[c].mtime < cutoff}
    if not old:
        return []  # each was written lately, so removed even later: nothing to look up in the log
    removed, horizon = _removal_times(uri, cutoff, removes or RemoveLog())
    out = []
    for relative, listed in sorted(old.items()):
        since = removed.get(relative)
        if since is None:  # never removed in the commits read: never added, or removed before them all
            since = max(listed.mtime, horizon)
        if since < cutoff:
            out.append(Garbage(str(table), MIRROR, listed.path, 1, listed.size))
    return out


def _removal_times(uri: str, cutoff: float, removes: RemoveLog) -> tuple[dict[str, float], float]:
    """When each file was removed, from the commits made since ``cutoff`` and the tombstones of the latest
    checkpoint; and the time before which a file missing from both was removed (or never added): -inf when
    the log was read back to ``cutoff``; else the earliest of the oldest commit left (entries before it
    expired, ``delta.logRetentionDuration``) and the tombstone horizon (the checkpoint's time less
    ``delta.deletedFileRetentionDuration``: a checkpoint keeps every tombstone younger than that)."""
    log_dir = posixpath.join(uri, "_delta_log")
    listed_log = list_files(log_dir)
    commits = sorted(((int(m.group(1)), f) for f in listed_log
                      if (m := _COMMIT.match(posixpath.basename(f.path)))), key=lambda c: c[0])
    removed: dict[str, float] = {}
    reached = False
    for _, listed in reversed(commits):
        if listed.mtime < cutoff - _CLOCK_SLACK_S:
            reached = True
            break
        for path, when in removes.removes(listed.path).items():
            removed[path] = max(removed.get(path, when), when)
    if not commits:
        return removed, float("inf")
    if reached:
        return removed, float("-inf")
    horizon = commits[0][1].mtime
    checkpoint = _latest_checkpoint(listed_log)
    if checkpoint is not None:
        _, parts = checkpoint
        for listed in parts:
            for path, when in removes.removes(listed.path).items():
                removed[path] = max(removed.get(path, when), when)
        keep = _tombstone_retention(uri)
        if keep is not None:
            written = max(f.mtime for f in parts)
            horizon = min(horizon, written - keep - _CLOCK_SLACK_S)
    return removed, horizon


_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")


def _latest_checkpoint(listed_log: list[Any]) -> tuple[int, list[Any]] | None:
    """The latest checkpoint's version and its file(s) (a multi-part checkpoint has several)."""
    found: dict[int, list[Any]] = {}
    for f in listed_log:
        m = _CHECKPOINT.match(posixpath.basename(f.path))
        if m:
            found.setdefault(int(m.group(1)), []).append(f)
    if not found:
        return None
    latest = max(found)
    return latest, found[latest]


def _tombstone_retention(uri: str) -> float | None:
    """Seconds a removed file stays a tombstone in the table's checkpoints (Delta's default: 1 week)."""
    from deltalake import DeltaTable

    value = DeltaTable(uri).metadata().configuration.get("delta.deletedFileRetentionDuration")
    if value is None:
        return 7 * 86400.0
    return interval_seconds(value)


def mirror_log_retention(root: str, table: TableId) -> timedelta | None:
    """How far back time travel on the table's mirror reaches: its ``delta.logRetentionDuration`` (Delta's
    default of 30 days when unset); None without a Delta table."""
    from deltalake import DeltaTable

    uri = mirror_table_uri(root, table)
    if not DeltaTable.is_deltatable(uri):
        return None
    seconds = interval_seconds(DeltaTable(uri).metadata().configuration.get("delta.logRetentionDuration"))
    return timedelta(days=30) if seconds is None else timedelta(seconds=seconds)


def _read_removes(path: str) -> dict[str, float]:
    """The ``remove`` actions of a commit file (JSON lines) or a checkpoint (Parquet: its tombstones)."""
    fs, inner = filesystem(path)
    out: dict[str, float] = {}
    if path.endswith(".parquet"):
        try:
            column = pq.read_table(inner, columns=["remove"], filesystem=fs).column("remove")
        except FileNotFoundError:  # cleaned up meanwhile
            return out
        for remove in column.to_pylist():
            if remove and remove.get("path"):
                _note_remove(out, remove)
        return out
    try:
        with fs.open_input_stream(inner) as src:
            lines = src.read().decode().splitlines()
    except FileNotFoundError:  # cleaned up meanwhile
        return out
    for line in lines:
        if not line.strip():
            continue
        action: dict[str, Any] = json.loads(line)
        remove = action.get("remove")
        if remove and remove.get("path"):
            _note_remove(out, remove)
    return out


def _note_remove(out: dict[str, float], remove: dict[str, Any]) -> None:
    """A ``remove`` (a commit's, or a checkpoint's tombstone): its file counts from it, and so does the vector
    file of the vector it names (from its last remove)."""
    when = float(remove.get("deletionTimestamp") or 0) / 1000
    out[unquote(remove["path"])] = when
    vector = remove.get("deletionVector")
    if vector and vector.get("storageType") == "u":
        name = file_of_z85(vector["pathOrInlineDv"])
        out[name] = max(out.get(name, when), when)


def _live_vector_files(uri: str) -> set[str]:
    """The vector files the table's current version names (none without the deletion-vector feature)."""
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    if FEATURE not in (table.protocol().reader_features or []):
        return set()
    return {v.file for v in current_vectors(uri, table.version()).values()}


def cleanup_logs(root: str, table: TableId, dry_run: bool) -> list[Garbage]:
    """Expired log entries of the table's two Delta tables, deleted by delta-rs (``cleanup_metadata``: only
    entries older than ``delta.logRetentionDuration`` and before the latest checkpoint). A dry run reports
    nothing here: delta-rs cannot say beforehand what it would delete."""
    from deltalake import DeltaTable

    out: list[Garbage] = []
    if dry_run:
        return out
    for uri in (mirror_table_uri(root, table), changelog_table_uri(root, table)):
        if not DeltaTable.is_deltatable(uri):
            continue
        log_dir = posixpath.join(uri, "_delta_log")
        before = {f.path: f for f in list_files(log_dir)}
        DeltaTable(uri).cleanup_metadata()
        after = {f.path for f in list_files(log_dir)}
        out += [Garbage(str(table), DELTA_LOG, p, 1, f.size) for p, f in before.items() if p not in after]
    return out
