"""Which server answers on a connection: what makes its binlog positions its own.

Binlog positions are comparable within one server's binlog only. Everything that stores a position says whose
binlog it names by this identity's ``token``: the stream's offsets (``BinlogOffset.server``), chunk HWs
(``hw_server`` in the chunk store) and plans (``ChunkPlan.planned_on``). ``engine/stream/failover.py`` and
``engine/stream/snapshot_server.py`` compare them with the server a stream talks to.

A token alone does not tell apart two servers configured with the same ``server_id`` (every MariaDB starts
with 1; a restored backup keeps its id): where the server has one, the GTID position at the stored position
is recorded with it, and compared with the binlog of the server at hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, detect_flavor


@dataclass(frozen=True)
class ServerIdentity:
    """Who answers on a connection: what makes its binlog positions its own."""

    flavor: str
    server_id: int
    server_uuid: str | None  # Oracle MySQL (auto.cnf); MariaDB has none
    gtid_domain_id: int | None  # MariaDB (informational: the domain its own transactions get)
    where: str  # host:port as the stream reaches it (for messages)

    @property
    def token(self) -> str:
        """What an offset records: ``mariadb:11`` or ``mysql:11:<server_uuid>``."""
        text = f"{self.flavor}:{self.server_id}"
        return f"{text}:{self.server_uuid}" if self.server_uuid else text

    def same_server(self, token: str) -> bool:
        flavor, server_id, uuid = parse_token(token)
        if flavor != self.flavor:
            return False
        if uuid and self.server_uuid:
            return uuid == self.server_uuid
        return server_id == self.server_id

    def describe(self) -> str:
        return describe_token(self.token)

    @classmethod
    def of(cls, info: ServerInfo, where: str = "?") -> ServerIdentity:
        """The identity in a ``ServerInfo`` already read (no query; without the informational GTID domain)."""
        return cls(info.flavor, info.server_id, info.server_uuid, None, where)


def describe_token(token: str) -> str:
    _flavor, server_id, uuid = parse_token(token)
    text = f"server_id {server_id}"
    return f"{text}, server_uuid {uuid}" if uuid else text


def parse_token(token: str) -> tuple[str, int | None, str | None]:
    """``(flavor, server_id, server_uuid)`` of a token (None where it has none)."""
    flavor, _, rest = token.partition(":")
    server_id, _, uuid = rest.partition(":")
    return flavor, int(server_id) if server_id.isdigit() else None, uuid or None


def server_identity(conn: pymysql.connections.Connection) -> ServerIdentity:
    """Two short queries: cheap enough for every batch (the server behind a URL can change at any time)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@version, @@version_comment, @@server_id")
        version, comment, server_id = cur.fetchone()
        flavor = detect_flavor(str(version), str(comment or ""))
        cur.execute("SELECT @@gtid_domain_id" if flavor == "mariadb" else "SELECT @@server_uuid")
        (extra,) = cur.fetchone()
    where = f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"
    if flavor == "mariadb":
        return ServerIdentity(flavor, int(server_id), None, int(extra), where)
    return ServerIdentity(flavor, int(server_id), str(extra) if extra else None, None, where)
