"""The changelog records a mirror refresh applies, per chunk: read after a watermark in the table's newest
columns, each located in the chunk of its own key and kept only if it is after that chunk's HW."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from airflow_provider_mysqlcdc.engine.chunk_store import MirrorView
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.lake.changelog import CommittedBatch, read_batch
from airflow_provider_mysqlcdc.engine.lake.chunk_assigner import ChunkAssigner
from airflow_provider_mysqlcdc.engine.lake.file_types import engine_types
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_files import parquet_dataset
from airflow_provider_mysqlcdc.engine.lake.schema_history import SchemaEvent, conform
from airflow_provider_mysqlcdc.engine.model.position_text import after_bound
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

OP, POSITION, CHUNK = "_op", "_position", "_chunk"


@dataclass(frozen=True)
class ChunkRecords:
    per_chunk: dict[int, pa.Table]  # chunk id -> its records after its HW, by position (only non-empty)
    read: int  # records read from the files
    latest_position: str | None  # the latest ``_position`` among the new batches' records


def chunk_records(
    root: str,
    table: TableId,
    assigner: ChunkAssigner,
    plan: ChunkPlan,
    view: MirrorView,
    data_schema: pa.Schema,
    new_batches: list[CommittedBatch],
    old_ids: list[int],
    rebuild: set[int],
    history: list[SchemaEvent],
) -> ChunkRecords:
    """Records after their chunk's HW, per chunk: of the new batches for every chunk, and of the batches
    applied before only for the chunks being rebuilt."""
    hws = {c.chunk_id: c.hw for c in view.chunks}
    new = read_changes([f for b in new_batches for f in b.files], data_schema, min(hws.values()), history,
                       str(table))
    latest = pc.max(new.column(POSITION)).as_py() if new.num_rows else None
    per_new = dict(_slices(after_chunk_hw(assigner, new, plan, hws)))
    read = new.num_rows
    per_old: dict[int, pa.Table] = {}
    if rebuild and old_ids:
        floor = min(hws[c] for c in rebuild)
        files = [f for b in old_ids for f in after_watermark(read_batch(root, table, b), floor)]
        old = read_changes(files, data_schema, floor, history, str(table))
        read += old.num_rows
        per_old = dict(_slices(_only_chunks(after_chunk_hw(assigner, old, plan, hws), rebuild)))
    per_chunk = {cid: t for cid, t in per_new.items() if t.num_rows}
    for cid, t in per_old.items():
        per_chunk[cid] = _concat_sorted([t, per_chunk.get(cid)])
    return ChunkRecords(per_chunk, read, latest)


def after_watermark(batch: CommittedBatch, watermark: BinlogPosition) -> tuple[str, ...]:
    """The files of ``batch`` unless the whole batch ended at or before ``watermark`` (its records are all
    covered then: a rebuild after a re-snapshot opens no file of the batches before the new HWs)."""
    end = batch.end_offset
    return batch.files if end is None or end.ordered_position > watermark else ()


def after_chunk_hw(
    assigner: ChunkAssigner, changes: pa.Table, plan: ChunkPlan, hws: dict[int, BinlogPosition]
) -> pa.Table:
    """``changes`` after their chunk's HW, with their chunk id, sorted by chunk and position."""
    index = assigner.indexes(changes)
    ids = pa.array(np.asarray(assigner.chunk_ids, dtype=np.int32)[index], pa.int32())
    bounds = pa.array([after_bound(hws[c.chunk_id]) for c in plan.chunks]).take(pa.array(index))
    keep = pc.greater(changes.column(POSITION), bounds)
    tagged = changes.append_column(CHUNK, ids).filter(keep)
    return tagged.sort_by([(CHUNK, "ascending"), (POSITION, "ascending")])


def _change_schema(data_schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(OP, pa.string()), pa.field(POSITION, pa.string()), *data_schema])


def read_changes(
    files: list[str], data_schema: pa.Schema, after: BinlogPosition, history: list[SchemaEvent] | None = None,
    name: str = "",
) -> pa.Table:
    """``_op``, ``_position`` and the table columns of the records in ``files`` after ``after``, in the
    newest columns (``schema_history``) when the table's columns changed while the stream ran.

    The filter prunes row groups by their ``_position`` statistics, so batches wholly before the watermark
    cost a footer read."""
    schema = _change_schema(data_schema)
    if not files:
        return schema.empty_table()
    if history:
        parts: list[pa.Table] = []
        for f in files:
            fs, inner = filesystem(f)
            part = engine_types(ds.dataset(inner, format="parquet", filesystem=fs).to_table(
                filter=pc.field(POSITION) > after_bound(after)
            ))
            if part.num_rows:
                parts.extend(_conformed_changes(part, history, data_schema, name))
        return pa.concat_tables(parts).cast(schema) if parts else schema.empty_table()
    return parquet_dataset(files, schema).to_table(filter=pc.field(POSITION) > after_bound(after))


def _conformed_changes(
    part: pa.Table, history: list[SchemaEvent], data_schema: pa.Schema, name: str
) -> Iterator[pa.Table]:
    """The records of one file in the newest columns: each record gets the DDL that came after it."""
    marks = np.array([e.position for e in history])  # fixed-width strings: they sort like the positions
    buckets = np.searchsorted(marks, part.column(POSITION).to_numpy(zero_copy_only=False), side="right")
    for i in np.unique(buckets):
        rows = part.filter(pa.array(buckets == i))
        yield conform(rows, history[int(i):], data_schema, name, keep=(OP, POSITION))


def _only_chunks(table: pa.Table, chunk_ids: set[int]) -> pa.Table:
    return table.filter(pc.is_in(table.column(CHUNK), value_set=pa.array(sorted(chunk_ids), pa.int32())))


def _slices(table: pa.Table | None) -> Iterator[tuple[int, pa.Table]]:
    """(chunk id, its records) of a table sorted by chunk."""
    if table is None or table.num_rows == 0:
        return
    ids = table.column(CHUNK).to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    for start, end in zip(starts, ends):
        yield int(ids[start]), table.slice(int(start), int(end - start))


def _concat_sorted(parts: list[pa.Table | None]) -> pa.Table:
    present = [p for p in parts if p is not None]
    return pa.concat_tables(present).sort_by(POSITION)
