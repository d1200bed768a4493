"""Read row changes from the binlog between two offsets, decoded exactly like the snapshot reads them.

Every reader connects as a replica with its own ``server_id`` (two readers with one id kill each other), taken
from the configured range by ``allocate_server_id``. We drive mysql-replication 1.0.17 with the settings the
pitfalls call for: ``is_mariadb=False`` with ``log_file``/``log_pos`` (its MariaDB mode ignores the position),
``filter_non_implemented_events=False`` (so no event type is skipped unseen), no table filters (every
TABLE_MAP is needed; we filter rows ourselves), and every read bounded by an end position and/or a timeout.

A transaction's rows are buffered until its commit event (XID, or a COMMIT query), so every row carries the
commit timestamp, and only committed rows are ever emitted. Each ``RowChange`` carries ``offset_after``, the
offset from which a new read continues right after it (see ``offsets``).

Inside: ``event_framer`` (the events cut and parsed in compiled code off mysql-replication's connection;
every type it does not parse is mysql-replication's), ``event_loop`` (one read, a handler per event type),
``framed_rows`` (rows events decoded from the received bytes), ``transaction`` (a group's rows and resume
offsets), ``captured`` (schemas per TABLE_MAP, DDL), ``changes`` (what a read yields), ``errors``,
``server_ids``.

Progress while the captured tables are idle: ``read`` yields only RowChange; ``read_with_heartbeats`` also
yields a ``Heartbeat(offset)`` after every transaction (and file rotation) that emitted nothing, so a caller
can commit its offset while the binlog moves on. ``reader.last_offset`` is always the offset right after
everything yielded so far.

What we do not understand, we refuse (``No silent skips`` in docs/design.md):

* event types we do not know, compressed events (MariaDB ``log_bin_compress``, MySQL
  ``binlog_transaction_compression``), statement-based changes and incidents: ``UnsupportedEvent``;
* DDL on a captured table that changes rows without row events (TRUNCATE, RENAME, partition DROP/EXCHANGE,
  ...; ``engine.binlog.ddl``) and that no plan of the table made after it covers: ``ResnapshotRequired``.
  Column DDL is followed: a ``SchemaChange`` item, and every rows event is decoded with the columns its
  TABLE_MAP names (``binlog/table_map.py``); a TABLE_MAP without column names (no
  ``binlog_row_metadata=FULL``): ``SchemaChangeError``;
* a start file the server purged: ``BinlogPurged``;
* XA transactions with rows of captured tables. Their rows sit in the XA PREPARE group but take effect at the
  XA COMMIT, which may come many transactions later; a resume offset (one transaction start plus skip counts)
  cannot express "these prepared rows are still pending", so we raise ``UnsupportedEvent`` rather than guess.
  ``XA COMMIT ... ONE PHASE`` is an ordinary transaction and is supported. So are XA transactions that touch
  only tables we do not capture.
* a transaction that ends with ROLLBACK (or contains ROLLBACK TO SAVEPOINT) and holds rows of a captured
  table. The server writes such groups only when non-transactional tables were changed; which of the rows
  took effect depends on each table's engine, so we raise rather than guess.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from typing import Any, Literal, Self, overload

import pymysql
from pymysqlreplication import BinLogStreamReader

from airflow_provider_mysqlcdc.engine.binlog import row_decoding
from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedTables
from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowBlock, RowChange, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import COMPARE, PYTHON, decoder_mode
from airflow_provider_mysqlcdc.engine.binlog.errors import (
    BinlogPurged,
    BinlogReadError,
    DeadlineReached,
    OffsetMismatch,
    ReadTimeout,
)
from airflow_provider_mysqlcdc.engine.binlog.event_framer import FramedStream, framer_available
from airflow_provider_mysqlcdc.engine.binlog.event_loop import EventLoop
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ServerNotReady, ServerUnavailable
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.charset_tables import charset_decoder
from airflow_provider_mysqlcdc.engine.source.connection import (
    LOST_CONNECTION_ERRORS,
    UNREACHABLE_ERRORS,
    MySQLSettings,
    connect,
)
from airflow_provider_mysqlcdc.engine.source.connection import (
    Connection as _Connection,
)

log = logging.getLogger(__name__)

DEFAULT_NONBLOCKING_TIMEOUT = 300.0  # seconds; every non-blocking read is bounded (see Known pitfalls)
HEARTBEAT_PERIOD = 1.0  # seconds; the server's heartbeat lets a blocking read notice its deadline
MAX_RECONNECTS = 5  # mysql-replication reconnects on lost connections by itself, without pause or limit
# gone away, lost, out of sync, lost (TLS), can't connect, killed, shutting down
_LOST_CONNECTION = frozenset({2014, 2055}) | LOST_CONNECTION_ERRORS | UNREACHABLE_ERRORS


class BinlogReader:
    """Reads committed row changes of the captured tables; ``last_offset`` is where the next read resumes."""

    def __init__(
        self,
        settings: MySQLSettings,
        server_id: int,
        tables: set[TableId] | None,
        schemas: dict[TableId, TableSchema],
        replanned: dict[TableId, BinlogPosition] | None = None,
    ) -> None:
        """``schemas``: each captured table's schema as known (the TABLE_MAPs say what it was at each event).
        ``replanned``: where a table's current plan was made; DDL before that position is covered by it."""
        self.settings = settings
        self.server_id = server_id
        row_decoding.install()
        decoders = functools.partial(charset_decoder, lambda: connect(settings.with_database(None)),
                                     f"{settings.host}:{settings.port}")
        self.captured = CapturedTables(tables, schemas, replanned, decoders)
        self._last_offset: BinlogOffset | None = None
        self._after: RowBlock | None = None  # last_offset is right after this block (computed when asked)
        self._control: pymysql.connections.Connection | None = None

    @property
    def last_offset(self) -> BinlogOffset | None:
        """The offset right after everything yielded so far (where the next read resumes)."""
        if self._after is not None:
            block, self._after = self._after, None
            self._last_offset = block.offset_after(len(block) - 1)
        return self._last_offset

    @last_offset.setter
    def last_offset(self, value: BinlogOffset | None) -> None:
        self._last_offset, self._after = value, None

    def passed(self, block: RowBlock) -> None:
        """``block`` was yielded: the offset after it is the last offset (an object only when asked for)."""
        self._after = block

    @property
    def replanned(self) -> dict[TableId, BinlogPosition]:
        """Where each table's current plan was made: its DDL before that position is covered by the plan."""
        return self.captured.replanned

    @replanned.setter
    def replanned(self, value: dict[TableId, BinlogPosition]) -> None:
        self.captured.replanned = dict(value)

    # -- public API --

    def read(
        self,
        start: BinlogOffset,
        end: BinlogPosition | None = None,
        *,
        blocking: bool = False,
        timeout: float | None = None,
        sync_to_transaction: bool = False,
    ) -> Iterator[RowChange]:
        """Row changes after ``start`` of transactions that commit at or before ``end``.

        ``end=None`` with ``blocking=False`` stops at the current end of the binlog. A non-blocking read is
        always bounded by ``timeout`` (default DEFAULT_NONBLOCKING_TIMEOUT s). When the time is up, a read
        without ``end`` stops at the last transaction boundary it reached (``last_offset``); a read with
        ``end`` raises ReadTimeout. ``end`` must be a transaction boundary (a watermark).
        """
        for item in self.read_with_heartbeats(
            start, end, blocking=blocking, timeout=timeout, sync_to_transaction=sync_to_transaction
        ):
            if type(item) is RowChange:
                yield item

    @overload
    def read_with_heartbeats(
        self, start: BinlogOffset, end: BinlogPosition | None = None, *, blocking: bool = False,
        timeout: float | None = None, sync_to_transaction: bool = False, blocks: Literal[False] = False,
    ) -> Iterator[RowChange | Heartbeat | SchemaChange]: ...

    @overload
    def read_with_heartbeats(
        self, start: BinlogOffset, end: BinlogPosition | None = None, *, blocking: bool = False,
        timeout: float | None = None, sync_to_transaction: bool = False, blocks: Literal[True],
    ) -> Iterator[RowBlock | Heartbeat | SchemaChange]: ...

    def read_with_heartbeats(
        self,
        start: BinlogOffset,
        end: BinlogPosition | None = None,
        *,
        blocking: bool = False,
        timeout: float | None = None,
        sync_to_transaction: bool = False,
        blocks: bool = False,
    ) -> Iterator[RowChange | RowBlock | Heartbeat | SchemaChange]:
        """Like ``read``, plus a Heartbeat after each transaction (or file rotation) that emitted nothing.

        ``sync_to_transaction``: ``start`` is a position read from ``SHOW MASTER STATUS``, which on MariaDB
        can lie between a transaction's rows and its commit event; skip to the next transaction start.
        Only for scans that need nothing before their first full transaction (watermark markers).
        DDL on a captured table yields a SchemaChange (after which nothing else of its group is yielded).
        ``blocks``: a transaction's rows come as ``RowBlock``s (columns, one per rows event), not RowChanges.
        """
        self.last_offset = start
        if end is not None and start.at_boundary and start.position.key >= end.key:
            return
        if timeout is None and not blocking:
            timeout = DEFAULT_NONBLOCKING_TIMEOUT
        deadline = None if timeout is None else time.monotonic() + timeout
        self._check_start(start)
        connector = _Connector(deadline, self.settings.connect_timeout)
        stream = BinLogStreamReader(
            connection_settings=self.settings.replication_kwargs(),
            server_id=self.server_id,
            resume_stream=True,
            blocking=blocking,
            log_file=start.file,
            log_pos=start.pos,
            is_mariadb=False,
            filter_non_implemented_events=False,
            freeze_schema=False,
            slave_heartbeat=HEARTBEAT_PERIOD if blocking else None,
            pymysql_wrapper=connector,
            enable_logging=False,
        )
        mode = decoder_mode()
        framed = mode != PYTHON and framer_available()
        source = FramedStream(stream) if framed else stream
        try:
            yield from EventLoop(self, source, start, end, deadline, sync_to_transaction, blocks,
                                 compare=framed and mode == COMPARE).run()
        finally:
            stream.close()

    # -- internals --

    # -- the server's binlog files, on a control session --

    def timeout_error(self, end: BinlogPosition, cur_file: str) -> ReadTimeout:
        return ReadTimeout(
            f"binlog read did not reach {end} within its timeout (last offset {self.last_offset}, reading "
            f"{cur_file}); raise the timeout or read a smaller range"
        )

    def _binary_logs(self) -> list[tuple[str, int]]:
        """SHOW BINARY LOGS on the reader's control session (kept open between reads, reopened if lost)."""
        for attempt in (1, 2):
            conn = self._control_connection()
            try:
                with conn.cursor() as cur:
                    cur.execute("SHOW BINARY LOGS")
                    return [(str(r[0]), int(r[1])) for r in cur.fetchall()]
            except pymysql.err.MySQLError as exc:
                self.close()
                lost = isinstance(exc, pymysql.err.OperationalError) and exc.args[0] in _LOST_CONNECTION
                if attempt == 1 and lost:
                    continue  # the kept session timed out between reads: reopen once
                if lost:
                    raise ServerUnavailable(
                        f"the connection to MySQL at {self.settings.host}:{self.settings.port} was lost "
                        f"({exc.args[-1]})"
                    ) from None
                raise ServerNotReady(
                    f"SHOW BINARY LOGS failed on {self.settings.host}:{self.settings.port} "
                    f"({exc.args[-1]}): binary logging must be on and the CDC user needs REPLICATION CLIENT"
                ) from None
        raise AssertionError("unreachable")

    def _control_connection(self) -> pymysql.connections.Connection:
        if self._control is None:
            try:
                self._control = _Connection(**self.settings.with_database(None).pymysql_kwargs())
            except pymysql.err.OperationalError:
                connect(self.settings.with_database(None)).close()  # raises ConnectionFailed, explained
                raise
        return self._control

    def close(self) -> None:
        """Close the control session; the reader stays usable (the next read reopens it)."""
        if self._control is not None:
            try:
                self._control.close()
            except pymysql.err.Error:
                pass
            self._control = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_start(self, start: BinlogOffset) -> None:
        logs = self._binary_logs()
        sizes = dict(logs)
        if start.file in sizes:
            if start.pos > sizes[start.file]:
                raise OffsetMismatch(
                    f"offset {start} lies beyond the end of {start.file} ({sizes[start.file]} bytes): the "
                    "binlog was reset (RESET MASTER) or the offset belongs to another server; re-snapshot "
                    "the table(s)"
                )
            return
        if not logs:
            raise ServerNotReady("the server lists no binary logs: binary logging must be on")
        oldest, newest = logs[0][0], logs[-1][0]
        if file_number(start.file) > file_number(newest):
            raise OffsetMismatch(
                f"offset {start} names binlog file {start.file}, newer than the newest file on the server "
                f"({newest}): the binlog was reset or the offset belongs to another server; re-snapshot the "
                "table(s)"
            )
        raise self._purged(start.file, oldest)

    def _purged(self, file: str, oldest: str | None) -> BinlogPurged:
        return BinlogPurged(
            f"binlog file {file} was purged from the server (the oldest file still there is "
            f"{oldest or 'unknown'}): the changes since the offset are gone and cannot be streamed. "
            "Re-snapshot the table(s) and start the stream from the new high watermarks; keep binlogs longer "
            "(binlog_expire_logs_seconds / expire_logs_days) so the stream can fall behind safely"
        )

    def stream_error(self, exc: pymysql.err.MySQLError, start: BinlogOffset, cur_file: str) -> CdcError:
        code = exc.args[0] if exc.args else None
        message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        if code == 1236 and "first log file" in message.lower():
            try:
                logs = self._binary_logs()
            except CdcError:
                logs = []
            return self._purged(cur_file, logs[0][0] if logs else None)
        if code in _LOST_CONNECTION:
            return ServerUnavailable(
                f"the binlog stream from {self.settings.host}:{self.settings.port} was cut while reading "
                f"{cur_file} (started at {start}): {message} (error {code})"
            )
        return BinlogReadError(
            f"the binlog stream from {self.settings.host}:{self.settings.port} failed while reading "
            f"{cur_file} (started at {start}): {message} (error {code})"
        )




