"""A failover while a batch is being read: the server behind the URL changes after the driver planned it.

The driver plans a batch (its end, and the cuts of a parallel catch-up) on one server; its read tasks each
connect on their own, later. When the URL reaches another server by then (a virtual IP or proxy moved), the
planned positions name the old server's binlog. A read may still move to the new server by GTID position
(``engine/stream/failover.py``) where that keeps the batch one reader's range: a batch read by a single task
that has handed on nothing yet. Elsewhere it must not: a part resumed inside the range has no GTID position,
and partitions moved one by one would give changes of one batch positions from two servers, out of binlog
order. So the read stops with ``FailoverDuringBatch``, whose message says what happened and what the restart
does (the driver then moves the whole batch at once: ``BinlogMicroBatchStream.partitions``).

A read also checks the server again once a part is read (``server_changed``): the binlog dump runs on a
connection of its own, which may reach the new server although the check before the part reached the old one.
"""
from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.stream.failover import ServerIdentity, describe_token, server_identity


class FailoverDuringBatch(CdcError):
    """The server behind the URL changed while a batch was read; the restart replays the batch on the new
    server (the message says so)."""


def server_changed(settings: MySQLSettings, token: str | None) -> ServerIdentity | None:
    """The server the URL reaches now, if it is not the one ``token`` names (None: the same one, or no token).
    Raises ``ServerUnavailable`` when it cannot tell (an outage: the part is read, and checked, again)."""
    if token is None:
        return None
    with connect(settings.with_database(None)) as conn:
        identity = server_identity(conn)
    return None if identity.same_server(token) else identity


def server_changed_after_error(settings: MySQLSettings, token: str | None) -> ServerIdentity | None:
    """``server_changed`` after a read failed: None also when it cannot tell (the read's own error stands)."""
    try:
        return server_changed(settings, token)
    except Exception:  # noqa: BLE001 - the read's error is the one to report or retry
        return None


def failover_during_batch(
    *,
    where: str,
    planned_on: str,
    now: ServerIdentity,
    batch_id: Any,
    batch_start: BinlogOffset | None,
    part: tuple[BinlogOffset, BinlogOffset],
    partition: tuple[int, int],
) -> FailoverDuringBatch:
    """The error of a read whose batch was planned on ``planned_on`` (a server token) while ``where`` (the
    URL's host:port) reaches ``now``. One line: its first line is all that reaches the stream's error."""
    batch = f"batch {batch_id}" if batch_id is not None else "this batch"
    index, count = partition
    reading = f"partition {index + 1} of {count} of the batch" if count > 1 else "the batch"
    gtid = batch_start.gtid_position if batch_start is not None else None
    if gtid:
        restart = (
            f"Restart the stream (it does not retry by itself): it replays {batch} from its start on the new "
            f"server, at the first transaction there after GTID position {gtid} (logged as \"failover\"); "
            "if the new server does not hold that position, the restart stops and says so"
        )
    else:
        restart = (
            f"The start of {batch} has no GTID position recorded, so the stream cannot move to the new "
            "server: point the URL back at the old server and restart the stream, or re-snapshot the tables "
            "on the new one and start a new stream (new checkpoint and output)"
        )
    return FailoverDuringBatch(
        f"failover during {batch}: the server at {where} changed from {describe_token(planned_on)} to "
        f"{now.describe()} while {reading} was being read (its range {part[0]} -> {part[1]} was planned on "
        f"the old server, whose positions mean nothing on the new one). Nothing of {batch} was committed: "
        f"readers see none of it. {restart}"
    )
