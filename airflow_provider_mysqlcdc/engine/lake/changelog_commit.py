"""Where a changelog batch is committed: one stream micro-batch, per table, exactly once.

The stream's sink (``spark/stream/changelog_sink.py``) only moves data: its executors hand each partition's
changes to ``changelog_files`` and report the ``WrittenFile``s, the binlog range each partition read and the
DDL it met; its driver hands those to ``ChangelogCommit``, which decides everything the lake stores. Per batch
id and table:

1. ``begin``: the batch ledger in the stream's checkpoint (``batch_ledger``) says whether this batch id was
   attempted before (the run was killed after planning it: a *replay*), and records this attempt before any
   file is written; the first batch of a run makes every table's changelog a Delta table (an output root of a
   release before the Delta changelog: ``ChangelogTable.adopt``, ``table_format``);
2. the executors write ``changelog/batch=<id>/part-...parquet`` (and ``changelog-json/``):
   ``changelog_files``;
3. ``commit``: the schema history first (a reader never sees data ahead of its DDL), then the batch marker
   ``changelog/_committed/batch=<id>.json`` (``batch_marker``) atomically for every table with changes: the
   files of this attempt (readers that follow markers never see a torn or duplicated batch), ``rows``,
   ``first_position``/``last_position``, the binlog range ``start_offset``/``end_offset``;
4. on a replay, files and markers of earlier attempts are removed after the new markers are in place: a
   replayed batch overwrites, it never duplicates; but a table whose Delta changelog already holds the batch
   keeps that attempt's marker and files, and only the other attempts' files go;
5. one Delta commit per table adds the batch's files to ``changelog/_delta_log`` with the application
   transaction ``("mysqlcdc-changelog", batch id)`` (``table_format.changelog_table``: ``delta_changelog``):
   what every reader that is not ours sees;
6. the output's progress record (``stream_progress``), written after the markers: the end offset (idle
   tables' position advances with the stream), the batch's figures and the running totals
   (``stream_figures``); then the ledger entry ``committed``.

After the batch hook (the mirror refresh), ``record_timing`` writes the progress record again with the batch's
duration and the hook's. Files of an attempt killed before its markers are unreferenced until the replay
removes them (or garbage collection); readers never see them.
"""

from __future__ import annotations

import functools
import posixpath
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.batch_ledger import (
    COMMITTED,
    WRITING,
    LedgerEntry,
    read_ledger_entry,
    write_ledger_entry,
)
from airflow_provider_mysqlcdc.engine.lake.batch_marker import (
    BatchMarker,
    read_batch_marker,
    write_batch_marker,
)
from airflow_provider_mysqlcdc.engine.lake.changelog_files import BatchFiles, Unwritten, WrittenFile
from airflow_provider_mysqlcdc.engine.lake.concurrent_commits import concurrently
from airflow_provider_mysqlcdc.engine.lake.layout import (
    CHANGELOG,
    CHANGELOG_JSON,
    changelog_dir,
    changelog_marker,
    delete_dir,
    filesystem,
    new_version,
)
from airflow_provider_mysqlcdc.engine.lake.schema_history import (
    excluded_after,
    read_schema_history,
    record_schema_changes,
)
from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.lake.stream_progress import (
    StreamProgress,
    read_stream_progress,
    write_stream_progress,
)
from airflow_provider_mysqlcdc.engine.lake.table_format import ChangelogTable, changelog_table
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


@dataclass(frozen=True)
class BatchAttempt:
    """One attempt at committing a batch id: its own attempt id (in its files' names) and whether the batch id
    was attempted before."""

    batch_id: int
    attempt: str
    replay: bool


@dataclass(frozen=True)
class BatchCommit:
    """What a micro-batch's commit reports: what it wrote (progress output, the ledger)."""

    batch_id: int
    rows: dict[str, int]  # changes written per table ("database.table")
    replay: bool  # this batch id was attempted before (its earlier output was replaced)
    seconds: float
    start_offset: dict | None = None  # the binlog range the batch covered (BinlogOffset dicts)
    end_offset: dict | None = None
    schema_changes: dict[str, int] = field(default_factory=dict)  # DDL statements per table
    figures: BatchFigures | None = None  # what the progress record keeps of the batch

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def tables_changed(self) -> list[TableId]:
        """The tables with changes or DDL in the batch (what the mirror refresh looks at)."""
        return [TableId.parse(t) for t in sorted({*self.rows, *self.schema_changes})]

    def describe(self) -> str:
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items())) or "no captured changes"
        replayed = " (replayed)" if self.replay else ""
        return f"batch {self.batch_id}: {self.total_rows} changes ({tables}) in {self.seconds:.1f}s{replayed}"


