"""A throwaway MySQL-compatible server with the binlog on, for tests and the demo (never for production).

The lifecycle both flavors share (a temp datadir copied from a template installed once per process, a free
loopback port, a wait until it accepts connections, the least-privilege CDC user, a clean restart); the
flavors (``mariadb.py``, ``mysql.py``) say how their server is installed and started.
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

Options = dict[str, str | None | bool]

# what both flavors' test servers run with: the binlog as CDC needs it, a non-UTC zone (zone mistakes show up
# as wrong values), and a server tuned for throwaway data
COMMON_OPTIONS: Options = {
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "server-id": "1",
    "default-time-zone": "-07:00",
    "character-set-server": "utf8mb4",
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
class ThrowawayServer:
    """One running server; ``options`` override the flavor's DEFAULT_OPTIONS (False drops an option)."""

    options: Options = field(default_factory=dict)
    basedir: Path | None = None
    port: int = 0
    process: subprocess.Popen | None = None
    _args: list[str] = field(default_factory=list, repr=False)

    FLAVOR: ClassVar[str] = ""
    DEFAULT_OPTIONS: ClassVar[Options] = {}
    # options baked into the datadir at install time: a server with one of them gets its own install
    INSTALL_TIME_OPTIONS: ClassVar[frozenset[str]] = frozenset()
    _templates: ClassVar[dict[str, Path]] = {}

    # --- what a flavor provides ----------------------------------------------------------------------------

    def server_command(self) -> list[str]:
        """The server binary (with whatever runs it), before the options."""
        raise NotImplementedError

    def install_datadir(self, datadir: Path) -> None:
        raise NotImplementedError

    def fixed_args(self, datadir: Path) -> list[str]:
        """Arguments every server of the flavor gets, after the common ones."""
        return []

    # --- shared lifecycle ----------------------------------------------------------------------------------

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

    def _template_datadir(self) -> Path:
        """A datadir installed once per process and flavor (never started: every server copies it and starts
        from the same fresh state), removed at exit. Tests start servers by the dozen; the install is the
        slow part."""
        template = ThrowawayServer._templates.get(self.FLAVOR)
        if template is None or not template.exists():
            base = Path(tempfile.mkdtemp(prefix=f"mysqlcdc-{self.FLAVOR}-template-"))
            atexit.register(shutil.rmtree, base, ignore_errors=True)
            self.install_datadir(base / "data")
            template = ThrowawayServer._templates[self.FLAVOR] = base / "data"
        return template

    def start(self) -> Self:
        command = self.server_command()
        self.basedir = Path(tempfile.mkdtemp(prefix=f"mysqlcdc-{self.FLAVOR}-"))
        datadir = self.basedir / "data"
        if self.INSTALL_TIME_OPTIONS & set(self.options):
            self.install_datadir(datadir)
        else:  # a copy of the process's freshly installed datadir: a fraction of an install's time
            shutil.copytree(self._template_datadir(), datadir, symlinks=True)
            # Oracle MySQL keeps its server_uuid in auto.cnf and makes a new one at start where there is none:
            # copies of one template must not share it (replication refuses equal UUIDs, and the engine tells
            # MySQL servers apart by it)
            (datadir / "auto.cnf").unlink(missing_ok=True)
        self.port = self.port or free_port()
        merged: Options = {**self.DEFAULT_OPTIONS, **self.options}
        args = [*command, "--no-defaults", f"--datadir={datadir}", f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--socket={self.basedir / 'mysqld.sock'}",
                f"--pid-file={self.basedir / 'mysqld.pid'}", f"--log-error={self.basedir / 'error.log'}",
                *(["--user=root"] if os.geteuid() == 0 else []), *self.fixed_args(datadir)]
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
                raise RuntimeError(
                    f"the {self.FLAVOR} server exited with {self.process.returncode}:\n{self.error_log()}")
            try:
                self.admin().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(
            f"the {self.FLAVOR} server did not accept connections within {timeout:.0f}s:\n{self.error_log()}")

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
        return self if self.process is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
