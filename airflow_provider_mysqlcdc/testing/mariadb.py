"""A throwaway MariaDB with the binlog on, for tests and the demo (never for production).

It lives in its own temp datadir on a free loopback port, so it never touches a server already running
on the machine.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from airflow_provider_mysqlcdc.testing.server_process import (
    CDC_GRANTS,
    CDC_PASSWORD,
    CDC_USER,
    COMMON_OPTIONS,
    Options,
    ThrowawayServer,
    _die_with_parent,
    free_port,
)

__all__ = ["CDC_GRANTS", "CDC_PASSWORD", "CDC_USER", "DEFAULT_OPTIONS", "MariaDBServer", "_die_with_parent",
           "find_mariadbd", "free_port"]

DEFAULT_OPTIONS: Options = {
    **COMMON_OPTIONS,
    "log-bin": "mysql-bin",
    "collation-server": "utf8mb4_general_ci",
}


def find_mariadbd() -> str:
    for candidate in (shutil.which("mariadbd"), "/usr/sbin/mariadbd", shutil.which("mysqld"),
                      "/usr/sbin/mysqld"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("mariadbd not found: install Debian's mariadb-server (make setup does this)")


class MariaDBServer(ThrowawayServer):
    """One running mariadbd."""

    FLAVOR: ClassVar[str] = "mariadb"
    DEFAULT_OPTIONS: ClassVar[Options] = DEFAULT_OPTIONS
    INSTALL_TIME_OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {"innodb-page-size", "lower-case-table-names", "innodb-data-file-path"})

    def server_command(self) -> list[str]:
        return [find_mariadbd()]

    def install_datadir(self, datadir: Path) -> None:
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if not install:
            raise RuntimeError("mariadb-install-db not found: install Debian's mariadb-server")
        user_args = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [install, "--no-defaults", f"--datadir={datadir}", "--auth-root-authentication-method=normal",
             "--skip-test-db", *user_args],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
