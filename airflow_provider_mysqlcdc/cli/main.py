"""``mysqlcdc``: the engine without Airflow: check, plan, remove-table, snapshot, stream, status, mirror, gc,
verify.

This module builds the parser and dispatches; each command group lives in its own module (``check``, ``plan``,
``snapshot``, ``stream``, ``status``, ``gc``) and the options they share in ``options``.

Exit codes: 0 success, 1 a check failed (or a snapshot chunk), 2 bad input (an argument, found before any
work; ``cli/validation.py``) or an error the message explains, 130 a stream stopped with Ctrl-C.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from airflow_provider_mysqlcdc import __version__
from airflow_provider_mysqlcdc.cli.validation import USAGE_ERROR, ArgumentParser
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.common.native_faults import report_native_faults
from airflow_provider_mysqlcdc.pipeline.arguments import redacted

# Each command's module, in the order ``--help`` lists them, and the function that adds its parser(s). A
# command's run imports only its own module: the others load pyarrow, Delta or PySpark (~1 s a run).
_MODULES = {"check": "add_parser", "plan": "add_parsers", "snapshot": "add_parser", "stream": "add_parser",
            "status": "add_parsers", "gc": "add_parser", "verify": "add_parser"}
_COMMANDS = {"check": "check", "plan": "plan", "remove-table": "plan", "snapshot": "snapshot",
             "stream": "stream", "status": "status", "mirror": "status", "gc": "gc", "verify": "verify"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; or, for a known ``command``, one that knows only that command's module."""
    parser = ArgumentParser(
        prog="mysqlcdc",
        description="Replicate MySQL tables into a data lake: snapshot chunks and the binlog stream on "
                    "Spark.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [_COMMANDS[command]] if command in _COMMANDS else list(_MODULES)
    for name in modules:
        module = importlib.import_module(f"{__package__}.{name}")
        getattr(module, _MODULES[name])(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command named on the command line: its first argument that is not an option (``mysqlcdc`` itself
    takes only ``--help`` and ``--version``)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    report_native_faults()  # a native abort (pyarrow, delta-rs, connectorx) still says where it happened
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command(argv)).parse_args(argv)
    try:
        return int(args.func(args))
    except CdcError as exc:
        print(f"mysqlcdc {args.command}: error: {redacted(str(exc))}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
