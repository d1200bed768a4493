"""``mysqlcdc check``: whether a MySQL/MariaDB server is ready for CDC, and its binlog position."""
from __future__ import annotations

import argparse
import json

from airflow_provider_mysqlcdc.cli.options import add_mysql_options, mysql_settings
from airflow_provider_mysqlcdc.cli.validation import decimal
from airflow_provider_mysqlcdc.engine.source.readiness import DEFAULT_MIN_RETENTION_HOURS, check_server


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check", help="validate a MySQL/MariaDB server for CDC and print its binlog position"
    )
    add_mysql_options(check, password_file=False)
    check.add_argument(
        "--min-binlog-retention-hours",
        type=decimal(0, 24 * 366 * 10, unit="hours"),
        default=DEFAULT_MIN_RETENTION_HOURS,
        help="warn when binlogs expire sooner than this (default %(default)s)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    report = check_server(mysql_settings(args), min_retention_hours=args.min_binlog_retention_hours)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0 if report.ok else 1
