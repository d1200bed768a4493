"""Waiting out a MySQL outage: a restart, a failover or a network cut must not stop a stream that can resume.

A read that was cut is run again from its start (binlog reads are exact ranges, so the rerun returns the same
changes); the wait backs off up to a few seconds between tries and is bounded by a budget, after which the
error says how long the server was gone and that a restart resumes from the checkpoint.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ServerUnavailable
from airflow_provider_mysqlcdc.engine.common.retry import Backoff
from airflow_provider_mysqlcdc.engine.source.connection import LOST_CONNECTION_ERRORS, UNREACHABLE_ERRORS

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_RECONNECT_TIMEOUT_S = 300.0
# A host name that does not resolve (2005) is a typo far more often than an outage: it fails at once.
_TRANSIENT_CODES = (LOST_CONNECTION_ERRORS | UNREACHABLE_ERRORS | {2014, 2055}) - {2005}


def is_transient(exc: BaseException) -> bool:
    """The server is away for now (not: wrong password, missing privilege, purged binlog)."""
    if isinstance(exc, ServerUnavailable):
        return "Unknown MySQL server host" not in str(exc)
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError):
        code = exc.args[0] if exc.args else None
        return code in _TRANSIENT_CODES or isinstance(exc, pymysql.err.InterfaceError)
    return isinstance(exc, ConnectionError)


def retry_while_unavailable(
    work: Callable[[], T],
    *,
    what: str,
    where: str,
    budget_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
    on_retry: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``work`` until it succeeds or the server has been away for ``budget_s`` seconds.

    ``on_retry`` runs before each new try (drop a dead session). Errors that are not transient pass at once.
    """
    backoff: Backoff | None = None  # from the first failure on
    while True:
        try:
            result = work()
        except Exception as exc:  # classified below
            if not is_transient(exc):
                raise
            if backoff is None:
                backoff = Backoff(budget_s, first_delay_s=0.5, max_delay_s=10.0, jitter=(0.75, 1.25),
                                  sleep=sleep)
                log.warning("MySQL at %s is unavailable while %s (%s): retrying for up to %.0f s",
                            where, what, _brief(exc), budget_s)
            if backoff.exhausted(counting_next_wait=True):
                raise ServerUnavailable(
                    f"MySQL at {where} stayed unavailable for {backoff.waited_s:.0f} s while {what} "
                    f"({backoff.waits + 1} tries; last error: {_brief(exc)}); nothing after the last "
                    "committed batch was written. Restart the job when the server is back: it resumes from "
                    "its checkpoint (raise reconnect_timeout to wait longer)"
                ) from None
            if on_retry is not None:
                on_retry()
            backoff.wait()
            continue
        if backoff is not None:
            log.warning("MySQL at %s is back after %.1f s (%d tries) while %s", where, backoff.waited_s,
                        backoff.waits + 1, what)
        return result


def _brief(exc: BaseException) -> str:
    if isinstance(exc, pymysql.err.MySQLError) and len(exc.args) > 1:
        return f"{exc.args[1]} (error {exc.args[0]})"
    return str(exc)
