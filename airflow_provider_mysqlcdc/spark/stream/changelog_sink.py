"""The stream's sink (``foreachBatch``): Spark moves each micro-batch's changes to the lake's batch commit.

Spark only moves data here; the lake decides every path, file, marker, progress record and commit
(``engine/lake/changelog_commit.py``, which documents the protocol step by step):

1. on the driver, ``ChangelogCommit.begin`` records the attempt in the checkpoint's ledger (a replay is a
   batch id seen before);
2. ``mapInArrow`` runs ``PartitionWriter`` on the executors: each partition's typed record batches (the
   ``arrow_batches.records_batch`` layout the source built, in Arrow IPC) go through
   ``engine.stream.transport.stream_changes`` into the lake's ``PartitionFiles`` (``engine/lake/
   changelog_files.py``); one result row per file written, per binlog range read and per DDL statement met
   comes back to the driver;
3. on the driver, ``ChangelogCommit.commit`` commits what the partitions wrote (markers, replay clean-up,
   Delta commits, progress record, ledger);
4. ``on_batch_committed(batch_id, tables_changed)`` is called (the mirror refresh hooks in here), then the
   progress record gets the batch's duration and the hook's (``ChangelogCommit.record_timing``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.changelog_files import BatchFiles, WrittenFile
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.stream.transport import stream_changes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_mysqlcdc.engine.lake.changelog_commit import BatchCommit, ChangelogCommit
    from airflow_provider_mysqlcdc.spark.stream.zero_date_layouts import ZeroDateLayouts

# Executors unpickle ``PartitionWriter`` and so import this module in every new Python worker: the driver's
# commit (``changelog_commit``: Delta, pyarrow.dataset, pandas) and the chunk store (SQLAlchemy) are imported
# where the driver uses them, not here (tests/spark/test_worker_imports.py).

log = logging.getLogger(__name__)

WRITE_RESULT_SCHEMA = (
    "table STRING, kind STRING, file STRING, rows LONG, first_position STRING, last_position STRING, "
    "bytes LONG"
)
_NAMES = ["table", "kind", "file", "rows", "first_position", "last_position", "bytes"]
RANGE = "range"  # result rows that carry a partition's binlog range instead of a file
DDL = "ddl"  # result rows that carry a DDL statement of a table (its schema history)

BatchHook = Callable[[int, list[TableId]], None]

# --- executors: write one partition ---------------------------------------------------------------------


@dataclass
class PartitionWriter:
    """``mapInArrow`` function: stream rows in, one result row per file written (and per range, per DDL)."""

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
        unwritten = self.zero_dates.unwritten if self.zero_dates is not None else None
        files = BatchFiles(self.root, self.batch_id, self.attempt, self.schemas, self.changelog_json,
                           self.exclude, unwritten).partition(partition, task)
        ranges: list[dict] = []
        versions: dict[str, TableSchema] = {}
        ddl: list[dict] = []
        try:
            for batch in batches:
                for changes in stream_changes(batch, ranges, versions, ddl):
                    files.write(changes.table, changes.schema_id, changes.batch, versions, ddl)
        finally:
            written = files.close()
        results: list[tuple] = [(f.table, f.kind, f.name, f.rows, f.first_position, f.last_position, f.bytes)
                                for f in written]
        results += [("", RANGE, json.dumps(r, separators=(",", ":")), 0, None, None, 0) for r in ranges]
        results += [(d["table"], DDL, json.dumps(d, separators=(",", ":")), 0, d["position"], None, 0)
                    for d in ddl]
        columns: list[Sequence[Any]] = list(zip(*results)) if results else [[] for _ in _NAMES]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), pa.int64() if n in ("rows", "bytes") else pa.string())
             for n, c in zip(_NAMES, columns)],
            names=_NAMES,
        )


def unpack_results(results: list[tuple]) -> tuple[list[WrittenFile], list[dict], list[dict]]:
    """The partitions' result rows as the lake's inputs: the files written, the ranges read, the DDL met."""
    written, ranges, ddl = [], [], []
    for row in results:
        if row[1] == RANGE:
            ranges.append(json.loads(row[2]))
        elif row[1] == DDL:
            ddl.append(json.loads(row[2]))
        else:
            written.append(WrittenFile(row[0], row[1], row[2], int(row[3] or 0), row[4], row[5],
                                       int(row[6] or 0) if len(row) > 6 else 0))
    return written, ranges, ddl


# --- driver: hand one batch to the lake's commit ----------------------------------------------------------


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
    lake: ChangelogCommit = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from airflow_provider_mysqlcdc.engine.lake.changelog_commit import ChangelogCommit

        self.lake = ChangelogCommit(self.root, self.checkpoint, {str(t): s for t, s in self.schemas.items()},
                                    self.changelog_json, dict(self.exclude))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        attempt = self.lake.begin(batch_id)
        layouts = self.zero_dates.refresh(self.lake.schemas) if self.zero_dates is not None else None
        files = self.lake.files(attempt, layouts.unwritten if layouts is not None else None)
        writer = PartitionWriter(files.root, files.batch_id, files.attempt, files.schemas,
                                 files.changelog_json, files.exclude, layouts)
        results = [tuple(r) for r in df.mapInArrow(writer, WRITE_RESULT_SCHEMA).collect()]
        batch = self.lake.commit(attempt, *unpack_results(results))
        hook_started = time.monotonic()
        if self.on_batch_committed is not None:
            self.on_batch_committed(batch_id, batch.tables_changed)
        batch = replace(batch, seconds=time.monotonic() - started)
        if batch.figures is not None:
            hooked = self.on_batch_committed is not None
            self.lake.record_timing(batch, time.monotonic() - hook_started if hooked else None)
        log.info("%s", batch.describe())
        if self.on_progress is not None:
            self.on_progress(batch)

    def commit(self, batch_id: int, attempt: str, results: list[tuple], *, replay: bool) -> BatchCommit:
        """Commit result rows of ``mapInArrow`` as attempt ``attempt`` of ``batch_id`` (the ledger aside)."""
        return self.lake.commit_files(batch_id, attempt, *unpack_results(results), replay=replay)

    def _exclusions(self) -> dict[str, tuple[str, ...]]:
        return self.lake.exclusions()

