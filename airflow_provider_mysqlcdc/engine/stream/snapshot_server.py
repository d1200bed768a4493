"""A stream's first batch starts on the server the snapshot read, or not at all.

Chunk HWs and plans are positions of the binlog of the server the snapshot phase read (recorded with them:
``hw_server``/``hw_gtid_position`` in the chunk store, ``planned_on`` in the plan). A stream started against
another server (a replica, a promoted primary, a restored backup behind the same host name) would start at a
position of the wrong binlog and filter this server's changes with HWs that mean nothing here: changes lost or
emitted twice, silently. So before a new checkpoint's stream begins, ``snapshot_start`` compares each table's
committed chunk HWs and its plan with the server behind the URL:

* another server id (or server_uuid, or flavor): that table's snapshot must be redone on this server;
* the same id, with a GTID position recorded at the table's latest HW: this server's binlog must be at that
  GTID position there (the check of ``failover.history_mismatch``), which tells apart two servers configured
  with one ``server_id`` and a binlog that was reset;
* nothing recorded (a chunk store or plan of an earlier release): taken to be this server, said once in the
  log.

It refuses (``SnapshotOnAnotherServer``) with the tables to re-snapshot and what to do. Otherwise the first
offset (min HW) is stamped with this server's identity and GTID position, so that a restart against another
server before the first batch is caught by ``failover.resolve_offset`` like any later offset.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, StreamChunk, TableView
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.identity import ServerIdentity, describe_token, server_identity
from airflow_provider_mysqlcdc.engine.stream.failover import ServerChanged, history_mismatch, stamp_offset
from airflow_provider_mysqlcdc.engine.stream.filter import stream_start

log = logging.getLogger(__name__)


class SnapshotOnAnotherServer(ServerChanged):
    """The snapshot of some tables was read on another server than the one the stream would start on."""


@dataclass(frozen=True)
class ForeignTable:
    """A table whose snapshot (or plan) names another server's binlog, and why that is known."""

    table: str
    reason: str


def snapshot_start(settings: MySQLSettings, chunk_store: str, tables: Iterable[str]) -> BinlogOffset:
    """The first offset of a new checkpoint's stream (min HW over the committed chunks of ``tables``), once
    the snapshot is known to have been read on the server behind ``settings``; stamped with that server."""
    names = list(tables)
    with ChunkStore(chunk_store) as store:
        views = store.stream_view(names)
        planned_on = {name: _planned_on(store, view) for name, view in views.items()}
    start = BinlogOffset.at(stream_start(v.min_hw for v in views.values()))
    conn = connect(settings.with_database(None))
    try:
        identity = server_identity(conn)
        check_snapshot_server(conn, identity, views, planned_on)
        return stamp_offset(conn, start, identity)
    finally:
        conn.close()


def _planned_on(store: ChunkStore, view: TableView) -> str | None:
    if view.latest_generation is None:
        return None
    return store.plan(view.table, view.latest_generation).plan.get("planned_on")


def check_snapshot_server(
    conn: pymysql.connections.Connection,
    identity: ServerIdentity,
    views: Mapping[str, TableView],
    planned_on: Mapping[str, str | None],
) -> None:
    """Raise ``SnapshotOnAnotherServer`` naming every table whose committed HWs or plan belong to another
    server than ``identity`` (see the module docstring); log once the tables that recorded no server."""
    foreign: list[ForeignTable] = []
    unrecorded: list[str] = []
    for name, view in sorted(views.items()):
        chunks = [c for g in view.generations for c in g.chunks if c.committed_hw is not None]
        reason = _foreign_reason(conn, identity, chunks, planned_on.get(name))
        if reason is not None:
            foreign.append(ForeignTable(name, reason))
        elif (any(c.hw_server is None for c in chunks)
              or (view.latest_generation and not planned_on.get(name))):
            unrecorded.append(name)
    if unrecorded:
        log.warning(
            "the chunk HWs or plans of %s record no server (written by an earlier release): they are taken "
            "to be positions of the server this stream starts on (%s at %s)",
            ", ".join(unrecorded), identity.describe(), identity.where,
        )
    if foreign:
        raise SnapshotOnAnotherServer(_message(identity, foreign))


def _foreign_reason(
    conn: pymysql.connections.Connection, identity: ServerIdentity, chunks: list[StreamChunk],
    planned_on: str | None,
) -> str | None:
    others = sorted({c.hw_server for c in chunks if c.hw_server and not identity.same_server(c.hw_server)})
    if others:
        return f"its chunk HWs are positions of {' and '.join(describe_token(t) for t in others)}"
    if planned_on and not identity.same_server(planned_on):
        return f"it was planned on {describe_token(planned_on)}"
    stamped = [c for c in chunks if c.hw_server and c.hw_gtid_position is not None]
    if not stamped:
        return None
    # The latest HW only: a binlog that holds it with the recorded history holds the earlier ones too.
    latest = max(stamped, key=lambda c: c.committed_hw.key)  # type: ignore[union-attr]
    hw = latest.committed_hw
    assert hw is not None
    mismatch = history_mismatch(conn, BinlogOffset(hw.file, hw.pos, gtid_position=latest.hw_gtid_position),
                                identity)
    if mismatch is None:
        return None
    return f"{identity.describe()} as its snapshot's, but {mismatch.replace('the stream', 'the snapshot')}"


def _message(identity: ServerIdentity, foreign: list[ForeignTable]) -> str:
    tables = ", ".join(f.table for f in foreign)
    by_reason: dict[str, list[str]] = {}
    for f in foreign:
        by_reason.setdefault(f.reason, []).append(f.table)
    reasons = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
    return (
        f"the stream would start on the server at {identity.where} ({identity.describe()}), but the snapshot "
        f"of {tables} was read on another server ({reasons}). Binlog positions are not comparable between "
        "servers: those chunk HWs cannot start or filter a stream of this server's binlog. Tables to "
        f"re-snapshot: {tables}. Re-plan and snapshot them on this server (mysqlcdc plan --tables "
        f"{','.join(f.table for f in foreign)}, then mysqlcdc snapshot; or rerun the DAG's plan and snapshot "
        "tasks), then start the stream again; or point the stream at the server the snapshot read"
    )
