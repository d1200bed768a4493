"""Read row changes from the binlog between two offsets, decoded exactly like the snapshot reads them.

Every reader connects as a replica with its own ``server_id`` (two readers with one id kill each other), taken
from the configured range by ``allocate_server_id``. We drive mysql-replication 1.0.17 with the settings the
pitfalls call for: ``is_mariadb=False`` with ``log_file``/``log_pos`` (its MariaDB mode ignores the position),
``filter_non_implemented_events=False`` (so no event type is skipped unseen), no table filters (every
TABLE_MAP is needed; we filter rows ourselves), and every read bounded by an end position and/or a timeout.

A transaction's rows are buffered until its commit event (XID, or a COMMIT query), so every row carries the
commit timestamp, and only committed rows are ever emitted. Each ``RowChange`` carries ``offset_after``, the
offset from which a new read continues right after it (see ``offsets``).

Progress while the captured tables are idle: ``read`` yields only RowChange; ``read_with_heartbeats`` also
yields a ``Heartbeat(offset)`` after every transaction (and file rotation) that emitted nothing, so a caller
can commit its offset while the binlog moves on. ``reader.last_offset`` is always the offset right after
everything yielded so far.

What we do not understand, we refuse (``No silent skips`` in DESIGN.md):

* event types we do not know, compressed events (MariaDB ``log_bin_compress``, MySQL
  ``binlog_transaction_compression``), statement-based changes and incidents: ``UnsupportedEvent``;
* DDL on a captured table that changes rows without row events (TRUNCATE, RENAME, partition DROP/EXCHANGE,
  ...; ``engine.binlog.ddl``) and that no plan of the table made after it covers: ``ResnapshotRequired``. Column DDL
  is followed: a ``SchemaChange`` item, and every rows event is decoded with the columns its TABLE_MAP names
  (``binlog_schema``); a TABLE_MAP without column names (no ``binlog_row_metadata=FULL``):
  ``SchemaChangeError``;
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

import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    BeginLoadQueryEvent,
    ExecuteLoadQueryEvent,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    IntvarEvent,
    MariadbAnnotateRowsEvent,
    MariadbBinLogCheckPointEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    MariadbStartEncryptionEvent,
    NotImplementedEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsQueryLogEvent,
    StopEvent,
    UserVarEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from airflow_provider_mysqlcdc.engine.binlog.table_map import schema_from_table_map, table_map_signature
from airflow_provider_mysqlcdc.engine.source.connection import (
    LOST_CONNECTION_ERRORS,
    UNREACHABLE_ERRORS,
    MySQLSettings,
    connect,
)
from airflow_provider_mysqlcdc.engine.source.connection import (
    Connection as _Connection,
)
from airflow_provider_mysqlcdc.engine.binlog.ddl import DDL_VERBS, DML_VERBS, TableDdl, TableRef, statement_tables, table_ddl
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError, ServerNotReady, ServerUnavailable
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, RowKey, file_number, row_key
from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, Op, Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.model.values import binlog_normalizer

log = logging.getLogger(__name__)

DEFAULT_NONBLOCKING_TIMEOUT = 300.0  # seconds; every non-blocking read is bounded (see Known pitfalls)
HEARTBEAT_PERIOD = 1.0  # seconds; the server's heartbeat lets a blocking read notice its deadline
MAX_RECONNECTS = 5  # mysql-replication reconnects on lost connections by itself, without pause or limit

# Type codes mysql-replication maps to NotImplementedEvent, and what they mean to us.
_TXN_START_CODES = {0x22: "ANONYMOUS_GTID_LOG_EVENT", 0x2A: "GTID_TAGGED_LOG_EVENT"}
_IGNORABLE_CODES = {0x1C: "IGNORABLE_LOG_EVENT", 0x29: "HEARTBEAT_LOG_EVENT_V2"}
_COMPRESSED_CODES = {
    0x28: "TRANSACTION_PAYLOAD_EVENT (MySQL binlog_transaction_compression)",
    0xA5: "QUERY_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xA6: "WRITE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA7: "UPDATE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA8: "DELETE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA9: "WRITE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xAA: "UPDATE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xAB: "DELETE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
}
_MARIADB_FL_STANDALONE = 0x01
_LOG_EVENT_ARTIFICIAL_F = 0x20
_UTC = timezone.utc
# gone away, lost, out of sync, lost (TLS), can't connect, killed, shutting down
_LOST_CONNECTION = frozenset({2014, 2055}) | LOST_CONNECTION_ERRORS | UNREACHABLE_ERRORS


# --- errors -------------------------------------------------------------------------------------------------


class BinlogReadError(CdcError):
    """Reading the binlog failed; the message says where and what to do."""


class UnsupportedEvent(BinlogReadError):
    """An event we cannot apply exactly (unknown type, compressed, statement-based, XA with captured rows)."""


class CompressedEvent(UnsupportedEvent):
    """A compressed binlog event: turn compression off on the server (``mysqlcdc check`` says how)."""


class SchemaChangeError(BinlogReadError):
    """A schema change of a captured table the stream cannot follow."""


class ResnapshotRequired(SchemaChangeError):
    """DDL that changed a captured table's rows without row events (or in a way the changelog cannot show):
    the table must be snapshotted again, planned at or after ``position``."""

    def __init__(self, message: str, table: TableId, position: BinlogPosition, reason: str, statement: str):
        super().__init__(message)
        self.table, self.position, self.reason, self.statement = table, position, reason, statement


class BinlogPurged(BinlogReadError):
    """The binlog file a read must start in is gone from the server."""


class OffsetMismatch(BinlogReadError):
    """The binlog at the offset is not what the offset describes (wrong server, RESET MASTER, bad offset)."""


class ReadTimeout(BinlogReadError):
    """A read with an end position did not reach it within its timeout."""


class _DeadlineReached(Exception):
    """Raised inside mysql-replication's reconnect path to end a read whose time is up."""


