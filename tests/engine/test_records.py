"""Records of both phases share one Arrow layout: metadata columns, then the table's columns."""
from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES, records_batch, snapshot_batch
from airflow_provider_mysqlcdc.engine.model.position_text import format_row_key
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema

SCHEMA = TableSchema(
    TableId("shop", "orders"),
    (
        Column("id", "bigint", "bigint(20) unsigned", False),
        Column("amount", "decimal", "decimal(12,2)", True, numeric_precision=12, numeric_scale=2),
    ),
    ("id",),
)


def test_snapshot_and_stream_batches_share_the_schema():
    hw = BinlogPosition("mysql-bin.000012", 4711)
    snap = snapshot_batch(SCHEMA, [(2**64 - 1, Decimal("1.50"))], hw, chunk_id=3, generation=2)
    end = BinlogPosition("mysql-bin.000012", 5000)
    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    stream = records_batch(SCHEMA, [
        Record("shop.orders", "-U", "stream", row_key(end, 0, BEFORE), {"id": 7, "amount": Decimal("1.00")},
               ts),
        Record("shop.orders", "+U", "stream", row_key(end, 0, AFTER), {"id": 7, "amount": Decimal("2.00")},
               ts),
    ])
    assert snap.schema == stream.schema
    assert snap.schema.names[: len(METADATA_NAMES)] == METADATA_NAMES
    row = snap.to_pylist()[0]
    assert (row["_op"], row["_phase"], row["_chunk_id"], row["_generation"]) == ("+I", "snapshot", 3, 2)
    assert row["id"] == 2**64 - 1 and row["amount"] == Decimal("1.50")
    before, after = stream.to_pylist()
    assert (before["_op"], after["_op"]) == ("-U", "+U") and before["_commit_ts"] == ts
    # snapshot records sort before every change after their HW, and an update's before image first
    assert row["_position"] < before["_position"] < after["_position"]


def test_row_order_compares_file_numbers_numerically():
    a = format_row_key(row_key(BinlogPosition("mysql-bin.999999", 900)))
    b = format_row_key(row_key(BinlogPosition("mysql-bin.1000000", 4)))
    assert a < b
    assert BinlogPosition("mysql-bin.999999", 900) < BinlogPosition("mysql-bin.1000000", 4)
