"""spark-submit entry point of the stream phase: the binlog of the captured tables into the changelog.

    MYSQLCDC_MYSQL_PASSWORD=... spark-submit spark_apps/binlog_stream.py \
        --mysql-url mysql://cdc@db:3306 --tables shop.orders,shop.items --chunk-store /data/chunks.db \
        --output /lake/mysqlcdc --checkpoint /lake/_checkpoints/stream --trigger available-now

Argument parsing only; the work is ``airflow_provider_mysqlcdc.spark.stream_job``. The password comes from
``$MYSQLCDC_MYSQL_PASSWORD`` or ``--password-file``, never from the command line. ``run(spark, args)`` runs
in an existing Spark session (tests, the CLI).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable, Sequence

from airflow_provider_mysqlcdc.engine.connection import PASSWORD_ENV, URL_ENV
from airflow_provider_mysqlcdc.engine.errors import CdcError
from airflow_provider_mysqlcdc.spark.binlog_source import DEFAULT_MAX_BYTES_PER_BATCH
from airflow_provider_mysqlcdc.spark.changelog_sink import BatchHook, CommittedBatch
from airflow_provider_mysqlcdc.spark.stream_job import (
    AVAILABLE_NOW,
    StreamConfig,
    StreamRun,
    mirror_refresh,
    parse_exclude_columns,
    run_stream,
)
from airflow_provider_mysqlcdc.spark.stream_lock import DEFAULT_LEASE_SECONDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get(URL_ENV),
        help=f"mysql://user@host:port[?server_id=5400-5499] without the password (default ${URL_ENV})",
    )
    parser.add_argument("--password-file", help=f"file holding the MySQL password (default: ${PASSWORD_ENV})")
    parser.add_argument(
        "--tables",
        required=True,
        action="append",
        help="database.table names or patterns, comma-separated (repeatable)",
    )
    parser.add_argument("--chunk-store", required=True, help="chunk store URL or SQLite path")
    parser.add_argument("--output", required=True, help="output root (local path or hdfs://, s3://, ...)")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory of this stream")
    parser.add_argument(
        "--trigger",
        default=AVAILABLE_NOW,
        help=f"{AVAILABLE_NOW!r} (catch up, then stop) or 'processing-time=10 seconds' "
        "(continuous); default %(default)s",
    )
    parser.add_argument(
        "--max-bytes-per-batch",
        type=int,
        default=DEFAULT_MAX_BYTES_PER_BATCH,
        help="binlog bytes per micro-batch, rounded to a transaction boundary "
        "(0: no limit; default %(default)s)",
    )
    parser.add_argument("--changelog-json", action="store_true", help="also write Flink changelog-json files")
    parser.add_argument("--exclude-columns", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
                        help="columns never written (secrets, blobs); use the snapshot's exclusions")
    parser.add_argument("--no-mirror", action="store_true",
                        help="do not refresh the materialized mirror after each batch (refresh later with "
                        "mysqlcdc mirror)")
    parser.add_argument(
        "--server-id-slot",
        type=int,
        default=0,
        help="replica server_id slot of the configured range the reader uses (default 0)",
    )
    parser.add_argument("--read-timeout", type=float, default=600.0, help="seconds per batch read")
    parser.add_argument("--query-name", help="Spark query name")
    parser.add_argument(
        "--lock-lease-seconds",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        help="the checkpoint lock expires this long after its holder's last heartbeat",
    )
    parser.add_argument(
        "--break-lock",
        action="store_true",
        help="take the checkpoint lock even if another stream seems to hold it",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="binlog_stream.py", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> StreamConfig:
    if not args.mysql_url:
        raise CdcError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    tables = tuple(t.strip() for item in args.tables for t in item.split(",") if t.strip())
    return StreamConfig(
        mysql_url=args.mysql_url,
        tables=tables,
        chunk_store=args.chunk_store,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=args.trigger,
        password_file=args.password_file,
        max_bytes_per_batch=args.max_bytes_per_batch or None,
        changelog_json=args.changelog_json,
        server_id_slot=args.server_id_slot,
        read_timeout=args.read_timeout,
        query_name=args.query_name,
        lock_lease_seconds=args.lock_lease_seconds,
        break_lock=args.break_lock,
        exclude_columns=parse_exclude_columns(getattr(args, "exclude_columns", []) or []),
    )


def run(
    spark,
    args: argparse.Namespace,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[CommittedBatch], None] | None = None,
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
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName(args.query_name or "mysqlcdc-binlog-stream")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.speculation", "false")
        .getOrCreate()
    )
    try:
        run(spark, args, on_progress=lambda b: print(b.describe(), flush=True))
    except CdcError as exc:
        print(f"binlog_stream: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
