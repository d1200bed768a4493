"""The row format of the binlog stream between the Spark source and the changelog sink.

One source serves many tables with different schemas, but a Spark stream has one schema. So each change
travels as one row of generic columns, and its values travel encoded *exactly* as a JSON object
``{column: [tag, value]}`` written by the engine's ``KeyCodec`` (integers as strings, so BIGINT UNSIGNED
never overflows; Decimals keep their scale; bytes in base64; DATETIME as a wall clock, TIMESTAMP with its
UTC zone; TIME as microseconds). The sink decodes per table back to the engine's canonical values and builds
the typed table layout (``record_batches.records_batch``), so nothing is ever coerced by Spark.

Columns (``STREAM_SCHEMA``): ``_table`` ("database.table"), ``_op`` (+I/-U/+U/-D), ``_position`` (the
fixed-width row order key, see ``positions.format_row_key``), ``_commit_ts`` (UTC), ``_binlog_file``,
``_values`` (the JSON above), ``_schema`` (the table's schema version at the change, ``TableSchema.schema_id``).

Schemas travel with the data, since a table's columns change while the stream runs: each partition starts
with one *schema row* per schema version its changes use (``_op = "schema"``, ``_schema`` its id, ``_values``
``TableSchema.to_dict()``), and DDL the changelog follows travels as a *DDL row* (``_op = "ddl"``, ``_values``
the statement and its column changes, ``engine.ddl``).

Each partition ends with one *range row* (``_op = "range"``, ``_table`` null, ``_values`` =
``{"start": offset, "end": offset}``): it tells the sink which binlog range the batch covered, also when no
change of a captured table was in it, so batch markers can carry the exact stream position.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import pyarrow as pa

from ..engine.errors import CdcError
from ..engine.keys import KeyCodec
from ..engine.positions import RowKey, format_row_key
from ..engine.records import Record
from ..engine.tables import TableSchema

if TYPE_CHECKING:
    from ..engine.binlog_reader import SchemaChange

STREAM_SCHEMA_DDL = (
    "_table STRING, _op STRING, _position STRING, _commit_ts TIMESTAMP, _binlog_file STRING, _values STRING, "
    "_schema STRING"
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
    ]
)
ROWS_PER_ARROW_BATCH = 4096
RANGE_OP = "range"
SCHEMA_OP = "schema"
DDL_OP = "ddl"

_encode = KeyCodec.encode_value
_decode = KeyCodec.decode_value


def encode_values(values: dict) -> str:
    encoded = {name: _encode(v) for name, v in values.items()}
    return json.dumps(encoded, ensure_ascii=False, separators=(",", ":"))


def decode_values(text: str) -> dict:
    return {name: _decode(item) for name, item in json.loads(text).items()}


def parse_position(text: str) -> RowKey:
    """The inverse of ``positions.format_row_key``."""
    try:
        number, pos, index, half = text.split(":")
        return int(number), int(pos), int(index) - 1, int(half)
    except ValueError:
        raise CdcError(f"malformed change position {text!r}: expected number:pos:index:half") from None


def stream_batches(
    records: Iterable[Record],
    size: int = ROWS_PER_ARROW_BATCH,
    schemas: dict[str, TableSchema] | None = None,
    schema_changes: Iterable[SchemaChange] = (),
) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of the stream schema (what the source yields to Spark), after the schema
    rows of ``schemas`` (schema_id -> schema) and the DDL rows of ``schema_changes``."""
    meta = [_meta_row(str(s.table), SCHEMA_OP, None, None, None, json.dumps(s.to_dict()), sid)
            for sid, s in (schemas or {}).items()]
    meta += [
        _meta_row(str(c.table), DDL_OP, format_row_key(c.key), c.commit_ts, c.binlog_file,
                  json.dumps({"verb": c.ddl.verb, "statement": c.ddl.statement[:4000],
                              "changes": c.ddl.changes.to_dict(), "resnapshot": c.ddl.resnapshot,
                              "offset": c.offset.to_dict()}), None)
        for c in schema_changes
    ]
    if meta:
        yield pa.RecordBatch.from_pylist(meta, schema=STREAM_ARROW_SCHEMA)
    chunk: list[Record] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield _to_batch(chunk)
            chunk = []
    if chunk:
        yield _to_batch(chunk)


def range_batch(start: dict, end: dict) -> pa.RecordBatch:
    """The range row of a partition (offsets as ``BinlogOffset.to_dict()``)."""
    values = json.dumps({"start": start, "end": end}, separators=(",", ":"))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([None], pa.string()),
            pa.array([RANGE_OP]),
            pa.array([None], pa.string()),
            pa.array([None], pa.timestamp("us", tz="UTC")),
            pa.array([None], pa.string()),
            pa.array([values]),
            pa.array([None], pa.string()),
        ],
        schema=STREAM_ARROW_SCHEMA,
    )


def _meta_row(table: str, op: str, position: str | None, commit_ts: Any, binlog_file: str | None,
              values: str, schema_id: str | None) -> dict:
    return {"_table": table, "_op": op, "_position": position, "_commit_ts": commit_ts,
            "_binlog_file": binlog_file, "_values": values, "_schema": schema_id}


def _to_batch(records: list[Record]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.table for r in records], pa.string()),
            pa.array([r.op for r in records], pa.string()),
            pa.array([r.position for r in records], pa.string()),
            pa.array([r.commit_ts for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([r.binlog_file for r in records], pa.string()),
            pa.array([encode_values(r.values) for r in records], pa.string()),
            pa.array([r.schema_id for r in records], pa.string()),
        ],
        schema=STREAM_ARROW_SCHEMA,
    )


def records_by_table(
    batch: pa.RecordBatch,
    ranges: list[dict] | None = None,
    schemas: dict[str, TableSchema] | None = None,
    ddl: list[dict] | None = None,
) -> dict[str, list[Record]]:
    """Decode stream rows (as Spark hands them to the sink) back into engine Records, grouped by table; range
    rows are appended to ``ranges``, schema rows added to ``schemas``, DDL rows appended to ``ddl`` (their
    values plus ``table``, ``position``, ``commit_ts``)."""
    columns = {
        name: batch.column(batch.schema.get_field_index(name)).to_pylist()
        for name in STREAM_ARROW_SCHEMA.names
        if batch.schema.get_field_index(name) >= 0
    }
    out: dict[str, list[Record]] = defaultdict(list)
    schema_ids = columns.get("_schema") or [None] * len(columns["_op"])
    for table, op, position, commit_ts, binlog_file, values, schema_id in zip(
        columns["_table"],
        columns["_op"],
        columns["_position"],
        columns["_commit_ts"],
        columns["_binlog_file"],
        columns["_values"],
        schema_ids,
    ):
        if op == RANGE_OP:
            if ranges is not None:
                ranges.append(json.loads(values))
            continue
        if op == SCHEMA_OP:
            if schemas is not None:
                schemas[schema_id] = TableSchema.from_dict(json.loads(values))
            continue
        if op == DDL_OP:
            if ddl is not None:
                ddl.append({**json.loads(values), "table": table, "position": position,
                            "commit_ts": commit_ts.isoformat() if commit_ts else None})
            continue
        out[table].append(
            Record(
                table=table,
                op=op,
                phase="stream",
                key=parse_position(position),
                values=decode_values(values),
                commit_ts=commit_ts,
                binlog_file=binlog_file,
                schema_id=schema_id,
            )
        )
    return out
