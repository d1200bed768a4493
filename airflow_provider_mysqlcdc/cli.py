"""``mysqlcdc``: the engine without Airflow. Subcommands arrive with the features they expose.

Exit codes: 0 success, 1 a check failed, 2 bad input or an error the message explains.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from . import __version__
from .engine.check import DEFAULT_MIN_RETENTION_HOURS, check_server
from .engine.connection import PASSWORD_ENV, URL_ENV, MySQLSettings
from .engine.errors import CdcError, ConfigurationError


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
    return parser


def _settings(args: argparse.Namespace) -> MySQLSettings:
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    return MySQLSettings.from_url(args.mysql_url)


def _cmd_check(args: argparse.Namespace) -> int:
    report = check_server(_settings(args), min_retention_hours=args.min_binlog_retention_hours)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CdcError as exc:
        print(f"mysqlcdc {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
