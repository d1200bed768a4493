"""``mysqlcdc``: the engine without Airflow: check, plan, remove-table, snapshot, stream, status, mirror.

This module builds the parser and dispatches; each command group lives in its own module (``check``, ``plan``,
``snapshot``, ``stream``, ``status``) and the options they share in ``options``.

Exit codes: 0 success, 1 a check failed, 2 bad input or an error the message explains.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from airflow_provider_mysqlcdc import __version__
from airflow_provider_mysqlcdc.engine.common.errors import CdcError


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_mysqlcdc.cli import (  # here: stream loads pyspark
        check,
        plan,
        snapshot,
        status,
        stream,
    )

    parser = argparse.ArgumentParser(
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdcError as exc:
        print(f"mysqlcdc {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
