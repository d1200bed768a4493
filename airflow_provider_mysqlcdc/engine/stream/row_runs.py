"""The emitted images of one table and schema version gathered across rows events, column by column, so the
changes of many small events become one Arrow batch instead of one each.

Why: on an OLTP binlog every rows event holds one row. Building an Arrow record batch per event (its schema,
its arrays, a filter) cost ~150 us, far more than reading and decoding the event; gathering the decoder's
columns into lists costs a few list extends per event, and the arrays are built once per ``size`` changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.model.arrow_batches import changes_batch
from airflow_provider_mysqlcdc.engine.model.position_text import format_row_keys
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.stream.filter import EmittedRows


@dataclass
class RowRun:
    """Changes of one table and schema version in binlog order: ops, ``_position`` texts, commit times and
    the values of each column (schema order), one entry per change."""

    schema: TableSchema
    ops: list[str] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)
    commit_ts: list[Any] = field(default_factory=list)
    columns: list[list[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.columns:
            self.columns = [[] for _ in self.schema.columns]

    def __len__(self) -> int:
        return len(self.ops)

    def add(self, emitted: EmittedRows) -> None:
        """The images the filter kept of one rows event."""
        block, keep = emitted.block, emitted.keep
        positions = format_row_keys(*block.key_base, block.rows, block.halves)
        if keep is None:
            self.ops += emitted.ops
            self.positions += positions
            self.commit_ts += [block.commit_ts] * len(positions)
            for mine, theirs in zip(self.columns, block.columns):
                mine += theirs
            return
        kept = [j for j, k in enumerate(keep) if k]
        self.ops += [emitted.ops[j] for j in kept]
        self.positions += [positions[j] for j in kept]
        self.commit_ts += [block.commit_ts] * len(kept)
        for mine, theirs in zip(self.columns, block.columns):
            mine += [theirs[j] for j in kept]

    def take(self, n: int) -> pa.RecordBatch:
        """The first ``n`` changes as one record batch (``arrow_batches.record_schema``); the rest stay."""
        batch = changes_batch(self.schema, self.ops[:n], self.positions[:n], self.commit_ts[:n],
                              [col[:n] for col in self.columns])
        del self.ops[:n], self.positions[:n], self.commit_ts[:n]
        for col in self.columns:
            del col[:n]
        return batch
