"""How we reach a MySQL server: settings parsed from a URL, and sessions that all run in UTC.

The password may come from the URL or from the ``MYSQLCDC_MYSQL_PASSWORD`` environment variable, so that
command lines (``spark-submit``, ``ps``) never need to carry it. It never appears in ``repr``, logs or errors.
Every session waits at most ``read_timeout`` seconds for each read and write (``read_timeouts.py``).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pymysql
import pymysql.cursors

from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import (
    ConfigurationError,
    ConnectionFailed,
    ServerUnavailable,
)
from airflow_provider_mysqlcdc.engine.source.read_timeouts import DEFAULT_READ_TIMEOUT_S, BoundedReads

# Client error codes of a server that cannot be reached now: can't connect, unknown host, gone away, lost.
UNREACHABLE_ERRORS = frozenset({2003, 2005, 2006, 2013})
# ... and of a session the server ended: killed (1927 MariaDB), shutdown in progress (1053).
LOST_CONNECTION_ERRORS = frozenset({2013, 2006, 1927, 1053})
DEFAULT_SERVER_ID_RANGE = (5400, 5499)
# Every session of ours runs in UTC and under one sql_mode, whatever the server's default: Oracle MySQL's
# default (NO_ZERO_DATE, NO_ZERO_IN_DATE, strict) refuses a zero date as a comparison value, so a table whose
# key holds one could not be planned or read; ALLOW_INVALID_DATES keeps '2024-02-30' keys (legacy schemas
# written under it) as they are in comparisons; and no NO_BACKSLASH_ESCAPES, under which pymysql's quoting
# of parameters would mean other values.
SESSION_SQL_MODE = "ALLOW_INVALID_DATES"
SESSION_INIT = f"SET time_zone = '+00:00', sql_mode = '{SESSION_SQL_MODE}'"

_SSL_KEYS = {"ssl_ca": "ca", "ssl_cert": "cert", "ssl_key": "key"}
_KNOWN_QUERY_KEYS = set(_SSL_KEYS) | {"ssl", "ssl_verify", "charset", "server_id", "connect_timeout",
                                     "read_timeout", "read_view_mode", "watermark_table"}
# how a chunk read opens its read view (engine/snapshot/read_view.py): a property of the source, so the
# snapshot's chunk reads and the stream's re-snapshots of the same server read alike
READ_VIEW_MODES = ("auto", "consistent_snapshot", "gtid_executed", "watermark_table")


@dataclass(frozen=True)
class MySQLSettings:
    """Where and how to connect; ``password`` is excluded from ``repr`` on purpose."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str | None = None
    charset: str = "utf8mb4"
    ssl: dict[str, Any] | None = None
    server_id_range: tuple[int, int] = DEFAULT_SERVER_ID_RANGE
    connect_timeout: int = 10
    read_timeout: float = DEFAULT_READ_TIMEOUT_S  # seconds each read or write of a session may wait
    read_view_mode: str = "auto"  # one of READ_VIEW_MODES
    watermark_table: str | None = None  # db.table the CDC user may write, for the watermark_table mode

    def __post_init__(self) -> None:
        if not 0 < self.read_timeout < float("inf"):  # also NaN
            raise ConfigurationError(
                f"MySQL read_timeout must be a positive number of seconds, got {self.read_timeout!r}"
            )
        if self.read_view_mode not in READ_VIEW_MODES:
            raise ConfigurationError(
                f"MySQL read_view_mode must be one of {', '.join(READ_VIEW_MODES)}, "
                f"got {self.read_view_mode!r}"
            )
        if self.watermark_table is not None and (
                self.watermark_table.count(".") != 1 or "" in self.watermark_table.split(".")):
            raise ConfigurationError(
                f"MySQL watermark_table must be db.table, got {self.watermark_table!r}"
            )

    @classmethod
    def from_url(cls, url: str, password: str | None = None) -> MySQLSettings:
        """Parse ``mysql://user[:password]@host[:port][/database][?ssl_ca=..&server_id=5400-5499]``."""
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mariadb", "mysql+pymysql"):
            raise ConfigurationError(
                f"MySQL URL must start with mysql:// (got scheme {parts.scheme or 'none'!r}); "
                "example: mysql://cdc@db.example.com:3306"
            )
        if not parts.hostname:
            raise ConfigurationError("MySQL URL has no host; example: mysql://cdc@db.example.com:3306")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ConfigurationError(f"MySQL URL has an invalid port: {exc}") from None
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = set(query) - _KNOWN_QUERY_KEYS
        if unknown:
            raise ConfigurationError(
                f"MySQL URL has unknown option(s) {sorted(unknown)}; known: {sorted(_KNOWN_QUERY_KEYS)}"
            )
        resolved_password = password
        if resolved_password is None:
            resolved_password = unquote(parts.password) if parts.password is not None else None
        if resolved_password is None:
            resolved_password = os.environ.get(MYSQL_PASSWORD_ENV, "")
        database = unquote(parts.path.lstrip("/")) or None
        return cls(
            host=parts.hostname,
            port=port,
            user=unquote(parts.username or "root"),
            password=resolved_password,
            database=database,
            charset=query.get("charset", "utf8mb4"),
            ssl=_ssl_options(query),
            server_id_range=parse_server_id_range(query.get("server_id")),
            connect_timeout=int(query.get("connect_timeout", 10)),
            read_timeout=parse_read_timeout(query.get("read_timeout")),
            read_view_mode=query.get("read_view_mode") or "auto",
            watermark_table=query.get("watermark_table") or None,
        )

    def redacted_url(self) -> str:
        """The URL without the password: safe for logs, XCom and command lines."""
        auth = quote(self.user, safe="")
        db = quote(self.database, safe="") if self.database else ""
        return f"mysql://{auth}@{self.host}:{self.port}/{db}"

    def url_without_password(self) -> str:
        """The URL with every option (TLS, charset, server_id range, timeout) but no password: it parses back
        to the same settings plus the password from the environment or a file (spark-submit arguments)."""
        query: dict[str, str] = {}
        if self.ssl is not None:
            query["ssl"] = "true"
            for key, name in (("ca", "ssl_ca"), ("cert", "ssl_cert"), ("key", "ssl_key")):
                if self.ssl.get(key):
                    query[name] = str(self.ssl[key])
            if self.ssl.get("check_hostname") is False:
                query["ssl_verify"] = "false"
        if self.charset != "utf8mb4":
            query["charset"] = self.charset
        if self.server_id_range != DEFAULT_SERVER_ID_RANGE:
            query["server_id"] = "{}-{}".format(*self.server_id_range)
        if self.connect_timeout != 10:
            query["connect_timeout"] = str(self.connect_timeout)
        if self.read_timeout != DEFAULT_READ_TIMEOUT_S:
            query["read_timeout"] = f"{self.read_timeout:g}"
        if self.read_view_mode != "auto":
            query["read_view_mode"] = self.read_view_mode
        if self.watermark_table:
            query["watermark_table"] = self.watermark_table
        base = self.redacted_url()
        return f"{base}?{urlencode(query)}" if query else base

    def with_database(self, database: str | None) -> MySQLSettings:
        return dataclasses.replace(self, database=database)

    def pymysql_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "charset": self.charset,
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            "write_timeout": self.read_timeout,
            "autocommit": True,
            "init_command": SESSION_INIT,
        }
        if self.database:
            kwargs["database"] = self.database
        if self.ssl is not None:
            kwargs["ssl"] = self.ssl
        return kwargs

    def replication_kwargs(self) -> dict[str, Any]:
        """Connection settings for mysql-replication's ``BinLogStreamReader``."""
        kwargs: dict[str, Any] = {
            "host": self.host, "port": self.port, "user": self.user, "passwd": self.password,
            "charset": self.charset, "read_timeout": self.read_timeout, "write_timeout": self.read_timeout,
        }
        if self.ssl is not None:
            kwargs["ssl"] = self.ssl
        return kwargs


