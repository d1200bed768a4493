"""``mysqlcdc verify``: compare the lake with the source, chunk by chunk, without reading rows
(``engine/verify``). ``cli/main.py`` adds it with ``add_parser(sub)``.

Exit code 0: every verified chunk matches (or was repaired); 1: a chunk differs (each named with its table,
chunk, key range and both row counts); 3: some chunks could not be verified yet (the stream has not reached
their position: verify again with ``--resume``). ``--repair`` re-snapshots the chunks that differ on Spark (in
this process, as ``mysqlcdc snapshot`` does) and verifies them again once the stream has passed them.
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.cli.options import (
    add_chunk_store_option,
    add_mysql_options,
    add_output_option,
    add_spark_master_option,
    chunk_store_of,
    mysql_settings,
)
from airflow_provider_mysqlcdc.cli.snapshot_options import add_source_limit_options, source_limits
from airflow_provider_mysqlcdc.cli.validation import checked, whole
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MISMATCH, REPAIRED, UNVERIFIED
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.verify.repair import Resnapshot, chunks_to_repair, repair_table
from airflow_provider_mysqlcdc.engine.verify.verify_run import ChunkVerdict, VerifyOptions, VerifyRun
from airflow_provider_mysqlcdc.pipeline import arguments

MISMATCH_EXIT, UNVERIFIED_EXIT = 1, 3


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from airflow_provider_mysqlcdc.spark.session import DEFAULT_MASTER

    parser = subparsers.add_parser(
        "verify",
        help="verify the lake against the source, chunk by chunk (digests; no row crosses the wire)",
        description="For each chunk: a digest of the source rows (count and a sum of row hashes the server "
        "computes) in a read view whose binlog position is known, compared with the same digest of the "
        "lake's rows of that chunk as of that position (snapshot plus changelog), and the mirror's files "
        "with what they were built from. Runs under the snapshot's source limits; records every verdict "
        "in the chunk store.",
    )
    add_mysql_options(parser)
    add_output_option(parser, required=True, writable=False)
    add_chunk_store_option(parser, store_alias=True, output_default=True)
    parser.add_argument("--table", action="append", dest="tables", metavar="DB.TABLE", required=True,
                        type=checked(arguments.table_name), help="a table to verify (repeatable)")
    parser.add_argument("--chunks", type=checked(arguments.chunk_ids), metavar="IDS",
                        help="only these chunk ids of each table: 3,7 or 0-15")
    parser.add_argument("--sample", type=checked(arguments.sample_share), metavar="PERCENT",
                        help="a random share of the chunks, e.g. 5%% (seeded: --seed)")
    parser.add_argument("--seed", type=whole(0, 2**31), default=0, help="the sample's seed (default 0)")
    parser.add_argument("--explain", action="store_true",
                        help="for a chunk that differs, name the first differing keys (reads that chunk's "
                        "keys and row hashes)")
    parser.add_argument("--resume", metavar="VERIFY_ID", type=checked(arguments.verify_id),
                        help="continue the verify run with this id: the chunks that matched there are "
                        "skipped, the others verified again")
    parser.add_argument("--wait", type=whole(0, 86400), default=600, metavar="SECONDS",
                        help="how long to wait for the stream to pass the digests' positions "
                        "(default %(default)s)")
    parser.add_argument("--repair", action="store_true",
                        help="re-snapshot the chunks that differ (on Spark, in this process) and verify them "
                        "again once the stream has passed them")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    add_source_limit_options(parser)
    add_spark_master_option(parser, default=DEFAULT_MASTER)
    parser.set_defaults(func=cmd_verify)
    return parser


def cmd_verify(args: argparse.Namespace) -> int:
    settings = mysql_settings(args, "to read the source's digests")
    try:
        url = arguments.chunk_store_location(chunk_store_of(args), must_exist=True)
    except arguments.BadValue as exc:
        raise exc.named("--chunk-store") from None
    options = VerifyOptions(chunks=args.chunks, sample=args.sample, seed=args.seed, explain=args.explain,
                            wait_s=float(args.wait), limits=source_limits(args))
    verdicts: list[ChunkVerdict] = []

    def show(verdict: ChunkVerdict) -> None:
        if not args.json:
            print(verdict.describe(), flush=True)

    with ChunkStore(url) as store:
        run = VerifyRun(settings, store, args.output, options, on_verdict=show)
        if args.resume:
            run.verify_id = args.resume
        for table in args.tables:
            table = table if isinstance(table, TableId) else TableId.parse(str(table))
            found = run.verify_table(table)
            if args.repair and chunks_to_repair(found):
                if not args.json:
                    print(f"repairing {table} chunks {chunks_to_repair(found)}: re-snapshot, then verify "
                          "again", flush=True)
                repaired = repair_table(run, table, found, _spark_resnapshot(args, url),
                                        _local_refresh(args.output, store, settings))
                again = {v.chunk_id: v for v in repaired}
                found = [again.get(v.chunk_id, v) for v in found]
            verdicts += found
    summary = {r: sum(1 for v in verdicts if v.result == r)
               for r in ("match", REPAIRED, MISMATCH, UNVERIFIED)}
    if args.json:
        print(json.dumps({"verify_id": run.verify_id, "summary": summary,
                          "chunks": [_as_dict(v) for v in verdicts]}, indent=2))
    else:
        print(f"verify {run.verify_id}: {summary['match']} chunks match, {summary[REPAIRED]} repaired, "
              f"{summary[MISMATCH]} differ, {summary[UNVERIFIED]} not verified"
              + (f" (verify again with --resume {run.verify_id})" if summary[UNVERIFIED] else ""))
    if summary[MISMATCH]:
        return MISMATCH_EXIT
    return UNVERIFIED_EXIT if summary[UNVERIFIED] else 0


def _spark_resnapshot(args: argparse.Namespace, chunk_store: str) -> Resnapshot:
    """Re-snapshot chunks on Spark in this process, as ``mysqlcdc snapshot --chunks`` does."""

    def resnapshot(table: TableId, generation: int, chunk_ids: list[int], excluded: tuple[str, ...]) -> None:
        from pyspark.sql import SparkSession

        from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
        from airflow_provider_mysqlcdc.spark.session import build_session
        from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_snapshot

        settings = mysql_settings(args, "to re-snapshot the chunks that differ")
        if not args.password_file and settings.password:
            os.environ[MYSQL_PASSWORD_ENV] = settings.password  # local executors only; never an option
        options = SnapshotOptions(
            mysql_url=settings.url_without_password(), table=str(table), output=args.output,
            chunk_store=chunk_store, generation=generation, chunk_ids=tuple(chunk_ids),
            password_file=args.password_file, exclude_columns=excluded, limits=source_limits(args),
        )
        existing = SparkSession.getActiveSession()
        spark = build_session(args.master, "mysqlcdc verify --repair")
        try:
            run_snapshot(spark, [options], raise_on_failure=True)
        finally:
            if existing is None:
                spark.stop()

    return resnapshot


def _local_refresh(output: str, store: ChunkStore,
                   settings: MySQLSettings) -> Callable[[TableId], object] | None:
    """A mirror refresh of our own for a local output (its refresh lock keeps it from overlapping the
    stream's); on an object store the stream's driver is the only writer of the mirror: None."""
    fs, _ = filesystem(output)
    if not isinstance(fs, pafs.LocalFileSystem):
        return None

    def refresh(table: TableId) -> object:
        with MirrorRefresher(output, store, settings=settings) as refresher:
            return refresher.refresh(table)

    return refresh


def _as_dict(v: ChunkVerdict) -> dict[str, Any]:
    return {"table": v.table, "generation": v.generation, "chunk_id": v.chunk_id, "result": v.result,
            "position": v.position, "source": v.source.as_dict() if v.source else None,
            "lake": v.lake.as_dict() if v.lake else None, "why": v.why, "differences": list(v.differences)}
