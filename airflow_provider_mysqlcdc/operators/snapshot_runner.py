"""The DAG run's group runner: one Spark application that runs every chunk group of the run.

``MySqlCdcStartRunnerOperator`` (a setup task) starts ``spark_apps/snapshot_runner.py`` with ``spark-submit``
on the Spark connection, detached from the task, and returns once it serves; the snapshot tasks then hand it
their groups and defer (``MySqlCdcSnapshotOperator``) instead of each paying for a Spark start (25-35 s on a
busy machine). ``MySqlCdcStopRunnerOperator`` (its teardown) stops it when the groups are done. Airflow
clears a setup and its teardown with any task between them, so clearing one snapshot task starts a runner
again for the rerun. A snapshot task that finds no runner serving (none started, stopped, dead) runs its group
with its own ``spark-submit``, as before.

Lineage: neither task reads or writes a table itself (the snapshot tasks report the group's datasets), so
their OpenLineage events carry the job alone; the runner's Spark application names the start task as its
OpenLineage parent (``[openlineage] spark_inject_parent_job_info``), the groups it runs being its Spark jobs.

The runner is a process of the worker that ran the setup task: it suits the LocalExecutor and Celery workers
that outlive a task; where a task's host ends with the task (the KubernetesExecutor), leave the runner out and
let each group submit its own application.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import (
    RUNNER_ACTIVE,
    RUNNER_FAILED,
    SERVING,
    STOPPED,
    GroupRunner,
    scope_key,
)
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.operator_methods import NoDatasets
from airflow_provider_mysqlcdc.operators.arguments import check_literals, check_rendered, conn_id, optional
from airflow_provider_mysqlcdc.operators.spark_apps import RUNNER_APP, app_path
from airflow_provider_mysqlcdc.operators.spark_submit import SparkAppMixin
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url

LOG_DIR_ENV = "MYSQLCDC_RUNNER_LOG_DIR"
_TAIL_LINES = 30


def runner_scope(context: Any) -> str:
    """The DAG run a runner serves: ``<dag_id>/<run_id>``."""
    return f"{context['dag'].dag_id}/{context['run_id']}"


def runner_log_dir() -> Path:
    return Path(os.environ.get(LOG_DIR_ENV) or Path(tempfile.gettempdir()) / "mysqlcdc-runners")


def runner_log_path(scope: str, runner_id: str) -> Path:
    """Where the runner's ``spark-submit`` output goes, on the host that started it."""
    return runner_log_dir() / f"{scope_key(scope)[:16]}-{runner_id[:8]}.log"