# --- server ids ---------------------------------------------------------------------------------------------


def allocate_server_id(settings: MySQLSettings, slot: int) -> int:
    """The replica ``server_id`` of reader ``slot`` (0-based); the top id of the range is for ``check``."""
    low, high = settings.server_id_range
    slots = high - low  # ids low .. high-1; high is reserved for mysqlcdc check
    if slots <= 0:
        raise ConfigurationError(
            f"server_id range {low}-{high} leaves no id for binlog readers (the top id {high} is reserved "
            "for mysqlcdc check): configure a range of at least two ids, e.g. server_id=5400-5499"
        )
    if not 0 <= slot < slots:
        raise ConfigurationError(
            f"binlog reader slot {slot} does not fit the server_id range {low}-{high} ({slots} reader ids; "
            f"the top id is reserved for mysqlcdc check): widen the range or run fewer parallel readers"
        )
    return low + slot


@contextlib.contextmanager
def claimed_server_id(settings: MySQLSettings, prefer: int = 1) -> Iterator[int]:
    """A reader ``server_id`` no other claimant on this server holds while the block runs.

    Snapshot backfills run in many Spark tasks of many applications at once, and two binlog readers with one
    ``server_id`` make the server drop the first. Each claim takes ``GET_LOCK('mysqlcdc.server_id.<id>', 0)``
    (no privilege needed; released when the claiming session ends), trying the range's snapshot slots (1 ..
    n-1; slot 0 is the stream's) from ``prefer`` on.
    """
    low, high = settings.server_id_range
    slots = high - low
    if slots < 2:
        raise ConfigurationError(
            f"server_id range {low}-{high} leaves no id for snapshot backfill readers (slot 0 is the stream's, "
            "the top id is mysqlcdc check's): configure a range of at least three ids, e.g. server_id=5400-5499"
        )
    first = (max(prefer, 1) - 1) % (slots - 1)
    conn = connect(settings.with_database(None))
    try:
        with conn.cursor() as cur:
            for i in range(slots - 1):
                server_id = low + 1 + (first + i) % (slots - 1)
                cur.execute("SELECT GET_LOCK(%s, 0)", (f"mysqlcdc.server_id.{server_id}",))
                if cur.fetchone()[0] == 1:
                    yield server_id
                    return
        raise ServerNotReady(
            f"all {slots - 1} snapshot reader server_ids of the range {low}-{high} are in use: widen server_id "
            "in the MySQL connection, or run fewer chunk reads at once"
        )
    finally:
        conn.close()


