"""The stream phase's command-line options, shared by ``mysqlcdc stream`` and ``spark_apps/binlog_stream.py``.

Each entry point adds only its own trigger options; everything else is parsed once, here.
"""
from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_mysqlcdc.cli.options import (
    add_chunk_store_option,
    add_exclude_columns_option,
    add_mysql_options,
    add_output_option,
    add_tables_option,
    chunk_store_of,
    require_mysql_url,
    unique_tables,
)
from airflow_provider_mysqlcdc.cli.snapshot_options import add_source_limit_options, source_limits
from airflow_provider_mysqlcdc.cli.validation import checked, decimal, whole
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.gc.retention import DEFAULT_INTERVAL_MINUTES, DEFAULT_RETENTION
from airflow_provider_mysqlcdc.engine.lake.stream_lock import DEFAULT_LEASE_SECONDS
from airflow_provider_mysqlcdc.engine.model.table_names import split_table_list
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.source.outages import DEFAULT_RECONNECT_TIMEOUT_S
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL, StartupMode
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.spark.stream.binlog_source import (
    DEFAULT_CATCHUP_PARTITION_BYTES,
    DEFAULT_MAX_BYTES_PER_BATCH,
    ROWS_PER_READ,
)
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig, parse_exclude_columns


def add_stream_arguments(parser: argparse.ArgumentParser, *, local_files: bool = False) -> None:
    """The stream's options; ``local_files``: the password file, a SQLite chunk store's directory and a local
    output and checkpoint are checked here (``mysqlcdc stream``; a Spark app's driver may run elsewhere)."""
    add_mysql_options(parser, password_in_url=False, local_files=local_files)
    add_tables_option(parser)
    add_chunk_store_option(parser, existing=False if local_files else None, output_default=True)
    add_output_option(parser, required=True, writable=local_files)
    parser.add_argument("--checkpoint", required=True,
                        type=checked(arguments.storage_root, what="a checkpoint directory",
                                     writable=local_files),
                        help="Spark checkpoint directory of this stream")
    parser.add_argument("--max-bytes-per-batch", type=whole(0, arguments.MAX_BATCH_BYTES, zero="0: no limit"),
                        default=DEFAULT_MAX_BYTES_PER_BATCH,
                        help="binlog bytes per micro-batch, rounded to a transaction boundary "
                        "(0: no limit; default %(default)s)")
    parser.add_argument("--catchup-partitions", default=0,
                        type=whole(0, arguments.MAX_CATCHUP_PARTITIONS,
                                   zero="0: Spark's default parallelism"),
                        help="parallel catch-up: at most this many Spark tasks decode one batch's binlog "
                        "range when the stream is far behind (0: Spark's default parallelism; 1: off)")
    parser.add_argument("--catchup-partition-bytes", type=whole(1, arguments.MAX_BATCH_BYTES),
                        default=DEFAULT_CATCHUP_PARTITION_BYTES,
                        help="binlog bytes each parallel partition gets at least: a batch splits only when "
                        "it spans twice that (default %(default)s)")
    parser.add_argument("--rows-per-read", type=whole(1, arguments.MAX_ROWS_PER_READ), default=ROWS_PER_READ,
                        help="row images a read task decodes and holds before handing them on: bounds its "
                        "memory (default %(default)s, about 100 MB)")
    parser.add_argument("--changelog-json", action="store_true", help="also write Flink changelog-json files")
    add_exclude_columns_option(parser)
    parser.add_argument("--server-id-slot", type=whole(0, arguments.MAX_SERVER_ID_SLOT), default=0,
                        help="replica server_id slot of the configured range the reader uses (default 0)")
    parser.add_argument("--reconnect-timeout", type=decimal(0, arguments.MAX_WAIT_S, unit="seconds"),
                        default=DEFAULT_RECONNECT_TIMEOUT_S,
                        help="seconds to wait out a MySQL outage (restart, failover, network cut) before the "
                        "stream stops (default %(default)s)")
    parser.add_argument("--no-resnapshot", dest="resnapshot", action="store_false",
                        help="stop with an error at DDL that changes rows without row events (TRUNCATE, "
                        "RENAME TABLE, partition DROP/EXCHANGE, ...) instead of snapshotting that table "
                        "again")
    add_source_limit_options(parser)  # for the re-snapshots such DDL needs
    parser.add_argument("--startup-mode", default=INITIAL, metavar="MODE", type=checked(_startup_mode_text),
                        help=f"where a new checkpoint's stream begins: {StartupMode.HELP} "
                        "(default %(default)s)")
    parser.add_argument("--lock-lease-seconds", default=DEFAULT_LEASE_SECONDS,
                        type=decimal(0, arguments.MAX_WAIT_S, unit="seconds", minimum_exclusive=True),
                        help="the checkpoint lock expires this long after its holder's last heartbeat")
    parser.add_argument("--break-lock", action="store_true",
                        help="take the checkpoint lock even if another stream seems to hold it")
    parser.add_argument("--gc-retention", default=DEFAULT_RETENTION, type=checked(arguments.retention),
                        help="garbage collection deletes superseded snapshot versions, killed attempts' "
                        "files and old mirror files this long after they stopped being needed: 72h, 3d, "
                        "30m (default %(default)s; never below a 15 minute grace)")
    parser.add_argument("--gc-mirror-retention", default=None, type=checked(arguments.retention),
                        help="mirror files a batch superseded are deleted this long after (Delta time travel "
                        "and queries that opened an older version need them): default 1h while "
                        "--gc-retention is left at its default, else --gc-retention; never below the "
                        "mirror's Delta log retention plus the 15 minute grace")
    parser.add_argument("--mirror-updates", default="rewrite", type=checked(arguments.mirror_updates),
                        help="how a batch updates the mirror: rewrite (each chunk it touches, default) or "
                        "deletion_vectors (its changed rows plus Delta deletion vectors; readers: "
                        "docs/output.md)")
    parser.add_argument("--gc-interval-minutes", default=DEFAULT_INTERVAL_MINUTES,
                        type=checked(arguments.gc_interval_minutes),
                        help="run garbage collection after a batch at most every this many minutes "
                        "(0: never; default %(default)g)")


