"""Which binlog rows the stream phase emits.

Start at min(HW) over all committed chunks. Emit a row iff its event ends after the largest HW of its table,
or after the HW of the chunk that holds its key. Never drop a row unless a committed snapshot provably covers
it: a chunk that is planned but not committed (a newly added table, a rerun in progress) counts as HW = -inf,
and while a table has two plan generations in use (a re-plan not yet fully committed) a row is dropped only
if *every* generation's chunk covers it. Key-changing updates are split into -D/+I first, each half judged by
the chunk of its own row image.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from airflow_provider_mysqlcdc.engine.binlog.changes import RowBlock
from airflow_provider_mysqlcdc.engine.chunks.locator import Locator
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.key_changes import identity_columns, split_key_changes
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.records import (
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    Op,
    Record,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


@dataclass
class GenerationFilter:
    """One plan generation of a table: its chunk locator and each chunk's effective HW (None = -inf)."""

    generation: int
    key_columns: tuple[str, ...]
    locator: Locator
    high_watermarks: dict[int, BinlogPosition | None]

    def covered(self, images: Sequence, positions: list[tuple[int, int]]) -> list[bool]:
        keys = [tuple(img.values.get(c) for c in self.key_columns) for img in images]
        chunk_ids = self.locator.locate(keys)
        out = []
        for chunk_id, pos in zip(chunk_ids, positions):
            hw = self.high_watermarks.get(chunk_id)
            out.append(hw is not None and pos <= hw.key)
        return out

    def covered_block(self, block: RowBlock) -> list[bool]:
        """``covered`` for the images of one rows event (one position), their keys read off its columns."""
        names = block.schema.column_names
        nothing = [None] * len(block)
        keys = list(zip(*(block.columns[names.index(c)] if c in names else nothing
                          for c in self.key_columns)))
        pos = block.key_base
        out = []
        for chunk_id in self.locator.locate(keys):
            hw = self.high_watermarks.get(chunk_id)
            out.append(hw is not None and pos <= hw.key)
        return out


@dataclass
class TableFilter:
    """A table's generations as of one chunk store read; never changed afterwards (``StreamFilter.update``
    swaps in a new one), so its largest HW is computed once, not once per read of the binlog."""

    schema: TableSchema
    generations: list[GenerationFilter] = field(default_factory=list)

    @functools.cached_property
    def max_high_watermark(self) -> tuple[int, int] | None:
        """Past this every row of the table is emitted (None: nothing committed, so everything is)."""
        committed = [hw.key for g in self.generations for hw in g.high_watermarks.values() if hw is not None]
        return max(committed) if committed else None


