"""``mysqlcdc stream``: the stream phase on Spark from the command line (``--available-now`` or continuous).

The lead wires it into ``cli.py`` with ``cli_stream.add_parser(sub)``. Spark runs in this process
(``--master``, default ``local[*]``); the password comes from ``$MYSQLCDC_MYSQL_PASSWORD`` or
``--password-file``.
"""

from __future__ import annotations

import argparse
import os
import sys

from .engine.connection import PASSWORD_ENV, URL_ENV
from .spark.binlog_source import DEFAULT_MAX_BYTES_PER_BATCH
from .spark.snapshot_options import CHUNK_STORE_ENV
from .spark.stream_job import AVAILABLE_NOW, StreamConfig, mirror_refresh, parse_exclude_columns, run_stream
from .spark.stream_lock import DEFAULT_LEASE_SECONDS


def add_parser(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "stream",
        help="stream the binlog of the captured tables into the changelog (Spark Structured Streaming)",
        description="Read the binlog from the smallest chunk high watermark and write an exactly-once "
        "changelog per table. One stream per checkpoint.",
    )
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get(URL_ENV),
        help=f"mysql://user@host:port without the password (default ${URL_ENV}); the password "
        f"comes from ${PASSWORD_ENV} or --password-file",
    )
    parser.add_argument("--password-file", help="file holding the MySQL password")
    parser.add_argument(
        "--tables",
        required=True,
        action="append",
        help="database.table names or patterns, comma-separated (repeatable)",
    )
    parser.add_argument("--chunk-store", default=os.environ.get(CHUNK_STORE_ENV),
                        help=f"chunk store URL or SQLite path (default ${CHUNK_STORE_ENV})")
    parser.add_argument("--output", required=True, help="output root (local path or hdfs://, s3://, ...)")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory of this stream")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--available-now", action="store_true", help="catch up to the binlog end seen at the start, then stop"
    )
    mode.add_argument(
        "--interval",
        default="10 seconds",
        help="continuous mode (the default): start a micro-batch every INTERVAL (default %(default)s)",
    )
    parser.add_argument(
        "--max-bytes-per-batch",
        type=int,
        default=DEFAULT_MAX_BYTES_PER_BATCH,
        help="binlog bytes per micro-batch, rounded to a transaction boundary (0: no limit)",
    )
    parser.add_argument("--changelog-json", action="store_true", help="also write Flink changelog-json files")
    parser.add_argument("--exclude-columns", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
                        help="columns never written (secrets, blobs); use the snapshot's exclusions")
    parser.add_argument("--server-id-slot", type=int, default=0, help="replica server_id slot (default 0)")
    parser.add_argument(
        "--master",
        default=os.environ.get("MYSQLCDC_SPARK_MASTER", "local[*]"),
        help="Spark master (default %(default)s)",
    )
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
    parser.set_defaults(func=cmd_stream)
    return parser


def config_from_args(args: argparse.Namespace) -> StreamConfig:
    from .engine.errors import ConfigurationError

    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store given: pass --chunk-store or set ${CHUNK_STORE_ENV}")
    return StreamConfig(
        mysql_url=args.mysql_url,
        tables=tuple(t.strip() for item in args.tables for t in item.split(",") if t.strip()),
        chunk_store=args.chunk_store,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=AVAILABLE_NOW if args.available_now else f"processing-time={args.interval}",
        password_file=args.password_file,
        max_bytes_per_batch=args.max_bytes_per_batch or None,
        changelog_json=args.changelog_json,
        server_id_slot=args.server_id_slot,
        query_name="mysqlcdc-stream",
        lock_lease_seconds=args.lock_lease_seconds,
        break_lock=args.break_lock,
        exclude_columns=parse_exclude_columns(getattr(args, "exclude_columns", []) or []),
    )


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
        .config("spark.ui.showConsoleProgress", "false")
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