def log_tail(path: str | Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


_START_CHECKS = {
    "output_path": lambda v: arguments.storage_root(v, writable=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=None),
    "mysql_conn_id": conn_id,
    "spark_conn_id": conn_id,
    "concurrency": lambda v: arguments.whole_number(v, minimum=1, maximum=64),
    "idle_timeout": lambda v: arguments.number(v, minimum=1, maximum=7 * 86400, unit="seconds"),
    "start_timeout": lambda v: arguments.number(v, minimum=1, maximum=86400, unit="seconds"),
}
_START_LITERAL_CHECKS = {**_START_CHECKS, "output_path": lambda v: arguments.storage_root(v, look=False)}
_STOP_CHECKS = {
    "output_path": _START_CHECKS["output_path"],
    "chunk_store": _START_CHECKS["chunk_store"],
    "stop_timeout": lambda v: arguments.number(v, minimum=0, maximum=86400, unit="seconds"),
}


class MySqlCdcStartRunnerOperator(NoDatasets, SparkAppMixin, SparkSubmitOperator):
    """Starts the DAG run's group runner (a setup task): one Spark application that runs the chunk groups the
    run's snapshot tasks hand it. Starts none when ``chunk_groups`` is given and empty (nothing to snapshot,
    or groups meant to submit their own applications): it succeeds anyway, as a setup task must for its work
    tasks to run.

    :param output_path: the output root (as for the snapshot tasks).
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param mysql_conn_id: the source connection; the snapshot tasks must use the same one.
    :param chunk_groups: the plan task's output (optional): no group, no runner.
    :param concurrency: chunk groups run at once, each one Spark job (default 4).
    :param idle_timeout: seconds the runner waits for a group before it leaves on its own (default 1800).
    :param start_timeout: seconds to wait for it to serve (default 600).
    :param conn_id: the Spark connection (client deploy mode). Other ``SparkSubmitOperator`` arguments pass
        through (``conf``, ``executor_memory``, ...).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields, "spark_conn_id", "mysql_conn_id", "chunk_store", "output_path",
        "chunk_groups", "concurrency", "idle_timeout", "start_timeout",
    )
    ui_color = "#fbe3c4"

    def __init__(self, *, output_path: str, chunk_store: str | None = None,
                 mysql_conn_id: str = MySqlCdcHook.default_conn_name, chunk_groups: Any = None,
                 concurrency: int | str = 4, idle_timeout: float | str = 1800.0,
                 start_timeout: float | str = 600.0, application: str | None = None,
                 conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(application=application or app_path(RUNNER_APP), conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id
        self.output_path, self.chunk_store, self.mysql_conn_id = output_path, chunk_store, mysql_conn_id
        self.chunk_groups = chunk_groups
        self.concurrency, self.idle_timeout, self.start_timeout = concurrency, idle_timeout, start_timeout
        check_literals(vars(self), _START_LITERAL_CHECKS)

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        args = check_rendered(self, _START_CHECKS)
        if isinstance(self.chunk_groups, Sequence) and not isinstance(self.chunk_groups, str) and not list(
                self.chunk_groups):
            self.log.info("no chunk group to run in a shared application: no group runner started")
            return {"scope": runner_scope(context), "runner_id": None}
        scope, runner_id = runner_scope(context), uuid.uuid4().hex
        hook = MySqlCdcHook(args["mysql_conn_id"])
        store_url = chunk_store_url(args["chunk_store"], args["output_path"])
        self.application_args = ["--mysql-url", hook.redacted_url(), "--scope", scope,
                                 "--runner-id", runner_id, "--concurrency", str(args["concurrency"]),
                                 "--idle-timeout", str(args["idle_timeout"])]
        self.name = f"mysqlcdc snapshot runner {scope}"
        self.prepare_spark(hook, store_url, CHUNK_STORE_URL_ENV, context)
        spark = self._get_hook()
        if spark._connection.get("deploy_mode") == "cluster":
            raise ConfigurationError(
                f"Spark connection {args['spark_conn_id']}: the group runner needs client deploy mode (its "
                "driver runs beside the Airflow worker); use client mode, or leave the runner out of the DAG "
                "so each chunk group submits its own application")
        command = spark._build_spark_submit_command(self.application)
        log_path = runner_log_path(scope, runner_id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with ChunkStore(store_url) as store:
            store.register_runner(scope, runner_id, source=hook.redacted_url(), host=socket.gethostname(),
                                  pid=None, detail=f"log: {log_path}")
            with open(log_path, "ab") as log_file:
                process = subprocess.Popen(
                    command, env={**os.environ, **(spark._env or {})}, stdin=subprocess.DEVNULL,
                    stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            store.note_runner_pid(scope, runner_id, process.pid)
            self.log.info("group runner %s starting for %s (pid %d, log %s)", runner_id, scope, process.pid,
                          log_path)
            runner = self._wait_serving(store, scope, runner_id, process, log_path,
                                        float(args["start_timeout"]))
        self.log.info("group runner %s serving after %.1f s", runner_id,
                      (runner.heartbeat_at - runner.started_at).total_seconds())
        return {"scope": scope, "runner_id": runner_id, "pid": process.pid, "log": str(log_path)}

    def _wait_serving(self, store: ChunkStore, scope: str, runner_id: str, process: subprocess.Popen[bytes],
                      log_path: Path, timeout_s: float) -> GroupRunner:
        deadline = time.monotonic() + timeout_s
        while True:
            runner = store.runner(scope)
            if runner is None or runner.runner_id != runner_id:
                raise CdcError(f"the group runner of {scope} was replaced while it started")
            if runner.state == SERVING:
                return runner
            exited = process.poll()
            if runner.state in (STOPPED, RUNNER_FAILED) or exited is not None:
                raise CdcError(
                    "the group runner did not start "
                    f"({runner.detail or f'spark-submit exited with {exited}'})."
                    f"\nThe last lines of its log {log_path}:\n{log_tail(log_path)}")
            if time.monotonic() > deadline:
                _kill(process.pid)
                store.runner_ended(scope, runner_id, failed=True, detail=f"did not start in {timeout_s:g} s")
                raise CdcError(f"the group runner did not serve within {timeout_s:g} s (start_timeout); the "
                               f"last lines of its log {log_path}:\n{log_tail(log_path)}")
            time.sleep(0.5)


class MySqlCdcStopRunnerOperator(NoDatasets, BaseOperator):
    """Stops the DAG run's group runner (the teardown of ``MySqlCdcStartRunnerOperator``): it finishes the
    groups it runs, then leaves; one that does not leave within ``stop_timeout`` is killed (on this host).

    :param output_path: the output root (as for the start task).
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param stop_timeout: seconds to wait for it to leave (default 300).
    """

    template_fields: Sequence[str] = ("chunk_store", "output_path", "stop_timeout")
    ui_color = "#fbe3c4"

    def __init__(self, *, output_path: str, chunk_store: str | None = None,
                 stop_timeout: float | str = 300.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output_path, self.chunk_store, self.stop_timeout = output_path, chunk_store, stop_timeout

    def execute(self, context: Any) -> dict[str, Any]:
        args = check_rendered(self, _STOP_CHECKS)
        scope, timeout_s = runner_scope(context), float(args["stop_timeout"])
        with ChunkStore(chunk_store_url(args["chunk_store"], args["output_path"])) as store:
            runner = store.stop_runner(scope)
            if runner is None:
                self.log.info("no group runner for %s", scope)
                return {"scope": scope, "state": None}
            deadline = time.monotonic() + timeout_s
            while (runner is not None and runner.alive() and not runner.process_gone()
                   and time.monotonic() < deadline):
                time.sleep(0.5)
                runner = store.runner(scope)
            if runner is None:
                return {"scope": scope, "state": None}
            if runner.state in RUNNER_ACTIVE and (not runner.alive() or runner.process_gone()):
                # gone: its process ended, or it went silent (a killed runner's heartbeat may be older than
                # STALE_S by the time its teardown looks, after the groups' own applications ran)
                store.runner_ended(scope, runner.runner_id, failed=True, detail=runner.gone_reason())
                runner = store.runner(scope) or runner
            elif runner.alive():
                killed = runner.pid is not None and runner.host == socket.gethostname() and _kill(runner.pid)
                store.runner_ended(scope, runner.runner_id, failed=True,
                                   detail=f"did not stop within {timeout_s:g} s"
                                   + ("; killed" if killed else ""))
                runner = store.runner(scope) or runner
        log_path = runner_log_path(scope, runner.runner_id)
        self.log.info("group runner %s of %s: %s (%s)", runner.runner_id, scope, runner.state, runner.detail)
        tail = log_tail(log_path) if runner.host == socket.gethostname() else ""
        if tail:
            self.log.info("the last lines of its log %s:\n%s", log_path, tail)
        return {"scope": scope, "state": runner.state, "detail": runner.detail, "log": str(log_path)}


def _kill(pid: int) -> bool:
    """End the runner's process group (spark-submit, its JVM and Python driver): TERM, then KILL."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    for _ in range(20):
        time.sleep(0.5)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
