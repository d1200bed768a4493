"""A throwaway Oracle MySQL with the binlog on, for tests and the demo (never for production).

Debian's stable release has no Oracle MySQL; its unstable suite does (``mysql-server-core``), built against a
newer glibc than the host's. ``make setup`` unpacks that suite's server and client into ``.mysql-root/`` with
``mmdebstrap`` (see the Makefile), and the server runs from there through that root's own dynamic loader and
libraries: no chroot, so its datadir, socket and logs live in an ordinary temp dir. A root given by
``MYSQLCDC_MYSQL_ROOT``, or an Oracle ``mysqld`` installed on the host, is used the same way.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from airflow_provider_mysqlcdc.engine.source.watermark_table import WATERMARK_DDL
from airflow_provider_mysqlcdc.testing.server_process import (
    CDC_PASSWORD,
    CDC_USER,
    COMMON_OPTIONS,
    Options,
    ThrowawayServer,
)

MYSQL_ROOT_ENV = "MYSQLCDC_MYSQL_ROOT"
# where `make setup` puts it, beside the checkout's .venv
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / ".mysql-root"

# Oracle MySQL has no read view with its own binlog position (MariaDB's Binlog_snapshot_position): exact chunk
# reads write markers to a table the CDC user may write (docs/source-server.md), named in the source's URL
WATERMARK_TABLE = "mysqlcdc.watermark"

DEFAULT_OPTIONS: Options = {
    **COMMON_OPTIONS,  # the server's own default collation (utf8mb4_0900_ai_ci), as most users have it
    "log-bin": "binlog",
    # GTIDs on, as on most production servers: the read-only exact read view (read_view_mode=gtid_executed)
    # and MySQL's GTID positions need them; a test of the watermark table or of gtid_mode=OFF says so
    "gtid-mode": "ON",
    "enforce-gtid-consistency": "ON",
    "innodb-redo-log-capacity": "64M",
    "mysqlx": "OFF",
    "secure-file-priv": "",
    # a test server, not a production one: the per-thread and per-table instruments cost memory per server
    "performance-schema-max-table-instances": "2000",
}



@dataclass(frozen=True)
class MySQLInstall:
    """Where an Oracle MySQL's binaries and shared files are, and how to run them."""

    root: Path  # "/" for a host install
    loader: list[str]  # the root's dynamic loader with its library path, or nothing on the host

    def command(self, binary: str) -> list[str]:
        return [*self.loader, str(self.root / binary.lstrip("/"))]

    @property
    def share(self) -> Path:
        return self.root / "usr/share/mysql"

    @property
    def plugins(self) -> Path:
        return self.root / "usr/lib/mysql/plugin"


def _root_install(root: Path) -> MySQLInstall | None:
    if not (root / "usr/sbin/mysqld").exists():
        return None
    loaders = sorted(root.glob("lib*/ld-linux*.so*")) + sorted(root.glob("usr/lib*/ld-linux*.so*"))
    if not loaders:
        return None
    libs = [p for p in (root / "lib" / _multiarch(root), root / "usr/lib" / _multiarch(root)) if p.exists()]
    return MySQLInstall(root, [str(loaders[0]), "--library-path", ":".join(map(str, libs))])


def _multiarch(root: Path) -> str:
    found = sorted(p.name for p in (root / "usr/lib").glob("*-linux-gnu*"))
    return found[0] if found else "x86_64-linux-gnu"


@functools.cache
def find_mysql() -> MySQLInstall:
    """The Oracle MySQL to start: ``$MYSQLCDC_MYSQL_ROOT``, the checkout's ``.mysql-root``, or the host's."""
    for root in (os.environ.get(MYSQL_ROOT_ENV), DEFAULT_ROOT):
        if root and (found := _root_install(Path(root))):
            return found
    host = shutil.which("mysqld") or "/usr/sbin/mysqld"
    if os.path.exists(host):
        version = subprocess.run([host, "--version"], capture_output=True, text=True, check=False).stdout
        if "mariadb" not in version.lower():
            return MySQLInstall(Path("/"), [])
    raise RuntimeError(
        f"no Oracle MySQL server found: run `make setup` (it unpacks Debian's mysql-server-core into "
        f"{DEFAULT_ROOT}), or point {MYSQL_ROOT_ENV} at a root holding usr/sbin/mysqld"
    )


def mysql_version() -> str:
    """The server's own version line (``mysqld --version``)."""
    install = find_mysql()
    result = subprocess.run([*install.command("/usr/sbin/mysqld"), "--version"], capture_output=True,
                            text=True, check=True)
    return result.stdout.strip()


class MySQLServer(ThrowawayServer):
    """One running Oracle mysqld."""

    FLAVOR: ClassVar[str] = "mysql"
    DEFAULT_OPTIONS: ClassVar[Options] = DEFAULT_OPTIONS
    INSTALL_TIME_OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {"innodb-page-size", "lower-case-table-names", "innodb-data-file-path"})

    def server_command(self) -> list[str]:
        return find_mysql().command("/usr/sbin/mysqld")

    @property
    def cdc_url(self) -> str:
        return f"mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{self.port}/?watermark_table={WATERMARK_TABLE}"

    def _create_cdc_user(self) -> None:
        super()._create_cdc_user()
        db, table = WATERMARK_TABLE.split(".")
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            cur.execute(WATERMARK_DDL.format(table=f"`{db}`.`{table}`").replace(
                "CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
            cur.execute(f"GRANT INSERT, UPDATE ON `{db}`.`{table}` TO %s@'%%'", (CDC_USER,))

    def fixed_args(self, datadir: Path) -> list[str]:
        install = find_mysql()
        return [f"--basedir={install.root / 'usr'}", f"--lc-messages-dir={install.share}",
                f"--character-sets-dir={install.share / 'charsets'}", f"--plugin-dir={install.plugins}",
                f"--tmpdir={datadir.parent}"]

    def install_datadir(self, datadir: Path) -> None:
        install_time = {k: v for k, v in self.options.items() if k in self.INSTALL_TIME_OPTIONS}
        # --initialize makes root@localhost only, which a TCP client under skip-name-resolve is not
        datadir.parent.mkdir(parents=True, exist_ok=True)
        init = datadir.parent / "init.sql"
        init.write_text("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY '';\n"
                        "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n")
        subprocess.run(
            [*self.server_command(), "--no-defaults", "--initialize-insecure", f"--datadir={datadir}",
             *(["--user=root"] if os.geteuid() == 0 else []), *self.fixed_args(datadir),
             "--innodb-redo-log-capacity=64M", f"--init-file={init}",
             *(f"--{k}={v}" for k, v in install_time.items())],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
