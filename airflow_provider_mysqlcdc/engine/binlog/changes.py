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
    """The binlog moved on without a change of a captured table: a caller may commit ``offset``."""

    offset: BinlogOffset
