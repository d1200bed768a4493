"""A real, throwaway Airflow deployment for end-to-end tests: api-server, scheduler, dag-processor and
triggerer (deferred tasks wait in it).

``dag.test()`` runs tasks in the test process; this runs them the way a deployment does: the dag-processor
parses the DAG bundles, the scheduler (LocalExecutor) queues task instances, its workers run them through the
task SDK and report to the api-server's execution API, and the UI shows the result. All processes share
one environment (its own Airflow home and a fresh SQLite metadata DB in a work dir, one JWT secret so the
api-server accepts the scheduler's task tokens), write logs to files there, die with the test process and are
stopped as process groups (the LocalExecutor's workers and the task processes go with the scheduler).

Airflow 3.3's LocalExecutor runs against SQLite (``airflow standalone`` does the same; no "database is locked"
seen with parallelism 4), so no PostgreSQL is needed: a fresh ``airflow db migrate`` takes about 3 s, and a
copy of a DB it left (``template_db``: the test session migrated one already) none.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote

import requests

from airflow_provider_mysqlcdc.testing.mariadb import _die_with_parent, free_port
from tests.support.airflow_server import AirflowApiServer, terminate_groups

T = TypeVar("T")
TERMINAL_RUN_STATES = frozenset({"success", "failed"})


@dataclass(frozen=True)
class TaskInstanceInfo:
    """One task instance as the REST API reports it (``map_index`` -1 for an unmapped task)."""

    task_id: str
    map_index: int
    rendered_map_index: str | None
    state: str | None
    try_number: int


def _quote(value: str) -> str:
    return quote(value, safe="")


@dataclass
class AirflowServices:
    """api-server + scheduler + dag-processor + triggerer on one fresh metadata DB; ``env`` adds to their
    environment (connections as ``AIRFLOW_CONN_*``, config overrides); ``users`` maps SimpleAuthManager user
    to role."""

    users: Mapping[str, str] = field(default_factory=lambda: {"admin": "admin"})
    env: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 4
    # a metadata DB as `airflow db migrate` left it (conftest's MIGRATED_DB), copied instead of migrating
    template_db: Path | None = None
    startup_timeout: float = 180.0
    request_timeout: float = 60.0
    keep_workdir: bool = False  # keep logs and the metadata DB after stop() (debugging)
    workdir: Path | None = None
    api: AirflowApiServer | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    environ: dict[str, str] = field(default_factory=dict, repr=False)  # for more ``airflow`` commands
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)

    # --- lifecycle -----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.api is not None, "the services have not been started"
        return self.api.url

    @property
    def passwords(self) -> dict[str, str]:
        assert self.api is not None, "the services have not been started"
        return self.api.passwords

    def log_path(self, name: str) -> Path:
        """``api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` or ``db-migrate``."""
        if name == "api-server" and self.api is not None and self.api.workdir is not None:
            return self.api.log_path
        assert self.workdir is not None, "the services have not been started"
        return self.workdir / f"{name}.log"

    def _environment(self, port: int) -> dict[str, str]:
        """What all three processes run with (the api-server adds its auth manager settings on top; the
        others do not need them). New secrets each time: call once per start."""
        assert self.workdir is not None
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        return {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.workdir / 'airflow.db'}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            # workers report to the api-server's execution API (Airflow 3 tasks never touch the metadata DB)
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            # the scheduler signs the workers' task tokens, the api-server checks them: one secret for both
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.workdir / "task-logs"),
            # the scheduler's log server: not the default 8793, which another deployment may hold
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            # Files are parsed at once on start; new files are found within 5 s; a parsed file is parsed
            # again after 30 s only (on 2 cores re-parsing takes CPU the tasks need). Liveness is reported
            # often for the health check start() waits for.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "300",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            **self.env,
        }

    def start(self) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix="mysqlcdc-airflow-services-"))
        port = free_port()
        self.environ = env = self._environment(port)
        try:
            if self.template_db is not None and self.template_db.exists():
                shutil.copyfile(self.template_db, self.workdir / "airflow.db")
            else:
                self._run("db-migrate", ["db", "migrate"], env)
            # The scheduler and the dag-processor start while the api-server does (2 cores: it all overlaps).
            for name in ("dag-processor", "scheduler", "triggerer"):
                self.processes[name] = self._spawn(name, [name], env)
            self.api = AirflowApiServer(users=self.users, env=env, port=port, apps="all",
                                        startup_timeout=self.startup_timeout, keep_workdir=self.keep_workdir)
            self.api.start()
            self.wait_until(self._components_healthy, self.startup_timeout,
                            "scheduler, dag-processor and triggerer healthy")
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, name: str, args: list[str], env: Mapping[str, str]) -> None:
        with open(self.log_path(name), "wb") as log:
            result = subprocess.run(
                [sys.executable, "-m", "airflow", *args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, cwd=self.workdir, preexec_fn=_die_with_parent,
                timeout=self.startup_timeout, check=False,  # the caller raises with the log's tail
            )
        if result.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{self._tail(name)}")

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str]) -> subprocess.Popen:
        # cwd: not the repo (``python -m`` puts it on sys.path; its *.egg-info would load the plugin twice)
        with open(self.log_path(name), "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "airflow", *args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, cwd=self.workdir,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl(), which takes no lock
                start_new_session=True,
            )

    def _components_healthy(self) -> bool:
        self.check_alive()
        health = requests.get(f"{self.url}/api/v2/monitor/health", timeout=self.request_timeout).json()
        return all(health.get(part, {}).get("status") == "healthy"
                   for part in ("scheduler", "dag_processor", "triggerer"))

    def check_alive(self) -> None:
        """Fails with the process's log when the scheduler, the dag-processor or the api-server has exited."""
        procs = dict(self.processes)
        if self.api is not None and self.api.process is not None:
            procs["api-server"] = self.api.process
        for name, process in procs.items():
            if process.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {process.returncode}:\n{self._tail(name)}")

    def stop(self) -> None:
        """SIGTERM to every process group at once (SIGKILL after 20 s, the api-server's after its
        ``stop_grace``): they shut down side by side, not one after the other; the work dir goes unless
        ``keep_workdir``."""
        try:
            popped = (self.processes.pop(name, None) for name in ("scheduler", "dag-processor", "triggerer"))
            processes = [(p, 20.0) for p in popped if p is not None]
            if self.api is not None and self.api.process is not None:
                processes.append((self.api.process, self.api.stop_grace))
                self.api.process = None  # api.stop() below only removes its work dir
            terminate_groups(processes)
        finally:
            try:
                if self.api is not None:
                    self.api.stop()
            finally:
                if self.workdir is not None and not self.keep_workdir:
                    shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- logs ----------------------------------------------------------------------------------------------

    def _tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:]) or "(no output)"

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of every process's log, for assertion messages."""
        names = ("scheduler", "dag-processor", "triggerer", "api-server")
        return "\n".join(f"--- {name} ---\n{self._tail(name, lines)}" for name in names)

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1,
                 try_number: int = 1) -> str:
        """One try's log as the api-server serves it (from the shared log folder), one JSON record a line."""
        path = (f"/api/v2/dags/{_quote(dag_id)}/dagRuns/{_quote(run_id)}/taskInstances/{_quote(task_id)}"
                f"/logs/{try_number}")
        params = {"map_index": map_index, "full_content": True}
        content = self._request("GET", path, params=params).json()["content"]
        return "\n".join(entry if isinstance(entry, str) else json.dumps(entry) for entry in content)

    # --- REST API ------------------------------------------------------------------------------------------

    def api_token(self, user: str = "admin") -> str:
        """A JWT for ``user`` from ``POST /auth/token`` with the SimpleAuthManager password."""
        if user not in self._tokens:
            response = requests.post(f"{self.url}/auth/token", timeout=self.request_timeout,
                                     json={"username": user, "password": self.passwords[user]})
            assert response.status_code == 201, f"token for {user}: {response.status_code} {response.text}"
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def _request(self, method: str, path: str, user: str = "admin", **kw: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.api_token(user)}", **kw.pop("headers", {})}
        response = requests.request(method, self.url + path, headers=headers, timeout=self.request_timeout,
                                    **kw)
        assert response.ok, f"{method} {path}: {response.status_code} {response.text}"
        return response

    def import_errors(self) -> list[dict[str, Any]]:
        """The dag-processor's import errors (``filename``, ``stack_trace``, ...) of all bundles."""
        return self._request("GET", "/api/v2/importErrors", params={"limit": 100}).json()["import_errors"]

    def wait_for_dag(self, dag_id: str, timeout: float = 90.0) -> dict[str, Any]:
        """The DAG once the dag-processor has parsed it. Import errors (of any file: another bundle's
        broken DAG must not fail a test that does not use it) show in the time-out message."""

        def parsed() -> dict[str, Any] | None:
            self.check_alive()
            headers = {"Authorization": f"Bearer {self.api_token()}"}
            response = requests.get(f"{self.url}/api/v2/dags/{_quote(dag_id)}", headers=headers,
                                    timeout=self.request_timeout)
            return response.json() if response.status_code == 200 else None

        def what() -> str:
            return f"DAG {dag_id} parsed; import errors: {json.dumps(self.import_errors(), indent=1)}"

        return self.wait_until(parsed, timeout, what)

    def unpause(self, dag_id: str) -> None:
        self._request("PATCH", f"/api/v2/dags/{_quote(dag_id)}", json={"is_paused": False})

    def run_ids(self, dag_id: str) -> list[str]:
        runs = self._request("GET", f"/api/v2/dags/{_quote(dag_id)}/dagRuns", params={"limit": 100}).json()
        return [run["dag_run_id"] for run in runs["dag_runs"]]

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Unpauses the DAG and starts a manual run with ``conf``; returns its run id."""
        self.unpause(dag_id)
        run = self._request("POST", f"/api/v2/dags/{_quote(dag_id)}/dagRuns",
                            json={"logical_date": None, "conf": dict(conf or {})}).json()
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self._request("GET", f"/api/v2/dags/{_quote(dag_id)}/dagRuns/{_quote(run_id)}").json()["state"]

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskInstanceInfo]:
        """All task instances of the run, mapped ones one per map index, ordered by task id and map index."""
        path = f"/api/v2/dags/{_quote(dag_id)}/dagRuns/{_quote(run_id)}/taskInstances"
        items: list[dict[str, Any]] = []
        while True:
            page = self._request("GET", path, params={"limit": 100, "offset": len(items)}).json()
            items += page["task_instances"]
            if not page["task_instances"] or len(items) >= page["total_entries"]:
                break
        infos = [TaskInstanceInfo(ti["task_id"], ti["map_index"], ti.get("rendered_map_index"), ti["state"],
                                  ti["try_number"]) for ti in items]
        return sorted(infos, key=lambda ti: (ti.task_id, ti.map_index))

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 120.0) -> str:
        """The run's state once it is ``success`` or ``failed``."""
        return self.wait_until(
            lambda: (state if (state := self.run_state(dag_id, run_id)) in TERMINAL_RUN_STATES else None),
            timeout, f"run {dag_id}/{run_id} finished")

    def wait_until(self, predicate: Callable[[], T], timeout: float, what: str | Callable[[], str],
                   interval: float = 0.25) -> T:
        """Polls ``predicate`` until it returns something truthy (returned); on time-out fails with ``what``
        (a callable is asked then), the predicate's last value and the processes' logs."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                described = what() if callable(what) else what
                raise AssertionError(
                    f"not within {timeout:.0f}s: {described} (last: {value!r})\n{self.log_tail()}")
            time.sleep(interval)
