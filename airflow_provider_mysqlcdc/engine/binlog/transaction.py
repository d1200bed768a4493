"""Transaction bookkeeping of a binlog read: a group's rows are held until its commit, each with the offset a
new read resumes from right after it (the group's start plus rows events and row images to skip)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.row_event import PartialUpdateRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedVersion
from airflow_provider_mysqlcdc.engine.binlog.ddl import TableDdl
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import decoded_images
from airflow_provider_mysqlcdc.engine.binlog.errors import OffsetMismatch, UnsupportedEvent
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, RowKey, row_key
from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, Op
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


@dataclass
class Transaction:
    """The transaction being read: where it starts, what it holds so far."""

    start: BinlogPosition
    gtid: str | None
    began: bool  # inside BEGIN ... COMMIT (else the group is a single statement)
    rows_events: int = 0  # rows events seen, of every table (the unit of skip_events)
    captured: bool = False  # holds rows events of a captured table (emitted or skipped)
    # (table, op, values, key, file, offset after this image) of the captured rows, in binlog order
    buffer: list[tuple[TableId, Op, dict, RowKey, str, BinlogOffset, TableSchema]] = field(default_factory=list)
    ddl: list[tuple[TableId, TableDdl]] = field(default_factory=list)  # DDL of captured tables in this group


def decode_rows(
    event: Any,
    target: CapturedVersion,
    txn: Transaction,
    index: int,
    skip: int,
    cur_file: str,
    end_pos: int,
    gtid_before: str | None,
) -> None:
    if event.__class__ is PartialUpdateRowsEvent:
        raise UnsupportedEvent(
            f"partial JSON update of {target.table} at {cur_file}:{end_pos}: set "
            "binlog_row_value_options='' so the binlog carries full row images"
        )
    table = target.table
    base = row_key(BinlogPosition(cur_file, end_pos))
    number, pos = base[0], base[1]
    start_pos, file = txn.start.pos, txn.start.file
    decoded = None
    if target.layout is not None:
        decoded = decoded_images(event, target.layout, table, lambda: _python_images(event, target))
    if decoded is None:
        decoded = _python_images(event, target)
    images: list[tuple[Op, dict, RowKey]] = []
    if event.__class__ is UpdateRowsEvent:
        for i, (before, after) in enumerate(zip(decoded["before_values"], decoded["after_values"])):
            images.append((UPDATE_BEFORE, before, (number, pos, i, BEFORE)))
            images.append((UPDATE_AFTER, after, (number, pos, i, AFTER)))
    else:
        op, half = (INSERT, AFTER) if event.__class__ is WriteRowsEvent else (DELETE, BEFORE)
        for i, values in enumerate(decoded["values"]):
            images.append((op, values, (number, pos, i, half)))
    count = len(images)
    if skip > count:
        raise OffsetMismatch(
            f"offset skips {skip} row images of the rows event ending at {cur_file}:{end_pos}, which has "
            f"only {count}: the offset does not match this binlog"
        )
    buffer = txn.buffer
    next_event = BinlogOffset(file, start_pos, index + 1, 0, gtid_before)
    for c in range(skip, count):
        op, values, key = images[c]
        after = next_event if c == count - 1 else BinlogOffset(file, start_pos, index, c + 1, gtid_before)
        buffer.append((table, op, values, key, cur_file, after, target.schema))


def _python_images(event: Any, target: CapturedVersion) -> dict[str, list[dict]]:
    """mysql-replication's row images of ``event``, normalised, by half (the reference path)."""
    normalize = target.normalize
    if event.__class__ is UpdateRowsEvent:
        rows = event.rows
        return {
            "before_values": [normalize(r["before_values"], r["before_none_sources"]) for r in rows],
            "after_values": [normalize(r["after_values"], r["after_none_sources"]) for r in rows],
        }
    return {"values": [normalize(r["values"], r["none_sources"]) for r in event.rows]}