# --- output -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row image of a committed change, its place in the binlog order, and where to resume after it."""

    table: TableId
    op: Op
    values: dict[str, Any]
    key: RowKey  # (binlog file number, end of the rows event, row index in the event, half)
    binlog_file: str
    commit_ts: datetime  # UTC, from the transaction's commit (XID) event
    offset_after: BinlogOffset
    schema: TableSchema | None = None  # the table's schema when the event was written (its TABLE_MAP)

    def to_record(self) -> Record:
        return Record(
            table=str(self.table), op=self.op, phase="stream", key=self.key, values=self.values,
            commit_ts=self.commit_ts, binlog_file=self.binlog_file,
            schema_id=self.schema.schema_id if self.schema is not None else None,
        )


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """DDL on a captured table the changelog follows (``ddl.resnapshot`` is None), or one a new plan of the
    table made at or after it covers; ``offset`` is right after the statement."""

    table: TableId
    key: RowKey  # (binlog file number, end of the DDL event, 0, 0): ordered with the row changes
    binlog_file: str
    commit_ts: datetime
    ddl: TableDdl
    offset: BinlogOffset


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The binlog moved on without a change of a captured table: a caller may commit ``offset``."""

    offset: BinlogOffset


# --- the reader ---------------------------------------------------------------------------------------------


@dataclass
class _Captured:
    table: TableId
    schema: TableSchema
    normalize: Callable[..., dict]
    column_names: list[str]


def _captured(schema: TableSchema) -> _Captured:
    return _Captured(schema.table, schema, binlog_normalizer(schema), schema.column_names)


@dataclass
class _Txn:
    """The transaction being read: where it starts, what it holds so far."""

    start: BinlogPosition
    gtid: str | None
    began: bool  # inside BEGIN ... COMMIT (else the group is a single statement)
    rows_events: int = 0  # rows events seen, of every table (the unit of skip_events)
    captured: bool = False  # holds rows events of a captured table (emitted or skipped)
    # (table, op, values, key, file, offset after this image) of the captured rows, in binlog order
    buffer: list[tuple[TableId, Op, dict, RowKey, str, BinlogOffset, TableSchema]] = field(default_factory=list)
    ddl: list[tuple[TableId, TableDdl]] = field(default_factory=list)  # DDL of captured tables in this group


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
        captured = set(schemas) if tables is None else set(tables)
        missing = sorted(str(t) for t in captured if t not in schemas)
        if missing:
            raise ConfigurationError(f"no schema given for captured table(s) {missing}")
        self._captured = {t: _captured(schemas[t]) for t in captured}
        self._versions: dict[tuple[TableId, tuple], _Captured] = {}
        self.replanned = dict(replanned or {})
        self._pending_ddl: list[tuple[TableId, TableDdl]] = []
        self._captured_ci = {(t.database.lower(), t.table.lower()): t for t in captured}
        self.last_offset: BinlogOffset | None = None
        self._control: pymysql.connections.Connection | None = None

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

    def read_with_heartbeats(
        self,
        start: BinlogOffset,
        end: BinlogPosition | None = None,
        *,
        blocking: bool = False,
        timeout: float | None = None,
        sync_to_transaction: bool = False,
    ) -> Iterator[RowChange | Heartbeat | SchemaChange]:
        """Like ``read``, plus a Heartbeat after each transaction (or file rotation) that emitted nothing.

        ``sync_to_transaction``: ``start`` is a position read from ``SHOW MASTER STATUS``, which on MariaDB
        can lie between a transaction's rows and its commit event; skip to the next transaction start.
        Only for scans that need nothing before their first full transaction (watermark markers).
        DDL on a captured table yields a SchemaChange (after which nothing else of its group is yielded).
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
        try:
            yield from self._read(stream, start, end, deadline, sync_to_transaction)
        finally:
            stream.close()

    # -- internals --

    def _read(
        self,
        stream: BinLogStreamReader,
        start: BinlogOffset,
        end: BinlogPosition | None,
        deadline: float | None,
        sync_to_transaction: bool = False,
    ) -> Iterator[RowChange | Heartbeat | SchemaChange]:
        end_key = end.key if end is not None else None
        syncing = sync_to_transaction
        cur_file = start.file
        cur_number = file_number(cur_file)
        first_checked = False
        gtid_before = start.gtid
        # skip bookkeeping applies to the first transaction only
        skip_events, skip_rows = start.skip_events, start.skip_rows
        skipping = not start.at_boundary
        maps: dict[int, _Captured | None] = {}
        txn: _Txn | None = None
        fetch = stream.fetchone
        monotonic = time.monotonic

        while True:
            try:
                event = fetch()
            except _DeadlineReached:
                event = None
                if end is not None:
                    raise self._timeout(end, cur_file) from None
                return
            except pymysql.err.MySQLError as exc:
                raise self._stream_error(exc, start, cur_file) from None
            if event is None:  # EOF: the current end of the binlog (non-blocking)
                if end is not None:
                    raise BinlogReadError(
                        f"the binlog ends at {self.last_offset} before the requested end {end}: the end "
                        "position must be one the server has already written"
                    )
                return
            if deadline is not None and monotonic() > deadline:
                if end is not None:
                    raise self._timeout(end, cur_file)
                return

            packet = event.packet
            end_pos = packet.log_pos
            cls = event.__class__

            if end_pos == 0 or packet.flags & _LOG_EVENT_ARTIFICIAL_F or cls is HeartbeatLogEvent or (
                cls is RotateEvent and packet.timestamp == 0
            ):
                # Artificial events: the rotate names the file being streamed; the rest has no position.
                if cls is RotateEvent:
                    cur_file, cur_number = event.next_binlog, file_number(event.next_binlog)
                continue

            event_start = end_pos - packet.event_size
            if not first_checked:
                first_checked = True
                if cur_file != start.file or event_start != start.pos:
                    raise OffsetMismatch(
                        f"asked the server for the binlog at {start.file}:{start.pos} but it sent an event "
                        f"at {cur_file}:{event_start}: the offset does not match this server's binlog"
                    )
            if end_key is not None and (cur_number, end_pos) > end_key:
                if txn is not None:
                    raise OffsetMismatch(
                        f"end position {end} lies inside the transaction that starts at {txn.start}: an end "
                        "position must be a transaction boundary (a watermark)"
                    )
                return

            if syncing:
                starts_txn = cls is MariadbGtidEvent or cls is GtidEvent or (
                    cls is NotImplementedEvent and event.event_type in _TXN_START_CODES
                ) or (cls is QueryEvent and event.query.strip().upper() == "BEGIN")
                if not starts_txn:
                    if cls is RotateEvent:
                        cur_file, cur_number = event.next_binlog, file_number(event.next_binlog)
                    continue
                syncing = False

            group_ends = False  # this event ends the current transaction (or single-statement group)
            if cls in _ROWS_EVENTS:
                if txn is None:
                    raise OffsetMismatch(
                        f"rows event at {cur_file}:{event_start} outside a transaction: the read did not "
                        "start at a transaction boundary"
                    )
                index = txn.rows_events
                txn.rows_events += 1
                target = maps.get(event.table_id)
                if target is None:
                    continue  # a table we do not capture: counted, never decoded
                txn.captured = True
                if skipping and index < skip_events:
                    continue
                skip = skip_rows if skipping and index == skip_events else 0
                self._decode_rows(event, target, txn, index, skip, cur_file, end_pos, gtid_before)
            elif cls is TableMapEvent:
                maps[event.table_id] = self._table_map(event, cur_file, event_start)
            elif cls is XidEvent:
                if txn is None:
                    raise OffsetMismatch(f"commit event at {cur_file}:{event_start} outside a transaction")
                group_ends = True
            elif cls is MariadbGtidEvent or cls is GtidEvent or (
                cls is NotImplementedEvent and event.event_type in _TXN_START_CODES
            ):
                if txn is not None:
                    raise OffsetMismatch(
                        f"transaction at {txn.start} has no commit event before the next transaction at "
                        f"{cur_file}:{event_start}"
                    )
                # MariaDB's GTID event stands for BEGIN unless the group is a single statement (DDL).
                began = cls is MariadbGtidEvent and not event.flags & _MARIADB_FL_STANDALONE
                gtid = event.gtid if cls is not NotImplementedEvent else None
                txn = _Txn(BinlogPosition(cur_file, event_start), gtid, began=began)
            elif cls is QueryEvent:
                kind = self._query(event, txn, cur_file, event_start)
                if txn is None:
                    txn = _Txn(BinlogPosition(cur_file, event_start), None, began=False)
                if self._pending_ddl:
                    txn.ddl.extend(self._pending_ddl)
                    self._pending_ddl = []
                if kind == "begin":
                    txn.began = True
                else:  # COMMIT, ROLLBACK without captured rows, or the single statement of a group
                    group_ends = kind != "continue" or not txn.began
            elif cls is XAPrepareEvent:
                if txn is None:
                    raise OffsetMismatch(f"XA PREPARE at {cur_file}:{event_start} outside a transaction")
                if txn.captured and not event.one_phase:
                    raise UnsupportedEvent(
                        f"XA transaction {event.xid!r} prepared at {txn.start} changes captured table(s) "
                        f"{', '.join(sorted({str(b[0]) for b in txn.buffer})) or '(skipped rows)'}; XA "
                        "transactions are not supported yet (their rows take effect at a later XA COMMIT). "
                        "Avoid XA on captured tables, or re-snapshot them after it commits"
                    )
                group_ends = True  # ONE PHASE commits here; a prepare without our rows emits nothing
            elif cls is RotateEvent:  # the end of this file: the next transaction starts in the next one
                cur_file, cur_number = event.next_binlog, file_number(event.next_binlog)
                if txn is None:
                    self.last_offset = BinlogOffset(cur_file, event.position, gtid=gtid_before)
                    yield Heartbeat(self.last_offset)
                continue
            elif cls in _BOOKKEEPING_EVENTS:
                if cls is UserVarEvent and event.name.startswith("!dummyvar"):
                    raise self._dummy(cur_file, event_start)
            elif cls is NotImplementedEvent:
                if event.event_type not in _IGNORABLE_CODES:
                    raise self._unsupported(event.event_type, cur_file, event_start)
            elif cls is BeginLoadQueryEvent or cls is ExecuteLoadQueryEvent:
                raise UnsupportedEvent(
                    f"statement-based LOAD DATA at {cur_file}:{event_start}: mysqlcdc needs "
                    "binlog_format=ROW for every session"
                )
            else:
                raise UnsupportedEvent(
                    f"binlog event {cls.__name__} (type {event.event_type:#04x}) at {cur_file}:{event_start} "
                    "is not understood by mysqlcdc; refusing to skip it"
                )

            if group_ends:
                assert txn is not None
                skipped_from = start if skipping else None
                yield from self._commit(txn, packet, cur_file, end_pos, gtid_before, skipped_from)
                gtid_before = txn.gtid or gtid_before
                txn, skipping = None, False
            if end_key is not None and txn is None and (cur_number, end_pos) >= end_key:
                return

    def _decode_rows(
        self,
        event: Any,
        target: _Captured,
        txn: _Txn,
        index: int,
        skip: int,
        cur_file: str,
        end_pos: int,
        gtid_before: str | None,
    ) -> None:
        if event.__class__ is PartialUpdateRowsEvent:
            raise UnsupportedEvent(
                f"partial JSON update of {target.table} at {cur_file}:{end_pos}: set "
                "binlog_row_value_options='' so the binlog carries full row images"
            )
        rows = event.rows
        normalize = target.normalize
        table = target.table
        base = row_key(BinlogPosition(cur_file, end_pos))
        number, pos = base[0], base[1]
        start_pos, file = txn.start.pos, txn.start.file
        images: list[tuple[Op, dict, RowKey]] = []
        if event.__class__ is UpdateRowsEvent:
            for i, row in enumerate(rows):
                before = normalize(row["before_values"], row["before_none_sources"])
                after = normalize(row["after_values"], row["after_none_sources"])
                images.append((UPDATE_BEFORE, before, (number, pos, i, BEFORE)))
                images.append((UPDATE_AFTER, after, (number, pos, i, AFTER)))
        else:
            op, half = (INSERT, AFTER) if event.__class__ is WriteRowsEvent else (DELETE, BEFORE)
            for i, row in enumerate(rows):
                images.append((op, normalize(row["values"], row["none_sources"]), (number, pos, i, half)))
        count = len(images)
        if skip > count:
            raise OffsetMismatch(
                f"offset skips {skip} row images of the rows event ending at {cur_file}:{end_pos}, which has "
                f"only {count}: the offset does not match this binlog"
            )
        buffer = txn.buffer
        next_event = BinlogOffset(file, start_pos, index + 1, 0, gtid_before)
        for c in range(skip, count):
            op, values, key = images[c]
            after = next_event if c == count - 1 else BinlogOffset(file, start_pos, index, c + 1, gtid_before)
            buffer.append((table, op, values, key, cur_file, after, target.schema))

    def _commit(  # the end of a group: its rows get the commit time; a group without our rows, a Heartbeat
        self,
        txn: _Txn,
        packet: Any,
        cur_file: str,
        end_pos: int,
        gtid_before: str | None,
        skipped_from: BinlogOffset | None,
    ) -> Iterator[RowChange | Heartbeat | SchemaChange]:
        if skipped_from is not None and (
            txn.rows_events < skipped_from.skip_events
            or (txn.rows_events == skipped_from.skip_events and skipped_from.skip_rows > 0)
        ):
            raise OffsetMismatch(
                f"offset {skipped_from} skips more rows events than the transaction at {txn.start} has "
                f"({txn.rows_events}): the offset does not match this binlog"
            )
        commit_ts = datetime.fromtimestamp(packet.timestamp, _UTC)
        boundary = BinlogOffset(cur_file, end_pos, gtid=txn.gtid or gtid_before)
        buffer = txn.buffer
        if txn.ddl:
            key = (file_number(cur_file), end_pos, 0, 0)
            self.last_offset = boundary
            for table, ddl in txn.ddl:
                yield SchemaChange(table, key, cur_file, commit_ts, ddl, boundary)
            txn.ddl = []
        if not buffer:
            self.last_offset = boundary
            yield Heartbeat(boundary)
            return
        last = len(buffer) - 1
        for n, (table, op, values, key, file, after, schema) in enumerate(buffer):
            change = RowChange(table, op, values, key, file, commit_ts, boundary if n == last else after, schema)
            self.last_offset = change.offset_after
            yield change
        txn.buffer = []

    def _table_map(self, event: TableMapEvent, cur_file: str, event_start: int) -> _Captured | None:
        """The captured table's schema as this TABLE_MAP gives it: the one in force at its rows events."""
        table = TableId(event.schema, event.table)
        known = self._captured.get(table)
        if known is None:
            return None
        signature = table_map_signature(event)
        version = self._versions.get((table, signature))
        if version is not None:
            return version
        names = [c.name for c in event.columns]
        if names == known.column_names and all(n for n in names):
            derived = schema_from_table_map(event, table, known.schema)
            version = known if derived.schema_id == known.schema.schema_id else _captured(derived)
        elif any(not n or str(n).startswith("UNKNOWN_COL") for n in names):
            raise SchemaChangeError(
                f"the binlog at {cur_file}:{event_start} has no column names for captured table {table}: set "
                "binlog_row_metadata=FULL on the server (mysqlcdc check says how), then re-snapshot the table"
            )
        else:
            version = _captured(schema_from_table_map(event, table, known.schema))
        self._versions[(table, signature)] = version
        return version

    def _query(self, event: QueryEvent, txn: _Txn | None, cur_file: str, event_start: int) -> str:
        """Classify a query event: "begin", "commit", "end" (the group ends, nothing to emit), "continue"."""
        sql = event.query.strip()
        if sql.startswith("# Dummy event"):
            raise self._dummy(cur_file, event_start)
        head = sql[:16].upper()
        if head.startswith("BEGIN") or head.startswith("XA START"):
            return "begin"
        if head.startswith("COMMIT"):
            return "commit"
        if head.startswith("SAVEPOINT") or head.startswith("XA END"):
            return "continue"
        if head.startswith("ROLLBACK"):
            to_savepoint = head.split()[1:2] == ["TO"]
            if txn is not None and txn.captured:
                raise UnsupportedEvent(
                    f"{sql[:40]!r} at {cur_file}:{event_start} in the transaction at {txn.start}, which "
                    "changes a captured table: such groups are written only when non-transactional tables "
                    "are involved, and which rows took effect depends on each table's engine; re-snapshot "
                    "the captured tables"
                )
            return "continue" if to_savepoint else "end"
        if head.startswith("XA COMMIT") or head.startswith("XA ROLLBACK"):
            return "end"
        verb, refs = statement_tables(sql)
        where = txn.start if txn is not None else f"{cur_file}:{event_start}"
        default_db = event.schema
        if isinstance(default_db, bytes):
            default_db = default_db.decode("utf-8", "replace")
        hits = self._captured_refs(refs, default_db)
        if hits and verb in DDL_VERBS:
            end = BinlogPosition(cur_file, event.packet.log_pos)
            for table in sorted(hits):
                ddl = table_ddl(sql, self._captured[table].schema.primary_key)
                planned = self.replanned.get(table)
                if ddl.resnapshot and (planned is None or planned.key < end.key):
                    raise ResnapshotRequired(
                        f"{verb} on captured table {table} at {where} (ending at {end}): {ddl.resnapshot}; "
                        f"{ddl.statement[:300]!r}. The changelog cannot follow this change: the table must be "
                        "snapshotted again. The stream does that by itself unless resnapshot is turned off; "
                        f"otherwise plan and snapshot {table} again (mysqlcdc plan --tables {table}, then "
                        "mysqlcdc snapshot; or rerun the DAG's plan and snapshot tasks for it) and restart the "
                        f"stream: it continues past this statement once the new plan exists "
                        f"[resnapshot table={table} position={end}]",
                        table, end, ddl.resnapshot, ddl.statement,
                    )
                self._pending_ddl.append((table, ddl))
        if hits and verb in DML_VERBS:
            raise UnsupportedEvent(
                f"statement-based change of captured table(s) {', '.join(sorted(map(str, hits)))} at "
                f"{where}: {sql[:300]!r}; mysqlcdc needs binlog_format=ROW for every session. "
                "Re-snapshot the table(s)"
            )
        return "continue" if txn is not None and txn.began else "end"

    def _captured_refs(self, refs: list[TableRef], default_db: str | None) -> set[TableId]:
        hits: set[TableId] = set()
        for db, table in refs:
            db = db if db is not None else default_db
            if db is None:
                continue
            if table is None:  # a whole database
                hits.update(t for (d, _), t in self._captured_ci.items() if d == db.lower())
            elif (found := self._captured_ci.get((db.lower(), table.lower()))) is not None:
                hits.add(found)
        return hits

    def _unsupported(self, code: int, cur_file: str, event_start: int) -> UnsupportedEvent:
        where = f"{cur_file}:{event_start}"
        if code in _COMPRESSED_CODES:
            return CompressedEvent(
                f"compressed binlog event {_COMPRESSED_CODES[code]} at {where}: mysqlcdc cannot decode "
                "compressed events; turn compression off on the server (MariaDB: SET GLOBAL "
                "log_bin_compress=OFF; MySQL: binlog_transaction_compression=OFF), then re-snapshot the "
                "tables whose changes were written compressed"
            )
        if code == 0x1A:
            return UnsupportedEvent(
                f"INCIDENT event at {where}: the server reports that changes may be missing from the binlog; "
                "re-snapshot the captured tables"
            )
        return UnsupportedEvent(
            f"binlog event type {code:#04x} at {where} is not understood by mysqlcdc; refusing to skip it"
        )

    def _dummy(self, cur_file: str, event_start: int) -> UnsupportedEvent:
        return UnsupportedEvent(
            f"the server replaced the event at {cur_file}:{event_start} with a dummy because it thinks this "
            "replica cannot handle it; mysqlcdc refuses to skip it (upgrade mysqlcdc or report the event)"
        )

    def _timeout(self, end: BinlogPosition, cur_file: str) -> ReadTimeout:
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

    def __enter__(self) -> "BinlogReader":
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

    def _stream_error(self, exc: pymysql.err.MySQLError, start: BinlogOffset, cur_file: str) -> CdcError:
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


_ROWS_EVENTS = frozenset({WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent})
_BOOKKEEPING_EVENTS = frozenset(
    {
        FormatDescriptionEvent,
        PreviousGtidsEvent,
        MariadbGtidListEvent,
        MariadbBinLogCheckPointEvent,
        MariadbAnnotateRowsEvent,
        MariadbStartEncryptionEvent,
        RowsQueryLogEvent,
        IntvarEvent,
        RandEvent,
        UserVarEvent,
        StopEvent,
    }
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
                raise _DeadlineReached()
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
        return _Connection(**kwargs)