class StreamFilter:
    """Decides emission for batches of binlog row changes (anything with table/op/values/key/commit_ts)."""

    def __init__(self, tables: Iterable[TableFilter]) -> None:
        self.tables: dict[TableId, TableFilter] = {t.schema.table: t for t in tables}
        self.emitted = 0
        self.dropped = 0

    def update(self, table_filter: TableFilter) -> None:
        """Swap in fresh chunk HWs (a rerun committed, a table was added or re-planned)."""
        self.tables[table_filter.schema.table] = table_filter

    def remove(self, table: TableId) -> None:
        self.tables.pop(table, None)

    def apply_blocks(self, blocks: Sequence[RowBlock]) -> list[EmittedRows]:
        """``apply`` for row blocks (the stream's hot path): the same decisions, no Python object per change.
        A rows event has one position, so a block past its table's largest HW is kept whole."""
        out: list[EmittedRows] = []
        past: dict[TableId, tuple[int, int] | None] = {}
        identities: dict[TableId, tuple[str, ...]] = {}
        # per table and schema version: where the identity columns are (computed once, not per event)
        indexes: dict[tuple[TableId, str], list[int]] = {}
        for block in blocks:
            tf = self.tables.get(block.table)
            if tf is None:
                continue
            if block.table not in identities:
                key_columns = {c for g in tf.generations for c in g.key_columns}
                identities[block.table] = identity_columns(tf.schema.primary_key, sorted(key_columns))
                past[block.table] = tf.max_high_watermark
            version = (block.table, block.schema.schema_id)
            where = indexes.get(version)
            if where is None:
                names = block.schema.column_names
                where = indexes[version] = [names.index(c) for c in identities[block.table] if c in names]
            ops = _split_key_changes(block.ops, [block.columns[i] for i in where])
            keep: list[bool] | None = None
            past_max = past[block.table]
            if past_max is not None and block.key_base <= past_max:
                covered_all = [True] * len(block)
                for generation in tf.generations:
                    for j, covered in enumerate(generation.covered_block(block)):
                        covered_all[j] = covered_all[j] and covered
                keep = [not c for c in covered_all]
            emitted = EmittedRows(block, ops, keep)
            kept = len(emitted)
            self.emitted += kept
            self.dropped += len(block) - kept
            if kept:
                out.append(emitted)
        return out

    def apply(self, changes: Sequence) -> list[Record]:
        """The change-by-change form of ``apply_blocks`` (RowChanges in, Records out): what the columnar path
        replaced, kept as the reference it is tested against (tests/engine/test_row_blocks.py)."""
        by_table: dict[TableId, list] = defaultdict(list)
        order: list[TableId] = []
        for change in changes:
            if change.table not in self.tables:
                continue
            if change.table not in by_table:
                order.append(change.table)
            by_table[change.table].append(change)
        emitted: list[Record] = []
        for table in order:
            emitted.extend(self._apply_table(self.tables[table], by_table[table]))
        emitted.sort(key=lambda r: r.key)
        return emitted

    def _apply_table(self, tf: TableFilter, changes: list) -> list[Record]:
        key_columns = {c for g in tf.generations for c in g.key_columns}
        identity = identity_columns(tf.schema.primary_key, sorted(key_columns))
        images = split_key_changes(changes, identity)
        positions = [(img.key[0], img.key[1]) for img in images]
        keep = [True] * len(images)
        past_max = tf.max_high_watermark
        if past_max is not None:
            candidates = [i for i, pos in enumerate(positions) if pos <= past_max]
            if candidates:
                sub_images = [images[i] for i in candidates]
                sub_pos = [positions[i] for i in candidates]
                covered_all = [True] * len(candidates)
                for generation in tf.generations:
                    for j, covered in enumerate(generation.covered(sub_images, sub_pos)):
                        covered_all[j] = covered_all[j] and covered
                for j, i in enumerate(candidates):
                    keep[i] = not covered_all[j]
        table_name = str(tf.schema.table)
        out = []
        for image, emit in zip(images, keep):
            if not emit:
                self.dropped += 1
                continue
            self.emitted += 1
            out.append(
                Record(
                    table=table_name, op=image.op, phase="stream", key=image.key, values=image.values,
                    commit_ts=image.commit_ts, binlog_file=image.binlog_file,
                    schema_id=image.schema.schema_id if getattr(image, "schema", None) is not None else None,
                )
            )
        return out


@dataclass
class EmittedRows:
    """What the filter keeps of one ``RowBlock``: its images marked in ``keep`` (None: all), with the ops a
    key-changing update takes (-D/+I)."""

    block: RowBlock
    ops: list[Op]
    keep: list[bool] | None

    def __len__(self) -> int:
        return len(self.ops) if self.keep is None else sum(self.keep)

    def records(self) -> list[Record]:
        block = self.block
        names = block.schema.column_names
        table, schema_id = str(block.table), block.schema.schema_id
        rows = zip(*block.columns) if block.columns else [()] * len(block)
        return [
            Record(table=table, op=self.ops[j], phase="stream", key=block.key(j),
                   values=dict(zip(names, row)), commit_ts=block.commit_ts, binlog_file=block.binlog_file,
                   schema_id=schema_id)
            for j, row in enumerate(rows) if self.keep is None or self.keep[j]
        ]


def split_block_key_changes(block: RowBlock, identity: Sequence[str]) -> list[Op]:
    """``split_key_changes`` on a block: the ops of its
    images, -U/+U pairs whose identity differs as -D/+I."""
    names = block.schema.column_names
    return _split_key_changes(block.ops, [block.columns[names.index(c)] for c in identity if c in names])


def _split_key_changes(block_ops: list[Op], columns: list[list]) -> list[Op]:
    """The ops of a block's images given its identity columns: -U/+U pairs whose identity differs as -D/+I."""
    if UPDATE_BEFORE not in block_ops:
        return block_ops  # nothing to split: the block's own list (never changed by the caller)
    if len(block_ops) == 2 and block_ops[1] == UPDATE_AFTER:  # one row's update (OLTP)
        for col in columns:
            if col[0] != col[1]:
                return [DELETE, INSERT]
        return block_ops
    ops = list(block_ops)
    j, n = 0, len(ops)
    while j < n:
        if ops[j] == UPDATE_BEFORE and j + 1 < n and ops[j + 1] == UPDATE_AFTER:
            if any(col[j] != col[j + 1] for col in columns):
                ops[j], ops[j + 1] = DELETE, INSERT
            j += 2
            continue
        j += 1
    return ops


def stream_start(high_watermarks: Iterable[BinlogPosition | None]) -> BinlogPosition:
    """min(HW) over all committed chunks: every row a chunk does not cover lies after it."""
    committed = [hw for hw in high_watermarks if hw is not None]
    if not committed:
        raise CdcError(
            "no committed chunk: run the snapshot phase before the stream (or choose a start offset)"
        )
    return min(committed)
