"""``mysqlcdc status`` and ``mysqlcdc mirror``: where each table stands, and a table's current state.

``add_parsers(subparsers)`` registers both subcommands on the ``mysqlcdc`` parser (``cli/main.py`` wires it);
each sets ``func`` to a function taking the parsed arguments and returning the exit code. Arguments follow the
other subcommands: ``--chunk-store`` (or ``$MYSQLCDC_CHUNK_STORE_URL``), ``--output``, ``--mysql-url`` (or
``$MYSQLCDC_MYSQL_URL``) with the password from ``$MYSQLCDC_MYSQL_PASSWORD`` or ``--password-file``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.cli.options import (
    add_chunk_store_option,
    add_mysql_options,
    add_output_option,
    chunk_store_of,
    mysql_settings,
)
from airflow_provider_mysqlcdc.cli.validation import checked, whole
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import mirror_files, read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import (
    latest_mirror_version,
    mirror_version_at,
    read_mirror,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import connect
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.pipeline import arguments


def add_parsers(subparsers: Any) -> None:
    """Add ``status`` and ``mirror`` to the ``mysqlcdc`` subcommands."""
    status = subparsers.add_parser(
        "status",
        help="per table: snapshot phase progress, stream position and lag, mirror consistency",
        description="Chunks planned/running/committed/failed, rows, HWs, stream position and lag behind the "
        "server's binlog (bytes, files, seconds), the binlog headroom (time until the server purges the "
        "oldest binlog file the pipeline needs), the last batch's figures, and from which binlog position "
        "each table's mirror is consistent.",
    )
    _add_common(status)
    status.add_argument(
        "--table",
        action="append",
        dest="tables",
        metavar="DB.TABLE",
        type=checked(arguments.table_name),
        help="only this table (repeatable; default: every table in the chunk store)",
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)

    mirror = subparsers.add_parser(
        "mirror",
        help="refresh a table's materialized mirror, then print or export its current state",
        description="Refresh the mirror of one table from its committed snapshot and changelog (only chunks "
        "with new changes are rewritten), then print a summary, the rows (--print) or one Parquet file "
        "(--export).",
    )
    _add_common(mirror)
    mirror.add_argument("--table", required=True, metavar="DB.TABLE", type=checked(arguments.table_name))
    mirror.add_argument(
        "--print",
        action="store_true",
        dest="print_rows",
        help="print the rows as JSON lines on stdout (the summary goes to stderr)",
    )
    mirror.add_argument("--limit", type=whole(0), default=None, help="print at most this many rows")
    mirror.add_argument(
        "--export", metavar="FILE", help="also write the current state into this Parquet file",
        type=checked(arguments.local_file_target, what="a Parquet file path"),
    )
    mirror.add_argument(
        "--mirror-updates", default="rewrite", type=checked(arguments.mirror_updates),
        help="how the refresh updates the mirror: rewrite (default) or deletion_vectors; use what the "
        "stream uses (docs/output.md)",
    )
    mirror.add_argument(
        "--no-refresh",
        action="store_true",
        help="read the mirror as last refreshed (e.g. while a running stream refreshes it)",
    )
    mirror.add_argument(
        "--as-of",
        metavar="POSITION|TIME|VERSION",
        type=checked(_as_of),
        help="time travel (implies --no-refresh): the table as of a binlog position (mysql-bin.000003:1234, "
        "exact at the positions the mirror recorded, else as of the latest one before), a time the mirror "
        "version was written (ISO 8601, UTC unless it names a zone), or a Delta version number",
    )
    mirror.add_argument("--json", action="store_true", help="print the summary as JSON")
    mirror.set_defaults(func=cmd_mirror)


def _add_common(parser: argparse.ArgumentParser) -> None:
    # must exist: checked where it is opened (_store)
    add_chunk_store_option(parser, store_alias=True, output_default=True)
    add_output_option(parser, required=False, writable=False)
    add_mysql_options(parser)


# --- commands -----------------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with _store(args) as store:
        tables = None if args.tables is None else [TablePattern.parse(t).exact for t in args.tables]
        settings = mysql_settings(args, why="the lag and the binlog headroom") if args.mysql_url else None
        report = collect_status(store, args.output, tables, settings=settings)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0


def cmd_mirror(args: argparse.Namespace) -> int:
    if not args.output:
        raise ConfigurationError("no output root given: pass --output")
    table = TablePattern.parse(args.table).exact  # db.table, or `db`.`any name`
    info = sys.stderr if args.print_rows else sys.stdout
    if args.as_of is not None:
        return _mirror_as_of(args, table, info)
    if args.no_refresh:
        manifest = read_manifest(args.output, table)
        changed = None
    else:
        _check_store(args)  # before the progress line: a bad --chunk-store is the only line
        print(f"refreshing the mirror of {table} ...", file=sys.stderr, flush=True)
        with (
            _store(args) as store,
            MirrorRefresher(args.output, store, conn_factory=_conn_factory(args, required=True),
                            updates=args.mirror_updates) as refresher,
        ):
            result = refresher.refresh(table)
        manifest = result.manifest
        changed = result
        if manifest is None:
            raise ConfigurationError(f"{table}: {result.reason}")
    if manifest is None:
        mirror_files(args.output, table)  # raises MirrorNotFound, which says how to build the mirror
        return 2
    summary = {**manifest.to_dict(), "files": mirror_files(args.output, table)}
    summary.pop("chunks", None)
    delta = latest_mirror_version(args.output, table)
    summary["delta_table"] = mirror_table_uri(args.output, table)
    summary["delta_version"] = None if delta is None else delta.as_dict()
    if changed is not None:
        summary["refresh"] = {
            "rewritten_chunks": list(changed.rewritten),
            "rebuilt_chunks": list(changed.rebuilt),
            "batches_applied": list(changed.batches),
            "records_read": changed.records,
            "seconds": round(changed.seconds, 3),
        }
    if args.json:
        print(json.dumps(summary, indent=2), file=info)
    else:
        print(manifest.describe(), file=info)
        if changed is not None:
            print(
                f"rewrote chunks {list(changed.rewritten)} (rebuilt from snapshot: {list(changed.rebuilt)}), "
                f"applied batches {list(changed.batches)} in {changed.seconds:.2f}s",
                file=info,
            )
        if delta is not None:
            print(f"Delta table {summary['delta_table']}: version {delta.version}"
                  + (f", exact as of {delta.as_of}" if delta.as_of else ""), file=info)
        print("files:", *summary["files"], sep="\n  ", file=info)
    _print_rows(args, read_mirror(args.output, table) if args.export or args.print_rows else None, info)
    return 0


def _mirror_as_of(args: argparse.Namespace, table: TableId, info: Any) -> int:
    """``mirror --as-of``: the Delta version that shows the table then, its rows on request."""
    version = mirror_version_at(args.output, table, args.as_of)
    summary = {"table": str(table), "requested": str(args.as_of), **version.as_dict(),
               "delta_table": mirror_table_uri(args.output, table)}
    if args.json:
        print(json.dumps(summary, indent=2), file=info)
    else:
        shown = (f"as of binlog position {version.as_of}" if version.as_of
                 else "NOT consistent (mixed chunk HWs)")
        print(f"{table}: mirror version {version.version} (written {summary['written_at']}, through batch "
              f"{version.through_batch}), {shown}", file=info)
    data = read_mirror(args.output, table, as_of=version.version) if args.export or args.print_rows else None
    _print_rows(args, data, info)
    return 0


def _as_of(text: str) -> BinlogPosition | datetime | int:
    """``--as-of``: a Delta version (digits), a binlog position (``file.NNNNNN:pos``) or an ISO time."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if re.fullmatch(r"[^\s:]+\.\d+:\d+", text):
        return BinlogPosition.parse(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise arguments.BadValue(
            f"{text!r} is neither a binlog position (mysql-bin.000003:1234), an ISO 8601 time "
            "(2026-11-27T10:00:00) nor a Delta version number"
        ) from None


def _print_rows(args: argparse.Namespace, data: Any, info: Any) -> None:
    if data is not None:
        if args.export:
            fs, inner = filesystem(args.export)
            pq.write_table(data, inner, filesystem=fs)
            print(f"wrote {data.num_rows} rows to {args.export}", file=info)
        if args.print_rows:
            rows = data.slice(0, args.limit) if args.limit is not None else data
            for batch in rows.to_batches():
                for row in batch.to_pylist():
                    sys.stdout.write(
                        json.dumps({k: _json_value(v) for k, v in row.items()}, ensure_ascii=False) + "\n"
                    )


# --- helpers ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _store(args: argparse.Namespace) -> Iterator[ChunkStore]:
    """The chunk store named by --store; a SQLite path that does not exist is an error, not a new store."""
    store = ChunkStore(_check_store(args))
    try:
        yield store
    finally:
        store.close()


def _check_store(args: argparse.Namespace) -> str:
    """``--chunk-store`` (or the default of a local ``--output``), an existing store: these commands read a
    pipeline, never start one."""
    url = chunk_store_of(args)
    try:
        return arguments.chunk_store_location(url, must_exist=True)
    except arguments.BadValue as exc:
        raise exc.named("--chunk-store") from None


def _conn_factory(args: argparse.Namespace, *, required: bool) -> Callable[[], Any] | None:
    if not args.mysql_url and not required:
        return None
    why = "the mirror needs the table schema and the collation order of string keys"
    settings = mysql_settings(args, why=why)
    return lambda: connect(settings)


def _json_value(value: Any) -> Any:
    """Exact JSON for canonical values: decimals and big integers as text, bytes as base64."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)
