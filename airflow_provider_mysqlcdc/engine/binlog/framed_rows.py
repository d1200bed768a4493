"""A captured rows event the compiled framer parsed, decoded into a ``RowBlock`` of its transaction.

The compiled rows decoder reads the row images straight from the received bytes where the framer found them
(no mysql-replication packet, no event object, no dict of halves: the columns go straight into the block); a
table whose TABLE_MAP has no compiled layout, or an event whose column count is not its layout's, takes
mysql-replication's path on the same packet instead (said once per table in the log).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedVersion
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import framed_columns
from airflow_provider_mysqlcdc.engine.binlog.transaction import (
    ROWS_DELETE,
    ROWS_UPDATE,
    ROWS_WRITE,
    Transaction,
    add_block,
    add_images,
    decode_rows,
    python_images,
)

# rows event type codes: v1 (MariaDB) and v2 (Oracle MySQL)
KINDS = {0x17: ROWS_WRITE, 0x18: ROWS_UPDATE, 0x19: ROWS_DELETE,
         0x1E: ROWS_WRITE, 0x1F: ROWS_UPDATE, 0x20: ROWS_DELETE}


def decode_framed_rows(
    event: Any,
    target: CapturedVersion,
    txn: Transaction,
    index: int,
    skip: int,
    cur_file: str,
    gtid_before: str | None,
    parsed: Callable[[], Any],
    compare: bool,
) -> None:
    """``decode_rows`` for a ``FramedEvent``; ``parsed()`` gives mysql-replication's object of the same
    packet (the Python path, and the reference ``compare`` mode checks the compiled decoder against)."""
    kind = KINDS[event.event_type]
    layout = target.layout
    if not compare and target.layout_matches and event.column_count == layout.column_count:
        update = kind is ROWS_UPDATE
        images, _ = layout.compiled.decode(event.data, event.body_start, event.body_end, event.present,
                                           event.present_after if update else None)
        add_images(kind, images, target, txn, index, skip, cur_file, event.log_pos, gtid_before)
        return
    columns = None
    if target.layout is not None:
        columns = framed_columns(event, target.layout, target.table, target.column_names,
                                 kind == ROWS_UPDATE, lambda: python_images(parsed(), target), compare)
    if columns is None:
        decode_rows(parsed(), target, txn, index, skip, cur_file, event.log_pos, gtid_before)
        return
    add_block(kind, columns, target, txn, index, skip, cur_file, event.log_pos, gtid_before)
