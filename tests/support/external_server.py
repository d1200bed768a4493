"""Tests against a server given by URL (``MYSQLCDC_TEST_MYSQL_URL``, an admin account), e.g. MySQL 8.0/8.4."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from urllib.parse import quote

import pymysql

from airflow_provider_mysqlcdc.engine.source.connection import Connection, MySQLSettings

CDC_GRANTS = "SELECT, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT"


@dataclass
class ExternalServer:
    """Same surface as MariaDBServer: admin_url, cdc_url, admin(); creates a least-privilege CDC user."""

    url: str
    cdc_user: str = "mysqlcdc_test_cdc"
    cdc_password: str = field(default_factory=lambda: secrets.token_urlsafe(12), repr=False)

    def __post_init__(self) -> None:
        self.settings = MySQLSettings.from_url(self.url)
        self.port = self.settings.port
        self.host = self.settings.host

    @property
    def admin_url(self) -> str:
        return self.url

    @property
    def cdc_url(self) -> str:
        return f"mysql://{self.cdc_user}:{quote(self.cdc_password, safe='')}@{self.host}:{self.port}/"

    def admin(self, database: str | None = None) -> pymysql.connections.Connection:
        # the engine's connection class: its TLS context is built once per process, not per connection
        kwargs = self.settings.with_database(database).pymysql_kwargs()
        return Connection(**kwargs)

    def flavor(self) -> str:
        from airflow_provider_mysqlcdc.engine.source.server import server_info

        with self.admin() as conn:
            return server_info(conn).flavor

    def start(self) -> ExternalServer:
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (self.cdc_user,))
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (self.cdc_user, self.cdc_password))
            cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO %s@'%%'", (self.cdc_user,))
        return self

    def stop(self) -> None:
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (self.cdc_user,))
