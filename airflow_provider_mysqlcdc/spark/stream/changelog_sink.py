"""The stream's sink: each micro-batch's changes, per table, as an exactly-once changelog (``foreachBatch``).

Per batch id and table (``output_layout``):

1. executors take the typed record batches the source built (``stream_rows``: the
   ``arrow_batches.records_batch`` layout, in Arrow IPC) and write
   ``changelog/batch=<id>/part-<partition>-<attempt>.parquet`` (and, optionally, the Flink ``changelog-json``
   form under ``changelog-json/batch=<id>/``);
2. the driver writes the batch marker ``changelog/_committed/batch=<id>.json`` atomically for every table
   with changes in the batch: the files of this attempt (readers that follow markers never see a torn or
   duplicated batch), ``rows``, ``first_position``/``last_position`` and the binlog range the batch covered,
   ``start_offset``/``end_offset`` (``BinlogOffset`` dicts, from the source's range rows);
3. on a replay of the batch id (the run was killed after planning it), files and markers of earlier attempts
   are removed after the new markers are in place: a replayed batch overwrites, it never duplicates; but a
   table whose Delta changelog already holds the batch keeps that attempt's marker and files, and only the
   other attempts' files go;
4. one Delta commit per table adds the batch's files to ``changelog/_delta_log`` with the application
   transaction ``("mysqlcdc-changelog", batch id)`` (``engine.lake.delta_changelog``): what every reader that
   is not ours sees;
5. ``on_batch_committed(batch_id, tables_changed)`` is called (the mirror refresh hooks in here);
6. the output's progress record (``_mysqlcdc_stream_progress.json``, ``engine.lake.changelog``), written
   with the markers, is written again with the batch's duration and mirror refresh time. The batch's figures
   (rows and bytes written per table, row images read and dropped by the stream filter, the commit time of
   the last transaction read) and running totals are what ``status`` and the Airflow task's metrics read
   (``engine.lake.stream_figures``).

TIME columns are written as int64 microseconds (``engine.lake.delta_types``): Delta has no TIME type.

A replay is recognised by the batch ledger in the stream's checkpoint (``mysqlcdc/batches/batch=<id>.json``),
written before the batch's files. Files of an attempt killed before its markers are unreferenced until the
replay removes them; readers never see them.

Flink ``changelog-json``: one object per line, ``{"data": {...}, "op": "+I"}``; DECIMAL and integers as JSON
numbers (exact), DATETIME as ``"yyyy-MM-dd HH:mm:ss.SSSSSS"``, TIMESTAMP the same with a ``Z`` (UTC), DATE
``"yyyy-MM-dd"``, TIME ``"HH:mm:ss.SSSSSS"``, binary as base64 (Flink's JSON format conventions).
"""

from __future__ import annotations

import base64
import json
import logging
import posixpath
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog import (
    StreamProgress,
    parse_offset,
    read_stream_progress,
    write_stream_progress,
)
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import arrow_records
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import DeltaChangelog, batch_files
from airflow_provider_mysqlcdc.engine.lake.delta_types import file_schema
from airflow_provider_mysqlcdc.engine.lake.layout import (
    CHANGELOG,
    CHANGELOG_JSON,
    changelog_dir,
    changelog_marker,
    delete_dir,
    filesystem,
    new_version,
    read_json,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.schema_history import (
    excluded_after,
    read_schema_history,
    record_schema_changes,
)
from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.model.arrow_batches import record_schema
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.stream.transport import stream_changes
from airflow_provider_mysqlcdc.spark.stream.zero_date_layouts import ZeroDateLayouts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

WRITE_RESULT_SCHEMA = (
    "table STRING, kind STRING, file STRING, rows LONG, first_position STRING, last_position STRING, "
    "bytes LONG"
)
RANGE = "range"  # result rows that carry a partition's binlog range instead of a file
DDL = "ddl"  # result rows that carry a DDL statement of a table (its schema history)
LEDGER_DIR = "mysqlcdc/batches"
LEDGER_RETAIN = 1000  # batch ledgers kept in the checkpoint (Spark itself keeps ~100 batches of metadata)

BatchHook = Callable[[int, list[TableId]], None]


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

    def describe(self) -> str:
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items())) or "no captured changes"
        replayed = " (replayed)" if self.replay else ""
        return f"batch {self.batch_id}: {self.total_rows} changes ({tables}) in {self.seconds:.1f}s{replayed}"


