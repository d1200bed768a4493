"""A table's mirror and changelog as Spark DataFrames, on a Spark without the delta-spark package.

With delta-spark, ``spark.read.format("delta").load(<table dir>/mirror)`` is all a reader needs. Without it,
Spark reads the Parquet files that one version of the Delta table names (delta-rs lists them; no JVM package),
with ``mergeSchema`` so files written before an ADD COLUMN read NULL there, in the Delta table's column order.
Types are the Delta tables' (TIME as ``bigint`` microseconds). Time travel: ``as_of`` as in
``engine.lake.mirror_reader`` (a binlog position, a time or a Delta version).

A mirror with deletion vectors (``mirror_updates=deletion_vectors``): delta-rs reports each file's deleted
rows, and the frame drops them by an anti-join on (file, ``_metadata.row_index``), the row's number in its
Parquet file (Spark 3.5 and later). The file is matched by its last three path segments, which the engine
names (``chunk=<id>/version=<v>/part.parquet``, ``overlay/version=<v>/part.parquet``) and Spark does not
percent-encode, whatever the scheme. The deleted rows travel from the driver: at most the compaction
threshold's share of the table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.file_types import plain_type
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import (
    AsOf,
    has_deletion_vectors,
    keep_masks,
    mirror_version_at,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId


def mirror_frame(
    spark: SparkSession, root: str, table: TableId | str, as_of: AsOf | None = None,
    storage_options: dict[str, str] | None = None,
) -> DataFrame:
    """The table's current state (or as of ``as_of``) as a DataFrame."""
    table = TableId.parse(table) if isinstance(table, str) else table
    version = None if as_of is None else mirror_version_at(root, table, as_of, storage_options).version
    return _frame(spark, mirror_table_uri(root, table), "mirror", table, version, storage_options)


def changelog_frame(
    spark: SparkSession, root: str, table: TableId | str, storage_options: dict[str, str] | None = None
) -> DataFrame:
    """Every change of the table the stream committed (metadata columns first; order by ``_position``)."""
    table = TableId.parse(table) if isinstance(table, str) else table
    return _frame(spark, changelog_table_uri(root, table), "changelog", table, None, storage_options)


def _frame(spark: SparkSession, uri: str, what: str, table: TableId, version: int | None,
           storage_options: dict[str, str] | None) -> DataFrame:
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    if not DeltaTable.is_deltatable(uri, storage_options):
        raise CdcError(f"{table} has no {what} Delta table at {uri} yet: it is written by the stream "
                       f"(the changelog) and the mirror refresh (the mirror) once the table has data")
    delta = DeltaTable(uri, version=version, storage_options=storage_options)
    schema = pa.schema([pa.field(f.name, plain_type(f.type), True)
                        for f in pa.schema(delta.schema().to_arrow())])
    spark_schema = from_arrow_schema(schema)
    files = delta.file_uris()
    if not files:
        return spark.createDataFrame([], spark_schema)
    frame = spark.read.option("mergeSchema", "true").parquet(*files)
    if has_deletion_vectors(delta):
        frame = _without_deleted(spark, frame, delta)
    present = set(frame.columns)
    # a column no file holds yet (added by DDL, no row written since) reads NULL, as Delta readers read it
    return frame.select(*[
        F.col(_quoted(f.name)) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ])


_FILE, _ROW = "__mysqlcdc_file", "__mysqlcdc_row"


def _without_deleted(spark: SparkSession, frame: DataFrame, delta: object) -> DataFrame:
    """``frame`` without the rows the version's deletion vectors delete."""
    deleted = [(_tail(path), int(row)) for path, mask in keep_masks(delta).items()
               for row in np.flatnonzero(~mask)]
    if not deleted:
        return frame
    gone = spark.createDataFrame(deleted, f"{_FILE} string, {_ROW} long")
    marked = frame.select("*", F.substring_index(F.col("_metadata.file_path"), "/", -3).alias(_FILE),
                          F.col("_metadata.row_index").alias(_ROW))
    return marked.join(F.broadcast(gone), [_FILE, _ROW], "left_anti").drop(_FILE, _ROW)


def _tail(path: str) -> str:
    return "/".join(path.rstrip("/").split("/")[-3:])


def _quoted(name: str) -> str:
    return f"`{name.replace('`', '``')}`"
