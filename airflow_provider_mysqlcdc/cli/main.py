"""``mysqlcdc``: the engine without Airflow: check, plan, remove-table, snapshot, stream, status, mirror, gc.

This module builds the parser and dispatches; each command group lives in its own module (``check``, ``plan``,
``snapshot``, ``stream``, ``status``, ``gc``) and the options they share in ``options``.

Exit codes: 0 success, 1 a check failed (or a snapshot chunk), 2 bad input (an argument, found before any
work; ``cli/validation.py``) or an error the message explains, 130 a stream stopped with Ctrl-C.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from airflow_provider_mysqlcdc import __version__
from airflow_provider_mysqlcdc.cli.validation import USAGE_ERROR, ArgumentParser
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.pipeline.arguments import redacted


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_mysqlcdc.cli import (  # here: stream loads pyspark
        check,
        gc,
        plan,
        snapshot,
        status,
        stream,
    )

    parser = ArgumentParser(
        prog="mysqlcdc",
        description="Replicate MySQL tables into a data lake: snapshot chunks and the binlog stream on Spark.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    check.add_parser(sub)
    plan.add_parsers(sub)  # plan, remove-table
    snapshot.add_parser(sub)
    stream.add_parser(sub)
    status.add_parsers(sub)  # status, mirror
    gc.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdcError as exc:
        print(f"mysqlcdc {args.command}: error: {redacted(str(exc))}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
