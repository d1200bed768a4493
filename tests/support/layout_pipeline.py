"""The engine pipeline of ``engine_harness`` writing its output as files in the documented layout.

Snapshot chunks go to ``snapshot/generation=<g>/chunk=<id>/version=<v>/`` (committed with the chunk store
row); stream batches to ``changelog/batch=<id>/`` plus the marker ``changelog/_committed/batch=<id>.json``
carrying ``end_offset``, then the batch's commit to the changelog's Delta table, as the Spark stream does.
The in-memory snapshots and changelog of ``Pipeline`` are kept too, so tests can compare the file mirror with
the engine's mirror rule (``tests/support/reference_mirror.py``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.binlog.changes import SchemaChange
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import DeltaChangelog, batch_files
from airflow_provider_mysqlcdc.engine.lake.layout import (
    changelog_dir,
    changelog_marker,
    new_version,
    snapshot_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.lake.schema_history import record_schema_changes
from airflow_provider_mysqlcdc.engine.lake.stream_progress import StreamProgress, write_stream_progress
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES, record_schema, records_batch
from airflow_provider_mysqlcdc.engine.model.position_text import format_row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead, ChunkReadResult
from airflow_provider_mysqlcdc.engine.snapshot.phase import snapshot_chunk
from tests.support.engine_harness import Pipeline
from tests.support.workload import Workload


@dataclass
class LayoutPipeline(Pipeline):
    root: str = ""
    next_batch: int = 0
    last_rows_read: int = 0
    end_offsets: bool = True  # write end_offset into the batch markers
    empty_batches: bool = True  # write a marker (and no files) for captured tables without records
    tables: list[TableId] = field(default_factory=list)
    progress: bool = False  # write the stream's progress record after each batch, as the Spark stream does
    keep_rows: bool = True  # each snapshot's rows in memory too, for the reference mirror (a bench: False)

    # -- snapshot ------------------------------------------------------------------------------------------

    def _writer(self, plan: ChunkPlan, chunk_id: int) -> Callable[[Iterator[pa.RecordBatch]], str]:
        schema = self.schemas[plan.table]

        def write(batches: Iterator[pa.RecordBatch]) -> str:
            data = pa.Table.from_batches(list(batches), schema=record_schema(schema))
            version = new_version()
            directory = snapshot_dir(self.root, plan.table, plan.generation, chunk_id, version)
            os.makedirs(directory)
            pq.write_table(data, os.path.join(directory, "part-00000.parquet"))
            if self.keep_rows:
                self.snapshots[(plan.table, chunk_id)] = _data_rows(data)
            return version

        return write

    def snapshot_result(self, plan: ChunkPlan, chunk_id: int) -> ChunkReadResult:
        return snapshot_chunk(
            self.settings,
            self.store,
            plan,
            chunk_id,
            self._writer(plan, chunk_id),
            options=self.read_options,
            schema=self.schemas[plan.table],
        )

    def read_uncommitted(self, plan: ChunkPlan, chunk_id: int) -> Callable[[], ChunkReadResult]:
        """Start a rerun and read it now; the returned function writes and commits it later."""
        schema = self.schemas[plan.table]
        state = self.store.start_chunk(str(plan.table), plan.generation, chunk_id)
        read = ChunkRead(self.settings, schema, plan, plan.chunk(chunk_id), self.read_options)
        batches = list(read.batches())

        def commit() -> ChunkReadResult:
            version = self._writer(plan, chunk_id)(iter(batches))
            r = read.result
            self.store.commit_chunk(
                str(plan.table),
                plan.generation,
                chunk_id,
                rows=r.rows,
                lw=r.low_watermark,
                hw=r.high_watermark,
                output_version=version,
                attempt=state.attempts,
                hw_server=r.hw_server,
                hw_gtid_position=r.hw_gtid_position,
            )
            return r

        return commit

    # -- stream --------------------------------------------------------------------------------------------

    def stream_batch(self, max_rows: int | None = None) -> tuple[int, set[TableId]]:
        """Read one micro-batch and write it per table; return its id and the tables it changed."""
        assert self.stream is not None and self.offset is not None
        self.stream.refresh()  # pick up reruns committed since the last batch, as the Spark source does
        batch = self.stream.read(self.offset, max_rows=max_rows)
        self.changelog.extend(batch.records)
        self.offset = batch.end
        self.last_rows_read = batch.rows_read
        batch_id = self.next_batch
        self.next_batch += 1
        changed = {TableId.parse(r.table) for r in batch.records}
        for table in self.tables or sorted(changed):
            records = [r for r in batch.records if r.table == str(table)]
            ddl = [_ddl_event(c) for c in batch.schema_changes if c.table == table]
            if ddl:  # before the markers, as the Spark sink records them
                record_schema_changes(self.root, table, ddl, batch_id)
            if records or self.empty_batches:
                self.write_batch(table, batch_id, records, batch.end.to_dict() if self.end_offsets else None,
                                 batch.schemas)
        if self.progress:
            tables = tuple(str(t) for t in (self.tables or sorted(self.schemas)))
            write_stream_progress(self.root, StreamProgress(batch_id, batch.end, tables))
        return batch_id, changed

    def write_batch(
        self, table: TableId, batch_id: int, records: list[Record], end_offset: dict | None,
        versions: dict[str, TableSchema] | None = None,
    ) -> None:
        """The batch's files: one per schema version of the records (``versions``: schema id -> schema, as
        the stream read them; records without one are in ``self.schemas``), as the Spark sink writes them."""
        directory = changelog_dir(self.root, table, batch_id)
        os.makedirs(directory, exist_ok=True)
        groups: dict[str | None, list[Record]] = {}
        for record in records:
            groups.setdefault(record.schema_id, []).append(record)
        for n, (schema_id, group) in enumerate(groups.items()):
            schema = (versions or {}).get(schema_id) if schema_id is not None else None
            batch = records_batch(schema or self.schemas[table], group)
            pq.write_table(pa.Table.from_batches([batch]), os.path.join(directory, f"part-{n:05d}.parquet"))
        marker: dict = {"batch_id": batch_id, "rows": len(records)}
        if records:  # the files the batch committed, as the Spark sink names them
            marker["files"] = [f"part-{n:05d}.parquet" for n in range(len(groups))]
        if end_offset is not None:
            marker["end_offset"] = end_offset
        write_json_atomic(changelog_marker(self.root, table, batch_id), marker)
        if records:  # then the Delta commit, as the stream's sink makes it
            names = [f"part-{n:05d}.parquet" for n in range(len(groups))]
            DeltaChangelog(self.root, table).commit(batch_id, batch_files(self.root, table, batch_id, names),
                                                    end_offset)

    def stream_batches(self, rng: random.Random, count: int) -> list[tuple[int, set[TableId]]]:
        return [self.stream_batch(max_rows=rng.randint(20, 300)) for _ in range(count)]

    def drain(self, max_rows: int = 400) -> list[tuple[int, set[TableId]]]:
        """Batches until the stream has caught up with the binlog (the last one read nothing)."""
        out = []
        while True:
            out.append(self.stream_batch(max_rows=max_rows))
            if self.last_rows_read == 0:
                return out


def _ddl_event(change: SchemaChange) -> dict:
    """A DDL the stream followed, as the schema history records it."""
    return {"position": format_row_key(change.key), "verb": change.ddl.verb,
            "statement": change.ddl.statement, "changes": change.ddl.changes.to_dict(),
            "resnapshot": change.ddl.resnapshot,
            "commit_ts": change.commit_ts.isoformat() if change.commit_ts else None}


def _data_rows(data: pa.Table) -> list[dict]:
    names = [n for n in data.schema.names if n not in METADATA_NAMES]
    return values.canonical_pylist(data.select(names))


def drain_and_refresh(pipe: LayoutPipeline, refresher: MirrorRefresher) -> None:
    """Batches until the stream has caught up, each followed by the stream's mirror refresh hook."""
    for batch_id, changed in pipe.drain(max_rows=300):
        refresher.on_batch_committed(batch_id, sorted(changed, key=str))


def stream_while_writing(pipe: LayoutPipeline, refresher: MirrorRefresher, rng: random.Random,
                         workload: Workload, batches: int, transactions: int | None = None) -> None:
    """``batches`` stream batches, the writers running before each, each followed by the refresh hook.
    ``transactions``: the writers run for that many more transactions before each batch (a volume), else
    for 0.4 s."""
    for _ in range(batches):
        if transactions is None:
            workload.run_for(0.4)
        else:
            if workload.idle_at_bound:  # writers bounded by volume: this many more, then they idle
                workload.allow_transactions(transactions)
            workload.wait_for_transactions(transactions)
        batch_id, changed = pipe.stream_batch(max_rows=rng.randint(40, 300))
        refresher.on_batch_committed(batch_id, sorted(changed, key=str))

