"""Transaction bookkeeping of a binlog read: a group's rows are held until its commit, each with the offset a
new read resumes from right after it (the group's start plus rows events and row images to skip)."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedVersion
from airflow_provider_mysqlcdc.engine.binlog.changes import RowBlock
from airflow_provider_mysqlcdc.engine.binlog.ddl import TableDdl
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import decoded_columns
from airflow_provider_mysqlcdc.engine.binlog.errors import OffsetMismatch, UnsupportedEvent
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, Op
from airflow_provider_mysqlcdc.engine.model.tables import TableId


@dataclass
class Transaction:
    """The transaction being read: where it starts, what it holds so far."""

    start: BinlogPosition
    gtid: str | None
    began: bool  # inside BEGIN ... COMMIT (else the group is a single statement)
    rows_events: int = 0  # rows events seen, of every table (the unit of skip_events)
    captured: bool = False  # holds rows events of a captured table (emitted or skipped)
    buffer: list[RowBlock] = field(default_factory=list)  # the captured rows, in binlog order
    ddl: list[tuple[TableId, TableDdl]] = field(default_factory=list)  # DDL of captured tables in this group


ROWS_WRITE, ROWS_UPDATE, ROWS_DELETE = "write", "update", "delete"  # what a rows event does to its rows
_KINDS = {WriteRowsEvent: ROWS_WRITE, UpdateRowsEvent: ROWS_UPDATE, DeleteRowsEvent: ROWS_DELETE}
_HALVES = {ROWS_WRITE: ("values",), ROWS_DELETE: ("values",), ROWS_UPDATE: ("before_values", "after_values")}
_file_number = functools.lru_cache(maxsize=64)(file_number)  # the same few files, event after event


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
    """Decode a captured rows event (mysql-replication's object) into a ``RowBlock`` of the transaction
    (less its first ``skip`` images)."""
    if event.__class__ is PartialUpdateRowsEvent:
        raise UnsupportedEvent(
            f"partial JSON update of {target.table} at {cur_file}:{end_pos}: set "
            "binlog_row_value_options='' so the binlog carries full row images"
        )
    names = target.schema.column_names
    columns: dict[str, list[list]] | None = None
    if target.layout is not None:
        columns = decoded_columns(event, target.layout, target.table, names,
                                  lambda: python_images(event, target))
    if columns is None:
        columns = {half: _columnar(images, names) for half, images in python_images(event, target).items()}
    add_block(_KINDS[event.__class__], columns, target, txn, index, skip, cur_file, end_pos, gtid_before)


def add_block(
    kind: str,
    columns: dict[str, list[list]],
    target: CapturedVersion,
    txn: Transaction,
    index: int,
    skip: int,
    cur_file: str,
    end_pos: int,
    gtid_before: str | None,
) -> None:
    """The decoded images of one rows event (columns by half, mysql-replication's keys) as a ``RowBlock`` of
    the transaction, less its first ``skip`` images."""
    add_images(kind, [columns[half] for half in _HALVES[kind]], target, txn, index, skip, cur_file, end_pos,
               gtid_before)


def add_images(
    kind: str,
    images: Sequence[list[list]],
    target: CapturedVersion,
    txn: Transaction,
    index: int,
    skip: int,
    cur_file: str,
    end_pos: int,
    gtid_before: str | None,
) -> None:
    """``add_block`` with the columns of each half in order (before, after for an update), as the compiled
    decoder gives them."""
    if kind == ROWS_UPDATE:
        before, after = images
        n = len(before[0]) if before else 0
        if n == 1:  # one row (OLTP): its before and after images side by side
            values = [[b[0], a[0]] for b, a in zip(before, after)]
        else:
            values = [[v for pair in zip(b, a) for v in pair] for b, a in zip(before, after)]
        ops: list[Op] = [UPDATE_BEFORE, UPDATE_AFTER] * n
        rows = [i for i in range(n) for _ in (0, 1)]
        halves = [BEFORE, AFTER] * n
    else:
        values = images[0]
        n = len(values[0]) if values else 0
        insert = kind == ROWS_WRITE
        ops = [INSERT if insert else DELETE] * n
        rows = list(range(n))
        halves = [AFTER if insert else BEFORE] * n
    count = len(ops)
    if skip > count:
        raise OffsetMismatch(
            f"offset skips {skip} row images of the rows event ending at {cur_file}:{end_pos}, which has "
            f"only {count}: the offset does not match this binlog"
        )
    number, pos = _file_number(cur_file), end_pos
    if skip:
        ops, rows, halves, values = ops[skip:], rows[skip:], halves[skip:], [col[skip:] for col in values]
    if not ops:
        return
    txn.buffer.append(RowBlock(
        target.table, target.schema, ops, rows, halves, values, (number, pos), cur_file, None,
        txn.start.file, txn.start.pos, index, skip, count, gtid_before,
    ))


def _columnar(images: list[dict], names: list[str]) -> list[list]:
    return [[image[name] for image in images] for name in names]


def python_images(event: Any, target: CapturedVersion) -> dict[str, list[dict]]:
    """mysql-replication's row images of ``event``, normalised, by half (the reference path)."""
    normalize = target.normalize
    if event.__class__ is UpdateRowsEvent:
        rows = event.rows
        return {
            "before_values": [normalize(r["before_values"], r["before_none_sources"]) for r in rows],
            "after_values": [normalize(r["after_values"], r["after_none_sources"]) for r in rows],
        }
    return {"values": [normalize(r["values"], r["none_sources"]) for r in event.rows]}
