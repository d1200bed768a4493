"""The row format of the binlog stream between the Spark source and the changelog sink.

One source serves many tables with different schemas, but a Spark stream has one schema. So changes travel
as *rows rows* (``_op = "rows"``): each carries up to ``ROWS_PER_ARROW_BATCH`` changes of one table and one
schema version, in binlog order, as an Arrow IPC stream in ``_arrow``: exactly the typed record layout the
changelog files have (``arrow_batches.records_batch``), built once on the executor that decoded the binlog,
column by column from the decoder's row blocks, gathered across rows events (``row_runs``).
Values are never coerced by Spark, nothing is encoded per change, and the sink writes the batch as it comes
(less excluded columns).

Columns (``STREAM_SCHEMA``): ``_table`` ("database.table"), ``_op``, ``_position`` (the first change's
fixed-width row order key, see ``position_text.format_row_key``), ``_commit_ts`` (UTC), ``_binlog_file``,
``_values`` (JSON of schema, DDL and range rows), ``_schema`` (the table's schema version,
``TableSchema.schema_id``), ``_arrow`` (the changes of a rows row).

Schemas travel with the data, since a table's columns change while the stream runs: each partition starts
with one *schema row* per schema version its changes use (``_op = "schema"``, ``_schema`` its id, ``_values``
``TableSchema.to_dict()``), and DDL the changelog follows travels as a *DDL row* (``_op = "ddl"``, ``_values``
the statement and its column changes, ``engine.binlog.ddl``).

Each partition ends with one *range row* (``_op = "range"``, ``_table`` null, ``_values`` =
``{"start": offset, "end": offset, ...figures}``): it tells the sink which binlog range the partition covered,
also when no change of a captured table was in it, so batch markers can carry the exact stream position; and
what the read saw (``ReadFigures``: the commit time of the last transaction read, row images read and dropped
by the stream filter, seconds), which the sink records for status and metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.arrow_batches import records_batch
from airflow_provider_mysqlcdc.engine.model.position_text import format_row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema
from airflow_provider_mysqlcdc.engine.stream.row_runs import RowRun

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.binlog.changes import SchemaChange
    from airflow_provider_mysqlcdc.engine.stream.filter import EmittedRows

STREAM_SCHEMA_DDL = (
    "_table STRING, _op STRING, _position STRING, _commit_ts TIMESTAMP, _binlog_file STRING, _values STRING, "
    "_schema STRING, _arrow BINARY"
)
STREAM_ARROW_SCHEMA = pa.schema(
    [
        pa.field("_table", pa.string()),
        pa.field("_op", pa.string()),
        pa.field("_position", pa.string()),
        pa.field("_commit_ts", pa.timestamp("us", tz="UTC")),
        pa.field("_binlog_file", pa.string()),
        pa.field("_values", pa.string()),
        pa.field("_schema", pa.string()),
        pa.field("_arrow", pa.binary()),
    ]
)
ROWS_PER_ARROW_BATCH = 4096
ROWS_OP = "rows"
RANGE_OP = "range"
SCHEMA_OP = "schema"
DDL_OP = "ddl"

def stream_batches(
    records: Iterable[Record] = (),
    size: int = ROWS_PER_ARROW_BATCH,
    schemas: dict[str, TableSchema] | None = None,
    schema_changes: Iterable[SchemaChange] = (),
    table_schemas: dict[str, TableSchema] | None = None,
    rows: Iterable[EmittedRows] = (),
) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of the stream schema (what the source yields to Spark): the schema rows of
    ``schemas`` (schema_id -> schema) and the DDL rows of ``schema_changes``, then rows rows of up to ``size``
    records each, per table and schema version in binlog order. ``table_schemas`` (by "database.table") is
    the schema of records that name no schema version. ``rows`` (the filter's row blocks) give the same rows
    rows as their records would, built column by column (the hot path)."""
    schemas = schemas or {}
    meta = [_meta_row(str(s.table), SCHEMA_OP, None, None, None, json.dumps(s.to_dict()), sid)
            for sid, s in schemas.items()]
    meta += [
        _meta_row(str(c.table), DDL_OP, format_row_key(c.key), c.commit_ts, c.binlog_file,
                  json.dumps({"verb": c.ddl.verb, "statement": c.ddl.statement[:4000],
                              "changes": c.ddl.changes.to_dict(), "resnapshot": c.ddl.resnapshot,
                              "offset": c.offset.to_dict()}), None)
        for c in schema_changes
    ]
    if meta:
        yield pa.RecordBatch.from_pylist(meta, schema=STREAM_ARROW_SCHEMA)
    yield from _blocks_batches(rows, size)
    pending: dict[tuple[str, str | None], list[Record]] = {}
    for record in records:
        group = pending.setdefault((record.table, record.schema_id), [])
        group.append(record)
        if len(group) >= size:
            yield _rows_batch(record.table, record.schema_id, group, schemas, table_schemas)
            del pending[(record.table, record.schema_id)]
    for (table, schema_id), group in pending.items():
        yield _rows_batch(table, schema_id, group, schemas, table_schemas)


