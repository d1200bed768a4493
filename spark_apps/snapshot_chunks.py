"""spark-submit entry point: snapshot one chunk group (one table, one plan generation, some chunk ids).

    spark-submit --conf spark.speculation=false spark_apps/snapshot_chunks.py \
        --mysql-url mysql://cdc@db:3306 --chunk-store sqlite:////data/chunks.db --output s3://lake/cdc \
        --table shop.orders --generation 3 --chunks 0-15

The MySQL password comes from $MYSQLCDC_MYSQL_PASSWORD (driver and executors, e.g.
``--conf spark.executorEnv.MYSQLCDC_MYSQL_PASSWORD=...`` set by the scheduler, not typed) or from a file
named by ``--password-file`` (ship it with ``--files``); never from the command line. Prints the chunk group's
result as JSON on one line (also to ``--result-file``). Argument parsing only: the work is in
``airflow_provider_mysqlcdc.spark.snapshot.chunk_group``.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from airflow_provider_mysqlcdc.cli.snapshot_options import (
    add_connection_arguments,
    add_read_arguments,
    add_table_arguments,
    options_from_args,
)
from airflow_provider_mysqlcdc.engine.chunks.groups import parse_chunk_ids
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.common.text import split_commas


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapshot_chunks.py", description=__doc__.splitlines()[0])
    add_connection_arguments(parser, password_in_url=False)
    add_table_arguments(parser)
    add_read_arguments(parser)
    parser.add_argument("--result-file", help="also write the result JSON here")
    return parser


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the chunk group in ``spark``; returns the result (chunks with rows, LW, HW, output versions)."""
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group

    options = options_from_args(
        args, args.table, chunk_ids=parse_chunk_ids(args.chunks) if args.chunks else None,
        exclude_columns=tuple(split_commas(args.exclude_columns)),
    )
    result = run_chunk_group(spark, options, progress=lambda msg: print(msg, file=sys.stderr, flush=True),
                             raise_on_failure=False)
    return result.as_dict()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from airflow_provider_mysqlcdc.spark.session import build_session

    spark = build_session(master=None, app_name=f"mysqlcdc snapshot {args.table}")
    try:
        result = run(spark, args)
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
