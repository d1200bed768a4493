"""One record model for both phases: a snapshot row or a change, with where it sits in the binlog order.

Operations follow Flink's changelog: ``+I`` insert, ``-U`` update before image, ``+U`` update after image,
``-D`` delete. Snapshot records are ``+I`` at their chunk's high watermark.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from airflow_provider_mysqlcdc.engine.model.position_text import format_row_key
from airflow_provider_mysqlcdc.engine.model.positions import RowKey

Op = Literal["+I", "-U", "+U", "-D"]
Phase = Literal["snapshot", "stream"]
INSERT: Final = "+I"
UPDATE_BEFORE: Final = "-U"
UPDATE_AFTER: Final = "+U"
DELETE: Final = "-D"
RETRACTIONS = (UPDATE_BEFORE, DELETE)


@dataclass(frozen=True, slots=True)
class Record:
    table: str  # "database.table"
    op: Op
    phase: Phase
    key: RowKey  # (binlog file number, event end position, row index, half)
    values: dict[str, Any]
    commit_ts: datetime | None = None  # UTC, from the transaction's XID event (stream records)
    chunk_id: int | None = None  # snapshot records: the chunk that produced it
    generation: int | None = None  # snapshot records: the plan generation of that chunk
    binlog_file: str | None = None  # stream records: file of the event (the key holds its number)
    # stream records: the table's schema version at the event (TableSchema.schema_id)
    schema_id: str | None = None

    @property
    def position(self) -> str:
        return format_row_key(self.key)

    @property
    def is_retraction(self) -> bool:
        return self.op in RETRACTIONS
