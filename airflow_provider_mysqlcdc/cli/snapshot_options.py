"""The snapshot phase's command-line options, shared by ``mysqlcdc snapshot`` and
``spark_apps/snapshot_chunks.py``.

Both read planned chunks into the output with the same read options and build a ``SnapshotOptions`` per table
from them (``options_from_args``); each entry point adds only how it picks its tables and chunks.
"""
from __future__ import annotations

import argparse
import json

from airflow_provider_mysqlcdc.cli.options import (
    add_chunk_store_option,
    add_mysql_options,
    add_output_option,
    add_run_id_option,
    require_mysql_url,
)
from airflow_provider_mysqlcdc.cli.validation import checked, decimal, whole
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import DEFAULT_BATCH_ROWS
from airflow_provider_mysqlcdc.engine.snapshot.options import (
    DEFAULT_READER_SLOT_BASE,
    DEFAULT_ROWS_PER_FILE,
    READ_VIEW_MODES,
    SnapshotOptions,
)
from airflow_provider_mysqlcdc.engine.source.limits import (
    DEFAULT_MAX_CONCURRENT_READS,
    DEFAULT_QUERY_TIMEOUT_S,
    SourceLimits,
)
from airflow_provider_mysqlcdc.pipeline import arguments


def add_connection_arguments(parser: argparse.ArgumentParser, *, password_in_url: bool,
                             local_files: bool = False) -> None:
    """``--mysql-url``, ``--password-file`` (read on the executors) and ``--chunk-store``.

    ``password_in_url``: ``mysqlcdc snapshot`` takes a URL password (for its local executors, with a warning);
    ``spark-submit`` command lines must not carry one. ``local_files``: the password file and a SQLite chunk
    store must be here (``mysqlcdc snapshot``; a Spark app's driver may run on another host).
    """
    add_mysql_options(parser, password_in_url=password_in_url, on_executors=True, local_files=local_files)
    add_chunk_store_option(parser, existing=True if local_files else None, output_default=True)


def add_read_arguments(parser: argparse.ArgumentParser, *, local_files: bool = False) -> None:
    """The read options; ``local_files``: a local output must be writable here (``mysqlcdc snapshot``)."""
    add_output_option(parser, required=True, writable=local_files)
    parser.add_argument("--read-view-mode", choices=READ_VIEW_MODES, default="auto")
    parser.add_argument("--watermark-table", type=checked(arguments.table_key),
                        help="db.table for the watermark_table read view mode")
    parser.add_argument("--skip-backfill", action="store_true",
                        help="at-least-once chunks filtered at their LW (no binlog correction)")
    parser.add_argument("--batch-rows", type=whole(1, arguments.MAX_BATCH_ROWS), default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--rows-per-file", type=whole(1, arguments.MAX_ROWS_PER_FILE),
                        default=DEFAULT_ROWS_PER_FILE)
    parser.add_argument("--reader-slot-base",
                        type=whole(1, arguments.MAX_READER_SLOT, zero="slot 0 is the stream's"),
                        default=DEFAULT_READER_SLOT_BASE,
                        help="first watermark slot/server_id offset of this job; concurrent jobs need "
                        "disjoint ranges (a job uses one slot per parallel chunk)")
    add_run_id_option(parser, help="recorded with each chunk in the chunk store")
    add_source_limit_options(parser)


def add_source_limit_options(parser: argparse.ArgumentParser) -> None:
    """The limits chunk reads keep on the source server: the snapshot's, and a stream's re-snapshots'."""
    parser.add_argument("--max-concurrent-reads",
                        type=whole(0, arguments.MAX_CONCURRENT_READS, zero="0: no cap"),
                        default=DEFAULT_MAX_CONCURRENT_READS,
                        help="chunk reads the source server serves at once, over all jobs (0: no cap; "
                        "default %(default)s)")
    parser.add_argument("--rows-per-second", default=0,
                        type=decimal(0, arguments.MAX_ROWS_PER_SECOND, zero="0: no limit"),
                        help="rows per second the source server serves to all chunk reads together "
                        "(0: no limit)")
    parser.add_argument("--query-timeout",
                        type=decimal(0, arguments.MAX_QUERY_TIMEOUT_S, unit="seconds", zero="0: none"),
                        default=DEFAULT_QUERY_TIMEOUT_S,
                        help="server-side time limit of each chunk SELECT in seconds "
                        "(0: none; default %(default)s)")


def source_limits(args: argparse.Namespace) -> SourceLimits:
    return SourceLimits(max_concurrent_reads=args.max_concurrent_reads or None,
                        rows_per_second=args.rows_per_second or None,
                        query_timeout_s=args.query_timeout or None)


