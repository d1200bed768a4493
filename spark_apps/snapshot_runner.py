"""spark-submit entry point: one Spark application that runs the chunk groups of a DAG run as its snapshot
tasks hand them over (instead of one ``snapshot_chunks.py`` application per group).

    MYSQLCDC_MYSQL_PASSWORD=... spark-submit spark_apps/snapshot_runner.py --mysql-url mysql://cdc@db:3306 \
        --chunk-store /data/chunks.db --scope 'mysqlcdc_replication/manual__2026-11-28T10:00:00' \
        --runner-id 6f1c...

Started (and stopped) by ``MySqlCdcStartRunnerOperator`` / ``MySqlCdcStopRunnerOperator``, which register
the runner in the chunk store first. Each group's arguments are those ``snapshot_chunks.py`` takes; the MySQL
URL must be this application's (its password is this application's environment). Argument parsing only: the
loop is ``airflow_provider_mysqlcdc.spark.snapshot.group_runner``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Sequence
from typing import Any

import snapshot_chunks  # beside this file: Python puts the script's folder first on its path

from airflow_provider_mysqlcdc.cli.options import add_chunk_store_option, add_mysql_options
from airflow_provider_mysqlcdc.cli.snapshot_options import group_options
from airflow_provider_mysqlcdc.cli.validation import decimal, whole
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapshot_runner.py", description=__doc__.splitlines()[0])
    add_mysql_options(parser, password_in_url=False, on_executors=True)
    add_chunk_store_option(parser, existing=None)
    parser.add_argument("--scope", required=True, help="<dag_id>/<run_id>: whose groups it runs")
    parser.add_argument("--runner-id", required=True, help="as registered in the chunk store")
    parser.add_argument("--concurrency", type=whole(1, 64), default=4, help="groups run at once")
    parser.add_argument("--idle-timeout", type=decimal(1, 7 * 86400, unit="seconds"), default=1800.0,
                        help="leave after this long with no group to run")
    return parser


class GroupArguments:
    """A group's ``snapshot_chunks.py`` arguments -> its result, in this application's session."""

    def __init__(self, spark: Any, mysql_url: str, store_url: str) -> None:
        self.spark, self.mysql_url, self.store_url = spark, mysql_url, store_url

    def __call__(self, args: Sequence[str]) -> dict[str, Any]:
        parser = snapshot_chunks.build_parser()
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                parsed = parser.parse_args(list(args))
                options = group_options(parsed, parser)
        except SystemExit:
            raise ConfigurationError(
                f"the group's arguments are refused: {errors.getvalue().strip()}") from None
        if parsed.mysql_url != self.mysql_url:
            raise ConfigurationError(
                f"the group reads from {parsed.mysql_url}, this runner from {self.mysql_url}: give the "
                "snapshot task the runner's mysql_conn_id (or let it start its own Spark application)")
        return snapshot_chunks.run(self.spark, [o.with_(chunk_store=self.store_url) for o in options])


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.chunk_store or not args.mysql_url:
        parser.error("give --chunk-store (or $MYSQLCDC_CHUNK_STORE_URL) and --mysql-url")
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.spark.session import build_session
    from airflow_provider_mysqlcdc.spark.snapshot.group_runner import GroupRunnerLoop, RunnerSettings

    store_url = str(args.chunk_store)
    settings = RunnerSettings(scope=args.scope, runner_id=args.runner_id, concurrency=args.concurrency,
                              idle_s=args.idle_timeout)
    with ChunkStore(store_url) as store:
        try:
            spark = build_session(master=None, app_name=f"mysqlcdc snapshot runner {args.scope}",
                                  conf={"spark.scheduler.mode": "FAIR"})
        except BaseException as exc:
            store.runner_ended(args.scope, args.runner_id, failed=True,
                               detail=f"Spark did not start: {type(exc).__name__}: {exc}"[:1000])
            raise
        try:
            GroupRunnerLoop(store, settings, GroupArguments(spark, args.mysql_url, store_url),
                            say=lambda msg: print(msg, file=sys.stderr, flush=True)).serve()
        except BaseException as exc:
            store.runner_ended(args.scope, args.runner_id, failed=True,
                               detail=f"{type(exc).__name__}: {exc}"[:1000])
            if isinstance(exc, CdcError):
                print(f"snapshot_runner: error: {exc}", file=sys.stderr)
                return 2
            raise
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
