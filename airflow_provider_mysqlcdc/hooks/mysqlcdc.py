"""The source MySQL server as an Airflow connection (conn type ``mysql`` or ``mysqlcdc``).

Reads host, port, login, password and schema plus the extras ``ssl`` (``true`` or ``{"ca": ..., "cert": ...,
"key": ...}``), ``ssl_ca``/``ssl_cert``/``ssl_key``, ``ssl_verify``, ``server_id`` (``"5400-5499"``: the
range binlog readers take their ids from), ``charset``, ``connect_timeout``, ``read_timeout``,
``read_view_mode`` and ``watermark_table`` (how chunk reads and re-snapshots open their read view). The MySQL
provider package is not needed. The password leaves this hook only as ``settings().password`` (for the
engine) and as an environment variable for ``spark-submit``; never in a URL, an argument or XCom.
"""
from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.source.connection import (
    DEFAULT_SERVER_ID_RANGE,
    MySQLSettings,
    parse_read_timeout,
    parse_server_id_range,
)

_EXTRA_KEYS = {"ssl", "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify", "server_id", "charset",
               "connect_timeout", "read_timeout", "read_view_mode", "watermark_table"}


class MySqlCdcHook(BaseHook):
    """MySQL source for CDC: connection settings, the CDC check, and what ``spark-submit`` needs.

    The connection (type ``mysql`` or ``mysqlcdc``) gives host, port, login, password and schema; its extras
    ``ssl`` (``true`` or ``{"ca", "cert", "key", "verify"}``), ``ssl_ca``/``ssl_cert``/``ssl_key``,
    ``ssl_verify``, ``server_id`` (the range binlog readers take their ids from, e.g. ``"5400-5499"``),
    ``charset``, ``connect_timeout``, ``read_timeout``, ``read_view_mode`` (``auto``, ``consistent_snapshot``,
    ``gtid_executed``, ``watermark_table``) and ``watermark_table`` (``db.table`` the CDC user may write:
    Oracle MySQL's exact mode without GTIDs).

    :param mysql_conn_id: the Airflow connection id of the source server.
    """

    conn_name_attr = "mysql_conn_id"
    default_conn_name = "mysql_default"
    conn_type = "mysqlcdc"
    hook_name = "MySQL CDC source"

    def __init__(self, mysql_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mysql_conn_id = mysql_conn_id
        self._settings: MySQLSettings | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database (optional)", "login": "User"},
            "placeholders": {
                "host": "db.example.com",
                "port": "3306",
                "login": "cdc",
                "extra": json.dumps({"ssl": {"ca": "/etc/ssl/mysql-ca.pem"}, "server_id": "5400-5499"}),
            },
        }

    def settings(self) -> MySQLSettings:
        """The engine's connection settings (with the password) for this connection."""
        if self._settings is None:
            self._settings = settings_from_connection(self.get_connection(self.mysql_conn_id))
        return self._settings

    def redacted_url(self) -> str:
        """``mysql://user@host:port/?...``: what Spark apps get on their command line (no password)."""
        return self.settings().url_without_password()

    def spark_env(self) -> dict[str, str]:
        """Environment for ``spark-submit``: the only way the password reaches the Spark driver."""
        return {MYSQL_PASSWORD_ENV: self.settings().password}

    def test_connection(self) -> tuple[bool, str]:
        """The CDC validation of ``mysqlcdc check`` (binlog
        settings, privileges), for the UI's Test button."""
        from airflow_provider_mysqlcdc.engine.source.readiness import check_server

        try:
            report = check_server(self.settings())
        except CdcError as exc:
            return False, str(exc)
        return report.ok, report.render()


def settings_from_connection(conn: Any) -> MySQLSettings:
    """An Airflow ``Connection`` (``mysql``/``mysqlcdc``)
    as ``MySQLSettings``; unknown extras are an error."""
    if conn.conn_type not in ("mysql", "mysqlcdc", "mariadb"):
        why = (" (Airflow stores --conn-type mysql as 'generic' when the MySQL provider is not installed)"
               if conn.conn_type == "generic" else "")
        raise ConfigurationError(
            f"connection {conn.conn_id!r} has type {conn.conn_type!r}{why}: the MySQL CDC source needs a "
            f"connection of type mysqlcdc; recreate it: airflow connections delete {conn.conn_id} && "
            f"airflow connections add {conn.conn_id} --conn-type mysqlcdc --conn-host <host> --conn-port "
            "3306 --conn-login <user> --conn-password <password> (extras: ssl, server_id, charset)"
        )
    if not conn.host:
        raise ConfigurationError(f"connection {conn.conn_id!r} has no host: set the MySQL server's host name")
    extra = conn.extra_dejson or {}
    unknown = set(extra) - _EXTRA_KEYS
    if unknown:
        raise ConfigurationError(
            f"connection {conn.conn_id!r} has unknown extra(s) {sorted(unknown)}; "
            f"known: {sorted(_EXTRA_KEYS)}"
        )
    ssl = _ssl(conn.conn_id, extra)
    server_id = extra.get("server_id")
    try:
        return MySQLSettings(
            host=conn.host,
            port=int(conn.port or 3306),
            user=conn.login or "root",
            password=conn.password or "",
            database=conn.schema or None,
            charset=str(extra.get("charset", "utf8mb4")),
            ssl=ssl,
            server_id_range=parse_server_id_range(str(server_id)) if server_id else DEFAULT_SERVER_ID_RANGE,
            connect_timeout=int(extra.get("connect_timeout", 10)),
            read_timeout=parse_read_timeout(extra.get("read_timeout")),
            read_view_mode=str(extra.get("read_view_mode") or "auto"),
            watermark_table=str(extra["watermark_table"]) if extra.get("watermark_table") else None,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"connection {conn.conn_id!r}: {exc}") from None


def _ssl(conn_id: str, extra: dict[str, Any]) -> dict[str, Any] | None:
    value = extra.get("ssl")
    opts: dict[str, Any] = {}
    if isinstance(value, dict):
        unknown = set(value) - {"ca", "cert", "key", "verify"}
        if unknown:
            raise ConfigurationError(
                f"connection {conn_id!r}: unknown ssl option(s) {sorted(unknown)}; "
                "known: ca, cert, key, verify"
            )
        opts = {k: v for k, v in value.items() if k in ("ca", "cert", "key") and v}
        verify = value.get("verify")
    else:
        verify = extra.get("ssl_verify")
    for key in ("ca", "cert", "key"):
        if extra.get(f"ssl_{key}"):
            opts[key] = extra[f"ssl_{key}"]
    wanted = bool(opts) or (isinstance(value, dict)) or str(value).lower() in ("1", "true", "required", "on")
    if not wanted:
        return None
    opts["check_hostname"] = verify is None or str(verify).lower() not in ("0", "false", "off", "no")
    return opts
