"""A throwaway MariaDB with the binlog on, for tests and the demo (never for production).

It lives in its own temp datadir on a free loopback port, so it never touches a server already running
on the machine.
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import pymysql

CDC_USER = "cdc"
CDC_PASSWORD = "cdc-secret-pw"
CDC_GRANTS = "SELECT, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT"

DEFAULT_OPTIONS: dict[str, str | None] = {
    "log-bin": "mysql-bin",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "server-id": "1",
    "default-time-zone": "-07:00",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
    "innodb-buffer-pool-size": "256M",
    "innodb-flush-log-at-trx-commit": "2",
    "sync-binlog": "0",
    "max-connections": "300",
    "skip-name-resolve": None,
}


def _die_with_parent() -> None:
    """Runs in the child before exec: a killed test run must not leave its server behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# options that mariadb-install-db bakes into the datadir: a server with one of them gets its own install
_INSTALL_TIME_OPTIONS = {"innodb-page-size", "lower-case-table-names", "innodb-data-file-path"}
_template: Path | None = None


def _install_datadir(datadir: Path) -> None:
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if not install:
        raise RuntimeError("mariadb-install-db not found: install Debian's mariadb-server")
    user_args = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(
        [install, "--no-defaults", f"--datadir={datadir}", "--auth-root-authentication-method=normal",
         "--skip-test-db", *user_args],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _template_datadir() -> Path:
    """A datadir installed once per process (never started: every server copies it and starts from the
    same fresh state), removed at exit. Tests start servers by the dozen; the install is the slow part."""
    global _template
    if _template is None or not _template.exists():
        base = Path(tempfile.mkdtemp(prefix="mysqlcdc-mariadb-template-"))
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        _install_datadir(base / "data")
        _template = base / "data"
    return _template


def find_mariadbd() -> str:
    for candidate in (shutil.which("mariadbd"), "/usr/sbin/mariadbd", shutil.which("mysqld"),
                      "/usr/sbin/mysqld"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("mariadbd not found: install Debian's mariadb-server (make setup does this)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _AdminConnection(pymysql.connections.Connection):
    """pymysql tries TLS on every connection and builds a fresh context for it, loading the system CA store:
    20-50 ms per connection, ten times the rest of a loopback connect. Tests open admin sessions by the
    thousand (fixtures, writers), so the context is built once per process (as the engine's connections
    do)."""

    _contexts: ClassVar[dict[tuple, object]] = {}

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if not isinstance(sslp, dict):
            return super()._create_ssl_ctx(sslp)
        key = tuple(sorted((k, str(v)) for k, v in sslp.items()))
        ctx = _AdminConnection._contexts.get(key)
        if ctx is None:
            ctx = _AdminConnection._contexts[key] = super()._create_ssl_ctx(sslp)
        return ctx


@dataclass
class MariaDBServer:
    """One running mariadbd; ``options`` override DEFAULT_OPTIONS (a value of False drops an option)."""

    options: dict[str, str | None | bool] = field(default_factory=dict)
    basedir: Path | None = None
    port: int = 0
    process: subprocess.Popen | None = None
    _args: list[str] = field(default_factory=list, repr=False)

    @property
    def admin_url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    @property
    def cdc_url(self) -> str:
        return f"mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{self.port}/"

    def admin(self, database: str | None = None) -> pymysql.connections.Connection:
        return _AdminConnection(
            host="127.0.0.1", port=self.port, user="root", password="", database=database,
            autocommit=True, charset="utf8mb4", init_command="SET time_zone = '+00:00'",
        )

    def start(self) -> Self:
        mariadbd = find_mariadbd()
        self.basedir = Path(tempfile.mkdtemp(prefix="mysqlcdc-mariadb-"))
        datadir = self.basedir / "data"
        user_args = ["--user=root"] if os.geteuid() == 0 else []
        if _INSTALL_TIME_OPTIONS & set(self.options):
            _install_datadir(datadir)
        else:  # a copy of the process's freshly installed datadir: a fraction of mariadb-install-db's time
            shutil.copytree(_template_datadir(), datadir, symlinks=True)
        self.port = self.port or free_port()
        merged: dict[str, str | None | bool] = {**DEFAULT_OPTIONS, **self.options}
        args = [mariadbd, "--no-defaults", f"--datadir={datadir}", f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--socket={self.basedir / 'mysqld.sock'}",
                f"--pid-file={self.basedir / 'mysqld.pid'}", f"--log-error={self.basedir / 'error.log'}",
                *user_args]
        for name, value in merged.items():
            if value is False:
                continue
            if name == "log-bin" and value:
                value = str(datadir / str(value))
            args.append(f"--{name}" if value is None else f"--{name}={value}")
        self._args = args
        self._launch()
        self._create_cdc_user()
        return self

    def _launch(self) -> None:
        self.process = subprocess.Popen(
            self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl(), which takes no lock
        )
        self._wait_ready()

    def restart(self, down_seconds: float = 0.0) -> None:
        """A clean shutdown (what a maintenance restart does), ``down_seconds`` away, then the same server
        again on the same port and datadir: clients see their sessions cut and connections refused."""
        self._shutdown()
        time.sleep(down_seconds)
        self._launch()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.process.returncode}:\n{self.error_log()}")
            try:
                self.admin().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not accept connections within {timeout:.0f}s:\n{self.error_log()}")

    def _create_cdc_user(self) -> None:
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (CDC_USER, CDC_PASSWORD))
            cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO %s@'%%'", (CDC_USER,))

    def error_log(self, tail: int = 40) -> str:
        path = self.basedir / "error.log" if self.basedir else None
        if not path or not path.exists():
            return "(no error log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-tail:])

    def _shutdown(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def stop(self) -> None:
        self._shutdown()
        if self.basedir is not None:
            shutil.rmtree(self.basedir, ignore_errors=True)
            self.basedir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
