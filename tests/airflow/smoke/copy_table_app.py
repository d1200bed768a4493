"""Smoke-test Spark application: copy one MySQL table to Parquet through a PySpark Python data source.

Scaffolding that proves MySQL, Spark and Airflow work together here; not the product. The password comes from
the MYSQLCDC_MYSQL_PASSWORD environment variable, never from the command line.
"""
from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition


class IdRange(InputPartition):
    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high


class SmokeTableSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mysqlcdc_smoke_table"

    def schema(self) -> str:
        return "id BIGINT, name STRING, amount DECIMAL(10,2)"

    def reader(self, schema):
        return SmokeTableReader(self.options)


class SmokeTableReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.options = dict(options)

    def partitions(self):
        n = int(self.options.get("partitions", "2"))
        top = int(self.options["max_id"])
        step = top // n + 1
        return [IdRange(i * step, (i + 1) * step) for i in range(n)]

    def read(self, partition: IdRange):
        import pyarrow as pa
        import pymysql  # noqa: F401  (imported on the executor)

        from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect

        settings = MySQLSettings.from_url(self.options["url"])
        table = f"`{self.options['database']}`.`{self.options['table']}`"
        with connect(settings) as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT id, name, amount FROM {table} WHERE id >= %s AND id < %s ORDER BY id",
                (partition.low, partition.high),
            )
            rows = cur.fetchall()
        ids, names, amounts = (list(c) for c in zip(*rows)) if rows else ([], [], [])
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids, pa.int64()), pa.array(names, pa.string()),
             pa.array(amounts, pa.decimal128(10, 2))],
            names=["id", "name", "amount"],
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mysql-url", required=True, help="without password (MYSQLCDC_MYSQL_PASSWORD)")
    parser.add_argument("--database", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--max-id", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("mysqlcdc-smoke").getOrCreate()
    spark.dataSource.register(SmokeTableSource)
    df = (
        spark.read.format("mysqlcdc_smoke_table")
        .option("url", args.mysql_url)
        .option("database", args.database)
        .option("table", args.table)
        .option("max_id", args.max_id)
        .load()
    )
    df.write.mode("overwrite").parquet(args.output)
    print(f"smoke copy: wrote {spark.read.parquet(args.output).count()} rows to {args.output}")
    spark.stop()


if __name__ == "__main__":
    main()