@dataclass
class ChangelogCommit:
    """The changelog commit protocol of one stream (an output root and a checkpoint), batch after batch."""

    root: str
    checkpoint: str
    schemas: dict[str, TableSchema]  # the captured tables by name ("database.table")
    changelog_json: bool = False
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # columns never written, by table
    _tables: dict[TableId, ChangelogTable] = field(init=False, repr=False, default_factory=dict)
    _adopted: bool = field(init=False, repr=False, default=False)
    _progress: StreamProgress | None = field(init=False, repr=False, default=None)  # as last written
    _progress_read: bool = field(init=False, repr=False, default=False)

    # --- 1. begin ---------------------------------------------------------------------------------------

    def begin(self, batch_id: int) -> BatchAttempt:
        """Record a new attempt of ``batch_id`` in the ledger (before any of its files)."""
        replay = read_ledger_entry(self.checkpoint, batch_id) is not None
        attempt = BatchAttempt(batch_id, new_version(), replay)
        write_ledger_entry(self.checkpoint, LedgerEntry(batch_id, WRITING, attempt.attempt))
        if not self._adopted:  # an output root from before the Delta changelog: every table readable as Delta
            tables = [self._table(TableId.parse(table)) for table in sorted(self.schemas)]
            concurrently([functools.partial(t.adopt, batch_id) for t in tables])  # a look per table, at once
            self._adopted = True
        return attempt

    def files(self, attempt: BatchAttempt, unwritten: Unwritten | None = None) -> BatchFiles:
        """What the executors need to write this attempt's files (``changelog_files``)."""
        return BatchFiles(self.root, attempt.batch_id, attempt.attempt, self.schemas, self.changelog_json,
                          self.exclusions(), unwritten)

    def exclusions(self) -> dict[str, tuple[str, ...]]:
        """The excluded columns' names after the DDL followed so far (an excluded column renamed stays
        excluded under its new name): what the executors leave out of this batch's files."""
        return {
            table: tuple(sorted(excluded_after(names, read_schema_history(self.root, TableId.parse(table)))))
            for table, names in self.exclude.items() if names
        }

    # --- 3-6. commit ------------------------------------------------------------------------------------

    def commit(self, attempt: BatchAttempt, written: Iterable[WrittenFile], ranges: list[dict[str, Any]],
               ddl: list[dict[str, Any]]) -> BatchCommit:
        """Commit what the attempt's partitions wrote (``written``), read (``ranges``: each partition's binlog
        range and figures) and met (``ddl``: schema changes per table, in binlog order per partition)."""
        batch = self.commit_files(attempt.batch_id, attempt.attempt, written, ranges, ddl,
                                  replay=attempt.replay)
        write_ledger_entry(self.checkpoint, LedgerEntry(
            batch.batch_id, COMMITTED, attempt.attempt, batch.replay, batch.rows,
            BinlogOffset.from_dict(batch.start_offset) if batch.start_offset else None,
            BinlogOffset.from_dict(batch.end_offset) if batch.end_offset else None,
            datetime.now(UTC).isoformat()))
        return batch

    def commit_files(self, batch_id: int, attempt: str, written: Iterable[WrittenFile],
                     ranges: list[dict[str, Any]], ddl_events: list[dict[str, Any]], *,
                     replay: bool) -> BatchCommit:
        """Steps 3-6 without the ledger: write the markers of this attempt; on a replay, then drop what
        earlier attempts left; then the Delta commits and the progress record."""
        by_table: dict[str, dict[str, list[WrittenFile]]] = defaultdict(lambda: defaultdict(list))
        for f in written:
            by_table[f.table][f.kind].append(f)
        ddl: dict[str, list[dict]] = defaultdict(list)
        for event in ddl_events:
            ddl[str(event["table"])].append(event)
        for table, changes in sorted(ddl.items()):  # before the markers: a reader never sees data ahead of it
            record_schema_changes(self.root, TableId.parse(table), changes, batch_id)
        self._check_exclusions(batch_id, ddl, by_table)
        start_offset, end_offset = _batch_range(ranges)
        captured = {*self.schemas, *by_table}
        # on a replay, tables whose Delta changelog already holds this batch keep that attempt's files
        settled = {t for t in captured if self._table(TableId.parse(t)).holds(batch_id)} if replay else set()
        rows: dict[str, int] = {}
        for table, kinds in sorted(by_table.items()):
            parquet = sorted(kinds.get(CHANGELOG, []), key=lambda f: f.name)
            rows[table] = sum(f.rows for f in parquet)
            if table in settled:
                continue
            firsts = [f.first_position for f in parquet if f.first_position]
            lasts = [f.last_position for f in parquet if f.last_position]
            write_batch_marker(self.root, TableId.parse(table), BatchMarker(
                batch_id=batch_id, table=table, attempt=attempt, files=tuple(f.name for f in parquet),
                changelog_json_files=tuple(sorted(f.name for f in kinds.get(CHANGELOG_JSON, []))),
                rows=rows[table], first_position=min(firsts) if firsts else None,
                last_position=max(lasts) if lasts else None, start_offset=start_offset, end_offset=end_offset,
                committed_at=datetime.now(UTC).isoformat(),
            ))
        if replay:
            for table in sorted(settled):
                _keep_committed_attempt(self.root, TableId.parse(table), batch_id)
            for table in sorted(captured - settled):
                tid = TableId.parse(table)
                kinds_written = by_table.get(table)
                if kinds_written is None:  # an earlier attempt may have written this table: drop its marker
                    _delete_file(changelog_marker(self.root, tid, batch_id))
                for kind in (CHANGELOG, CHANGELOG_JSON):
                    keep = {f.name for f in (kinds_written or {}).get(kind, [])}
                    _delete_other_files(changelog_dir(self.root, tid, batch_id, kind), keep)
        end_dict = None if end_offset is None else end_offset.to_dict()
        # after the markers: Delta readers see whole batches; tables' commits are independent, made at once
        commits = [(self._table(TableId.parse(table)), sorted(f.name for f in kinds.get(CHANGELOG, [])))
                   for table, kinds in sorted(by_table.items()) if table not in settled]
        concurrently([functools.partial(t.commit_batch, batch_id, names, end_dict) for t, names in commits])
        figures = _figures(batch_id, rows, by_table, ranges, replay)
        if end_offset is not None:  # after the markers: idle tables' position advances with the stream
            tables = sorted({*captured, *ddl})
            self._write_progress(figures, end_offset, tables, _last_event_at(ranges))
        start_dict = None if start_offset is None else start_offset.to_dict()
        return BatchCommit(batch_id, rows, replay, 0.0, start_dict, end_dict,
                           {t: len(c) for t, c in ddl.items()}, figures)

    def record_timing(self, batch: BatchCommit, hook_seconds: float | None) -> None:
        """The progress record again, with the batch's duration and its hook's (the mirror refresh; None:
        no hook)."""
        progress = self._progress
        if progress is None or progress.batch is None or progress.batch.batch_id != batch.batch_id:
            return
        figures = replace(progress.batch, seconds=batch.seconds, mirror_refresh_seconds=hook_seconds)
        self._progress = replace(progress, batch=figures)
        write_stream_progress(self.root, self._progress)

    # --- helpers ----------------------------------------------------------------------------------------

    def _table(self, table: TableId) -> ChangelogTable:
        found = self._tables.get(table)
        if found is None:
            found = self._tables[table] = changelog_table(self.root, table)
        return found

    def _previous_progress(self) -> StreamProgress | None:
        if not self._progress_read:
            self._progress = read_stream_progress(self.root)
            self._progress_read = True
        return self._progress

    def _write_progress(self, figures: BatchFigures, end_offset: BinlogOffset, tables: list[str],
                        last_event_at: str | None) -> None:
        """The progress record of a committed batch: its end offset, the commit time of the last transaction
        read (that of the record before when this batch read none), its figures and the running totals (a
        replayed batch id the record already counted is counted once)."""
        previous = self._previous_progress()
        totals = (previous.totals if previous is not None else None) or StreamTotals()
        counted = previous.batch if previous is not None else None
        if counted is not None and counted.batch_id == figures.batch_id:
            totals = totals.plus(counted, sign=-1)
        progress = StreamProgress(
            figures.batch_id, end_offset, tuple(tables), datetime.now(UTC).isoformat(),
            last_event_at or (previous.last_event_at if previous is not None else None),
            figures, totals.plus(figures),
        )
        write_stream_progress(self.root, progress)
        self._progress, self._progress_read = progress, True

    def _check_exclusions(self, batch_id: int, ddl: dict[str, list[dict]],
                          by_table: dict[str, dict[str, list[WrittenFile]]]) -> None:
        """Before the markers: when this batch renamed an excluded column, none of its files may hold the
        column under its new name. A partition leaves it out when it read the rename itself; a partition of
        a parallel catch-up that starts after the rename did not: the batch fails, and its replay (the rename
        is in the schema history now) leaves it out everywhere. Costs footer reads only after such a
        rename."""
        for table, changes in sorted(ddl.items()):
            excluded = self.exclude.get(table, ())
            renamed = excluded_after(excluded, [ColumnChanges.from_dict(c.get("changes") or {})
                                                for c in changes])
            now = excluded_after(excluded, read_schema_history(self.root, TableId.parse(table)))
            if renamed == set(excluded):
                continue
            tid = TableId.parse(table)
            for f in by_table.get(table, {}).get(CHANGELOG, []):
                path = posixpath.join(changelog_dir(self.root, tid, batch_id), f.name)
                fs, inner = filesystem(path)
                leaked = sorted(now & set(pq.read_schema(inner, filesystem=fs).names))
                if leaked:
                    raise CdcError(
                        f"batch {batch_id}: {table} column(s) {leaked} are excluded columns renamed by DDL "
                        "in this batch, and a partition read before the rename wrote them: the batch is not "
                        "committed; restart the stream (its replay leaves them out)"
                    )


