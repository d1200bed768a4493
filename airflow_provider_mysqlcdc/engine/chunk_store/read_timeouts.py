"""A bounded wait for every reply of the chunk store's database: a silent network path cannot hang a task.

The budget is the store's ``read_timeout_s``: by default ``$MYSQLCDC_CHUNK_STORE_READ_TIMEOUT_S``, else 60 s.
A session that waits longer than that for one reply is closed and counts as a lost connection. The store's
transaction then runs again through its outage retry (backoff, for the outage budget), and a write whose
COMMIT may have landed is recognized on retry and never applied twice (``database.py``).

* MySQL/MariaDB: pymysql read and write timeouts and TCP keepalive (the source's ``Connection``, whose error
  names the server and this setting). The server ends a session of ours that stays idle for twice the budget
  (``wait_timeout``), so the row locks of a transaction whose client gave up soon stop blocking its retry.
* PostgreSQL: TCP keepalive and ``tcp_user_timeout`` (libpq), a client-side limit on each wait for the server
  (psycopg; it also holds behind a proxy that keeps TCP alive while its upstream is gone), and, at twice the
  budget, ``idle_in_transaction_session_timeout`` (an abandoned transaction's locks are released) and
  ``statement_timeout`` (the server stops a statement nobody waits for any more).
* SQLite: a local file, no network; its busy timeout bounds lock waits.

The server's own limits are twice the client's, so the client always gives up first, with its own error.

Statements of the store are short (one chunk's row, one plan), so a reply within the budget is the rule; a
store with very many chunks, or a slow server, may need a larger one.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from airflow_provider_mysqlcdc.engine.common.environment import (
    CHUNK_STORE_READ_TIMEOUT_ENV as READ_TIMEOUT_ENV,
)
from airflow_provider_mysqlcdc.engine.common.environment import (
    seconds_from_env,
)
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.keepalive import libpq_keepalive_params

DEFAULT_READ_TIMEOUT_S = 60.0
SETTING = f"${READ_TIMEOUT_ENV}"


def read_timeout_budget(value: float | None) -> float:
    """``read_timeout_s`` as given, else ``$MYSQLCDC_CHUNK_STORE_READ_TIMEOUT_S``, else 60 s."""
    value = seconds_from_env(READ_TIMEOUT_ENV, value, DEFAULT_READ_TIMEOUT_S,
                             "the chunk store's read timeout")
    if not 0 < value < float("inf"):  # also NaN
        raise ConfigurationError(f"chunk store read timeout must be > 0 seconds, not {value!r}")
    return float(value)


def bound_sessions(engine: Engine, budget_s: float) -> None:
    """Give every session ``engine`` opens from now on the limits above."""
    backend = engine.url.get_backend_name()
    if backend in ("mysql", "mariadb"):
        _bound_mysql(engine, budget_s)
    elif backend == "postgresql":
        _bound_postgresql(engine, budget_s)


def _bound_mysql(engine: Engine, budget_s: float) -> None:
    from airflow_provider_mysqlcdc.engine.source.connection import Connection

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: tuple, cparams: dict[str, Any]) -> Any:
        cparams.setdefault("read_timeout", budget_s)  # a read_timeout in the store's URL wins
        cparams.setdefault("write_timeout", cparams["read_timeout"])
        return Connection(*cargs, timeout_setting=SETTING, **cparams)

    @event.listens_for(engine, "connect")
    def _limits(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute("SET SESSION wait_timeout = %s", (max(1, math.ceil(2 * budget_s)),))


def _bound_postgresql(engine: Engine, budget_s: float) -> None:
    connection_class = _pg_connection_class()
    budget_ms = max(1, math.ceil(budget_s * 1000))

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: tuple, cparams: dict[str, Any]) -> Any:
        for key, value in {**libpq_keepalive_params(), "tcp_user_timeout": budget_ms}.items():
            cparams.setdefault(key, value)  # what the store's URL sets wins
        conn = connection_class.connect(*cargs, **cparams)
        conn.read_timeout_s = budget_s
        return conn

    @event.listens_for(engine, "connect")
    def _limits(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('statement_timeout', %s, false)",
                (str(2 * budget_ms), str(2 * budget_ms)),
            )
        dbapi_connection.commit()


@functools.cache
def _pg_connection_class() -> type[Any]:
    """psycopg's connection with a limit on each wait for the server (psycopg waits without one)."""
    import psycopg

    timeout_error = getattr(psycopg.errors, "_WaitTimeout", None)  # psycopg >= 3.2

    class BoundedConnection(psycopg.Connection):
        read_timeout_s: float | None = None

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            if timeout is not None or not self.read_timeout_s or timeout_error is None:
                return super().wait(gen, interval, timeout)  # psycopg's own bounded waits (cancel, notifies)
            try:
                return super().wait(gen, interval, self.read_timeout_s)
            except timeout_error:
                where = f"{self.info.host}:{self.info.port}"
                self.pgconn.finish()  # the reply may still come: this session cannot be used any more
                raise psycopg.OperationalError(
                    f"no reply from PostgreSQL at {where} within {self.read_timeout_s:g} s (the chunk "
                    f"store's read timeout, set by {SETTING}): the network path went silent (a NAT, firewall "
                    "or proxy forgot the session) or the server took longer than that; the session was closed"
                ) from None

    return BoundedConnection
