"""Whose binlog a chunk's watermarks name: recorded with the HW, so that a stream started on another server
(a replica, a promoted primary, a restored backup behind the same host name) is refused instead of filtering
with positions that are not comparable (``engine/stream/snapshot_server.py``)."""
from __future__ import annotations

from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.gtid import gtid_position_at
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.identity import ServerIdentity
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo


@dataclass(frozen=True)
class HwServer:
    """The identity token of the server whose binlog the HW names, and the GTID state at the HW there
    (MariaDB's GTID position, Oracle MySQL's executed GTID set with gtid_mode=ON; else None): the token tells
    servers apart by id, the GTID state tells apart two servers with one id (every MariaDB starts with
    server_id 1) and a restored server with the same server_uuid."""

    server: str
    gtid_position: str | None


def hw_server(conn: pymysql.connections.Connection, info: ServerInfo, hw: BinlogPosition) -> HwServer:
    """``info``: what the session that fixed the HW read of its server; the GTID position is asked on that
    session too (``BINLOG_GTID_POS``, ~ms)."""
    identity = ServerIdentity.of(info)
    gtid = gtid_position_at(conn, hw, identity.flavor)
    return HwServer(identity.token, None if gtid is None else str(gtid))