def _startup_mode_text(value: str) -> str:
    """A startup mode in its canonical spelling (``latest-offset``, ``timestamp:2026-11-21T08:00:00+00:00``,
    ...)."""
    return str(arguments.startup_mode(arguments.text(value, what="a startup mode such as initial")))


def stream_config(args: argparse.Namespace, *, trigger: str, **extra: Any) -> StreamConfig:
    """A StreamConfig from the shared options; missing settings are named with their fix."""
    mysql_url = require_mysql_url(args)
    chunk_store = chunk_store_of(args)
    low, high = MySQLSettings.from_url(mysql_url, password="").server_id_range
    if args.server_id_slot >= high - low:
        raise ConfigurationError(
            f"--server-id-slot {args.server_id_slot} does not fit the server_id range {low}-{high} of "
            f"--mysql-url ({high - low} reader ids; the top one is for mysqlcdc check): give a slot below "
            f"{high - low}, or widen the range (?server_id=5400-5499)")
    unique_tables([item.split("=", 1) for item in args.exclude_columns or []], "--exclude-columns")
    return StreamConfig(
        mysql_url=mysql_url,
        tables=tuple(split_table_list(args.tables)),
        chunk_store=chunk_store,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=trigger,
        password_file=args.password_file,
        max_bytes_per_batch=args.max_bytes_per_batch or None,
        changelog_json=args.changelog_json,
        server_id_slot=args.server_id_slot,
        catchup_partitions=args.catchup_partitions,
        catchup_partition_bytes=args.catchup_partition_bytes,
        rows_per_read=args.rows_per_read,
        reconnect_timeout=args.reconnect_timeout,
        startup_mode=str(StartupMode.parse(args.startup_mode)),
        resnapshot=args.resnapshot,
        source_limits=source_limits(args),
        lock_lease_seconds=args.lock_lease_seconds,
        break_lock=args.break_lock,
        exclude_columns=parse_exclude_columns(args.exclude_columns or []),
        gc_retention=args.gc_retention,
        gc_mirror_retention=args.gc_mirror_retention,
        gc_interval_minutes=args.gc_interval_minutes,
        mirror_updates=args.mirror_updates,
        **extra,
    )
