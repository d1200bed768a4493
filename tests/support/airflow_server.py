"""A throwaway ``airflow api-server`` for UI tests: free loopback port, one worker, a known login.

Runs against the caller's Airflow home (metadata DB and config from the environment), with the
SimpleAuthManager and a password file written here, so a test can log in through the real login page. The
server dies with the test process (PR_SET_PDEATHSIG) and is stopped as a process group, so nothing is left
behind. Its output goes to a log file a test can search (for example for secrets that must not appear).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from airflow_provider_mysqlcdc.testing.mariadb import _die_with_parent, free_port

SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
HEALTH_PATH = "/api/v2/monitor/health"


@dataclass
class AirflowApiServer:
    """One running ``airflow api-server``; ``users`` maps user name to role (SimpleAuthManager roles)."""

    users: Mapping[str, str] = field(default_factory=lambda: {"admin": "admin"})
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment (connections, config)
    port: int = 0
    host: str = "127.0.0.1"
    startup_timeout: float = 180.0
    workdir: Path | None = None
    passwords: dict[str, str] = field(default_factory=dict)
    keep_workdir: bool = False  # keep the log and the passwords file after stop() (debugging)
    # "core" (REST API and UI) is enough to browse; workers of a scheduler need "execution" too ("all")
    apps: str = "core"
    # SIGTERM, then SIGKILL after this long: a graceful stop takes ~3 s and nothing needs it (no state kept)
    stop_grace: float = 1.0
    process: subprocess.Popen | None = None
    server_env: dict[str, str] = field(default_factory=dict, repr=False)  # the environment it runs with

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None, "the server has not been started"
        return self.workdir / "api-server.log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.workdir and self.log_path.exists() else ""

    def start(self) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix="mysqlcdc-api-server-"))
        self.port = self.port or free_port()
        # Our own passwords file: SimpleAuthManager only generates passwords for users missing from it.
        self.passwords = {user: secrets.token_urlsafe(12) for user in self.users}
        password_file = self.workdir / "passwords.json"
        password_file.write_text(json.dumps(self.passwords))
        env = {
            **os.environ,
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__API__HOST": self.host,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            **self.env,
        }
        self.server_env = env
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "api-server", "--host", self.host, "--port", str(self.port),
                 "--workers", "1", "--apps", self.apps],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                # Not the caller's directory: `python -m` puts it on sys.path, and a source checkout's
                # *.egg-info there registers the plugin's entry point a second time.
                cwd=self.workdir,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl(), which takes no lock
                start_new_session=True,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"airflow api-server exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + HEALTH_PATH, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise RuntimeError(
            f"airflow api-server not healthy within {self.startup_timeout:.0f}s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no output)"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``stop_grace``; then its work dir (log,
        passwords) goes."""
        process, self.process = self.process, None
        try:
            if process is not None:
                terminate_group(process, self.stop_grace)
        finally:
            if self.workdir is not None and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def terminate_group(process: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM to the process group a ``start_new_session`` child leads, SIGKILL after ``grace`` seconds."""
    terminate_groups([(process, grace)])


def terminate_groups(processes: list[tuple[subprocess.Popen, float]]) -> None:
    """SIGTERM to the process groups of ``start_new_session`` children, all at once (they shut down side by
    side); SIGKILL to a group whose leader is still there its grace seconds later."""
    signalled = []
    started = time.monotonic()
    for process, grace in processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            signalled.append((process, started + grace))
        except ProcessLookupError:
            process.poll()
    for process, deadline in sorted(signalled, key=lambda p: p[1]):
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