def _ssl_options(query: dict[str, str]) -> dict[str, Any] | None:
    opts: dict[str, Any] = {_SSL_KEYS[k]: v for k, v in query.items() if k in _SSL_KEYS and v}
    wanted = query.get("ssl", "").lower() in ("1", "true", "required", "on") or bool(opts)
    if not wanted:
        return None
    opts["check_hostname"] = query.get("ssl_verify", "true").lower() not in ("0", "false", "off")
    return opts


def parse_read_timeout(value: str | float | None) -> float:
    """``read_timeout`` of a MySQL URL (or connection extra): positive seconds; default 900."""
    if value in (None, ""):
        return DEFAULT_READ_TIMEOUT_S
    try:
        return float(value)  # MySQLSettings checks that it is positive
    except (TypeError, ValueError):
        raise ConfigurationError(f"MySQL read_timeout must be a number of seconds, got {value!r}") from None


def parse_server_id_range(value: str | None) -> tuple[int, int]:
    """``"5400-5499"`` or ``"5400"``: the replica ids our
    binlog readers may use (each reader needs its own)."""
    if not value:
        return DEFAULT_SERVER_ID_RANGE
    try:
        low, _, high = value.partition("-")
        lo, hi = int(low), int(high or low)
    except ValueError:
        raise ConfigurationError(
            f"server_id must be a number or a range like 5400-5499, got {value!r}"
        ) from None
    if not (1 <= lo <= hi <= 2**32 - 1):
        raise ConfigurationError(f"server_id range {value!r} must satisfy 1 <= low <= high <= 4294967295")
    return lo, hi


