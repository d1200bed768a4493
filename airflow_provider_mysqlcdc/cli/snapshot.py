"""``mysqlcdc snapshot``: planned chunks of every matched table read on Spark (in this process, one Spark job)
into versioned Parquet."""
from __future__ import annotations

import argparse
import json
import os
import sys

from airflow_provider_mysqlcdc.cli.options import (
    add_exclude_columns_option,
    add_spark_master_option,
    add_tables_option,
    chunk_store_of,
    parse_pairs,
    require_mysql_url,
    unique_tables,
)
from airflow_provider_mysqlcdc.cli.snapshot_options import (
    add_chunks_option,
    add_connection_arguments,
    add_generation_option,
    add_read_arguments,
    options_from_args,
)
from airflow_provider_mysqlcdc.cli.validation import checked
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.model.table_names import split_table_list
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline import arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from airflow_provider_mysqlcdc.spark.session import DEFAULT_MASTER

    snap = subparsers.add_parser("snapshot", help="snapshot planned chunks on Spark into versioned Parquet")
    add_connection_arguments(snap, password_in_url=True, local_files=True)
    add_tables_option(snap, planned=True)
    add_chunks_option(snap, help="only these chunk ids, e.g. 3,7 or 0-15 (one table only)")
    add_generation_option(snap)
    add_exclude_columns_option(snap)
    add_read_arguments(snap, local_files=True)
    add_spark_master_option(snap, default=DEFAULT_MASTER)
    snap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                      type=checked(_spark_setting), help="extra Spark settings")
    snap.add_argument("--json", action="store_true", help="print the results as JSON")
    snap.set_defaults(func=cmd_snapshot)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from urllib.parse import urlsplit, urlunsplit

    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.chunks.groups import parse_chunk_ids
    from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
    from airflow_provider_mysqlcdc.engine.model.table_names import matching_tables
    from airflow_provider_mysqlcdc.spark.session import build_session
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_snapshot

    try:  # a snapshot reads a plan: the store must exist (a default one is not created here)
        args.chunk_store = arguments.chunk_store_location(chunk_store_of(args), must_exist=True)
    except arguments.BadValue as exc:
        raise exc.named("--chunk-store") from None
    exclusions = unique_tables([item.split("=", 1) for item in args.exclude_columns], "--exclude-columns")
    parts = urlsplit(require_mysql_url(args))
    if parts.password is not None:
        # Spark options must not carry it: hand it to the (local) executors through the environment instead.
        os.environ[MYSQL_PASSWORD_ENV] = MySQLSettings.from_url(args.mysql_url).password
        netloc = parts.netloc.split("@", 1)[1] if "@" in parts.netloc else parts.netloc
        user = parts.username
        args.mysql_url = urlunsplit(parts._replace(netloc=f"{user}@{netloc}" if user else netloc))
        print(f"mysqlcdc snapshot: warning: a password in --mysql-url shows in process lists; prefer "
              f"${MYSQL_PASSWORD_ENV} or --password-file (it reaches local executors only)", file=sys.stderr)
    with ChunkStore(args.chunk_store) as store:
        planned = store.active_tables()  # a removed table is out of the pipeline: plan it again first
        removed = store.removed_tables()
    patterns = split_table_list(args.tables)
    tables = [str(t) for t in matching_tables(planned, patterns)]
    unmatched = [p for p in patterns if not matching_tables(planned, [p])]
    if unmatched:
        gone = [str(t) for t in matching_tables(removed, unmatched)]
        hint = (f" ({', '.join(gone)} was removed from the pipeline: plan it again to put it back)"
                if gone else "")
        raise ConfigurationError(f"no planned table matches {unmatched}: run mysqlcdc plan first{hint}")
    chunk_ids = parse_chunk_ids(args.chunks) if args.chunks else None
    if chunk_ids is not None and len(tables) != 1:
        raise ConfigurationError(f"--chunks needs exactly one table, {len(tables)} match: {tables}")
    excluded = {t: tuple(split_commas(cols)) for t, cols in exclusions.items()}
    jobs = [options_from_args(args, t, chunk_ids=chunk_ids, exclude_columns=excluded.get(t, ()))
            for t in tables]

    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    spark = build_session(args.master, "mysqlcdc snapshot", parse_pairs(args.conf, "--conf"))
    try:  # every table in one Spark job: the fixed costs of a job are paid once
        results = run_snapshot(spark, jobs, raise_on_failure=False,
                               progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    finally:
        if existing is None:
            spark.stop()
    if args.json:
        print(json.dumps({"tables": [r.as_dict() for r in results]}, indent=2))
    else:
        for r in results:
            hws = [BinlogPosition.parse(c.hw) for c in r.chunks if c.hw]
            span = f"HW {min(hws)} .. {max(hws)}" if hws else "no HW"
            state = "ok" if r.ok else f"FAILED: {r.error}"
            print(f"{r.table}: generation {r.generation}, {len(r.chunks)} chunk(s), {r.rows} rows, {span}, "
                  f"{r.seconds:.1f}s, {state}")
    return 0 if all(r.ok for r in results) else 1


def _spark_setting(value: str) -> str:
    """``KEY=VALUE`` of a Spark setting (``spark.executor.memory=2g``)."""
    written = arguments.text(value, what="a Spark setting as KEY=VALUE")
    key, sep, setting = written.partition("=")
    if not sep or not key.strip() or not setting.strip() or any(ch.isspace() for ch in key.strip()):
        raise arguments.BadValue(f"give a Spark setting as KEY=VALUE (spark.executor.memory=2g), got "
                                 f"{arguments.shown(value)}")
    return written
