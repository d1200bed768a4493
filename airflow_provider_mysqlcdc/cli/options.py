"""Command-line options that several ``mysqlcdc`` subcommands and the ``spark_apps`` entry points share.

Each is declared once, here: a command adds the ones it takes (``add_*_option(parser)``) in the order its
usage line shows them, and declares only its own options itself. Defaults come from the environment variables
named in ``engine.common.environment``; secrets never come from the command line if a command can help it.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from airflow_provider_mysqlcdc.cli.validation import checked, free_text, mysql_url
from airflow_provider_mysqlcdc.engine.common.environment import (
    CHUNK_STORE_URL_ENV,
    MYSQL_PASSWORD_ENV,
    MYSQL_URL_ENV,
)
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.secrets import read_password_file
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url

MYSQL_URL_FORMAT = "mysql://user@host:port[/db][?ssl_ca=..&server_id=5400-5499]"


def add_mysql_options(
    parser: argparse.ArgumentParser,
    *,
    password_file: bool = True,
    password_in_url: bool = True,
    on_executors: bool = False,
    local_files: bool = True,
) -> None:
    """``--mysql-url`` (default ``$MYSQLCDC_MYSQL_URL``) and, with ``password_file``, ``--password-file``.

    ``password_in_url``: the command accepts a password in the URL (it warns against it); otherwise the URL
    must come without one (Spark options and ``spark-submit`` command lines). ``on_executors``: Spark
    executors read the password file too. ``local_files``: the password file must be readable here (a Spark
    app's executors may instead find it among the files shipped with ``spark-submit --files``).
    """
    if not password_in_url:
        url_help = (f"{MYSQL_URL_FORMAT} without the password (default ${MYSQL_URL_ENV}); the password comes "
                    f"from ${MYSQL_PASSWORD_ENV} or --password-file, never from the command line")
    else:
        sources = f"${MYSQL_PASSWORD_ENV} or --password-file" if password_file else f"${MYSQL_PASSWORD_ENV}"
        url_help = (f"{MYSQL_URL_FORMAT} (default ${MYSQL_URL_ENV}). Prefer {sources} for the password: "
                    "a URL password shows in process lists.")
    parser.add_argument("--mysql-url", default=os.environ.get(MYSQL_URL_ENV), help=url_help,
                        type=checked(mysql_url, password_allowed=password_in_url, env=MYSQL_URL_ENV))
    if password_file:
        parser.add_argument(
            "--password-file",
            type=checked(arguments.readable_file, what="the MySQL password file") if local_files
            else free_text("the MySQL password file"),
            help="a file holding the MySQL password (readable on every executor, or shipped with "
            "spark-submit --files)" if on_executors else "a file holding the MySQL password",
        )


_OUTPUT_DEFAULT = ", else <output>/_mysqlcdc_chunks.db for a local --output"


def add_chunk_store_option(parser: argparse.ArgumentParser, *, store_alias: bool = False,
                           existing: bool | None = None, output_default: bool = False) -> None:
    """``--chunk-store`` (default ``$MYSQLCDC_CHUNK_STORE_URL``); ``store_alias`` also accepts ``--store``.

    ``existing``: True, a SQLite store must exist (commands that read a pipeline); False, its directory must
    exist and be writable (commands that may create it); None, only its form is checked (Spark apps, whose
    driver may run elsewhere). ``output_default``: the command takes ``--output`` and finds the store by
    ``chunk_store_of``.
    """
    names = ("--chunk-store", "--store") if store_alias else ("--chunk-store",)
    check = checked(arguments.chunk_store_location, must_exist=existing, env=CHUNK_STORE_URL_ENV)
    default = f"${CHUNK_STORE_URL_ENV}{_OUTPUT_DEFAULT if output_default else ''}"
    parser.add_argument(*names, dest="chunk_store", default=os.environ.get(CHUNK_STORE_URL_ENV), type=check,
                        help=f"chunk store URL or SQLite path (default {default})")


def chunk_store_of(args: argparse.Namespace) -> str:
    """``--chunk-store``, else ``$MYSQLCDC_CHUNK_STORE_URL`` (its default), else, for a local ``--output``,
    the SQLite file the operators default to (``<output>/_mysqlcdc_chunks.db``): ``mysqlcdc status --output
    DIR`` finds what a DAG wrote into DIR."""
    if args.chunk_store:
        return str(args.chunk_store)
    output = getattr(args, "output", None)
    if output and ("://" not in output or output.startswith("file://")):
        return chunk_store_url(None, output)
    where = (f"--output {output} is not a local path, so the chunk store has no default: "
             if output else "")
    raise ConfigurationError(f"no chunk store given: {where}pass --chunk-store or set ${CHUNK_STORE_URL_ENV}")


def add_output_option(parser: argparse.ArgumentParser, *, required: bool, writable: bool = True) -> None:
    """``--output``: a local directory or a URI; ``writable``: a local one must be writable (or creatable)."""
    parser.add_argument("--output", required=required,
                        type=checked(arguments.storage_root, writable=writable),
                        help="output root holding snapshot, changelog and mirror (local path or a pyarrow "
                        "URI: hdfs://, s3://, ...)")


def add_tables_option(parser: argparse.ArgumentParser, *, planned: bool = False) -> None:
    """``--tables`` (required, repeatable, comma-separated); ``planned``: only tables planned already."""
    parser.add_argument("--tables", action="append", required=True, type=checked(table_list_value),
                        help=f"{'planned ' if planned else ''}db.table or pattern (db.orders_*), or any name "
                        "quoted as `db`.`name`; comma-separated or repeated")


def table_list_value(value: str) -> str:
    """One ``--tables`` value: at least one well-formed name or pattern (kept as written: split later)."""
    arguments.table_patterns(value)
    return value


def add_exclude_columns_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exclude-columns", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
                        type=checked(_exclude_columns_item),
                        help="columns never written (secrets, blobs); repeatable; give the snapshot and the "
                        "stream the same")


def _exclude_columns_item(value: str) -> str:
    """``db.table=col,col`` as the engine reads it (the table's ``db.table`` form, columns after ``=``)."""
    table, columns = arguments.exclude_columns_item(value)
    return f"{table}={','.join(columns)}"


def add_spark_master_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    parser.add_argument("--master", default=default, type=free_text("a Spark master such as local[*]"),
                        help="Spark master (default %(default)s)")


def add_run_id_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--run-id``: an id recorded in the chunk store (at most 250 characters, its column's size)."""
    parser.add_argument("--run-id", type=free_text("a run id", arguments.MAX_RUN_ID_CHARS), help=help)


def unique_tables(pairs: Sequence[tuple[str, Any]], option: str) -> dict[str, Any]:
    """``[(table, value), ...]`` of a repeatable option as a dict; a table given twice is an error (the last
    would silently win: a column to exclude, dropped)."""
    out: dict[str, Any] = {}
    for table, value in pairs:
        if table in out:
            raise ConfigurationError(f"{option} names {table} twice: give it once (columns comma-separated)")
        out[table] = value
    return out


def require_mysql_url(args: argparse.Namespace, why: str = "") -> str:
    """``--mysql-url`` (or its environment default); if unset, a ConfigurationError saying how to give one."""
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${MYSQL_URL_ENV}"
                                 + (f" ({why})" if why else ""))
    return str(args.mysql_url)


def mysql_settings(args: argparse.Namespace, why: str = "") -> MySQLSettings:
    """The server of ``--mysql-url``, with the password from ``--password-file`` if the command has one (else
    from the URL or ``$MYSQLCDC_MYSQL_PASSWORD``)."""
    url = require_mysql_url(args, why)
    return MySQLSettings.from_url(url, password=read_password_file(getattr(args, "password_file", None)))


def parse_pairs(values: Sequence[str], what: str) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` as a dict; ``what`` (the option) names a malformed item."""
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key.strip() or not rest.strip():
            raise ConfigurationError(f"{what} must look like KEY=VALUE, got {value!r}")
        pairs[key.strip()] = rest.strip()
    return pairs
