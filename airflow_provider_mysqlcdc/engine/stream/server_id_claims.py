"""A stream's server_id range is its own while it runs:
a second stream on an overlapping range fails at start.

Every binlog reader of a stream (its own, the partitions of a parallel catch-up, the backfills of the chunks
it snapshots again) takes a replica ``server_id`` from the stream's configured range, and the server drops one
of two readers with one id. Readers of one stream never collide (``engine/binlog/server_ids.py`` claims ids
per reader); two streams whose ranges overlap would. So a stream claims its whole range when it starts:

* one MySQL session of the stream takes ``GET_LOCK('mysqlcdc.stream_ids.<id>', 0)`` for every id of the range
  (low .. high, the id ``mysqlcdc check`` uses included) and holds them until the stream stops. A lock held by
  a dead process frees itself: the server ends the session when the process dies, and an idle session after
  ``IDLE_TIMEOUT_S`` (a node lost without closing its connection); a heartbeat keeps the live one busy;
* the chunk store records which checkpoint holds the range through which session (``mysqlcdc_stream_claims``),
  so the second stream's error names both checkpoints.

A lost session (a server restart, a failover, a network cut) loses the locks: the heartbeat takes them again
on the next session, and if another stream took the range meanwhile, it reports the claim lost (``on_lost``:
the stream stops).
"""
from __future__ import annotations

import getpass
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, StreamClaim
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.identity import ServerIdentity, server_identity

log = logging.getLogger(__name__)

LOCK_PREFIX = "mysqlcdc.stream_ids."
HEARTBEAT_S = 30.0  # the claim's session runs a statement this often
IDLE_TIMEOUT_S = 300  # its wait_timeout: the server ends a silent claim (a lost node) after this
MAX_RANGE_IDS = 100_000  # ids one stream may claim (one lock each)
_LOCKS_PER_STATEMENT = 500
_ATTEMPTS = 3  # a holder on its way out (its session closing, or let go while we asked): try again
_RETRY_PAUSE_S = 0.5


class ServerIdRangeTaken(ConfigurationError):
    """Another stream holds a server_id of this stream's range on the same MySQL server."""


def lock_name(server_id: int) -> str:
    return f"{LOCK_PREFIX}{server_id}"


