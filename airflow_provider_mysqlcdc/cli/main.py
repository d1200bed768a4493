"""``mysqlcdc``: the engine without Airflow: check, plan, remove-table, snapshot, stream, status, mirror.

Exit codes: 0 success, 1 a check failed, 2 bad input or an error the message explains.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from airflow_provider_mysqlcdc import __version__
from airflow_provider_mysqlcdc.engine.source.readiness import DEFAULT_MIN_RETENTION_HOURS, check_server
from airflow_provider_mysqlcdc.engine.source.connection import PASSWORD_ENV, URL_ENV, MySQLSettings
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError


def _add_mysql_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get(URL_ENV),
        help=f"mysql://user@host:port[/db][?ssl_ca=..&server_id=5400-5499] (default: ${URL_ENV}). "
        f"Prefer ${PASSWORD_ENV} for the password: a URL password shows in process lists.",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mysqlcdc",
        description="Replicate MySQL tables into a data lake: snapshot chunks and the binlog stream on Spark.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    check = sub.add_parser("check", help="validate a MySQL/MariaDB server for CDC and print its binlog position")
    _add_mysql_args(check)
    check.add_argument(
        "--min-binlog-retention-hours",
        type=float,
        default=DEFAULT_MIN_RETENTION_HOURS,
        help="warn when binlogs expire sooner than this (default %(default)s)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_cmd_check)
    _add_plan_command(sub)
    _add_remove_table_command(sub)
    _add_snapshot_command(sub)
    from airflow_provider_mysqlcdc.cli.status import add_parsers as add_status_parsers
    from airflow_provider_mysqlcdc.cli.stream import add_parser as add_stream_parser

    add_stream_parser(sub)
    add_status_parsers(sub)
    return parser


def _settings(args: argparse.Namespace) -> MySQLSettings:
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    return MySQLSettings.from_url(args.mysql_url)


def _cmd_check(args: argparse.Namespace) -> int:
    report = check_server(_settings(args), min_retention_hours=args.min_binlog_retention_hours)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0 if report.ok else 1


# --- plan and snapshot (the snapshot phase) ---------------------------------------------------------------------


def _add_plan_command(sub: argparse._SubParsersAction) -> None:
    from airflow_provider_mysqlcdc.engine.chunks.groups import DEFAULT_CHUNKS_PER_GROUP
    from airflow_provider_mysqlcdc.engine.chunks.planner import DEFAULT_CHUNK_SIZE
    from airflow_provider_mysqlcdc.engine.snapshot.options import CHUNK_STORE_ENV

    plan = sub.add_parser("plan", help="split tables into chunks (a new plan generation) and print the chunk groups")
    _add_mysql_args(plan)
    plan.add_argument("--password-file", help="a file holding the MySQL password")
    plan.add_argument("--tables", action="append", required=True,
                      help="db.table or pattern (db.orders_*); comma-separated or repeated")
    plan.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="rows per chunk (default %(default)s)")
    plan.add_argument("--chunk-store", default=os.environ.get(CHUNK_STORE_ENV),
                      help=f"chunk store URL or SQLite path (default ${CHUNK_STORE_ENV})")
    plan.add_argument("--chunk-key", action="append", default=[], metavar="DB.TABLE=COLUMN",
                      help="chunk by this column instead of the primary key (repeatable)")
    plan.add_argument("--chunks-per-group", type=int, default=DEFAULT_CHUNKS_PER_GROUP,
                      help="chunks per Spark job / mapped Airflow task (default %(default)s)")
    plan.add_argument("--only-new", action="store_true",
                      help="plan only tables that are not in the pipeline yet (no plan, or removed); every "
                           "other table keeps its plan and snapshot")
    plan.add_argument("--run-id", help="recorded with the plan in the chunk store")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=_cmd_plan)


def _add_remove_table_command(sub: argparse._SubParsersAction) -> None:
    from airflow_provider_mysqlcdc.engine.snapshot.options import CHUNK_STORE_ENV

    remove = sub.add_parser(
        "remove-table",
        help="take planned tables out of the pipeline: the stream stops capturing them, their output stays",
        description="Take planned tables out of the pipeline. The running stream stops capturing them "
                    "(from its next micro-batch); their snapshot, changelog and mirror stay as they are (the "
                    "mirror stops advancing). Planning a table again by its exact name puts it back (a new "
                    "generation, snapshotted again); a wildcard pattern never does. Idempotent.",
    )
    remove.add_argument("tables", nargs="+", metavar="DB.TABLE",
                        help="planned db.table or pattern (db.tmp_*); comma-separated or several")
    remove.add_argument("--chunk-store", default=os.environ.get(CHUNK_STORE_ENV),
                        help=f"chunk store URL or SQLite path (default ${CHUNK_STORE_ENV})")
    remove.add_argument("--reason", help="recorded with the removal in the chunk store")
    remove.add_argument("--run-id", help="recorded with the removal in the chunk store")
    remove.add_argument("--json", action="store_true", help="print the result as JSON")
    remove.set_defaults(func=_cmd_remove_table)


def _add_snapshot_command(sub: argparse._SubParsersAction) -> None:
    from airflow_provider_mysqlcdc.spark.session import DEFAULT_MASTER
    from airflow_provider_mysqlcdc.engine.snapshot.options import add_connection_arguments, add_read_arguments

    snap = sub.add_parser("snapshot", help="snapshot planned chunks on Spark into versioned Parquet")
    add_connection_arguments(snap)
    snap.add_argument("--tables", action="append", required=True,
                      help="planned db.table or pattern; comma-separated or repeated")
    snap.add_argument("--chunks", help="only these chunk ids, e.g. 3,7 or 0-15 (one table only)")
    snap.add_argument("--generation", type=int, help="plan generation (default: the latest)")
    snap.add_argument("--exclude-columns", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
                      help="columns never written (e.g. secrets); repeatable")
    add_read_arguments(snap)
    snap.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default %(default)s)")
    snap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    snap.add_argument("--json", action="store_true", help="print the results as JSON")
    snap.set_defaults(func=_cmd_snapshot)


def _split_list(values: Sequence[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key.strip() or not rest.strip():
            raise ConfigurationError(f"{what} must look like KEY=VALUE, got {value!r}")
        pairs[key.strip()] = rest.strip()
    return pairs


def _cmd_plan(args: argparse.Namespace) -> int:
    from airflow_provider_mysqlcdc.engine.chunks.groups import chunk_groups
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
    from airflow_provider_mysqlcdc.engine.snapshot.options import CHUNK_STORE_ENV, read_password_file

    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store: pass --chunk-store or set ${CHUNK_STORE_ENV}")
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    settings = MySQLSettings.from_url(args.mysql_url, password=read_password_file(args.password_file))
    with ChunkStore(args.chunk_store) as store:
        plans = plan_tables(settings, store, _split_list(args.tables), chunk_size=args.chunk_size,
                            chunk_keys=_pairs(args.chunk_key, "--chunk-key"), run_id=args.run_id,
                            only_new=args.only_new)
    report = [
        {"table": str(p.table), "generation": p.generation, "split": p.split, "key_columns": list(p.key_columns),
         "chunk_size": p.chunk_size, "row_estimate": p.row_estimate, "chunk_count": len(p.chunks),
         "chunk_groups": [g.to_dict() for g in chunk_groups(p, args.chunks_per_group)]}
        for p in plans
    ]
    if args.json:
        print(json.dumps({"tables": report}, indent=2))
        return 0
    if not report:
        print("nothing planned: the matching tables are in the pipeline already" if args.only_new
              else "nothing planned: the matching tables were removed from the pipeline (name one exactly to "
                   "put it back)")
    for t in report:
        print(f"{t['table']}: generation {t['generation']}, {t['chunk_count']} chunk(s) of ~{t['chunk_size']} rows "
              f"({t['split']} split on {', '.join(t['key_columns'])}; ~{t['row_estimate']} rows)")
        for i, group in enumerate(t["chunk_groups"]):
            print(f"  group {i}: {group['name']} ({len(group['chunk_ids'])} chunk(s))")
    return 0


def _cmd_remove_table(args: argparse.Namespace) -> int:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import remove_tables
    from airflow_provider_mysqlcdc.engine.snapshot.options import CHUNK_STORE_ENV

    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store: pass --chunk-store or set ${CHUNK_STORE_ENV}")
    with ChunkStore(args.chunk_store) as store:
        results = remove_tables(store, _split_list(args.tables), args.run_id, reason=args.reason)
        entries = {e.table: e for e in store.table_entries()}
    rows = []
    for table, removed_now in results:
        entry = entries[table]
        rows.append({"table": table, "removed_now": removed_now, "generation": entry.latest_generation,
                     "removed_at": entry.removed_at.isoformat() if entry.removed_at else None})
    if args.json:
        print(json.dumps({"tables": rows}, indent=2))
        return 0
    for r in rows:
        what = "removed from the pipeline" if r["removed_now"] else "was removed from the pipeline already"
        print(f"{r['table']}: {what} at {r['removed_at']} (generation {r['generation']} and its output stay "
              "as they are; the stream no longer captures it)")
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from urllib.parse import urlsplit, urlunsplit

    from airflow_provider_mysqlcdc.engine.chunks.groups import parse_chunk_ids
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
    from airflow_provider_mysqlcdc.engine.model.tables import matching_tables
    from airflow_provider_mysqlcdc.spark.session import build_session
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
    from airflow_provider_mysqlcdc.engine.snapshot.options import CHUNK_STORE_ENV, options_from_args

    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store: pass --chunk-store or set ${CHUNK_STORE_ENV}")
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    parts = urlsplit(args.mysql_url)
    if parts.password is not None:
        # Spark options must not carry it: hand it to the (local) executors through the environment instead.
        os.environ[PASSWORD_ENV] = MySQLSettings.from_url(args.mysql_url).password
        netloc = parts.netloc.split("@", 1)[1] if "@" in parts.netloc else parts.netloc
        user = parts.username
        args.mysql_url = urlunsplit(parts._replace(netloc=f"{user}@{netloc}" if user else netloc))
        print(f"mysqlcdc snapshot: warning: a password in --mysql-url shows in process lists; prefer "
              f"${PASSWORD_ENV} or --password-file (it reaches local executors only)", file=sys.stderr)
    with ChunkStore(args.chunk_store) as store:
        planned = store.active_tables()  # a removed table is out of the pipeline: plan it again first
        removed = store.removed_tables()
    patterns = _split_list(args.tables)
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
    excluded = {t: tuple(_split_list([cols])) for t, cols in _pairs(args.exclude_columns, "--exclude-columns").items()}
    jobs = [options_from_args(args, t, chunk_ids=chunk_ids, exclude_columns=excluded.get(t, ())) for t in tables]

    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    spark = build_session(args.master, "mysqlcdc snapshot", _pairs(args.conf, "--conf"))
    results = []
    try:
        for options in jobs:
            results.append(run_chunk_group(spark, options, raise_on_failure=False,
                                           progress=lambda msg: print(msg, file=sys.stderr, flush=True)))
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdcError as exc:
        print(f"mysqlcdc {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
