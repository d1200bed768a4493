"""Throwaway servers of either flavor, for the shared fixtures and for tests that need one of their own."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.testing.server_process import CDC_GRANTS, Options, ThrowawayServer


def start_server(flavor: str, **options: str | None | bool) -> ThrowawayServer:
    """A started server of ``flavor`` ("mariadb" or "mysql") with ``options`` over the flavor's defaults."""
    given: Options = dict(options)
    if flavor == "mysql":
        from airflow_provider_mysqlcdc.testing.mysql import MySQLServer

        return MySQLServer(options=given).start()
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    return MariaDBServer(options=given).start()


def binlog_off(flavor: str) -> Options:
    """The options of a server without a binlog (MySQL 8+ has it on unless told otherwise)."""
    return {"log-bin": False, "skip-log-bin": None} if flavor == "mysql" else {"log-bin": False}


def binlog_end(conn: Any) -> BinlogPosition:
    """The end of the server's binlog (``SHOW MASTER STATUS`` or ``SHOW BINARY LOG STATUS``, by flavor and
    version, as the engine asks)."""
    status = current_binlog_status(conn, server_info(conn))
    return BinlogPosition(status.file, status.position)


def numbers(count: int) -> str:
    """A derived table of ``seq`` = 1..count (up to 10^6) for INSERT ... SELECT on either flavor: MariaDB's
    ``seq_1_to_N`` tables come from its Sequence engine, which Oracle MySQL does not have."""
    if not 0 < count <= 10**6:
        raise ValueError(f"numbers(count) needs 1 <= count <= 1000000, got {count}")
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
    places = [f"{digits} AS p{i}" for i in range(6)]
    total = " + ".join(f"p{i}.d * {10 ** i}" for i in range(6))
    return (f"(SELECT {total} + 1 AS seq FROM {', '.join(places)} "
            f"WHERE {total} < {int(count)}) AS numbers_1_to_{int(count)}")


def with_query(url: str, **options: str) -> str:
    """``url`` with these query options added (an Oracle MySQL test server's URL already has one)."""
    return f"{url}{'&' if '?' in url else '?'}{urlencode(options)}"


def create_cdc_user(server: Any, name: str, password: str) -> str:
    """A user with the CDC grants the docs give (and, where the server's CDC URL names a watermark table,
    INSERT/UPDATE on it): its URL, with the server URL's options."""
    settings = MySQLSettings.from_url(server.cdc_url)
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (name, password))
        cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO %s@'%%'", (name,))
        if settings.watermark_table:
            table = TableId.parse(settings.watermark_table)
            cur.execute(f"GRANT INSERT, UPDATE ON {table.quoted} TO %s@'%%'", (name,))
    query = server.cdc_url.partition("?")[2]
    url = f"mysql://{quote(name, safe='')}:{quote(password, safe='')}@{settings.host}:{settings.port}/"
    return f"{url}?{query}" if query else url


def airflow_connection(settings: MySQLSettings, conn_type: str = "mysql") -> str:
    """The Airflow connection (JSON, for ``AIRFLOW_CONN_...``) of these settings, the source's read view
    settings in its extras."""
    extra = {key: value for key, value in (("read_view_mode", settings.read_view_mode),
                                           ("watermark_table", settings.watermark_table))
             if value and value != "auto"}
    connection = {"conn_type": conn_type, "host": settings.host, "port": settings.port,
                  "login": settings.user, "password": settings.password}
    return json.dumps({**connection, "extra": extra} if extra else connection)
