"""``mysqlcdc stream``: the stream phase on Spark from the command line (``--available-now`` or continuous).

``cli/main.py`` adds it with ``add_parser(sub)``; its options are shared with ``spark_apps/binlog_stream.py``
(``cli/stream_options.py``). Spark runs in this process (``--master``, default ``$MYSQLCDC_SPARK_MASTER`` or
``local[*]``); the password comes from ``$MYSQLCDC_MYSQL_PASSWORD`` or ``--password-file``.
"""

from __future__ import annotations

import argparse
import os
import sys

from airflow_provider_mysqlcdc.cli.options import add_spark_master_option
from airflow_provider_mysqlcdc.cli.stream_options import add_stream_arguments, stream_config
from airflow_provider_mysqlcdc.cli.validation import checked
from airflow_provider_mysqlcdc.engine.common.environment import SPARK_MASTER_ENV
from airflow_provider_mysqlcdc.engine.common.native_faults import WORKER_CONF
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.spark.session import DEFAULT_MASTER
from airflow_provider_mysqlcdc.spark.stream.config import AVAILABLE_NOW, StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "stream",
        help="stream the binlog of the captured tables into the changelog (Spark Structured Streaming)",
        description="Read the binlog from the smallest chunk high watermark and write an exactly-once "
        "changelog per table. One stream per checkpoint.",
    )
    add_stream_arguments(parser, local_files=True)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--available-now", action="store_true", help="catch up to the binlog end seen at the start, then stop"
    )
    mode.add_argument(
        "--interval",
        default="10 seconds",
        type=checked(arguments.interval),
        help="continuous mode (the default): start a micro-batch every INTERVAL (default %(default)s)",
    )
    add_spark_master_option(parser, default=os.environ.get(SPARK_MASTER_ENV, DEFAULT_MASTER))
    parser.set_defaults(func=cmd_stream)
    return parser


def config_from_args(args: argparse.Namespace) -> StreamConfig:
    trigger = AVAILABLE_NOW if args.available_now else f"processing-time={args.interval}"
    return stream_config(args, trigger=trigger, query_name="mysqlcdc-stream")


def cmd_stream(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    config.settings()  # reject a URL with a password before Spark starts
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("mysqlcdc-stream")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.speculation", "false")
        .config("spark.scheduler.mode", "FAIR")  # a background re-snapshot's job must not hold up the batches
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=dict(WORKER_CONF))  # a Python worker's native abort reports its Python stack
        .getOrCreate()
    )
    try:
        mode = "available-now" if config.available_now else f"continuous, every {args.interval}"
        print(
            f"mysqlcdc stream: {', '.join(config.tables)} -> {config.output} ({mode}); checkpoint "
            f"{config.checkpoint}",
            flush=True,
        )
        with mirror_refresh(config) as refresh_mirror:
            run = run_stream(spark, config, on_batch_committed=refresh_mirror,
                             on_progress=lambda b: print(b.describe(), flush=True))
        print(f"mysqlcdc stream: done ({len(run.tables)} table(s))", flush=True)
    except KeyboardInterrupt:
        print("mysqlcdc stream: stopped", file=sys.stderr)
        return 130
    finally:
        spark.stop()
    return 0