@dataclass
class ServerIdRangeClaim:
    """The locks of one stream's range, held by ``conn`` until ``release``."""

    settings: MySQLSettings
    checkpoint: str
    chunk_store: str
    on_lost: Callable[[str], None] | None = None
    conn: Any = field(default=None, repr=False)
    identity: ServerIdentity | None = None
    connection_id: int | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def range(self) -> tuple[int, int]:
        return self.settings.server_id_range

    def claim(self) -> ServerIdRangeClaim:
        """Take every id of the range, record the holder, start the heartbeat; ``ServerIdRangeTaken`` if
        another stream holds one of them."""
        low, high = self.range
        if high - low + 1 > MAX_RANGE_IDS:
            raise ConfigurationError(
                f"server_id range {low}-{high} has {high - low + 1} ids; a stream claims each id of its "
                f"range (at most {MAX_RANGE_IDS}): configure a smaller range (e.g. server_id=5400-5499)"
            )
        self._take()
        log.info("the stream on %s holds server_id range %d-%d on %s (MySQL connection %s)", self.checkpoint,
                 low, high, self.identity.where if self.identity else "?", self.connection_id)
        self._thread = threading.Thread(target=self._heartbeat, name="mysqlcdc-server-id-claim", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Give the range back (idempotent): forget the record, end the session that holds the locks."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None
        with self._guard:
            conn, connection_id, self.conn = self.conn, self.connection_id, None
        if connection_id is not None:
            try:
                with ChunkStore(self.chunk_store) as store:
                    store.drop_stream_claim(self.checkpoint, connection_id)
            except Exception as exc:  # noqa: BLE001 - a stale row names nobody once the locks are gone
                log.warning("could not remove the server_id claim of %s from the chunk store: %s",
                            self.checkpoint, exc)
        if conn is not None:
            try:
                conn.close()  # ends the session: the server frees its locks
            except Exception:  # noqa: BLE001, S110 - a dead session holds nothing
                pass

    # -- internals --

    def _take(self) -> None:
        for attempt in range(_ATTEMPTS):
            conn = connect(self.settings.with_database(None))
            try:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION wait_timeout = %s", (IDLE_TIMEOUT_S,))
                    cur.execute("SELECT CONNECTION_ID()")
                    (connection_id,) = cur.fetchone()
                identity = server_identity(conn)
                taken = _lock_all(conn, *self.range)
            except BaseException:
                conn.close()
                raise
            if taken is None:
                with ChunkStore(self.chunk_store) as store:
                    store.record_stream_claim(StreamClaim(
                        self.checkpoint, identity.token, int(connection_id), *self.range, _holder(), None))
                with self._guard:
                    self.conn, self.identity, self.connection_id = conn, identity, int(connection_id)
                return
            server_id, holder = taken
            conn.close()  # frees the ids this attempt took
            if attempt == _ATTEMPTS - 1:
                raise ServerIdRangeTaken(self._taken_message(identity, server_id, holder))
            time.sleep(_RETRY_PAUSE_S)  # a holder that is just going away (a killed stream's session closing)

    def _taken_message(self, identity: ServerIdentity, server_id: int, holder: int | None) -> str:
        low, high = self.range
        found: StreamClaim | None = None
        if holder is not None:
            with ChunkStore(self.chunk_store) as store:
                found = next(iter(store.stream_claim_holders(identity.token, holder)), None)
                display = store.display_url
        else:
            display = self.chunk_store
        if found is None:
            who = (
                f"another stream (MySQL connection {holder}; its checkpoint is not recorded in this chunk "
                f"store {display}: a stream with a chunk store of its own)"
                if holder is not None else "another stream (which let go of it while this one started)"
            )
        elif found.checkpoint == self.checkpoint:
            who = (f"another stream on this same checkpoint {found.checkpoint} ({found.holder}, MySQL "
                   f"connection {holder}): stop that stream first")
        else:
            since = f", since {found.claimed_at:%Y-%m-%d %H:%M:%S} UTC" if found.claimed_at else ""
            who = (f"the stream on checkpoint {found.checkpoint} (server_id range {found.low_id}-"
                   f"{found.high_id}, {found.holder}, MySQL connection {holder}{since})")
        return (
            f"the stream on checkpoint {self.checkpoint} cannot claim its server_id range {low}-{high} on "
            f"the server at {identity.where}: server_id {server_id} is held by {who}. Two streams whose "
            "ranges overlap would give their binlog readers (the stream's own, parallel catch-up partitions, "
            "backfills) the same replica server_id, and the server drops one of two readers with one id. "
            "Give each stream on this server a server_id range of its own, disjoint from the others: the "
            "MySQL URL option ?server_id=<low>-<high> (mysqlcdc --mysql-url), or the Airflow connection's "
            'extra {"server_id": "<low>-<high>"}'
        )

    def _heartbeat(self) -> None:
        lost_session = False
        while not self._stop.wait(HEARTBEAT_S):
            with self._guard:
                conn = self.conn
                if conn is None:
                    return
                try:
                    conn.ping(reconnect=False)
                    continue
                except Exception:  # noqa: BLE001 - the session is gone, and its locks with it
                    self.conn = None
            if not lost_session:
                log.warning("the session holding the server_id range %d-%d of the stream on %s was lost; "
                            "claiming the range again", *self.range, self.checkpoint)
            lost_session = True
            try:
                self._take()
                lost_session = False
                log.info("the stream on %s holds its server_id range again", self.checkpoint)
            except ServerIdRangeTaken as exc:
                message = f"the stream lost its server_id range while its MySQL session was gone: {exc}"
                log.error(message)
                if self.on_lost is not None:
                    self.on_lost(message)
                return
            except (pymysql.err.MySQLError, CdcError, OSError) as exc:  # the server is still away: next beat
                log.info("claiming the server_id range again failed (%s); retrying", exc)


def claim_server_id_range(
    settings: MySQLSettings, checkpoint: str, chunk_store: str, *,
    on_lost: Callable[[str], None] | None = None,
) -> ServerIdRangeClaim:
    """Claim the stream's whole server_id range on its server for as long as it runs (``release()`` gives it
    back); fails with ``ServerIdRangeTaken``, naming both checkpoints, when another stream holds part of
    it."""
    return ServerIdRangeClaim(settings, checkpoint, chunk_store, on_lost).claim()


def _lock_all(conn: Any, low: int, high: int) -> tuple[int, int | None] | None:
    """Take ``GET_LOCK(<id>, 0)`` for every id; None when all are ours, else (a taken id, the connection id
    holding it, None if it was let go meanwhile)."""
    with conn.cursor() as cur:
        for first in range(low, high + 1, _LOCKS_PER_STATEMENT):
            ids = list(range(first, min(high, first + _LOCKS_PER_STATEMENT - 1) + 1))
            cur.execute("SELECT " + ", ".join(["GET_LOCK(%s, 0)"] * len(ids)), [lock_name(i) for i in ids])
            got = cur.fetchone()
            for server_id, ok in zip(ids, got):
                if ok != 1:
                    cur.execute("SELECT IS_USED_LOCK(%s)", (lock_name(server_id),))
                    (holder,) = cur.fetchone()
                    return server_id, None if holder is None else int(holder)
    return None


def _holder() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"
