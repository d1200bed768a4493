"""``mysqlcdc gc``: delete what no reader needs any more (``engine/lake/gc``), or show it (``--dry-run``).

``cli/main.py`` adds it with ``add_parser(sub)``. Safe while a stream runs: nothing younger than the retention
(at least the minimum grace) is touched, nor anything a manifest, a marker or the chunk store names.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_provider_mysqlcdc.cli.options import add_chunk_store_option, add_output_option, chunk_store_of
from airflow_provider_mysqlcdc.cli.validation import checked
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.gc.collector import collect_garbage
from airflow_provider_mysqlcdc.engine.lake.gc.report import bytes_text, read_gc_report
from airflow_provider_mysqlcdc.engine.lake.gc.retention import DEFAULT_RETENTION, Retention
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern
from airflow_provider_mysqlcdc.pipeline import arguments


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "gc",
        help="delete superseded snapshot versions, killed attempts' files and old mirror files after a "
        "retention",
        description="Garbage collection of an output root: superseded snapshot chunk versions and old plan "
        "generations, changelog files of killed attempts, mirror files the Delta table removed longer ago "
        "than the retention (VACUUM), expired Delta log entries. Safe while the stream runs.",
    )
    add_output_option(parser, required=True, writable=False)
    add_chunk_store_option(parser, store_alias=True, output_default=True)
    parser.add_argument("--retention", default=DEFAULT_RETENTION, type=checked(arguments.retention),
                        help="keep what stopped being needed less than this long ago: 72h, 3d, 30m "
                        "(default %(default)s; never below the 15 minute grace)")
    parser.add_argument("--mirror-retention", default=None, type=checked(arguments.retention),
                        help="superseded mirror files: default 1h while --retention is left at its default, "
                        "else --retention; never below the mirror's Delta log retention plus the grace")
    parser.add_argument("--table", action="append", dest="tables", metavar="DB.TABLE",
                        type=checked(arguments.table_name), help="only this table (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    parser.add_argument("--json", action="store_true", help="print the run (and the totals) as JSON")
    parser.set_defaults(func=cmd_gc)
    return parser


def cmd_gc(args: argparse.Namespace) -> int:
    try:
        url = arguments.chunk_store_location(chunk_store_of(args), must_exist=True)
    except arguments.BadValue as exc:
        raise exc.named("--chunk-store") from None
    tables = None if args.tables is None else [TablePattern.parse(t).exact for t in args.tables]
    with ChunkStore(url) as store:
        run = collect_garbage(args.output, store, Retention.settings(args.retention, args.mirror_retention),
                              dry_run=args.dry_run,
                              tables=tables)
    report = None if args.dry_run else read_gc_report(args.output)
    if args.json:
        out: dict[str, Any] = {"run": run.as_dict()}
        if report is not None:
            out["totals"] = report.as_dict()["totals"]
        print(json.dumps(out, indent=2))
    else:
        print(f"mysqlcdc gc {args.output}: {run.describe()}")
        for table, kinds in sorted(run.by_table.items()):
            amounts = (f"{k} {a.files} files {bytes_text(a.bytes)}" for k, a in sorted(kinds.items()))
            print(f"  {table}: " + ", ".join(amounts))
        if report is not None:
            print(report.describe().splitlines()[1])
    return 1 if run.errors else 0
