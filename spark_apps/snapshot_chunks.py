"""spark-submit entry point: snapshot one chunk group (some chunks of one or more tables) in one Spark job.

    spark-submit --conf spark.speculation=false spark_apps/snapshot_chunks.py \
        --mysql-url mysql://cdc@db:3306 --chunk-store sqlite:////data/chunks.db --output s3://lake/cdc \
        --chunk-group '{"parts": [{"table": "shop.orders", "generation": 3, "chunk_ids": [0, 1, 2]},
                                  {"table": "shop.items", "generation": 1, "chunk_ids": [0]}]}'

or, for one table, ``--table shop.orders --generation 3 --chunks 0-15``.

The MySQL password comes from $MYSQLCDC_MYSQL_PASSWORD (driver and executors, e.g.
``--conf spark.executorEnv.MYSQLCDC_MYSQL_PASSWORD=...`` set by the scheduler, not typed) or from a file
named by ``--password-file`` (ship it with ``--files``); never from the command line. Prints the result as
JSON on one line (also to ``--result-file``): ``{"ok", "tables": [one table's result, ...]}``, and for one
table that table's result's fields at the top level too. Argument parsing only: the work is in
``airflow_provider_mysqlcdc.spark.snapshot.chunk_group``.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_mysqlcdc.cli.snapshot_options import (
    add_connection_arguments,
    add_read_arguments,
    add_table_arguments,
    group_options,
)
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapshot_chunks.py", description=__doc__.splitlines()[0])
    add_connection_arguments(parser, password_in_url=False)
    add_table_arguments(parser)
    add_read_arguments(parser)
    parser.add_argument("--result-file", help="also write the result JSON here")
    return parser


def run(spark: Any, options: Sequence[SnapshotOptions]) -> dict[str, Any]:
    """Run the chunk group in ``spark``; returns the result (chunks with rows, LW, HW, output versions)."""
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_snapshot

    results = [r.as_dict() for r in run_snapshot(
        spark, options, progress=lambda msg: print(msg, file=sys.stderr, flush=True), raise_on_failure=False)]
    out: dict[str, Any] = {"ok": all(r["ok"] for r in results), "tables": results}
    return {**results[0], **out} if len(results) == 1 else out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options = group_options(args, parser)
    from airflow_provider_mysqlcdc.spark.session import build_session

    tables = [o.table for o in options]
    what = ", ".join(tables) if len(tables) < 4 else f"{len(tables)} tables ({tables[0]} .. {tables[-1]})"
    spark = build_session(master=None, app_name=f"mysqlcdc snapshot {what}")
    try:
        result = run(spark, options)
    except CdcError as exc:
        print(f"snapshot_chunks: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    text = json.dumps(result, separators=(",", ":"))
    print(text)  # one line: spark-submit's stdout becomes one task log line per line
    if args.result_file:
        with open(args.result_file, "w", encoding="utf-8") as out:
            out.write(text)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