def _batch_range(ranges: list[dict]) -> tuple[BinlogOffset | None, BinlogOffset | None]:
    """The binlog range a batch covered: the lowest start and the highest end of its partitions."""
    if not ranges:
        return None, None
    starts = [BinlogOffset.from_dict(r["start"]) for r in ranges]
    ends = [BinlogOffset.from_dict(r["end"]) for r in ranges]
    return min(starts, key=lambda o: o.key), max(ends, key=lambda o: o.key)


def _figures(batch_id: int, rows: dict[str, int], by_table: dict[str, dict[str, list[WrittenFile]]],
             ranges: list[dict], replay: bool) -> BatchFigures:
    """What the batch wrote (rows, bytes of every changelog file per table) and what its reads saw."""
    sizes = {table: sum(int(f.bytes or 0) for files in kinds.values() for f in files)
             for table, kinds in by_table.items()}
    return BatchFigures(
        batch_id, dict(rows), {t: n for t, n in sizes.items() if n},
        rows_read=sum(int(r.get("rows_read") or 0) for r in ranges),
        dropped=sum(int(r.get("dropped") or 0) for r in ranges),
        read_seconds=sum(float(r.get("read_seconds") or 0.0) for r in ranges), replay=replay,
    )


def _last_event_at(ranges: list[dict]) -> str | None:
    """The latest commit time the batch's partitions read (ISO, UTC), or None."""
    times = []
    for r in ranges:
        try:
            times.append(datetime.fromisoformat(str(r["last_event_at"])))
        except (KeyError, TypeError, ValueError):
            continue
    return max(times).astimezone(UTC).isoformat() if times else None


def _delete_file(path: str) -> None:
    fs, inner = filesystem(path)
    try:
        fs.delete_file(inner)
    except FileNotFoundError:
        pass


def _keep_committed_attempt(root: str, table: TableId, batch_id: int) -> None:
    """A batch an earlier attempt committed to the Delta changelog keeps that attempt's marker and files; the
    files of any other attempt (this one, killed ones) are deleted."""
    marker = read_batch_marker(root, table, batch_id)
    if marker is None:  # never the case (markers come first); keep everything rather than guess
        return
    for kind, listed in ((CHANGELOG, marker.files), (CHANGELOG_JSON, marker.changelog_json_files)):
        _delete_other_files(changelog_dir(root, table, batch_id, kind), set(listed or ()))


def _delete_other_files(directory: str, keep: set[str]) -> None:
    """Remove every file of ``directory`` not in ``keep`` (the whole directory if nothing is kept)."""
    if not keep:
        delete_dir(directory)
        return
    fs, inner = filesystem(directory)
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    except FileNotFoundError:
        return
    for info in infos:
        if info.type == pafs.FileType.File and posixpath.basename(info.path) not in keep:
            fs.delete_file(info.path)

