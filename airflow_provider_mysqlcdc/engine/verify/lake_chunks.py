"""A table's chunks as the lake holds them, for ``verify``: by the mirror rule at any binlog position, and as
the mirror's files hold them.

* **The rule's state** of a chunk at position P: its committed snapshot plus its changelog records after its
  HW and at or before P, latest per key (a multiset without a primary key). What the lake promises; a
  missing changelog file, a snapshot file that lost rows or a value changed on the way shows here.
* **The mirror's state**: the chunk's current mirror files, which must equal the rule's state through the
  batch they were built to (``through_batch``). What consumers read; a stale or damaged mirror file shows
  here.

The table's committed changelog is read once (each record located in its chunk, kept after that chunk's HW),
then every chunk's states come from it in memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.chunk_store import MirrorChunk
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_apply import apply_latest, apply_multiset
from airflow_provider_mysqlcdc.engine.lake.mirror_dv_refresh import chunk_state
from airflow_provider_mysqlcdc.engine.lake.mirror_files import read_snapshot
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import (
    MirrorChunkEntry,
    MirrorManifest,
    read_manifest,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_records import (
    CHUNK,
    OP,
    POSITION,
    after_chunk_hw,
    after_watermark,
    read_changes,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorBuild, MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.position_text import after_bound
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

BATCH = "_batch"


@dataclass(frozen=True)
class MissingFile:
    """A changelog file a committed batch names that is gone, and where that batch ended."""

    path: str
    batch_end: BinlogPosition | None  # None: unknown (an old marker): it may hold any chunk's changes


@dataclass
class LakeTable:
    root: str
    build: MirrorBuild
    manifest: MirrorManifest | None
    records: pa.Table  # every committed record after its chunk's HW: _op, _position, columns, _batch, _chunk
    missing: tuple[MissingFile, ...] = ()  # changelog files committed batches name that are gone

    @classmethod
    def load(cls, refresher: MirrorRefresher, table: TableId) -> LakeTable:
        build = refresher.build_of(table)
        root = refresher.root
        # the manifest before the changelog: every batch it was built through is then among the batches read
        # below (a refresh only applies committed batches); read after them, a batch committed and refreshed
        # in between made the mirror look changed (its rows ahead of the records the rule is built from)
        manifest = read_manifest(root, table)
        hws = {c.chunk_id: c.hw for c in build.view.chunks}
        parts, missing = [], []
        for batch_id in committed_batch_ids(root, table):
            marker = read_batch(root, table, batch_id)
            files = list(after_watermark(marker, min(hws.values())))
            gone = [f for f in files if not _exists(f)]
            end = marker.end_offset.ordered_position if marker.end_offset is not None else None
            missing += [MissingFile(f, end) for f in gone]
            files = [f for f in files if f not in gone]
            part = read_changes(files, build.data_schema, min(hws.values()), build.history, str(table))
            if part.num_rows:
                ids = pa.array(np.full(part.num_rows, batch_id), pa.int64())
                parts.append(part.append_column(BATCH, ids))
        if parts:
            changes = pa.concat_tables(parts)
            records = after_chunk_hw(refresher.assigner_of(build), changes, build.plan, hws)
        else:
            records = pa.schema([pa.field(OP, pa.string()), pa.field(POSITION, pa.string()),
                                 *build.data_schema, pa.field(BATCH, pa.int64()),
                                 pa.field(CHUNK, pa.int32())]).empty_table()
        return cls(root, build, manifest, records, tuple(missing))

    @property
    def table(self) -> TableId:
        return self.build.table

    def missing_for(self, chunk_id: int) -> list[str]:
        """The missing changelog files that may have held changes of the chunk after its HW (their batch
        ended after it): the chunk's rows by the mirror rule may lack those changes."""
        hw = self.chunk(chunk_id).hw
        return [m.path for m in self.missing if m.batch_end is None or m.batch_end > hw]

    def chunk(self, chunk_id: int) -> MirrorChunk:
        for c in self.build.view.chunks:
            if c.chunk_id == chunk_id:
                return c
        raise KeyError(chunk_id)

    def rule_state(self, chunk_id: int, *, at: BinlogPosition | None = None,
                   through_batch: int | None = None) -> pa.Table:
        """The chunk's rows by the mirror rule, with the records at or before ``at`` (or of the batches up to
        ``through_batch``)."""
        state = read_snapshot(self.root, self.table, self.build.view.generation, self.chunk(chunk_id),
                              self.build.data_schema, self.build.history)
        return self._apply(state, self.records_of(chunk_id, at=at, through_batch=through_batch))

    def records_of(self, chunk_id: int, *, at: BinlogPosition | None = None,
                   through_batch: int | None = None) -> pa.Table:
        """The chunk's records after its HW, at or before ``at`` and/or of the batches up to
        ``through_batch`` (neither: none)."""
        records = self._chunk_records(chunk_id)
        if at is None and through_batch is None:
            return records.slice(0, 0)
        if at is not None:
            records = records.filter(pc.less(records.column(POSITION), after_bound(at)))
        if through_batch is not None:
            records = records.filter(pc.less_equal(records.column(BATCH), through_batch))
        return records

    def change_points(self, chunk_id: int, low: BinlogPosition, high: BinlogPosition) -> list[BinlogPosition]:
        """The positions in ``(low, high]`` where the chunk's rows changed (the event ends, oldest first)."""
        records = self._chunk_records(chunk_id)
        positions = records.column(POSITION)
        inside = pc.and_(pc.greater(positions, after_bound(low)), pc.less(positions, after_bound(high)))
        ends = sorted({":".join(p.split(":")[:2]) for p in positions.filter(inside).to_pylist()})
        base, _, digits = high.file.rpartition(".")
        return [BinlogPosition(f"{base}.{int(n):0{len(digits)}d}", int(p))
                for n, p in (e.split(":") for e in ends)]

    def mirror_entry(self, chunk_id: int) -> MirrorChunkEntry | None:
        """The chunk's mirror files, if they are built on its current snapshot (else a refresh is due)."""
        if self.manifest is None or self.manifest.generation != self.build.view.generation:
            return None
        chunk = self.chunk(chunk_id)
        for entry in self.manifest.chunks:
            if entry.chunk_id == chunk_id:
                fresh = entry.snapshot_version == chunk.output_version and entry.high_watermark == chunk.hw
                return entry if fresh else None
        return None

    def mirror_state(self, entry: MirrorChunkEntry) -> pa.Table:
        """The chunk's live rows (with deletion vectors: its row ranges minus the deleted rows)."""
        assert self.manifest is not None
        return chunk_state(self.root, self.table, self.manifest, entry, self.build.data_schema)

    def _chunk_records(self, chunk_id: int) -> pa.Table:
        if self.records.num_rows == 0:
            return self.records
        return self.records.filter(pc.equal(self.records.column(CHUNK), chunk_id))

    def _apply(self, state: pa.Table, records: pa.Table) -> pa.Table:
        if records.num_rows == 0:
            return state
        key = self.build.primary_key
        changes = records.select([OP, POSITION, *self.build.data_schema.names])
        return apply_latest(state, changes, key) if key else apply_multiset(state, changes)


def _exists(path: str) -> bool:
    fs, inner = filesystem(path)
    return bool(fs.get_file_info(inner).type != pafs.FileType.NotFound)
