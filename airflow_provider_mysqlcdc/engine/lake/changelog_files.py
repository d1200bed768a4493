"""A stream batch's changelog files, as one partition (one task attempt) writes them: step 1 of the batch
commit (``changelog_commit``).

The engine decides the files: per table and schema version, ``changelog/batch=<id>/part-<partition>-<sink
attempt>-t<task attempt>[-<schema id>].parquet`` (and, optionally, the Flink ``changelog-json`` form under
``changelog-json/batch=<id>/``, ``changelog_json``). A partition computed twice (a task retried) never shares
a file with itself, and a replayed batch writes other names than the attempt it replaces. The changes come as
the typed record batches the stream built (``arrow_batches.records_batch`` layout), in binlog order, less the
excluded columns (an excluded column renamed by DDL read before the rows stays excluded) and the zero-date
companions the table's plan leaves out. TIME columns are written as int64 microseconds (``file_types``):
Delta has no TIME type.

Each file closed is a ``WrittenFile``: what the driver's commit needs (rows, first/last ``_position``, bytes).
Nothing here is visible to readers until the batch's marker names the files.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog_json import flink_json_line
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import arrow_records
from airflow_provider_mysqlcdc.engine.lake.file_types import file_schema
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, CHANGELOG_JSON, changelog_dir, filesystem
from airflow_provider_mysqlcdc.engine.lake.schema_history import excluded_after
from airflow_provider_mysqlcdc.engine.model.arrow_batches import record_schema
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema

Unwritten = Callable[[TableSchema], tuple[str, ...]]  # the zero-date companions a table's files leave out


@dataclass(frozen=True)
class WrittenFile:
    """One changelog file a partition wrote (not visible until the batch's marker names it)."""

    table: str  # "database.table"
    kind: str  # CHANGELOG (Parquet) or CHANGELOG_JSON
    name: str  # the base name, in the batch directory of its kind
    rows: int
    first_position: str | None
    last_position: str | None
    bytes: int


@dataclass
class BatchFiles:
    """What every partition of one batch attempt needs to write its files (picklable: sent to executors)."""

    root: str
    batch_id: int
    attempt: str  # the sink attempt (``layout.new_version``)
    schemas: dict[str, TableSchema]  # by table: for changes that carry no schema version
    changelog_json: bool = False
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # columns never written, by table
    unwritten: Unwritten | None = None  # None: every zero-date companion written

    def partition(self, partition: int, task: int = 0) -> PartitionFiles:
        return PartitionFiles(self, partition, task)


class PartitionFiles:
    """The open files of one partition: one per table and schema version."""

    def __init__(self, spec: BatchFiles, partition: int, task: int) -> None:
        self.spec, self.partition, self.task = spec, partition, task
        self._open: dict[tuple[str, str | None], _TableFiles] = {}

    def write(self, table: str, schema_id: str | None, batch: pa.RecordBatch,
              versions: dict[str, TableSchema], ddl: list[dict[str, Any]]) -> None:
        """Append changes of ``table`` at schema version ``schema_id`` (``versions``: the schema versions the
        partition met; ``ddl``: the DDL it read so far, before these rows)."""
        key = (table, schema_id)
        out = self._open.get(key)
        if out is None:
            out = self._open[key] = self._files(table, schema_id, versions, ddl)
        out.write(batch)

    def close(self) -> list[WrittenFile]:
        """Close every file (also after an error: their sizes are then known); what was written."""
        return [f for out in self._open.values() for f in out.close()]

    def _files(self, table: str, schema_id: str | None, versions: dict[str, TableSchema],
               ddl: list[dict[str, Any]]) -> _TableFiles:
        spec = self.spec
        schema = versions.get(schema_id) if schema_id is not None else None
        if schema is None:
            schema = spec.schemas.get(table)
        if schema is None:
            raise CdcError(f"the stream delivered changes of {table} without their schema ({schema_id})")
        # an excluded column renamed by DDL this partition read (before these rows) stays excluded
        renames = [ColumnChanges.from_dict(d.get("changes") or {}) for d in ddl if d.get("table") == table]
        schema = without_columns(schema, tuple(sorted(excluded_after(spec.exclude.get(table, ()), renames))))
        tid = schema.table
        stem = f"part-{self.partition:05d}-{spec.attempt}-t{self.task}"
        stem += f"-{schema_id}" if schema_id else ""
        parquet = posixpath.join(changelog_dir(spec.root, tid, spec.batch_id), f"{stem}.parquet")
        json_path = None
        if spec.changelog_json:
            json_dir = changelog_dir(spec.root, tid, spec.batch_id, CHANGELOG_JSON)
            json_path = posixpath.join(json_dir, f"{stem}.json")
        unwritten = spec.unwritten(schema) if spec.unwritten is not None else ()
        return _TableFiles(schema, parquet, json_path, unwritten)


class _TableFiles:
    """The open output files of one table (at one schema version) in one partition."""

    def __init__(self, schema: TableSchema, parquet_path: str, json_path: str | None,
                 unwritten: tuple[str, ...] = ()) -> None:
        self.schema = schema  # the table's columns at these changes (one file per schema version)
        self.arrow_schema = pa.schema([f for f in record_schema(schema) if f.name not in unwritten])
        self.parquet_path, self.json_path = parquet_path, json_path
        fs, inner = filesystem(parquet_path)
        fs.create_dir(posixpath.dirname(inner), recursive=True)
        self.file_schema = file_schema(self.arrow_schema)  # TIME as int64 microseconds: Delta has no TIME
        self.parquet_out = fs.open_output_stream(inner)  # ours to close: its size is the bytes written
        self.parquet = pq.ParquetWriter(self.parquet_out, self.file_schema)
        self.json: Any = None
        if json_path is not None:
            jfs, jinner = filesystem(json_path)
            jfs.create_dir(posixpath.dirname(jinner), recursive=True)
            self.json = jfs.open_output_stream(jinner)
        self.rows = 0
        self.first: str | None = None
        self.last: str | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        """Changes in binlog order, as the source built them (``stream_rows``), less excluded columns."""
        if batch.num_rows == 0:
            return
        data = pa.RecordBatch.from_arrays([batch.column(n) for n in self.arrow_schema.names],
                                          schema=self.arrow_schema)
        self.parquet.write_batch(data.cast(self.file_schema))
        if self.json is not None:
            records = arrow_records(pa.Table.from_batches([data]), self.schema)
            self.json.write("".join(flink_json_line(r) + "\n" for r in records).encode("utf-8"))
        positions = data.column("_position")
        self.rows += data.num_rows
        self.first = self.first or positions[0].as_py()
        self.last = positions[-1].as_py()

    def close(self) -> list[WrittenFile]:
        self.parquet.close()
        out = [(CHANGELOG, posixpath.basename(self.parquet_path), self.parquet_out.tell())]
        self.parquet_out.close()
        if self.json is not None:
            size = self.json.tell()
            self.json.close()
            out.append((CHANGELOG_JSON, posixpath.basename(self.json_path or ""), size))
        return [WrittenFile(str(self.schema.table), kind, name, self.rows, self.first, self.last, size)
                for kind, name, size in out]


def without_columns(schema: TableSchema, names: tuple[str, ...]) -> TableSchema:
    """``schema`` without the excluded columns (secrets, blobs never reach a file)."""
    if not names or not any(n in schema.column_by_name for n in names):
        return schema
    return replace(schema, columns=tuple(c for c in schema.columns if c.name not in names), column_by_name={})