# --- executors: write one partition ---------------------------------------------------------------------


class _TableFiles:
    """The open output files of one table in one partition."""

    def __init__(self, schema: TableSchema, parquet_path: str, json_path: str | None,
                 unwritten: tuple[str, ...] = ()) -> None:
        self.schema = schema  # the table's columns at these changes (one file per schema version)
        self.arrow_schema = pa.schema([f for f in record_schema(schema) if f.name not in unwritten])
        self.parquet_path, self.json_path = parquet_path, json_path
        fs, inner = filesystem(parquet_path)
        fs.create_dir(posixpath.dirname(inner), recursive=True)
        self.file_schema = file_schema(self.arrow_schema)  # TIME as int64 microseconds: Delta has no TIME
        self.parquet_out = fs.open_output_stream(inner)  # ours to close: its size is the bytes written
        self.parquet = pq.ParquetWriter(self.parquet_out, self.file_schema)
        self.json: Any = None
        if json_path is not None:
            jfs, jinner = filesystem(json_path)
            jfs.create_dir(posixpath.dirname(jinner), recursive=True)
            self.json = jfs.open_output_stream(jinner)
        self.rows = 0
        self.first: str | None = None
        self.last: str | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        """Changes in binlog order, as the source built them (``stream_rows``), less excluded columns."""
        if batch.num_rows == 0:
            return
        data = pa.RecordBatch.from_arrays([batch.column(n) for n in self.arrow_schema.names],
                                          schema=self.arrow_schema)
        self.parquet.write_batch(data.cast(self.file_schema))
        if self.json is not None:
            records = arrow_records(pa.Table.from_batches([data]), self.schema)
            self.json.write("".join(flink_json_line(r) + "\n" for r in records).encode("utf-8"))
        positions = data.column("_position")
        self.rows += data.num_rows
        self.first = self.first or positions[0].as_py()
        self.last = positions[-1].as_py()

    def close(self) -> list[tuple]:
        self.parquet.close()
        out = [(CHANGELOG, posixpath.basename(self.parquet_path), self.parquet_out.tell())]
        self.parquet_out.close()
        if self.json is not None:
            size = self.json.tell()
            self.json.close()
            out.append((CHANGELOG_JSON, posixpath.basename(self.json_path or ""), size))
        return [(str(self.schema.table), kind, name, self.rows, self.first, self.last, size)
                for kind, name, size in out]


@dataclass
class PartitionWriter:
    """``mapInArrow`` function: stream rows in, one result row per file written out."""

    root: str
    batch_id: int
    attempt: str
    schemas: dict[str, TableSchema]  # by table: for changes that carry no schema version
    changelog_json: bool = False
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # columns never written, by table
    zero_dates: ZeroDateLayouts | None = None  # by table, from its plan (None: every companion written)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        task = context.taskAttemptId() if context is not None else 0
        files: dict[tuple[str, str | None], _TableFiles] = {}
        ranges: list[dict] = []
        versions: dict[str, TableSchema] = {}
        ddl: list[dict] = []
        try:
            for batch in batches:
                for changes in stream_changes(batch, ranges, versions, ddl):
                    key = (changes.table, changes.schema_id)
                    out = files.get(key)
                    if out is None:
                        out = files[key] = self._open(*key, versions, partition, task, ddl)
                    out.write(changes.batch)
        finally:
            results = [row for out in files.values() for row in out.close()]
        results += [("", RANGE, json.dumps(r, separators=(",", ":")), 0, None, None, 0) for r in ranges]
        results += [(d["table"], DDL, json.dumps(d, separators=(",", ":")), 0, d["position"], None, 0)
                    for d in ddl]
        names = ["table", "kind", "file", "rows", "first_position", "last_position", "bytes"]
        columns: list[Sequence[Any]] = list(zip(*results)) if results else [[] for _ in names]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), pa.int64() if n in ("rows", "bytes") else pa.string())
             for n, c in zip(names, columns)],
            names=names,
        )

    def _open(self, table: str, schema_id: str | None, versions: dict[str, TableSchema],
              partition: int, task: int = 0, ddl: list[dict] | None = None) -> _TableFiles:
        schema = versions.get(schema_id) if schema_id is not None else None
        if schema is None:
            schema = self.schemas.get(table)
        if schema is None:
            raise CdcError(f"the stream delivered changes of {table} without their schema ({schema_id})")
        # an excluded column renamed by DDL this partition read (before these rows) stays excluded
        renames = [ColumnChanges.from_dict(d.get("changes") or {})
                   for d in ddl or () if d.get("table") == table]
        schema = without_columns(schema, tuple(sorted(excluded_after(self.exclude.get(table, ()), renames))))
        tid = schema.table
        # the task attempt: a partition computed twice (a task retried) never shares a file with itself
        stem = f"part-{partition:05d}-{self.attempt}-t{task}" + (f"-{schema_id}" if schema_id else "")
        parquet = posixpath.join(changelog_dir(self.root, tid, self.batch_id), f"{stem}.parquet")
        json_path = None
        if self.changelog_json:
            json_path = posixpath.join(
                changelog_dir(self.root, tid, self.batch_id, CHANGELOG_JSON), f"{stem}.json"
            )
        unwritten = self.zero_dates.unwritten(schema) if self.zero_dates is not None else ()
        return _TableFiles(schema, parquet, json_path, unwritten)