class Connection(BoundedReads, pymysql.connections.Connection):
    """A pymysql connection whose reads are bounded (``read_timeouts.py``) and that builds each TLS context
    once per process, not once per connection.

    pymysql 1.2 tries TLS on every connection ("preferred" mode when no SSL option is set) and builds a fresh
    context for it, loading the system CA store: 30-60 ms per connection, and the engine opens many. A context
    for the same options is the same every time and safe to share.
    """

    _contexts: ClassVar[dict[tuple, Any]] = {}  # shared by every connection of the process

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if not isinstance(sslp, dict):
            return super()._create_ssl_ctx(sslp)
        key = tuple(sorted((k, str(v)) for k, v in sslp.items()))
        ctx = Connection._contexts.get(key)
        if ctx is None:
            ctx = Connection._contexts[key] = super()._create_ssl_ctx(sslp)
        return ctx


def connect(settings: MySQLSettings, **overrides: Any) -> pymysql.connections.Connection:
    """Open a session in UTC; failures become a ConnectionFailed
    that names host and user, never the password."""
    kwargs = settings.pymysql_kwargs()
    kwargs.update(overrides)
    try:
        return Connection(**kwargs)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else None
        where = f"{settings.user}@{settings.host}:{settings.port}"
        if code == 1045:
            raise ConnectionFailed(
                f"MySQL refused the credentials of {where} (access denied): check the user name and "
                f"the password (URL or ${MYSQL_PASSWORD_ENV})"
            ) from None
        if code == 1049:
            raise ConnectionFailed(
                f"MySQL at {settings.host}:{settings.port} has no database {settings.database!r}: "
                "fix the database in the URL"
            ) from None
        # pymysql reports a failed TLS handshake as "can't connect"; a connection cut in the middle of it (a
        # failover behind a virtual IP, a restart) is an outage like any other cut, not a certificate problem
        if "[SSL" in _message(exc) and not any(cut in _message(exc) for cut in _CUT_DURING_HANDSHAKE):
            raise ConnectionFailed(
                f"the TLS handshake with MySQL at {settings.host}:{settings.port} failed ({_message(exc)}): "
                "the server's certificate must be signed by the CA in ssl_ca and name the host you connect "
                "to (or set ssl_verify=false to skip the host name check only)"
            ) from None
        if code in UNREACHABLE_ERRORS:
            raise ServerUnavailable(
                f"cannot reach MySQL at {settings.host}:{settings.port} ({_message(exc)}): "
                "check host, port, firewall and that the server is running"
            ) from None
        raise ConnectionFailed(f"cannot connect to MySQL as {where}: {_message(exc)}") from None


_CUT_DURING_HANDSHAKE = (
    "UNEXPECTED_EOF", "EOF occurred in violation of protocol", "Connection reset by peer", "Broken pipe",
)


def _message(exc: BaseException) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)
