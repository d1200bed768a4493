"""``mysql_cdc_snapshot``: planned chunks read as a DataFrame, a PySpark (4.x) Python data source.

``spark.read.format("mysql_cdc_snapshot")`` gives the chunk reads of the snapshot phase as a DataFrame, one
partition per chunk, Arrow batches straight from ``ChunkRead`` (for previews and for reading the types Spark
gets). A plain read records nothing in the chunk store: each action reads again, with new watermarks. The
snapshot phase itself, which records LW/HW and commits, is ``chunk_group.run_snapshot`` (its job is not a data
source write: Spark would run the writer's setup and commit in Python processes of their own, ~4 s a run;
``tasks.py`` says more).

Options (strings): ``mysql_url`` (no password), ``password_file``, ``table``, ``generation``, ``chunk_ids``
(``"3,7"``, ``"0-15"``), ``chunk_store``, ``output``, ``read_view_mode``, ``watermark_table``,
``skip_backfill``, ``batch_rows``, ``rows_per_file``, ``exclude_columns`` (``"a,b"``), ``run_id``,
``reader_slot_base``. See ``snapshot_options``.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions

SOURCE_NAME = "mysql_cdc_snapshot"


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """Spark types of the output, the same as Spark infers from the Parquet output: DECIMAL(p,s) stays
    decimal, DATETIME is TimestampNTZ, TIMESTAMP a (UTC instant) TimestampType, BIGINT UNSIGNED and BIT(64)
    are decimal(20,0), TIME is bigint microseconds (Parquet has no duration type; pyarrow reads it back as
    duration[us] from the schema it stores)."""
    return from_arrow_schema(_spark_arrow_schema(arrow_schema), prefer_timestamp_ntz=True)


def _spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(pa.int64()) if pa.types.is_duration(f.type) else f for f in schema])


def spark_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch as the reader hands it to Spark (TIME durations as int64 microseconds)."""
    if not any(pa.types.is_duration(t) for t in batch.schema.types):
        return batch
    target = _spark_arrow_schema(batch.schema)
    return pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(batch.columns, target)], schema=target)


class ChunkPartition(InputPartition):
    def __init__(self, chunk_id: int, slot: int) -> None:
        super().__init__(chunk_id)
        self.chunk_id, self.slot = chunk_id, slot


class SnapshotReader(DataSourceReader):
    def __init__(self, job: ChunkGroupJob) -> None:
        self.job = job

    def partitions(self) -> Sequence[InputPartition]:
        base = self.job.options.reader_slot_base
        return [ChunkPartition(c, base + i) for i, c in enumerate(self.job.chunk_ids)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChunkPartition)
        read = self.job.read(partition.chunk_id, partition.slot)
        declared = self.job.arrow_schema()
        for batch in self.job.batches(read):
            if not batch.schema.equals(declared):
                # DDL changed the table's columns after the DataFrame's schema was resolved on the driver: the
                # chunk was read with the new ones, which Spark cannot take under the old schema.
                raise CdcError(
                    f"{self.job.options.table} chunk {partition.chunk_id}: the table's columns changed (DDL) "
                    f"since this DataFrame's schema was resolved ({declared.names} -> {batch.schema.names}): "
                    "read it again"
                )
            yield spark_batch(batch)


class SnapshotDataSource(DataSource):
    """Registered as ``mysql_cdc_snapshot`` (``session.register_data_source``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _job(self) -> ChunkGroupJob:
        job = getattr(self, "_loaded", None)
        if job is None:
            job = self._loaded = ChunkGroupJob.load(SnapshotOptions.from_options(self.options))
        return job

    def schema(self) -> StructType:
        return spark_schema(self._job().arrow_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(self._job())

