"""``mysqlcdc plan`` and ``mysqlcdc remove-table``: which tables are in the pipeline, split into chunks."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from airflow_provider_mysqlcdc.cli.options import (
    add_chunk_store_option,
    add_mysql_options,
    add_run_id_option,
    add_tables_option,
    mysql_settings,
    table_list_value,
    unique_tables,
)
from airflow_provider_mysqlcdc.cli.validation import checked, free_text, whole
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import matching_tables, split_table_list
from airflow_provider_mysqlcdc.pipeline import arguments


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plan`` and ``remove-table`` to the ``mysqlcdc`` subcommands."""
    _add_plan_parser(subparsers)
    _add_remove_table_parser(subparsers)


def _add_plan_parser(sub: argparse._SubParsersAction) -> None:
    from airflow_provider_mysqlcdc.engine.chunks.groups import DEFAULT_CHUNKS_PER_GROUP
    from airflow_provider_mysqlcdc.engine.chunks.planner import DEFAULT_CHUNK_SIZE

    plan = sub.add_parser(
        "plan", help="split tables into chunks (a new plan generation) and print the chunk groups"
    )
    add_mysql_options(plan)
    add_tables_option(plan)
    plan.add_argument("--chunk-size", type=whole(1, arguments.MAX_CHUNK_SIZE), default=DEFAULT_CHUNK_SIZE,
                      help="rows per chunk (default %(default)s)")
    add_chunk_store_option(plan, existing=False)
    plan.add_argument("--chunk-key", action="append", default=[], metavar="DB.TABLE=COLUMN",
                      type=checked(arguments.chunk_key),
                      help="chunk by this column instead of the primary key (repeatable)")
    plan.add_argument("--chunks-per-group", type=whole(1, arguments.MAX_CHUNKS_PER_GROUP),
                      default=DEFAULT_CHUNKS_PER_GROUP,
                      help="chunks per Spark job / mapped Airflow task (default %(default)s)")
    plan.add_argument("--only-new", action="store_true",
                      help="plan only tables that are not in the pipeline yet (no plan, or removed); every "
                           "other table keeps its plan and snapshot")
    plan.add_argument("--zero-dates", choices=("keep", "null"), default="keep",
                      help="zero dates (0000-00-00) written exactly in a <column>__zero_date companion "
                           "(keep, the default) or as NULL only (null; key columns keep their companion); "
                           "stored in the plan, so the snapshot and the stream agree")
    add_run_id_option(plan, help="recorded with the plan in the chunk store")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=cmd_plan)


def _add_remove_table_parser(sub: argparse._SubParsersAction) -> None:
    remove = sub.add_parser(
        "remove-table",
        help="take planned tables out of the pipeline: the stream stops capturing them, their output stays",
        description="Take planned tables out of the pipeline. The running stream stops capturing them "
                    "(from its next micro-batch); their snapshot, changelog and mirror stay as they are (the "
                    "mirror stops advancing). Planning a table again by its exact name puts it back (a new "
                    "generation, snapshotted again); a wildcard pattern never does. Idempotent.",
    )
    remove.add_argument("tables", nargs="+", metavar="DB.TABLE", type=checked(table_list_value),
                        help="planned db.table or pattern (db.tmp_*); comma-separated or several")
    add_chunk_store_option(remove, existing=True)
    remove.add_argument("--reason", type=free_text("a reason"),
                        help="recorded with the removal in the chunk store")
    add_run_id_option(remove, help="recorded with the removal in the chunk store")
    remove.add_argument("--json", action="store_true", help="print the result as JSON")
    remove.set_defaults(func=cmd_remove_table)


def cmd_plan(args: argparse.Namespace) -> int:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.chunks.groups import chunk_groups
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables

    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store: pass --chunk-store or set ${CHUNK_STORE_URL_ENV}")
    settings = mysql_settings(args)
    patterns = split_table_list(args.tables)
    chunk_keys = unique_tables(args.chunk_key, "--chunk-key")
    unselected = [t for t in chunk_keys if not matching_tables([t], patterns)]
    if unselected:
        raise ConfigurationError(f"--chunk-key names {', '.join(unselected)}, which --tables does not "
                                 "select: add it to --tables, or drop its --chunk-key")
    with _created_only_by_success(args.chunk_store), ChunkStore(args.chunk_store) as store:
        plans = plan_tables(settings, store, patterns, chunk_size=args.chunk_size, chunk_keys=chunk_keys,
                            run_id=args.run_id, only_new=args.only_new, zero_dates=args.zero_dates)
    report: list[dict[str, Any]] = [
        {"table": str(p.table), "generation": p.generation, "split": p.split,
         "key_columns": list(p.key_columns), "chunk_size": p.chunk_size, "row_estimate": p.row_estimate,
         "chunk_count": len(p.chunks),
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
        print(f"{t['table']}: generation {t['generation']}, {t['chunk_count']} chunk(s) of "
              f"~{t['chunk_size']} rows ({t['split']} split on {', '.join(t['key_columns'])}; "
              f"~{t['row_estimate']} rows)")
        for i, group in enumerate(t["chunk_groups"]):
            print(f"  group {i}: {group['name']} ({len(group['chunk_ids'])} chunk(s))")
    return 0


@contextlib.contextmanager
def _created_only_by_success(url: str) -> Iterator[None]:
    """A SQLite chunk store this plan creates stays only if something was planned into it: an error the server
    reports (a table that does not exist, a server not ready for CDC) leaves no empty store behind."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, normalize_url

    parsed = normalize_url(url)
    path = (parsed.database or "") if parsed.get_backend_name() == "sqlite" else ""
    new = bool(path) and not path.startswith("file:") and path != ":memory:" and not os.path.exists(path)
    try:
        yield
    except Exception:
        if new and os.path.exists(path):
            with contextlib.suppress(Exception):  # the error to report is the plan's, not the cleanup's
                with ChunkStore(url) as store:
                    empty = not store.table_entries()
                if empty:
                    for leftover in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(leftover)
        raise


def cmd_remove_table(args: argparse.Namespace) -> int:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import remove_tables

    if not args.chunk_store:
        raise ConfigurationError(f"no chunk store: pass --chunk-store or set ${CHUNK_STORE_URL_ENV}")
    with ChunkStore(args.chunk_store) as store:
        results = remove_tables(store, split_table_list(args.tables), args.run_id, reason=args.reason)
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
