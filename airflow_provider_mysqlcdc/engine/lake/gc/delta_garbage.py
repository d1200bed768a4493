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

The log itself: delta-rs deletes log entries older than ``delta.logRetentionDuration`` (Delta's default, 30
days) when it writes a checkpoint; ``cleanup_metadata`` here does the same between checkpoints. The property
is left at its default: a log entry costs little, and the history (``DeltaTable.history()``, positions per
version) then reaches further back than the data files do, as with any Delta table. Setting it would take a
commit (``ALTER TABLE SET TBLPROPERTIES``) by GC, which is no writer of these logs.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import file_of_z85
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_dv_commit import FEATURE, current_vectors
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
    """When each file was removed, from the commits made since ``cutoff``; and the time before which the log
    was not read (a file removed earlier, or never added, is older than that; -inf when the log was read
    back to ``cutoff``, else the oldest commit left: entries before it were cleaned up)."""
    log_dir = posixpath.join(uri, "_delta_log")
    commits = sorted(((int(m.group(1)), f) for f in list_files(log_dir)
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
    oldest = commits[0][1].mtime
    return removed, float("-inf") if reached else oldest


def _read_removes(path: str) -> dict[str, float]:
    fs, inner = filesystem(path)
    out: dict[str, float] = {}
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
            when = float(remove.get("deletionTimestamp") or 0) / 1000
            out[unquote(remove["path"])] = when
            vector = remove.get("deletionVector")
            if vector and vector.get("storageType") == "u":  # the vector file counts from its last remove
                name = file_of_z85(vector["pathOrInlineDv"])
                out[name] = max(out.get(name, when), when)
    return out


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
