"""Which stream holds which server_id range: the registry behind the claims of ``engine/stream/
server_id_claims.py``.

The claim itself is a set of ``GET_LOCK``s on the MySQL server, held by one session of the stream (it frees
itself when the stream dies). A lock does not say who holds it beyond a connection id, so each stream also
writes a row here: its checkpoint, the server, the connection id holding the locks, its range. A second
stream that finds an id taken looks up the holder's connection id to name its checkpoint. Rows of streams
that died stay behind harmlessly: only a row whose connection still holds a lock is ever named.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, write_stamp
from airflow_provider_mysqlcdc.engine.chunk_store.records import aware_utc
from airflow_provider_mysqlcdc.engine.chunk_store.schema import stream_claims_table


@dataclass(frozen=True)
class StreamClaim:
    checkpoint: str
    server: str  # the MySQL server's identity token
    connection_id: int  # the session that holds the claim's GET_LOCKs
    low_id: int
    high_id: int
    holder: str  # user@host pid
    claimed_at: datetime | None


def checkpoint_key(checkpoint: str) -> str:
    return hashlib.sha256(checkpoint.encode("utf-8")).hexdigest()


class StreamClaims(StoreDatabase):
    """Recording and finding the holders of server_id range claims."""

    def record_stream_claim(self, claim: StreamClaim) -> None:
        """This checkpoint's stream holds its range now (replaces an earlier row of the checkpoint)."""
        key = checkpoint_key(claim.checkpoint)
        c = stream_claims_table.c
        values = {"checkpoint": claim.checkpoint, "server": claim.server,
                  "connection_id": claim.connection_id, "low_id": claim.low_id, "high_id": claim.high_id,
                  "holder": claim.holder,
                  "claimed_at": write_stamp()}

        def work(conn: Connection, _retry: bool) -> None:  # idempotent: a retry writes the same row again
            conn.execute(sa.delete(stream_claims_table).where(c.checkpoint_key == key))
            conn.execute(sa.insert(stream_claims_table).values(checkpoint_key=key, **values))

        self._write(work)

    def stream_claim_holders(self, server: str, connection_id: int) -> list[StreamClaim]:
        """The claims recorded for a session of a server, newest first (connection ids are reused after a
        server restart: the newest row is the live holder's)."""
        c = stream_claims_table.c
        rows = self._read_tx(lambda conn: conn.execute(
            sa.select(stream_claims_table).where(c.server == server, c.connection_id == int(connection_id))
            .order_by(c.claimed_at.desc())).mappings().all())
        return [StreamClaim(r["checkpoint"], r["server"], int(r["connection_id"]), int(r["low_id"]),
                            int(r["high_id"]), r["holder"], aware_utc(r["claimed_at"])) for r in rows]

    def drop_stream_claim(self, checkpoint: str, connection_id: int) -> None:
        """Forget this checkpoint's claim, if it is still the one held by ``connection_id``."""
        c = stream_claims_table.c
        self._write(lambda conn, _retry: conn.execute(sa.delete(stream_claims_table).where(
            c.checkpoint_key == checkpoint_key(checkpoint), c.connection_id == int(connection_id))))
