"""Oracle MySQL's read-only exact read view (``read_view_mode=gtid_executed``): which transactions a fresh
read view holds, told by the binlog position and the executed GTID set around it, with no write to the source.

Three facts of MySQL's commit (``MYSQL_BIN_LOG::ordered_commit``, with or without ``binlog_order_commits``):

1. a transaction owns its GTID (``@@global.gtid_owned``) before its events are written to the binlog;
2. it commits in the storage engine after they are written (flush stage, then commit stage);
3. only after the engine commit does its GTID leave ``gtid_owned`` and enter ``gtid_executed``, both in one
   step under the GTID lock.

The window, in this order on one session:

- ``scan_from``: the binlog end (``SHOW BINARY LOG STATUS``). Every transaction before it was written, so
  by (1) its GTID is owned or executed;
- ``gtid_owned``, then ``WAIT_FOR_EXECUTED_GTID_SET`` on what it lists: now every transaction before
  ``scan_from`` is executed, so by (3) committed in the engine;
- ``executed_before``: ``@@global.gtid_executed``. By (3) each of these transactions is committed in the
  engine;
- the read view opens (``START TRANSACTION WITH CONSISTENT SNAPSHOT``, or connectorx's SELECT): it holds every
  transaction before ``scan_from`` and every one in ``executed_before``;
- ``view_at``: the binlog end again. By (2) a transaction the view holds was written before it.

So the view holds everything before ``scan_from``, nothing after ``view_at``, and of the transactions between
them, every one in ``executed_before``: only the others are uncertain, and they committed in the engine within
the few milliseconds between reading ``executed_before`` and opening the view. A chunk with a primary key is
exact at ``view_at`` once the events of ``(scan_from, view_at]`` are applied in order (an image replaces its
key's row, whether the view held that transaction or not). A chunk without one is a multiset, where applying a
transaction twice counts its rows twice: it is exact at ``view_at`` as read when no uncertain transaction
touched it, and read again in a fresh view when one did. This needs ``gtid_mode=ON`` (anonymous transactions
own no GTID) and grants no more than the binlog reader's (REPLICATION CLIENT for the binlog status).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.changes import RowChange
from airflow_provider_mysqlcdc.engine.binlog.gtid_errors import GtidsNotCommitted
from airflow_provider_mysqlcdc.engine.binlog.mysql_gtid import MysqlGtid, MysqlGtidSet, executed_after_commits
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, current_binlog_status

log = logging.getLogger(__name__)


class UncommittedTransactions(CdcError):
    """Transactions written to the binlog before the window did not commit within the wait."""


@dataclass(frozen=True)
class WindowStart:
    """What is known before the read view opens: every transaction before ``scan_from`` is committed, and so
    is every transaction of ``executed_before``."""

    scan_from: BinlogPosition
    executed_before: str


@dataclass
class WindowTransaction:
    """One transaction of the window with its row changes of the chunk's table, in binlog order."""

    gtid: str | None
    changes: list[RowChange] = field(default_factory=list)


def check_gtid_mode(info: ServerInfo) -> None:
    """``gtid_executed`` needs Oracle MySQL with ``gtid_mode=ON``."""
    if info.flavor != "mysql":
        raise ConfigurationError(
            f"read view mode gtid_executed is Oracle MySQL's ({info.label} has no gtid_owned): use auto, "
            "which picks consistent_snapshot on MariaDB")
    if info.gtid_mode.upper() != "ON":
        raise ConfigurationError(
            f"read view mode gtid_executed needs gtid_mode=ON on the source ({info.label} has gtid_mode="
            f"{info.gtid_mode}): turn GTIDs on (gtid_mode=ON, enforce_gtid_consistency=ON), or use "
            "read_view_mode=watermark_table with a watermark table")


def start_window(conn: pymysql.connections.Connection, info: ServerInfo, wait_s: float) -> WindowStart:
    """``scan_from`` and ``executed_before``; every transaction before ``scan_from`` committed."""
    status = current_binlog_status(conn, info)
    try:
        executed = executed_after_commits(conn, wait_s)
    except GtidsNotCommitted as exc:
        raise UncommittedTransactions(
            f"on {info.label}, {exc}; a read view opened now could not be proven to hold them, so none was "
            "opened and nothing was read or committed") from None
    return WindowStart(BinlogPosition(status.file, status.position), executed)


def view_end(conn: pymysql.connections.Connection, info: ServerInfo) -> BinlogPosition:
    """The binlog end after the read view opened: nothing after it is in the view."""
    status = current_binlog_status(conn, info)
    return BinlogPosition(status.file, status.position)


def set_at_view(start: WindowStart, window_gtids: list[str]) -> str:
    """The executed GTID set at ``view_at`` (the chunk's HW), from what the window already read: every
    transaction before ``scan_from`` is in ``executed_before``, each of those was written before ``view_at``,
    and the window's transactions are the rest. No binlog scan of its own (``mysql_gtid.set_at``)."""
    found = MysqlGtidSet.parse(start.executed_before)
    if window_gtids:
        found = found.union(MysqlGtidSet.parse(",".join(window_gtids)))
    return str(found)


def window_transactions(changes: Iterable[RowChange]) -> list[WindowTransaction]:
    """The row changes of a window scan grouped by transaction: a transaction's last change resumes at its
    end, which carries its GTID."""
    done: list[WindowTransaction] = []
    current = WindowTransaction(None)
    for change in changes:
        current.changes.append(change)
        if change.offset_after.at_boundary:
            current.gtid = change.offset_after.gtid
            done.append(current)
            current = WindowTransaction(None)
    if current.changes:  # a scan stops at transaction ends: this cannot happen, and is never taken as seen
        done.append(current)
    return done


def held_by_view(start: WindowStart, transactions: list[WindowTransaction]) -> list[bool]:
    """Whether each transaction is certainly in the view: its GTID is in ``executed_before``."""
    executed = MysqlGtidSet.parse(start.executed_before)
    return [t.gtid is not None and executed.contains(MysqlGtid.parse(t.gtid)) for t in transactions]
