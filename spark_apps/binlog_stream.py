"""spark-submit entry point of the stream phase: the binlog of the captured tables into the changelog.

    MYSQLCDC_MYSQL_PASSWORD=... spark-submit spark_apps/binlog_stream.py \
        --mysql-url mysql://cdc@db:3306 --tables shop.orders,shop.items --chunk-store /data/chunks.db \
        --output /lake/mysqlcdc --checkpoint /lake/_checkpoints/stream --trigger available-now

Argument parsing only; the work is ``airflow_provider_mysqlcdc.spark.stream.job``. The password comes from
``$MYSQLCDC_MYSQL_PASSWORD`` or ``--password-file``, never from the command line. ``run(spark, args)`` runs
in an existing Spark session (tests, the CLI).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from airflow_provider_mysqlcdc.cli.stream_options import add_stream_arguments, stream_config
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog_commit import BatchCommit
from airflow_provider_mysqlcdc.spark.stream.changelog_sink import BatchHook
from airflow_provider_mysqlcdc.spark.stream.config import AVAILABLE_NOW, StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import StreamRun, mirror_refresh, run_stream


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stream_arguments(parser)
    parser.add_argument(
        "--trigger",
        default=AVAILABLE_NOW,
        help=f"{AVAILABLE_NOW!r} (catch up, then stop) or 'processing-time=10 seconds' "
        "(continuous); default %(default)s",
    )
    parser.add_argument("--no-mirror", action="store_true",
                        help="do not refresh the materialized mirror after each batch (refresh later with "
                        "mysqlcdc mirror)")
    parser.add_argument("--read-timeout", type=float, default=600.0, help="seconds per batch read")
    parser.add_argument("--query-name", help="Spark query name")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="binlog_stream.py", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> StreamConfig:
    return stream_config(args, trigger=args.trigger, read_timeout=args.read_timeout,
                         query_name=args.query_name)


def run(
    spark,
    args: argparse.Namespace,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[BatchCommit], None] | None = None,
) -> StreamRun:
    """Run the stream in ``spark`` until it ends (available-now) or is stopped; by default each batch
    also refreshes the mirror of the tables it changed."""
    config = config_from_args(args)
    if on_batch_committed is not None or getattr(args, "no_mirror", False):
        return run_stream(spark, config, on_batch_committed=on_batch_committed, on_progress=on_progress)
    with mirror_refresh(config) as hook:
        return run_stream(spark, config, on_batch_committed=hook, on_progress=on_progress)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # its settings, one line each, per connect
    logging.getLogger("pymysqlreplication").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName(args.query_name or "mysqlcdc-binlog-stream")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.speculation", "false")
        .config("spark.scheduler.mode", "FAIR")  # a background re-snapshot's job must not hold up the batches
        .getOrCreate()
    )
    try:
        run(spark, args)  # each batch is logged once, by the sink (logging is configured above)
    except CdcError as exc:
        print(f"binlog_stream: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
