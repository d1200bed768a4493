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
    require_mysql_url,
)
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.stream_lock import DEFAULT_LEASE_SECONDS
from airflow_provider_mysqlcdc.engine.model.table_names import split_table_list
from airflow_provider_mysqlcdc.engine.source.outages import DEFAULT_RECONNECT_TIMEOUT_S
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL, StartupMode
from airflow_provider_mysqlcdc.spark.stream.binlog_source import (
    DEFAULT_CATCHUP_PARTITION_BYTES,
    DEFAULT_MAX_BYTES_PER_BATCH,
    ROWS_PER_READ,
)
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig, parse_exclude_columns


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    add_mysql_options(parser, password_in_url=False)
    add_tables_option(parser)
    add_chunk_store_option(parser)
    add_output_option(parser, required=True)
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory of this stream")
    parser.add_argument("--max-bytes-per-batch", type=int, default=DEFAULT_MAX_BYTES_PER_BATCH,
                        help="binlog bytes per micro-batch, rounded to a transaction boundary "
                        "(0: no limit; default %(default)s)")
    parser.add_argument("--catchup-partitions", type=int, default=0,
                        help="parallel catch-up: at most this many Spark tasks decode one batch's binlog "
                        "range when the stream is far behind (0: Spark's default parallelism; 1: off)")
    parser.add_argument("--catchup-partition-bytes", type=int, default=DEFAULT_CATCHUP_PARTITION_BYTES,
                        help="binlog bytes each parallel partition gets at least: a batch splits only when "
                        "it spans twice that (default %(default)s)")
    parser.add_argument("--rows-per-read", type=int, default=ROWS_PER_READ,
                        help="row images a read task decodes and holds before handing them on: bounds its "
                        "memory (default %(default)s, about 100 MB)")
    parser.add_argument("--changelog-json", action="store_true", help="also write Flink changelog-json files")
    add_exclude_columns_option(parser)
    parser.add_argument("--server-id-slot", type=int, default=0,
                        help="replica server_id slot of the configured range the reader uses (default 0)")
    parser.add_argument("--reconnect-timeout", type=float, default=DEFAULT_RECONNECT_TIMEOUT_S,
                        help="seconds to wait out a MySQL outage (restart, failover, network cut) before the "
                        "stream stops (default %(default)s)")
    parser.add_argument("--no-resnapshot", dest="resnapshot", action="store_false",
                        help="stop with an error at DDL that changes rows without row events (TRUNCATE, RENAME "
                        "TABLE, partition DROP/EXCHANGE, ...) instead of snapshotting that table again")
    parser.add_argument("--startup-mode", default=INITIAL, metavar="MODE",
                        help=f"where a new checkpoint's stream begins: {StartupMode.HELP} (default %(default)s)")
    parser.add_argument("--lock-lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS,
                        help="the checkpoint lock expires this long after its holder's last heartbeat")
    parser.add_argument("--break-lock", action="store_true",
                        help="take the checkpoint lock even if another stream seems to hold it")


def stream_config(args: argparse.Namespace, *, trigger: str, **extra: Any) -> StreamConfig:
    """A StreamConfig from the shared options; missing settings are named with their fix."""
    mysql_url = require_mysql_url(args)
    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store given: pass --chunk-store or set ${CHUNK_STORE_URL_ENV}")
    return StreamConfig(
        mysql_url=mysql_url,
        tables=tuple(split_table_list(args.tables)),
        chunk_store=args.chunk_store,
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
        lock_lease_seconds=args.lock_lease_seconds,
        break_lock=args.break_lock,
        exclude_columns=parse_exclude_columns(args.exclude_columns or []),
        **extra,
    )
