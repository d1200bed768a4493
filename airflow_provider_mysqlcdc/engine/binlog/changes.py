"""What a binlog read yields: row changes, schema changes and heartbeats, each with where to resume after it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.ddl import TableDdl
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import RowKey
from airflow_provider_mysqlcdc.engine.model.records import Op, Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row image of a committed change, its place in the binlog order, and where to resume after it."""

    table: TableId
    op: Op
    values: dict[str, Any]
    key: RowKey  # (binlog file number, end of the rows event, row index in the event, half)
    binlog_file: str
    commit_ts: datetime  # UTC, from the transaction's commit (XID) event
    offset_after: BinlogOffset
    schema: TableSchema | None = None  # the table's schema when the event was written (its TABLE_MAP)

    def to_record(self) -> Record:
        return Record(
            table=str(self.table), op=self.op, phase="stream", key=self.key, values=self.values,
            commit_ts=self.commit_ts, binlog_file=self.binlog_file,
            schema_id=self.schema.schema_id if self.schema is not None else None,
        )


@dataclass(slots=True)
class RowBlock:
    """Consecutive row images of one rows event, column by column (what the decoders give), with where to
    resume after each: the unit the stream moves from the decoder to the changelog without a dict per change.

    Image ``j`` is row ``rows[j]``, half ``halves[j]`` of the event that ends at ``key_base`` (file number,
    position); ``columns[c][j]`` its value of ``schema.columns[c]``. The resume offset after it is inside the
    event, after the event, or the transaction's end (``boundary``, set on the transaction's last block)."""

    table: TableId
    schema: TableSchema
    ops: list[Op]
    rows: list[int]
    halves: list[int]
    columns: list[list[Any]]
    key_base: tuple[int, int]
    binlog_file: str
    commit_ts: datetime | None
    # resume offsets: image j is the (first + j)-th of the ``count`` images of rows event ``index`` of the
    # transaction that starts at ``start_file``:``start_pos``
    start_file: str
    start_pos: int
    index: int
    first: int
    count: int
    gtid_before: str | None
    boundary: BinlogOffset | None = None

    def __len__(self) -> int:
        return len(self.ops)

    def key(self, j: int) -> RowKey:
        return (self.key_base[0], self.key_base[1], self.rows[j], self.halves[j])

    def offset_after(self, j: int) -> BinlogOffset:
        if j == len(self.ops) - 1 and self.boundary is not None:
            return self.boundary
        c = self.first + j
        if c == self.count - 1:
            return BinlogOffset(self.start_file, self.start_pos, self.index + 1, 0, self.gtid_before)
        return BinlogOffset(self.start_file, self.start_pos, self.index, c + 1, self.gtid_before)

    def head(self, n: int) -> RowBlock:
        """The first ``n`` images (a read cut short by its row budget); resume offsets stay exact."""
        return RowBlock(
            self.table, self.schema, self.ops[:n], self.rows[:n], self.halves[:n],
            [col[:n] for col in self.columns], self.key_base, self.binlog_file, self.commit_ts,
            self.start_file, self.start_pos, self.index, self.first, self.count, self.gtid_before,
            self.boundary if n == len(self.ops) else None,
        )

    def changes(self) -> list[RowChange]:
        """The images as RowChanges (callers that read change by change)."""
        names = self.schema.column_names
        out = []
        for j, row in enumerate(zip(*self.columns) if self.columns else [()] * len(self.ops)):
            out.append(RowChange(self.table, self.ops[j], dict(zip(names, row)), self.key(j),
                                 self.binlog_file, self.commit_ts, self.offset_after(j), self.schema))  # type: ignore[arg-type]
        return out


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """DDL on a captured table the changelog follows (``ddl.resnapshot`` is None), or one a new plan of the
    table made at or after it covers; ``offset`` is right after the statement."""

    table: TableId
    key: RowKey  # (binlog file number, end of the DDL event, 0, 0): ordered with the row changes
    binlog_file: str
    commit_ts: datetime
    ddl: TableDdl
    offset: BinlogOffset


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The binlog moved on without a change of a captured table: a caller may commit ``offset``.
    ``commit_ts``: when the transaction that ended there was committed (None after a rotation)."""

    offset: BinlogOffset
    commit_ts: datetime | None = None