def add_generation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generation", type=whole(1, arguments.MAX_GENERATION),
                        help="plan generation (default: the latest)")


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """One chunk group (spark_apps/snapshot_chunks.py): ``--chunk-group`` (any number of tables, as the plan
    task returns it), or one table's ``--table`` with ``--generation``, ``--chunks``,
    ``--exclude-columns``."""
    parser.add_argument("--chunk-group", type=checked(_chunk_group),
                        help='the plan\'s group as JSON: '
                        '{"parts": [{"table", "generation", "chunk_ids"}, ...]}')
    parser.add_argument("--exclude-columns-of", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
                        type=checked(arguments.exclude_columns_item),
                        help="with --chunk-group: columns never written of one table (repeatable)")
    parser.add_argument("--table", type=checked(arguments.table_name),
                        help="db.table (planned in the chunk store)")
    add_generation_option(parser)
    add_chunks_option(parser, help="chunk ids, e.g. 3,7 or 0-15 (default: every chunk of the plan)")
    parser.add_argument("--exclude-columns", type=checked(_column_names),
                        help="columns never written, e.g. secret,blob")


def _chunk_group(value: str) -> ChunkGroup:
    """A chunk group as the plan task returns it, as JSON."""
    try:
        group = ChunkGroup.from_dict(json.loads(value))
    except (TypeError, ValueError, KeyError, AttributeError):
        raise arguments.BadValue('give the chunk group as JSON: {"parts": [{"table": "db.t", "generation": '
                                 f'1, "chunk_ids": [0, 1]}}]}}, got {arguments.shown(value)}') from None
    if not group.parts or any(not p.chunk_ids or min(p.chunk_ids) < 0 for p in group.parts):
        raise arguments.BadValue(
            f"a chunk group names at least one table and chunk, got {arguments.shown(value)}"
        )
    if len(set(group.tables)) != len(group.parts):
        raise arguments.BadValue(f"a chunk group names each table once, got {arguments.shown(value)}")
    for part in group.parts:
        arguments.table_name(part.table)
        arguments.whole_number(part.generation, minimum=1, maximum=arguments.MAX_GENERATION)
    return group


def group_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[SnapshotOptions]:
    """One ``SnapshotOptions`` per table of ``--chunk-group`` (or of the one ``--table``)."""
    if (args.chunk_group is None) == (args.table is None):
        parser.error("give either --chunk-group or --table")
    if args.chunk_group is None:
        if args.exclude_columns_of:
            parser.error("--exclude-columns-of goes with --chunk-group (with --table: --exclude-columns)")
        return [options_from_args(args, args.table, chunk_ids=arguments.chunk_ids(args.chunks) if args.chunks
                                  else None, exclude_columns=tuple(split_commas(args.exclude_columns)))]
    if args.generation or args.chunks or args.exclude_columns:
        parser.error("--generation, --chunks and --exclude-columns go with --table (with --chunk-group: its "
                     "parts, and --exclude-columns-of)")
    excluded = dict(args.exclude_columns_of)
    strays = sorted(set(excluded) - set(args.chunk_group.tables))
    if strays:
        parser.error(f"--exclude-columns-of names {strays}, not in --chunk-group")
    return [options_from_args(args, p.table, chunk_ids=p.chunk_ids, exclude_columns=excluded.get(p.table, ()))
            .with_(generation=p.generation) for p in args.chunk_group.parts]


def add_chunks_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--chunks", type=checked(_chunk_ids_text), help=help)


def _chunk_ids_text(value: str) -> str:
    """Chunk ids as written (``3,7``, ``0-15``), once they parse."""
    arguments.chunk_ids(value)
    return value.strip()


def _column_names(value: str) -> str:
    """``secret,blob`` as written, once each name is a possible column name."""
    return ",".join(arguments.column_list(value))


def options_from_args(args: argparse.Namespace, table: str, *, chunk_ids: tuple[int, ...] | None = None,
                      exclude_columns: tuple[str, ...] = ()) -> SnapshotOptions:
    """SnapshotOptions from the shared arguments; a URL password is refused (use the env or a file)."""
    return SnapshotOptions(
        mysql_url=require_mysql_url(args), table=table, output=args.output,
        chunk_store=args.chunk_store or None, generation=getattr(args, "generation", None),
        chunk_ids=chunk_ids, password_file=args.password_file,
        read_view_mode=args.read_view_mode, watermark_table=args.watermark_table,
        skip_backfill=args.skip_backfill, batch_rows=args.batch_rows, rows_per_file=args.rows_per_file,
        exclude_columns=exclude_columns, run_id=args.run_id, reader_slot_base=args.reader_slot_base,
        limits=source_limits(args),
    )