def _blocks_batches(rows: Iterable[EmittedRows], size: int) -> Iterator[pa.RecordBatch]:
    """Rows rows of the filter's row blocks: per table and schema version, in binlog order, ``size`` each;
    the blocks' columns are gathered first (``row_runs``), so one Arrow batch holds many rows events."""
    runs: dict[tuple[Any, str], tuple[tuple[str, str], RowRun]] = {}
    for emitted in rows:
        block = emitted.block
        key = (block.table, block.schema.schema_id)
        entry = runs.get(key)
        if entry is None:
            entry = runs[key] = ((str(block.table), block.schema.schema_id), RowRun(block.schema))
        group, run = entry
        run.add(emitted)
        while len(run) >= size:
            yield _rows_row(group, run.take(size))
    for group, run in runs.values():
        if len(run):
            yield _rows_row(group, run.take(len(run)))


def _rows_row(group: tuple[str, str], data: pa.RecordBatch) -> pa.RecordBatch:
    table, schema_id = group
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_batch(data)
    row = _meta_row(table, ROWS_OP, data.column("_position")[0].as_py(), None, None, None, schema_id)
    return pa.RecordBatch.from_pylist([{**row, "_arrow": sink.getvalue().to_pybytes()}],
                                      schema=STREAM_ARROW_SCHEMA)


@dataclass(frozen=True)
class ReadFigures:
    """What one partition's read saw, carried on its range row (every field optional for the sink)."""

    last_event_at: str | None = None  # ISO time (UTC) of the last transaction's commit read
    rows_read: int = 0  # row images of captured tables decoded
    dropped: int = 0  # of those, dropped by the stream filter (covered by a chunk's snapshot)
    seconds: float = 0.0  # time the binlog reads took

    def to_dict(self) -> dict[str, Any]:
        return {"last_event_at": self.last_event_at, "rows_read": self.rows_read, "dropped": self.dropped,
                "read_seconds": round(self.seconds, 3)}


def range_batch(start: dict, end: dict, figures: ReadFigures | None = None) -> pa.RecordBatch:
    """The range row of a partition (offsets as ``BinlogOffset.to_dict()``)."""
    extra = figures.to_dict() if figures is not None else {}
    values = json.dumps({"start": start, "end": end, **extra}, separators=(",", ":"))
    return pa.RecordBatch.from_pylist([_meta_row(None, RANGE_OP, None, None, None, values, None)],
                                      schema=STREAM_ARROW_SCHEMA)


def _meta_row(table: str | None, op: str, position: str | None, commit_ts: Any, binlog_file: str | None,
              values: str | None, schema_id: str | None) -> dict:
    return {"_table": table, "_op": op, "_position": position, "_commit_ts": commit_ts,
            "_binlog_file": binlog_file, "_values": values, "_schema": schema_id}


def _rows_batch(table: str, schema_id: str | None, records: list[Record], schemas: dict[str, TableSchema],
                table_schemas: dict[str, TableSchema] | None) -> pa.RecordBatch:
    schema = schemas.get(schema_id) if schema_id is not None else None
    schema = schema or (table_schemas or {}).get(table)
    if schema is None:
        raise CdcError(f"the stream has changes of {table} without their schema ({schema_id})")
    data = records_batch(schema, records)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_batch(data)
    row = _meta_row(table, ROWS_OP, records[0].position, None, None, None, schema_id)
    return pa.RecordBatch.from_pylist([{**row, "_arrow": sink.getvalue().to_pybytes()}],
                                      schema=STREAM_ARROW_SCHEMA)


@dataclass
class Changes:
    """The changes of one rows row: a table's records of one schema version, in binlog order."""

    table: str
    schema_id: str | None
    batch: pa.RecordBatch  # arrow_batches.record_schema layout


def stream_changes(
    batch: pa.RecordBatch,
    ranges: list[dict] | None = None,
    schemas: dict[str, TableSchema] | None = None,
    ddl: list[dict] | None = None,
) -> list[Changes]:
    """The changes in stream rows (as Spark hands them to the sink), as typed record batches; range rows are
    appended to ``ranges``, schema rows added to ``schemas``, DDL rows appended to ``ddl`` (their values plus
    ``table``, ``position``, ``commit_ts``)."""
    columns = {name: batch.column(name) for name in ("_table", "_op", "_position", "_commit_ts", "_values",
                                                     "_schema", "_arrow")}
    ops = columns["_op"].to_pylist()
    out: list[Changes] = []
    for i, op in enumerate(ops):
        if op == ROWS_OP:
            reader = pa.ipc.open_stream(columns["_arrow"][i].as_buffer())
            out.append(Changes(columns["_table"][i].as_py(), columns["_schema"][i].as_py(),
                               reader.read_next_batch()))
        elif op == RANGE_OP:
            if ranges is not None:
                ranges.append(json.loads(columns["_values"][i].as_py()))
        elif op == SCHEMA_OP:
            if schemas is not None:
                schemas[columns["_schema"][i].as_py()] = TableSchema.from_dict(
                    json.loads(columns["_values"][i].as_py()))
        elif op == DDL_OP:
            if ddl is not None:
                commit_ts = columns["_commit_ts"][i].as_py()
                ddl.append({**json.loads(columns["_values"][i].as_py()),
                            "table": columns["_table"][i].as_py(),
                            "position": columns["_position"][i].as_py(),
                            "commit_ts": commit_ts.isoformat() if commit_ts else None})
        else:
            raise CdcError(f"unknown stream row {op!r}: the source and the sink are of different releases")
    return out
