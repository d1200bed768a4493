"""Failover: which server an offset belongs to, and how a stream's offset moves to another server.

Binlog positions are comparable within one server's binlog only. So every offset of the stream says whose
binlog it names (``BinlogOffset.server``, a ``ServerIdentity.token``) and the GTID state at that point
(``BinlogOffset.gtid_position``: MariaDB's GTID position, Oracle MySQL's executed GTID set; one code path,
the type per flavor in ``engine/binlog/gtid.py``). Before an offset is used, ``resolve_offset`` compares it
with the server the stream talks to now:

* the same server (same ``server_id``, and on MySQL the same ``server_uuid``), whose binlog also holds the
  recorded GTID state at that file and position: the offset is used as it is;
* another server with a GTID state recorded (a promoted replica, or capture moved to a replica of the same
  topology), or the same one whose binlog no longer matches (a restore with the same ``server_uuid``, a
  binlog reset, another MariaDB with the same ``server_id``): the offset moves to the first transaction that
  state does not contain on the server at hand (``gtid.position_after_gtid_set``), or stops with an error
  naming what to do when that server has not applied it (behind, lost transactions) or its history differs.
  Chunk HWs are positions of the server the snapshot read, so this is safe only once the stream is past
  every chunk's HW (then the stream filter emits every change, whatever the positions); before that, or while
  a chunk's snapshot is not committed, it stops with an error that names the tables whose snapshot must be
  redone on the new server. The moved offset gets a larger ``file_number_base``, so every position the
  stream reports from the new server orders after every position of the old one (changelog ``_position``,
  mirror and filter comparisons against chunk HWs);
* another server without a GTID state (Oracle MySQL with ``gtid_mode`` OFF; an offset of an earlier release
  that recorded none): it stops with an error, instead of reading the wrong positions.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs
from airflow_provider_mysqlcdc.engine.binlog.gtid import (
    GtidError,
    gtid_position_at,
    parse_gtid_state,
    position_after_gtid_set,
)
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import file_number
from airflow_provider_mysqlcdc.engine.source.identity import (  # noqa: F401 - server_identity: re-exported
    ServerIdentity,
    describe_token,
    server_identity,
)

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.chunk_store import TableView

log = logging.getLogger(__name__)


class ServerChanged(CdcError):
    """The stream's offset names another server's binlog, and it cannot move to this one."""


def resolve_offset(
    conn: pymysql.connections.Connection,
    offset: BinlogOffset,
    identity: ServerIdentity,
    table_views: Callable[[], Mapping[str, TableView]],
) -> BinlogOffset:
    """``offset`` as an offset of the server behind ``conn`` (see the module docstring).

    ``table_views`` loads the chunk store's view of the captured tables; it is called only when the offset
    must move to another server."""
    if offset.server is None:  # the first offset (chunk HWs, a startup offset) or one from an older release
        return stamp_offset(conn, offset, identity)
    if identity.same_server(offset.server):
        mismatch = history_mismatch(conn, offset, identity)
        if mismatch is None:
            return offset
        reason = f"{identity.describe()} as before, but {mismatch}"
    else:
        reason = f"{describe_token(offset.server)} -> {identity.describe()}"
    return move_offset(conn, offset, identity, table_views, reason)


def stamp_offset(
    conn: pymysql.connections.Connection, offset: BinlogOffset, identity: ServerIdentity
) -> BinlogOffset:
    """Record whose binlog ``offset`` names (this server's), and its GTID position where it has one."""
    gtid = offset.gtid_position
    if gtid is None and offset.at_boundary:
        known = gtid_position_at(conn, offset.position, identity.flavor)
        gtid = str(known) if known is not None else None
    return dataclasses.replace(offset, server=identity.token, gtid_position=gtid)


def end_offset(
    conn: pymysql.connections.Connection, end: BinlogOffset, start: BinlogOffset, identity: ServerIdentity
) -> BinlogOffset:
    """A batch end planned on this server after ``start`` (already resolved): stamped, with its GTID
    position, and the stream's file number base."""
    stamped = stamp_offset(conn, dataclasses.replace(end, server=None, gtid_position=None), identity)
    return dataclasses.replace(stamped, file_number_base=start.file_number_base)


def move_offset(
    conn: pymysql.connections.Connection,
    offset: BinlogOffset,
    identity: ServerIdentity,
    table_views: Callable[[], Mapping[str, TableView]],
    reason: str,
) -> BinlogOffset:
    """The same point of the stream on another server of the topology, found by its GTID position."""
    where = identity.where
    not_ours = f"the server at {where} is not the one this checkpoint streamed from ({reason})"
    way_out = (
        "point the stream back at that server, or re-snapshot the tables on this one and start a new stream "
        "(new checkpoint and output)"
    )
    if offset.gtid_position is None:
        why = "the checkpoint recorded no GTID position at its offset"
        if identity.flavor == "mysql":
            why += (" (Oracle MySQL records its GTID set only with gtid_mode=ON and "
                    "enforce_gtid_consistency=ON: turn them on for the next checkpoint, see mysqlcdc check)")
        raise ServerChanged(
            f"{not_ours}: positions are not comparable between servers, and the stream cannot move by GTID "
            f"({why}); {way_out}"
        )
    blocked = tables_before_failover_point(offset, table_views())
    if blocked:
        raise ServerChanged(
            f"{not_ours}: positions are not comparable between servers. The stream ({offset}) is not past "
            f"the snapshot of {', '.join(blocked)} (a chunk HW after it, or a chunk not committed): those "
            "chunk HWs are positions of the old server, so the snapshot must be redone on the new server. "
            f"Re-plan and snapshot these tables on {where} and start a new stream (new checkpoint and "
            "output), or point the stream back at the old server until it is past every HW"
        )
    try:
        found = position_after_gtid_set(conn, parse_gtid_state(offset.gtid_position, identity.flavor))
    except GtidError as exc:
        raise ServerChanged(
            f"{not_ours}, and it cannot continue from the stream's GTID position {offset.gtid_position}: "
            f"{exc}. Positions are not comparable between servers; {way_out}"
        ) from None
    moved = dataclasses.replace(
        found,
        gtid=offset.gtid,
        server=identity.token,
        gtid_position=offset.gtid_position,
        file_number_base=offset.file_number_base + file_number(offset.file) + 1,
    )
    log.warning(
        "failover: %s; the stream continues at %s on %s from GTID position %s (offset %s there); positions "
        "from now on are reported with binlog file numbers raised by %d, so they order after the old "
        "server's",
        not_ours, offset, where, offset.gtid_position, moved, moved.file_number_base,
    )
    return moved


def tables_before_failover_point(offset: BinlogOffset, views: Mapping[str, TableView]) -> list[str]:
    """Tables whose snapshot the stream is not past at ``offset``: a chunk HW after it, or a chunk without a
    committed snapshot (its HW will be a position of whichever server it is read from)."""
    here = offset.key[:2]
    blocked = []
    for name, view in sorted(views.items()):
        chunks = [c for g in view.generations for c in g.chunks]
        if any(c.hw is None for c in chunks) or (view.max_hw is not None and view.max_hw.key > here):
            blocked.append(name)
    return blocked


def history_mismatch(
    conn: pymysql.connections.Connection, offset: BinlogOffset, identity: ServerIdentity
) -> str | None:
    """Why this server's binlog at the offset is not the one the stream read (None: it is, or cannot tell).

    Catches what a server id cannot: another server configured with the same ``server_id`` (every MariaDB
    starts with 1), or a binlog reset (``RESET MASTER``)."""
    if offset.gtid_position is None or not offset.at_boundary:
        return None
    here = gtid_position_at(conn, offset.position, identity.flavor)
    if here is None:
        sizes = dict(binary_logs(conn))
        newest = max(sizes, key=file_number, default=None)
        if offset.file in sizes:
            return f"its binlog has no event boundary at {offset.position}"
        if newest is not None and file_number(offset.file) > file_number(newest):
            return f"its binlog ends in {newest}, before {offset.file}"
        return None  # purged: reported as such where the binlog is read
    try:
        recorded = parse_gtid_state(offset.gtid_position, identity.flavor)
    except GtidError:
        return f"the stream recorded GTID position {offset.gtid_position}, not one of {identity.flavor}"
    if here == recorded:
        return None
    return (
        f"its binlog at {offset.position} is at GTID position {str(here) or '(empty)'}, where the stream "
        f"recorded {recorded}"
    )
