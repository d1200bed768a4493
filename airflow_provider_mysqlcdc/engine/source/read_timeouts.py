"""A bounded wait for every read of a MySQL session: a silent network path fails the session with an error
that names the server and the setting, instead of hanging it forever.

pymysql waits for a reply without limit unless it is given a read timeout. Every session this package opens
gets one (``read_timeout``, an option of the MySQL URL; the chunk store's sessions their own) and TCP
keepalive (``common/keepalive.py``). The timeout bounds each single read from the socket ("no byte for N
seconds"), not a whole query: a chunk read may stream for an hour as long as its rows keep coming.

A timed-out read closes the session and raises :class:`ReadTimedOut`. It is both a ``ServerUnavailable`` (a
``CdcError``: transient, the read may run again from its start) and a pymysql ``OperationalError`` with the
client code of a lost connection (2013), so every place that already copes with a lost connection (the chunk
read's "rerun it", the sort-key session's reconnect, mysql-replication's reconnect, SQLAlchemy's disconnect
handling in the chunk store) copes with it the same way.
"""
from __future__ import annotations

import errno
import socket
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ServerUnavailable
from airflow_provider_mysqlcdc.engine.common.keepalive import KEEPALIVE_SILENCE_S, tune_keepalive

# Above the chunk SELECT's server-side limit (query_timeout, 600 s), so that limit reports first.
DEFAULT_READ_TIMEOUT_S = 900.0
READ_TIMEOUT_SETTING = "read_timeout, an option of the MySQL URL"
_LOST = 2013  # CR_SERVER_LOST: "Lost connection to MySQL server during query"
_GONE = 2006  # CR_SERVER_GONE_ERROR: "MySQL server has gone away"


class ReadTimedOut(ServerUnavailable, pymysql.err.OperationalError):
    """A MySQL session got no reply within its read timeout, or its network path stopped answering TCP
    keepalive probes: the session is closed; what it was doing may run again on a new one."""

    def __str__(self) -> str:
        return str(self.args[-1])  # the message, not pymysql's "(2013, '...')" (args keep the code)


class BoundedReads:
    """Mixin for ``pymysql.connections.Connection``: keepalive on the socket; a timed-out read or write
    becomes a :class:`ReadTimedOut` naming the server and ``timeout_setting`` (the setting a user raises)."""

    timeout_setting: str = READ_TIMEOUT_SETTING
    host: str
    port: int
    _read_timeout: float | None
    _write_timeout: float | None
    _sock: Any

    def __init__(self, *args: Any, timeout_setting: str | None = None, **kwargs: Any) -> None:
        if timeout_setting is not None:
            self.timeout_setting = timeout_setting
        super().__init__(*args, **kwargs)  # pymysql connects here

    def connect(self, sock: Any = None) -> None:
        super().connect(sock)  # type: ignore[misc]
        if self._sock is not None:
            tune_keepalive(self._sock)

    def _read_bytes(self, num_bytes: int) -> bytes:
        try:
            return super()._read_bytes(num_bytes)  # type: ignore[misc]
        except pymysql.err.OperationalError as exc:
            error = self._timed_out(exc, _LOST, "no reply from", self._read_timeout)
            if error is None:
                raise
            raise error from None

    def _write_bytes(self, data: bytes) -> None:
        try:
            super()._write_bytes(data)  # type: ignore[misc]
        except pymysql.err.OperationalError as exc:
            error = self._timed_out(exc, _GONE, "could not send to", self._write_timeout)
            if error is None:
                raise
            raise error from None

    def _timed_out(self, exc: BaseException, code: int, what: str,
                   timeout: float | None) -> ReadTimedOut | None:
        """The error for a socket timeout (ours) or a kernel ETIMEDOUT (keepalive probes unanswered)."""
        cause = exc.__context__
        where = f"MySQL at {self.host}:{self.port}"
        if isinstance(cause, socket.timeout) and cause.errno is None and timeout:
            return ReadTimedOut(code, (
                f"{what} {where} within {timeout:g} s (the read timeout, set by {self.timeout_setting}): "
                "the network path went silent (a NAT, firewall or proxy forgot the session) or the server "
                "took longer than that; the session was closed. Raise the setting if the server is that "
                "slow"))
        if isinstance(cause, OSError) and cause.errno == errno.ETIMEDOUT:
            return ReadTimedOut(code, (
                f"the network path to {where} went silent: TCP keepalive probes went unanswered for about "
                f"{KEEPALIVE_SILENCE_S} s ({cause.strerror}); the session was closed"))
        return None
