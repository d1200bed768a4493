"""A watermark-mode chunk between its SELECT and its HW: the rows read, corrected by the binlog events between
the two markers (DBLog). Each event's images are kept only where they belong to this chunk (by their chunk
key), in binlog order: an insert or update replaces the row of its key, a delete removes it.

``ChunkBuffer`` holds Python rows (the pure-Python reader's), keyed by primary key, or as a multiset of whole
rows for a table without one. ``ArrowChunkBuffer`` holds the native reader's Arrow batches untouched and only
the final image of each key the events touched: the rows of those keys are dropped from the batches and the
images appended, so a chunk no event touched costs nothing here. It needs a primary key.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.changes import RowChange
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.key_changes import identity_columns, split_key_changes
from airflow_provider_mysqlcdc.engine.model.records import DELETE, UPDATE_BEFORE
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema


def chunk_images(schema: TableSchema, changes: list[RowChange], locator: ChunkLocator, chunk_id: int,
                 key_columns: tuple[str, ...]) -> Iterator[tuple[bool, tuple]]:
    """(removes, row in schema order) for each image of ``changes`` that belongs to chunk ``chunk_id``, in
    order; a key move is a delete of the old key and an insert of the new one."""
    images = split_key_changes(changes, identity_columns(schema.primary_key, key_columns))
    keys = [tuple(img.values.get(c) for c in key_columns) for img in images]
    owners = locator.locate(keys) if keys else []
    names = schema.column_names
    for image, owner in zip(images, owners):
        if owner == chunk_id:
            yield image.op in (DELETE, UPDATE_BEFORE), tuple(image.values.get(n) for n in names)


class ChunkBuffer:
    """The chunk's rows keyed by primary key (a multiset of whole rows for tables without one)."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        names = schema.column_names
        self._pk_index = [names.index(c) for c in schema.primary_key]
        self._by_key: dict[tuple, tuple] = {}
        self._multiset: Counter[tuple] = Counter()

    def load(self, rows: list[tuple]) -> None:
        if self._pk_index:
            for row in rows:
                self._by_key[tuple(row[i] for i in self._pk_index)] = row
        else:
            self._multiset.update(rows)

    def rows(self) -> list[tuple]:
        if self._pk_index:
            return list(self._by_key.values())
        return list(self._multiset.elements())

    def apply(self, changes: list[RowChange], locator: ChunkLocator, chunk_id: int,
              key_columns: tuple[str, ...]) -> int:
        """Replay (LW, HW] in order: insert/update replace,
        delete remove, each image filtered by its own chunk."""
        applied = 0
        for removes, row in chunk_images(self.schema, changes, locator, chunk_id, key_columns):
            applied += 1
            if self._pk_index:
                pk = tuple(row[i] for i in self._pk_index)
                if removes:
                    self._by_key.pop(pk, None)
                else:
                    self._by_key[pk] = row
            elif removes:
                if self._multiset[row] > 0:
                    self._multiset[row] -= 1
                    if not self._multiset[row]:
                        del self._multiset[row]
            else:
                self._multiset[row] += 1
        return applied


class ArrowChunkBuffer:
    """The native reader's batches of a chunk (``values.arrow_schema`` layout) and, per primary key the
    events touched, its final row (None: deleted)."""

    def __init__(self, schema: TableSchema, batches: list[pa.RecordBatch]) -> None:
        if not schema.primary_key:
            raise ValueError(f"{schema.table}: an ArrowChunkBuffer needs a primary key")
        self.schema, self._batches = schema, batches
        self._pk_index = [schema.column_names.index(c) for c in schema.primary_key]
        self._final: dict[tuple, tuple | None] = {}

    def apply(self, changes: list[RowChange], locator: ChunkLocator, chunk_id: int,
              key_columns: tuple[str, ...]) -> int:
        """As ``ChunkBuffer.apply``."""
        applied = 0
        for removes, row in chunk_images(self.schema, changes, locator, chunk_id, key_columns):
            applied += 1
            self._final[tuple(row[i] for i in self._pk_index)] = None if removes else row
        return applied

    def batches(self) -> list[pa.RecordBatch]:
        """The corrected rows: the batches without the touched
        keys' rows, then the touched keys' final rows."""
        if not self._final:
            return self._batches
        pk = list(self.schema.primary_key)
        keys_only = TableSchema(self.schema.table, tuple(self.schema.column(c) for c in pk), tuple(pk))
        # both sides through Arrow and back, so equal keys compare equal whatever their Python types
        touched_arrow = values.columns_to_arrow(keys_only, list(zip(*self._final)))
        touched = set(values.python_rows(touched_arrow, keys_only, pk))
        kept = []
        for batch in self._batches:
            mask = [key not in touched for key in values.python_rows(batch, self.schema, pk)]
            kept.append(batch.filter(pa.array(mask, pa.bool_())))
        final = [row for row in self._final.values() if row is not None]
        if final:
            kept.append(values.to_arrow_batch(self.schema, final))
        return [batch for batch in kept if batch.num_rows]