# --- driver: commit one batch -----------------------------------------------------------------------------


@dataclass
class ChangelogSink:
    """``df.writeStream.foreachBatch(ChangelogSink(...))``: exactly-once changelog files per batch id."""

    root: str
    schemas: dict[TableId, TableSchema]
    checkpoint: str
    changelog_json: bool = False
    on_batch_committed: BatchHook | None = None  # mirror refresh: (batch_id, tables with new changes)
    on_progress: Callable[[BatchCommit], None] | None = None
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # columns never written, by table
    zero_dates: ZeroDateLayouts | None = None  # by table, from its plan; refreshed before each batch
    _by_name: dict[str, TableSchema] = field(init=False, repr=False)
    _deltas: dict[TableId, DeltaChangelog] = field(init=False, repr=False, default_factory=dict)
    _adopted: bool = field(init=False, repr=False, default=False)
    _progress: StreamProgress | None = field(init=False, repr=False, default=None)  # as last written
    _progress_read: bool = field(init=False, repr=False, default=False)

    def __post_init__(self) -> None:
        self._by_name = {str(t): s for t, s in self.schemas.items()}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        attempt = new_version()
        ledger = self.ledger_path(batch_id)
        replay = read_json(ledger) is not None
        write_json_atomic(ledger, {"batch_id": batch_id, "state": "writing", "attempt": attempt})
        if not self._adopted:  # an output root from before the Delta changelog: every table readable as Delta
            for table in sorted(self._by_name):
                self._delta(TableId.parse(table)).adopt(batch_id)
            self._adopted = True
        layouts = self.zero_dates.refresh(self._by_name) if self.zero_dates is not None else None
        writer = PartitionWriter(self.root, batch_id, attempt, self._by_name, self.changelog_json,
                                 self._exclusions(), layouts)
        results = [tuple(r) for r in df.mapInArrow(writer, WRITE_RESULT_SCHEMA).collect()]
        batch = self.commit(batch_id, attempt, results, replay=replay)
        write_json_atomic(
            ledger,
            {
                "batch_id": batch_id,
                "state": "committed",
                "attempt": attempt,
                "replay": replay,
                "rows": batch.rows,
                "start_offset": batch.start_offset,
                "end_offset": batch.end_offset,
                "committed_at": datetime.now(UTC).isoformat(),
            },
        )
        if batch_id >= LEDGER_RETAIN:
            _delete_file(self.ledger_path(batch_id - LEDGER_RETAIN))
        hook_started = time.monotonic()
        if self.on_batch_committed is not None:
            changed = sorted({*batch.rows, *batch.schema_changes})
            self.on_batch_committed(batch_id, [TableId.parse(t) for t in changed])
        batch = replace(batch, seconds=time.monotonic() - started)
        if batch.figures is not None:
            self._record_timing(batch, time.monotonic() - hook_started)
        log.info("%s", batch.describe())
        if self.on_progress is not None:
            self.on_progress(batch)

    def _record_timing(self, batch: BatchCommit, hook_seconds: float) -> None:
        """The progress record again, with the batch's duration and its hook's (the mirror refresh)."""
        progress = self._progress
        if progress is None or progress.batch is None or progress.batch.batch_id != batch.batch_id:
            return
        hooked = self.on_batch_committed is not None
        figures = replace(progress.batch, seconds=batch.seconds,
                          mirror_refresh_seconds=hook_seconds if hooked else None)
        self._progress = replace(progress, batch=figures)
        write_stream_progress(self.root, self._progress)

    def _previous_progress(self) -> StreamProgress | None:
        if not self._progress_read:
            self._progress = read_stream_progress(self.root)
            self._progress_read = True
        return self._progress

    def _delta(self, table: TableId) -> DeltaChangelog:
        found = self._deltas.get(table)
        if found is None:
            found = self._deltas[table] = DeltaChangelog(self.root, table)
        return found

    def _delta_holds(self, batch_id: int, tables: set[str]) -> set[str]:
        """The tables whose Delta changelog already holds
        ``batch_id`` (an earlier attempt committed it there)."""
        return {t for t in tables if self._delta(TableId.parse(t)).holds(batch_id)}

    def ledger_path(self, batch_id: int) -> str:
        return posixpath.join(self.checkpoint.rstrip("/"), LEDGER_DIR, f"batch={batch_id:012d}.json")

    def _exclusions(self) -> dict[str, tuple[str, ...]]:
        """The excluded columns' names after the DDL followed so far (an excluded column renamed stays
        excluded under its new name): what the executors leave out of this batch's files."""
        return {
            table: tuple(sorted(excluded_after(names, read_schema_history(self.root, TableId.parse(table)))))
            for table, names in self.exclude.items() if names
        }

    def _check_exclusions(self, batch_id: int, ddl: dict[str, list[dict]],
                          by_table: dict[str, dict[str, list[tuple]]]) -> None:
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
            for row in by_table.get(table, {}).get(CHANGELOG, []):
                path = posixpath.join(changelog_dir(self.root, tid, batch_id), row[2])
                fs, inner = filesystem(path)
                leaked = sorted(now & set(pq.read_schema(inner, filesystem=fs).names))
                if leaked:
                    raise CdcError(
                        f"batch {batch_id}: {table} column(s) {leaked} are excluded columns renamed by DDL "
                        "in this batch, and a partition read before the rename wrote them: the batch is not "
                        "committed; restart the stream (its replay leaves them out)"
                    )

    def commit(self, batch_id: int, attempt: str, results: list[tuple], *, replay: bool) -> BatchCommit:
        """Write the markers of this attempt; on a replay, then drop what earlier attempts left."""
        by_table: dict[str, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
        ranges = []
        ddl: dict[str, list[dict]] = defaultdict(list)
        for row in results:
            if row[1] == RANGE:
                ranges.append(json.loads(row[2]))
            elif row[1] == DDL:
                ddl[row[0]].append(json.loads(row[2]))
            else:
                by_table[row[0]][row[1]].append(row)
        for table, changes in sorted(ddl.items()):  # before the markers: a reader never sees data ahead of it
            record_schema_changes(self.root, TableId.parse(table), changes, batch_id)
        self._check_exclusions(batch_id, ddl, by_table)
        start_offset, end_offset = _batch_range(ranges)
        # on a replay, tables whose Delta changelog already holds this batch keep that attempt's files
        settled = self._delta_holds(batch_id, {*self._by_name, *by_table}) if replay else set()
        last_event_at = _last_event_at(ranges)
        rows: dict[str, int] = {}
        for table, kinds in sorted(by_table.items()):
            parquet = sorted(kinds.get(CHANGELOG, []), key=lambda r: r[2])
            rows[table] = sum(r[3] for r in parquet)
            if table in settled:
                continue
            firsts = [r[4] for r in parquet if r[4]]
            lasts = [r[5] for r in parquet if r[5]]
            write_json_atomic(
                changelog_marker(self.root, TableId.parse(table), batch_id),
                {
                    "batch_id": batch_id,
                    "table": table,
                    "attempt": attempt,
                    "files": [r[2] for r in parquet],
                    "changelog_json_files": sorted(r[2] for r in kinds.get(CHANGELOG_JSON, [])),
                    "rows": rows[table],
                    "first_position": min(firsts) if firsts else None,
                    "last_position": max(lasts) if lasts else None,
                    "start_offset": start_offset,
                    "end_offset": end_offset,
                    "committed_at": datetime.now(UTC).isoformat(),
                },
            )
        if replay:
            for table in sorted(settled):
                _keep_committed_attempt(self.root, TableId.parse(table), batch_id)
            for table in sorted({*self._by_name, *by_table} - settled):
                tid = TableId.parse(table)
                written = by_table.get(table)
                if written is None:  # an earlier attempt may have written this table: drop its marker first
                    _delete_file(changelog_marker(self.root, tid, batch_id))
                for kind in (CHANGELOG, CHANGELOG_JSON):
                    keep = {r[2] for r in (written or {}).get(kind, [])}
                    _delete_other_files(changelog_dir(self.root, tid, batch_id, kind), keep)
        for table, kinds in sorted(by_table.items()):  # after the markers: Delta readers see whole batches
            if table not in settled:
                tid = TableId.parse(table)
                names = sorted(r[2] for r in kinds.get(CHANGELOG, []))
                self._delta(tid).commit(batch_id, batch_files(self.root, tid, batch_id, names), end_offset)
        figures = _figures(batch_id, rows, by_table, ranges, replay)
        if end_offset is not None:  # after the markers: idle tables' position advances with the stream
            tables = sorted({*self._by_name, *by_table, *ddl})
            self._write_progress(figures, end_offset, tables, last_event_at)
        return BatchCommit(batch_id, rows, replay, 0.0, start_offset, end_offset,
                           {t: len(c) for t, c in ddl.items()}, figures)

    def _write_progress(self, figures: BatchFigures, end_offset: dict, tables: list[str],
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
            figures.batch_id, parse_offset(end_offset) or BinlogOffset.from_dict(end_offset), tuple(tables),
            datetime.now(UTC).isoformat(),
            last_event_at or (previous.last_event_at if previous is not None else None),
            figures, totals.plus(figures),
        )
        write_stream_progress(self.root, progress)
        self._progress, self._progress_read = progress, True


# --- helpers ------------------------------------------------------------------------------------------------


def without_columns(schema: TableSchema, names: tuple[str, ...]) -> TableSchema:
    """``schema`` without the excluded columns (secrets, blobs never reach a file)."""
    if not names or not any(n in schema.column_by_name for n in names):
        return schema
    return replace(schema, columns=tuple(c for c in schema.columns if c.name not in names), column_by_name={})


def _batch_range(ranges: list[dict]) -> tuple[dict | None, dict | None]:
    """The binlog range a batch covered: the lowest start and the highest end of its partitions."""
    if not ranges:
        return None, None
    starts = [BinlogOffset.from_dict(r["start"]) for r in ranges]
    ends = [BinlogOffset.from_dict(r["end"]) for r in ranges]
    return min(starts, key=lambda o: o.key).to_dict(), max(ends, key=lambda o: o.key).to_dict()


def _figures(batch_id: int, rows: dict[str, int], by_table: dict[str, dict[str, list[tuple]]],
             ranges: list[dict], replay: bool) -> BatchFigures:
    """What the batch wrote (rows, bytes of every changelog file per table) and what its reads saw."""
    sizes = {table: sum(int(r[6] or 0) for files in kinds.values() for r in files if len(r) > 6)
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
    marker = read_json(changelog_marker(root, table, batch_id))
    if marker is None:  # never the case (markers come first); keep everything rather than guess
        return
    for kind, listed in ((CHANGELOG, "files"), (CHANGELOG_JSON, "changelog_json_files")):
        keep = set(map(str, marker.get(listed) or ()))
        _delete_other_files(changelog_dir(root, table, batch_id, kind), keep)


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


def flink_json_line(record: Record) -> str:
    """One line of Flink's ``changelog-json`` format for a record."""
    data = {name: _flink_value(value) for name, value in record.values.items()}
    return "".join(_encode_json({"data": data, "op": record.op}))


class _RawNumber(str):
    """A number that must be written verbatim (a Decimal or a huge integer keeps every digit)."""


def _encode_json(value: Any) -> Iterator[str]:
    if isinstance(value, _RawNumber):
        yield str.__str__(value)
    elif isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            if i:
                yield ","
            yield json.dumps(k, ensure_ascii=False)
            yield ":"
            yield from _encode_json(v)
        yield "}"
    else:
        yield json.dumps(value, ensure_ascii=False, allow_nan=True)


def _flink_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return _RawNumber(str(value))
    if isinstance(value, Decimal):
        return _RawNumber(format(value, "f"))
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        sign = "-" if value < timedelta(0) else ""
        micros = abs(value) // timedelta(microseconds=1)
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)