class _Connector:
    """mysql-replication's connection factory: bounds reconnects and ends the read at its deadline.

    mysql-replication reconnects by itself, immediately and forever, when the stream connection drops; with a
    read timeout on the socket that is also how a quiet blocking read notices its deadline.
    """

    def __init__(self, deadline: float | None, connect_timeout: int) -> None:
        self.deadline = deadline
        self.connect_timeout = connect_timeout
        self.stream_connects = 0

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection:
        if kwargs.get("db") == "information_schema":  # mysql-replication's control connection
            return _Connection(**kwargs)
        self.stream_connects += 1
        if self.stream_connects > 1:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                raise DeadlineReached()
            if self.stream_connects > MAX_RECONNECTS + 1:
                raise ServerUnavailable(
                    f"the binlog stream connection to {kwargs.get('host')}:{kwargs.get('port')} dropped "
                    f"{self.stream_connects - 1} times in one read; giving up"
                )
            time.sleep(min(0.2 * 2 ** (self.stream_connects - 2), 5.0))
            log.warning("binlog stream connection lost; reconnecting (attempt %d)", self.stream_connects - 1)
        kwargs.setdefault("connect_timeout", self.connect_timeout)
        if self.deadline is not None:
            kwargs["read_timeout"] = max(1.0, self.deadline - time.monotonic()) + 1.0
            kwargs["timeout_setting"] = "the read's time limit (stream: read_timeout; chunk: backfill)"
        return _Connection(**kwargs)

