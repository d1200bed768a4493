"""Every ``mysqlcdc`` argument checked while the command line is parsed, before any work.

A bad value ends the command with one line naming the option and the fix (``mysqlcdc plan: error: argument
--chunk-size: 0 is out of range: give a whole number from 1 to 1000000000``) and exit code 2, argparse's code
for a usage error: no traceback, and nothing written (no chunk store, no output directory, no checkpoint).
The checks themselves are the pipeline's (``pipeline/arguments.py``), shared with the operators; this module
makes argparse types of them and the parser that prints the one line.

Defaults taken from the environment (``$MYSQLCDC_CHUNK_STORE_URL``, ...) go through the same types, and the
error then names the variable too.
"""
from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.secrets import url_has_password
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue

T = TypeVar("T")
USAGE_ERROR = 2  # argparse's exit code for a bad command line; the CLI uses it for every bad argument
_ARGPARSE_OWN = ("the following arguments are required", "unrecognized arguments", "expected one argument",
                 "ambiguous option", "not allowed with argument", "invalid choice")


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr (no usage block to scroll past) and exit code 2.
    Subcommand parsers are made of the same class (``add_subparsers`` uses the parent's)."""

    def error(self, message: str) -> NoReturn:
        line = arguments.redacted(" ".join(message.split()))  # one line, and no password it may echo
        if line.startswith(_ARGPARSE_OWN):
            line += f" (see {self.prog} --help)"
        self.exit(USAGE_ERROR, f"{self.prog}: error: {line}\n")


def checked(check: Callable[..., T], *args: Any, env: str | None = None, **kwargs: Any) -> Callable[[str], T]:
    """``check(value, *args, **kwargs)`` as an argparse type: a :class:`BadValue` becomes argparse's error for
    the option (which names it); ``env``: the variable the option's default comes from, named in the error
    when the value came from it."""

    def convert(value: str) -> T:
        try:
            return check(value, *args, **kwargs)
        except BadValue as exc:
            source = f" (from ${env})" if env and os.environ.get(env) == value else ""
            raise argparse.ArgumentTypeError(exc.problem + source) from None

    convert.__name__ = getattr(check, "__name__", "value")
    return convert


def whole(minimum: int, maximum: int = arguments.SQL_BIGINT_MAX, zero: str = "") -> Callable[[str], int]:
    """A whole number in ``[minimum, maximum]``."""
    return checked(arguments.whole_number, minimum=minimum, maximum=maximum, zero=zero)


def decimal(minimum: float, maximum: float, *, unit: str = "", zero: str = "",
            minimum_exclusive: bool = False) -> Callable[[str], float]:
    """A finite number in ``[minimum, maximum]``."""
    return checked(arguments.number, minimum=minimum, maximum=maximum, unit=unit, zero=zero,
                   minimum_exclusive=minimum_exclusive)


def free_text(what: str, max_chars: int = arguments.MAX_TEXT_CHARS) -> Callable[[str], str]:
    """Non-empty text without control characters, at most ``max_chars``."""
    return checked(arguments.text, what=what, max_chars=max_chars)


def mysql_url(value: str, *, password_allowed: bool = True) -> str:
    """A ``mysql://user@host:port/...`` URL, parsed as the engine will parse it; the error line never shows
    the password (nor a part of one that a stray ``/``, ``?`` or ``#`` pushed out of the user info)."""
    written = arguments.text(value, what="a MySQL URL such as mysql://cdc@db.example.com:3306")
    _scheme, sep, rest = written.partition("://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if sep and "@" in rest and "@" not in netloc:
        raise BadValue("the URL does not read as mysql://user[:password]@host:port: percent-encode the "
                       "characters / ? # @ in the user and password (or give the password in a file, "
                       "--password-file)")
    try:
        MySQLSettings.from_url(written, password="")
    except ConfigurationError as exc:
        message = str(exc)
        if "invalid port" in message:
            message = "the port must be a number from 1 to 65535, e.g. mysql://cdc@db.example.com:3306"
        raise BadValue(arguments.redacted(message)) from None
    except (ValueError, TypeError, OverflowError):  # an option read as a number (connect_timeout=abc)
        raise BadValue("an option of the URL has a bad value: connect_timeout takes whole seconds (see "
                       "docs/source-server.md for every option)") from None
    if not password_allowed and url_has_password(written):
        raise BadValue(f"holds a password, which would show in process lists and Spark options: take it out "
                       f"and give it in ${MYSQL_PASSWORD_ENV} or --password-file")
    return written
