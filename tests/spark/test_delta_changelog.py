"""The changelog as a Delta Lake table: what the stream's sink commits is what delta-rs, pandas, Polars and
DuckDB read, one Delta commit per batch; added columns evolve the schema without a rewrite; an output root
written before the Delta log existed is converted on the next batch; a type Delta cannot widen is named."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import (
    APP_ID,
    BATCH_ID,
    END_OFFSET,
    DeltaChangelog,
    changelog_table_uri,
)
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.stream.transport import STREAM_ARROW_SCHEMA, stream_batches
from airflow_provider_mysqlcdc.spark.stream.changelog_sink import ChangelogSink
from tests.support.delta_reads import assert_delta_changelog_matches_markers, delta_changelog
from tests.support.engine_harness import Pipeline

TYPES = (
    "id BIGINT UNSIGNED NOT NULL PRIMARY KEY, t TIME(6), y YEAR, b BIT(64), f FLOAT, d DOUBLE, "
    "big DECIMAL(65,10), amount DECIMAL(12,2), day DATE, wall DATETIME(6), ts TIMESTAMP(6) NULL, "
    "note VARCHAR(40) CHARACTER SET latin1, blob_ BLOB, e ENUM('a','b'), s SET('x','y'), j JSON"
)
ROWS = [
    (2**64 - 1, "-838:59:59.000000", 1901, 2**64 - 1, 1.5, -2.25, "-12345678901234567890123456789.0123456789",
     "-9999999999.99", "1000-01-01", "9999-12-31 23:59:59.999999", "2038-01-19 03:14:07.999999", "Ünï",
     b"\x00\xff", "b", "x,y", '{"k": [1, 2]}'),
    (1, "00:00:00.000001", 2155, 0, None, None, None, "0.01", None, "1970-01-01 00:00:00", None, "", b"",
     None, "", "null"),
]


def _settings(mysql_server) -> MySQLSettings:
    return MySQLSettings.from_url(mysql_server.cdc_url)


def _records(mysql_server, tmp_path, table: TableId, schema: TableSchema, start: int) -> list[Record]:
    """Every row of the table as stream records at consecutive positions from ``start``."""
    pipe = Pipeline(_settings(mysql_server), ChunkStore(str(tmp_path / "chunks.db")), table.database)
    pipe.schemas = {table: schema}
    ts = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    return [
        Record(str(table), "+I", "stream", (7, start + i, 0, 1), dict(zip(schema.column_names, row)),
               commit_ts=ts, binlog_file="mysql-bin.000007")
        for i, row in enumerate(pipe.source(table))
    ]


def _schema(mysql_server, table: TableId) -> TableSchema:
    with connect(_settings(mysql_server)) as conn:
        return load_schema(conn, table)


def _commit(spark, root: str, checkpoint: str, schema: TableSchema, records: list[Record],
            batch_id: int) -> None:
    by_name = {str(schema.table): schema}
    frame = spark.createDataFrame(
        pa.Table.from_batches(list(stream_batches(records, table_schemas=by_name)), STREAM_ARROW_SCHEMA)
    )
    ChangelogSink(root, {schema.table: schema}, checkpoint)(frame, batch_id)


def test_the_changelog_is_a_delta_table_every_reader_reads(mysql_server, mysql_db, tmp_path, spark):
    table = TableId(mysql_db, "all types")  # a name that needs escaping in the path
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} ({TYPES})")
        cur.executemany(f"INSERT INTO {table.quoted} VALUES ({', '.join(['%s'] * 16)})", ROWS)
    schema = _schema(mysql_server, table)
    root, checkpoint = str(tmp_path / "lake"), str(tmp_path / "ckpt")
    first = _records(mysql_server, tmp_path, table, schema, 100)
    _commit(spark, root, checkpoint, schema, first, 0)
    uri = changelog_table_uri(root, table)
    assert "%" not in uri and Path(uri, "_delta_log").is_dir()
    assert_delta_changelog_matches_markers(root, schema)
    # batch 0 again, by the sink (a replay) and by a direct commit: the Delta log stays as it is
    _commit(spark, root, checkpoint, schema, first, 0)
    files = [p.relative_to(uri).as_posix() for p in Path(uri).glob("batch=*/*.parquet")]
    assert not DeltaChangelog(root, table).commit(0, files)
    assert DeltaTable(uri).version() == 0
    assert_delta_changelog_matches_markers(root, schema)

    # the readers a data team already has, each in one line, give the same rows
    delta = DeltaTable(uri)
    assert delta.transaction_version(APP_ID) == 0 and delta.history()[0][BATCH_ID] == "0"
    assert delta.history()[0][END_OFFSET] == "null"  # a batch built here carries no binlog range
    pandas = DeltaTable(uri).to_pandas()
    polars = pl.read_delta(uri)
    dataset = DeltaTable(uri).to_pyarrow_dataset()  # noqa: F841 (DuckDB scans the variable by name)
    in_duckdb = duckdb.sql("SELECT id, t, wall FROM dataset ORDER BY _position").fetchall()
    assert len(pandas) == len(polars) == len(in_duckdb) == len(ROWS)
    by_id = {r["id"]: r for r in polars.to_dicts()}
    assert by_id[2**64 - 1]["t"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000  # TIME as signed microseconds
    assert by_id[2**64 - 1]["note"] == "Ünï" and by_id[2**64 - 1]["blob_"] == b"\x00\xff"
    assert str(by_id[2**64 - 1]["big"]) == "-12345678901234567890123456789.0123456789"
    assert by_id[1]["wall"] == datetime(1970, 1, 1) and by_id[1]["t"] == 1
    assert in_duckdb == [(r["id"], r["t"], r["wall"]) for r in polars.sort("_position").to_dicts()]
    assert sorted(pandas["id"].map(int)) == [1, 2**64 - 1]

    # ADD COLUMN: the Delta schema grows, the files of batch 0 are neither rewritten nor removed
    files_before = set(DeltaTable(uri).file_uris())
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN added DATETIME(3) NULL, "
                    "ADD COLUMN later TIME NULL")
        cur.execute(f"UPDATE {table.quoted} SET added = '2020-02-29 12:00:00.123', later = '-01:00:00'")
    schema2 = _schema(mysql_server, table)
    second = _records(mysql_server, tmp_path, table, schema2, 200)
    _commit(spark, root, checkpoint, schema2, second, 1)
    assert_delta_changelog_matches_markers(root, schema2)
    delta = DeltaTable(uri)
    assert files_before < set(delta.file_uris()) and delta.transaction_version(APP_ID) == 1
    added = pl.read_delta(uri).sort("_position").get_column("added").to_list()
    assert added == [None, None] + [datetime(2020, 2, 29, 12, 0, 0, 123000)] * 2

    # an output root whose changelog predates the Delta log: the next batch creates it with every batch
    shutil.rmtree(Path(uri, "_delta_log"))
    _commit(spark, root, checkpoint, schema2, second[:1], 2)
    assert_delta_changelog_matches_markers(root, schema2)
    assert delta_changelog(root, schema2).num_rows == len(first) + len(second) + 1
    assert len(changelog_records(root, schema2)) == len(first) + len(second) + 1

    # a type Delta cannot widen stops the batch before its Delta commit, naming the column and the way out
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {table.quoted} MODIFY amount DECIMAL(14,2)")
    schema3 = _schema(mysql_server, table)
    with pytest.raises(CdcError, match=r"column 'amount' of .*all types.* changed type .*re-snapshot"):
        _commit(spark, root, checkpoint, schema3,
                _records(mysql_server, tmp_path, table, schema3, 300)[:1], 3)
    assert DeltaTable(uri).transaction_version(APP_ID) == 2
