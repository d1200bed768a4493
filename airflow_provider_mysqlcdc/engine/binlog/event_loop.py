"""One binlog read: the event loop, and a handler per event type that says what the event means to us.

The loop checks what every event must satisfy (its position against the start and the end of the read), then
looks the event's class up in ``EventLoop.HANDLERS``. A handler updates the transaction being read and says
whether the event ends it (``ENDS_GROUP``); the loop then emits the group's changes at its commit. An event
class without a handler is refused, never skipped (``No silent skips`` in docs/design.md).

Events come from the compiled framer (``event_framer``; not in ``python`` mode): the types it parses arrive as
``FramedEvent``s, handled by type code (``FRAMED_HANDLERS``, the same rules as their mysql-replication
counterparts), every other type as mysql-replication's object. A framed TABLE_MAP whose bytes equal the last
one of its table id reuses that one's schema version and layout without being parsed again; rows events are
decoded straight from the received bytes. In ``compare`` mode each framed event is parsed by mysql-replication
too and must agree (``event_framer.compare``), row images included.

Inside a transaction the framer passes over, in C, the events that would change nothing here (``pass_over``:
a TABLE_MAP the loop took with the same bytes, ROWS_QUERY, ANNOTATE_ROWS), so they never become Python
objects; the loop tells it when a transaction is open and which TABLE_MAPs it took (``remember``). In
``compare`` mode they come through marked (``passable``) and the loop checks that each would have changed
nothing.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import pymysql
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

from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedVersion
from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowBlock, RowChange, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.errors import (
    BinlogReadError,
    DeadlineReached,
    OffsetMismatch,
    UnsupportedEvent,
    dummy_event,
    unsupported_event,
)
from airflow_provider_mysqlcdc.engine.binlog.event_framer import (
    PASS_MARK,
    PASS_NONE,
    PASS_OVER,
    FramedEvent,
    FramedStream,
    FramerMismatch,
    check_framed,
)
from airflow_provider_mysqlcdc.engine.binlog.framed_rows import decode_framed_rows
from airflow_provider_mysqlcdc.engine.binlog.transaction import Transaction, decode_rows
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader

# Type codes mysql-replication maps to NotImplementedEvent, and what they mean to us.
_TXN_START_CODES = {0x22: "ANONYMOUS_GTID_LOG_EVENT", 0x2A: "GTID_TAGGED_LOG_EVENT"}
_IGNORABLE_CODES = {0x1C: "IGNORABLE_LOG_EVENT", 0x29: "HEARTBEAT_LOG_EVENT_V2"}
_MARIADB_FL_STANDALONE = 0x01
# type codes of the framed events the loop treats specially
_F_ROTATE, _F_HEARTBEAT, _F_TABLE_MAP, _F_QUERY = 0x04, 0x1B, 0x13, 0x02
_F_TXN_START = frozenset({0x21, 0x22, 0xA2})  # MySQL's GTID, ANONYMOUS_GTID, MariaDB's GTID
_LOG_EVENT_ARTIFICIAL_F = 0x20
_UTC = UTC

CONTINUES, ENDS_GROUP, ROTATED = 0, 1, 2  # what a handler says about the event it handled

Handler = Callable[["EventLoop", Any, str, int], int]


def _starts_transaction(cls: type, event: Any) -> bool:
    return cls is MariadbGtidEvent or cls is GtidEvent or (
        cls is NotImplementedEvent and event.event_type in _TXN_START_CODES)


class EventLoop:
    """The events of one read from ``start`` up to ``end`` (a transaction boundary, or None: the binlog's end
    now, or the deadline), turned into RowChange / SchemaChange / Heartbeat items."""

    HANDLERS: ClassVar[dict[type, Handler]]  # the table below the class
    FRAMED_HANDLERS: ClassVar[dict[int, Handler]]  # the same for framed events, by type code

    def __init__(self, reader: BinlogReader, stream: Any, start: BinlogOffset,
                 end: BinlogPosition | None, deadline: float | None, sync_to_transaction: bool,
                 blocks: bool = False, compare: bool = False) -> None:
        """``stream``: mysql-replication's ``BinLogStreamReader``, or ``event_framer.FramedStream`` over it.
        ``compare``: check every framed event against mysql-replication's parse of it."""
        self.reader, self.stream = reader, stream
        self.compare = compare
        self.parsed: Any = None  # compare mode: mysql-replication's object of the current framed event
        # framed TABLE_MAPs: table id -> (its body, the schema version it gave)
        self.framed_maps: dict[int, tuple[bytes, CapturedVersion | None]] = {}
        # yield each transaction's rows as RowBlocks (columns), not RowChange by RowChange
        self.blocks = blocks
        self.start, self.end, self.deadline = start, end, deadline
        self.end_key = end.key if end is not None else None
        self.syncing = sync_to_transaction
        self.cur_file = start.file
        self.cur_number = file_number(start.file)
        self.first_checked = False
        self.gtid_before = start.gtid
        # skip bookkeeping applies to the first transaction only
        self.skip_events, self.skip_rows = start.skip_events, start.skip_rows
        self.skipping = not start.at_boundary
        self.maps: dict[int, CapturedVersion | None] = {}
        self.txn: Transaction | None = None
        # what the framer passes over inside a transaction (PASS_NONE: not framed); whether it does now
        self.pass_mode = (PASS_NONE if not isinstance(stream, FramedStream)
                          else PASS_MARK if compare else PASS_OVER)
        self.passing = False

    # --- the loop -----------------------------------------------------------------------------------------

    def run(self) -> Iterator[RowChange | RowBlock | Heartbeat | SchemaChange]:
        handlers, framed_handlers = self.HANDLERS, self.FRAMED_HANDLERS
        pass_mode = self.pass_mode
        while True:
            if pass_mode and (self.txn is not None) is not self.passing:
                self.passing = not self.passing
                self.stream.pass_over(pass_mode if self.passing else PASS_NONE)
            event = self._next_event()
            if event is None:
                return
            cls = event.__class__
            if cls is FramedEvent:
                code = event.event_type
                end_pos, size, timestamp = event.log_pos, event.event_size, event.timestamp
                if self.compare:
                    if event.passable:  # before mysql-replication's parse follows it
                        self._check_passable(event)
                    self.parsed = self.stream.python_event(event)
                    check_framed(event, self.parsed, self.stream.checksum)
                if end_pos == 0 or event.header_flags & _LOG_EVENT_ARTIFICIAL_F or code == _F_HEARTBEAT or (
                    code == _F_ROTATE and timestamp == 0
                ):
                    if code == _F_ROTATE:
                        self._rotate_to(event.next_binlog)
                    continue
                handler = framed_handlers[code]
            else:
                packet = event.packet
                end_pos, size, timestamp = packet.log_pos, packet.event_size, packet.timestamp
                if end_pos == 0 or packet.flags & _LOG_EVENT_ARTIFICIAL_F or cls is HeartbeatLogEvent or (
                    cls is RotateEvent and timestamp == 0
                ):
                    # Artificial events: the rotate names the file being streamed; the rest has no position.
                    if cls is RotateEvent:
                        self._rotate_to(event.next_binlog)
                    continue
                handler = handlers.get(cls, EventLoop._on_unknown)
            event_start = end_pos - size
            self._check_first(event_start)
            if self._past_end(end_pos):
                return
            if self.syncing and not self._synced(cls, event):
                continue
            outcome = handler(self, event, self.cur_file, event_start)
            if outcome == ROTATED:
                if self.txn is None:
                    self.reader.last_offset = BinlogOffset(self.cur_file, event.position,
                                                           gtid=self.gtid_before)
                    yield Heartbeat(self.reader.last_offset)
                continue
            if outcome == ENDS_GROUP:
                yield from self._commit(timestamp, end_pos)
            if self.end_key is not None and self.txn is None and (self.cur_number, end_pos) >= self.end_key:
                return

    def _next_event(self) -> Any:
        """The next event, or None when the read is over (EOF or deadline without an end position)."""
        reader, end = self.reader, self.end
        try:
            event = self.stream.fetchone()
        except DeadlineReached:
            if end is not None:
                raise reader.timeout_error(end, self.cur_file) from None
            return None
        except pymysql.err.MySQLError as exc:
            raise reader.stream_error(exc, self.start, self.cur_file) from None
        if event is None:  # EOF: the current end of the binlog (non-blocking)
            if end is not None:
                raise BinlogReadError(
                    f"the binlog ends at {reader.last_offset} before the requested end {end}: the end "
                    "position must be one the server has already written"
                )
            return None
        if self.deadline is not None and time.monotonic() > self.deadline:
            if end is not None:
                raise reader.timeout_error(end, self.cur_file)
            return None
        return event

    def _check_passable(self, event: Any) -> None:
        """Compare mode: an event the framer would have passed over changes nothing here (``pass_over``)."""
        code, table_id = event.event_type, event.table_id
        cached = self.framed_maps.get(table_id) if code == _F_TABLE_MAP else None
        if self.txn is None or code == _F_TABLE_MAP and not (
            cached is not None and event.body_equals(cached[0]) and self.maps.get(table_id) is cached[1]
            and table_id in self.stream.stream.table_map
        ):
            raise FramerMismatch(
                f"event of type {code:#04x} ending at {event.log_pos} in {self.cur_file}: the compiled "
                "framer would pass over it, but it is "
                + ("outside a transaction" if self.txn is None else
                   f"a TABLE_MAP of table id {table_id} the event loop does not hold with these bytes")
            )

    def _rotate_to(self, file: str) -> None:
        self.cur_file, self.cur_number = file, file_number(file)

    def _check_first(self, event_start: int) -> None:
        if not self.first_checked:
            self.first_checked = True
            start = self.start
            if self.cur_file != start.file or event_start != start.pos:
                raise OffsetMismatch(
                    f"asked the server for the binlog at {start.file}:{start.pos} but it sent an event "
                    f"at {self.cur_file}:{event_start}: the offset does not match this server's binlog"
                )

    def _past_end(self, end_pos: int) -> bool:
        if self.end_key is not None and (self.cur_number, end_pos) > self.end_key:
            if self.txn is not None:
                raise OffsetMismatch(
                    f"end position {self.end} lies inside the transaction that starts at {self.txn.start}: "
                    "an end position must be a transaction boundary (a watermark)"
                )
            return True
        return False

    def _synced(self, cls: type, event: Any) -> bool:
        """While syncing to the next transaction start: False until the event that starts one."""
        if cls is FramedEvent:
            code = event.event_type
            if code in _F_TXN_START or (code == _F_QUERY and event.query.strip().upper() == "BEGIN"):
                self.syncing = False
                return True
            if code == _F_ROTATE:
                self._rotate_to(event.next_binlog)
            return False
        if _starts_transaction(cls, event) or (cls is QueryEvent and event.query.strip().upper() == "BEGIN"):
            self.syncing = False
            return True
        if cls is RotateEvent:
            self._rotate_to(event.next_binlog)
        return False

    def _commit(
        self, timestamp: int, end_pos: int
    ) -> Iterator[RowChange | RowBlock | Heartbeat | SchemaChange]:
        """The end of a group: its rows get the commit time; a group without our rows, a Heartbeat."""
        txn = self.txn
        assert txn is not None
        skipped_from = self.start if self.skipping else None
        if skipped_from is not None and (
            txn.rows_events < skipped_from.skip_events
            or (txn.rows_events == skipped_from.skip_events and skipped_from.skip_rows > 0)
        ):
            raise OffsetMismatch(
                f"offset {skipped_from} skips more rows events than the transaction at {txn.start} has "
                f"({txn.rows_events}): the offset does not match this binlog"
            )
        reader, cur_file = self.reader, self.cur_file
        commit_ts = datetime.fromtimestamp(timestamp, _UTC)
        boundary = BinlogOffset(cur_file, end_pos, gtid=txn.gtid or self.gtid_before)
        self.gtid_before = txn.gtid or self.gtid_before
        self.txn, self.skipping = None, False
        if txn.ddl:
            key = (file_number(cur_file), end_pos, 0, 0)
            reader.last_offset = boundary
            for table, ddl in txn.ddl:
                yield SchemaChange(table, key, cur_file, commit_ts, ddl, boundary)
            txn.ddl = []
        buffer = txn.buffer
        if not buffer:
            reader.last_offset = boundary
            yield Heartbeat(boundary, commit_ts)
            return
        for block in buffer:
            block.commit_ts = commit_ts
        buffer[-1].boundary = boundary
        txn.buffer = []
        if self.blocks:
            for block in buffer:
                reader.passed(block)
                yield block
            return
        for block in buffer:
            for change in block.changes():
                reader.last_offset = change.offset_after
                yield change

    # --- one handler per event type -----------------------------------------------------------------------

    def _on_rows(self, event: Any, cur_file: str, event_start: int) -> int:
        txn = self.txn
        if txn is None:
            raise OffsetMismatch(
                f"rows event at {cur_file}:{event_start} outside a transaction: the read did not "
                "start at a transaction boundary"
            )
        index = txn.rows_events
        txn.rows_events += 1
        target = self.maps.get(event.table_id)
        if target is None:
            return CONTINUES  # a table we do not capture: counted, never decoded
        txn.captured = True
        if self.skipping and index < self.skip_events:
            return CONTINUES
        skip = self.skip_rows if self.skipping and index == self.skip_events else 0
        decode_rows(event, target, txn, index, skip, cur_file, event.packet.log_pos, self.gtid_before)
        return CONTINUES

    def _on_table_map(self, event: Any, cur_file: str, event_start: int) -> int:
        self.maps[event.table_id] = self.reader.captured.table_map(event, cur_file, event_start)
        return CONTINUES

    def _on_xid(self, event: Any, cur_file: str, event_start: int) -> int:
        if self.txn is None:
            raise OffsetMismatch(f"commit event at {cur_file}:{event_start} outside a transaction")
        return ENDS_GROUP

    def _on_transaction_start(self, event: Any, cur_file: str, event_start: int) -> int:
        if self.txn is not None:
            raise OffsetMismatch(
                f"transaction at {self.txn.start} has no commit event before the next transaction at "
                f"{cur_file}:{event_start}"
            )
        cls = event.__class__
        # MariaDB's GTID event stands for BEGIN unless the group is a single statement (DDL).
        began = cls is MariadbGtidEvent and not event.flags & _MARIADB_FL_STANDALONE
        gtid = event.gtid if cls is not NotImplementedEvent else None
        self.txn = Transaction(BinlogPosition(cur_file, event_start), gtid, began=began)
        return CONTINUES

    def _on_query(self, event: Any, cur_file: str, event_start: int) -> int:
        framed = event.__class__ is FramedEvent
        captured = self.reader.captured
        kind = captured.query(event.query, event.schema, event.log_pos if framed else event.packet.log_pos,
                              self.txn, cur_file, event_start)
        if self.txn is None:
            self.txn = Transaction(BinlogPosition(cur_file, event_start), None, began=False)
        txn = self.txn
        if captured.pending_ddl:
            txn.ddl.extend(captured.pending_ddl)
            captured.pending_ddl = []
        if kind == "begin":
            txn.began = True
            return CONTINUES
        # COMMIT, ROLLBACK without captured rows, or the single statement of a group
        return ENDS_GROUP if kind != "continue" or not txn.began else CONTINUES

    def _on_xa_prepare(self, event: Any, cur_file: str, event_start: int) -> int:
        txn = self.txn
        if txn is None:
            raise OffsetMismatch(f"XA PREPARE at {cur_file}:{event_start} outside a transaction")
        if txn.captured and not event.one_phase:
            raise UnsupportedEvent(
                f"XA transaction {event.xid!r} prepared at {txn.start} changes captured table(s) "
                f"{', '.join(sorted({str(b.table) for b in txn.buffer})) or '(skipped rows)'}; XA "
                "transactions are not supported yet (their rows take effect at a later XA COMMIT). "
                "Avoid XA on captured tables, or re-snapshot them after it commits"
            )
        return ENDS_GROUP  # ONE PHASE commits here; a prepare without our rows emits nothing

    def _on_rotate(self, event: Any, cur_file: str, event_start: int) -> int:
        # the end of this file: the next transaction starts in the next one
        self._rotate_to(event.next_binlog)
        return ROTATED

    def _on_bookkeeping(self, event: Any, cur_file: str, event_start: int) -> int:
        if event.__class__ is UserVarEvent and event.name.startswith("!dummyvar"):
            raise dummy_event(f"{cur_file}:{event_start}")
        return CONTINUES

    def _on_not_implemented(self, event: Any, cur_file: str, event_start: int) -> int:
        if event.event_type in _TXN_START_CODES:
            return self._on_transaction_start(event, cur_file, event_start)
        if event.event_type not in _IGNORABLE_CODES:
            raise unsupported_event(event.event_type, f"{cur_file}:{event_start}")
        return CONTINUES

    def _on_load_data(self, event: Any, cur_file: str, event_start: int) -> int:
        raise UnsupportedEvent(
            f"statement-based LOAD DATA at {cur_file}:{event_start}: mysqlcdc needs "
            "binlog_format=ROW for every session"
        )

    # --- framed events (event_framer): the same rules, read off the FramedEvent --------------------------

    def _python(self, event: Any) -> Any:
        """mysql-replication's object of a framed event (parsed now unless compare mode already did)."""
        return self.parsed if self.parsed is not None else self.stream.python_event(event)

    def _on_framed_rows(self, event: Any, cur_file: str, event_start: int) -> int:
        if event.table_id not in self.stream.stream.table_map:
            return CONTINUES  # mysql-replication passes over rows of a table id it has no map for
        txn = self.txn
        if txn is None:
            raise OffsetMismatch(
                f"rows event at {cur_file}:{event_start} outside a transaction: the read did not "
                "start at a transaction boundary"
            )
        index = txn.rows_events
        txn.rows_events += 1
        target = self.maps.get(event.table_id)
        if target is None:
            return CONTINUES  # a table we do not capture: counted, never decoded
        txn.captured = True
        if self.skipping and index < self.skip_events:
            return CONTINUES
        skip = self.skip_rows if self.skipping and index == self.skip_events else 0
        decode_framed_rows(event, target, txn, index, skip, cur_file, self.gtid_before,
                           lambda: self._python(event), self.compare)
        return CONTINUES

    def _on_framed_table_map(self, event: Any, cur_file: str, event_start: int) -> int:
        table_id = event.table_id
        self.stream.remember(event)  # the framer passes over its twins inside a transaction
        cached = self.framed_maps.get(table_id)
        # mysql-replication must hold the map too (it forgets them at a rotation): rows events it would pass
        # over are passed over here as well, and its Python path needs it
        if cached is not None and event.body_equals(cached[0]) and table_id in self.stream.stream.table_map:
            self.maps[table_id] = cached[1]  # the same bytes as the last map of this id: the same version
            if self.compare:  # mysql-replication's map of it must give that version too
                again = self.reader.captured.table_map(self.parsed, cur_file, event_start)
                if again is not cached[1]:
                    raise FramerMismatch(
                        f"TABLE_MAP of table id {table_id} at {cur_file}:{event_start}: the cached schema "
                        f"version is not the one mysql-replication's parse of it gives"
                    )
            return CONTINUES
        version = self.reader.captured.table_map(self._python(event), cur_file, event_start)
        self.framed_maps[table_id] = (event.body(), version)
        self.maps[table_id] = version
        return CONTINUES

    def _on_framed_transaction_start(self, event: Any, cur_file: str, event_start: int) -> int:
        if self.txn is not None:
            raise OffsetMismatch(
                f"transaction at {self.txn.start} has no commit event before the next transaction at "
                f"{cur_file}:{event_start}"
            )
        # MariaDB's GTID event stands for BEGIN unless the group is a single statement (DDL).
        began = event.event_type == 0xA2 and not event.gtid_flags & _MARIADB_FL_STANDALONE
        self.txn = Transaction(BinlogPosition(cur_file, event_start), event.gtid, began=began)
        return CONTINUES


    def _on_framed_bookkeeping(self, event: Any, cur_file: str, event_start: int) -> int:
        return CONTINUES

    def _on_unknown(self, event: Any, cur_file: str, event_start: int) -> int:
        raise UnsupportedEvent(
            f"binlog event {event.__class__.__name__} (type {event.event_type:#04x}) at "
            f"{cur_file}:{event_start} is not understood by mysqlcdc; refusing to skip it"
        )


# The handler of each event class (exact class: a subclass is not assumed to mean the same).
EventLoop.HANDLERS = {
    **{cls: EventLoop._on_rows
       for cls in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent)},
    TableMapEvent: EventLoop._on_table_map,
    XidEvent: EventLoop._on_xid,
    MariadbGtidEvent: EventLoop._on_transaction_start,
    GtidEvent: EventLoop._on_transaction_start,
    QueryEvent: EventLoop._on_query,
    XAPrepareEvent: EventLoop._on_xa_prepare,
    RotateEvent: EventLoop._on_rotate,
    NotImplementedEvent: EventLoop._on_not_implemented,
    BeginLoadQueryEvent: EventLoop._on_load_data,
    ExecuteLoadQueryEvent: EventLoop._on_load_data,
    **{cls: EventLoop._on_bookkeeping for cls in (
        FormatDescriptionEvent, PreviousGtidsEvent, MariadbGtidListEvent, MariadbBinLogCheckPointEvent,
        MariadbAnnotateRowsEvent, MariadbStartEncryptionEvent, RowsQueryLogEvent, IntvarEvent, RandEvent,
        UserVarEvent, StopEvent,
    )},
}

# The handler of each type code the framer parses (``event_framer._frames``).
EventLoop.FRAMED_HANDLERS = {
    **{code: EventLoop._on_framed_rows for code in (0x17, 0x18, 0x19, 0x1E, 0x1F, 0x20)},
    0x13: EventLoop._on_framed_table_map,
    0x10: EventLoop._on_xid,
    **{code: EventLoop._on_framed_transaction_start for code in _F_TXN_START},
    0x02: EventLoop._on_query,
    0x04: EventLoop._on_rotate,
    # STOP, ROWS_QUERY, PREVIOUS_GTIDS, MariaDB's ANNOTATE_ROWS, BINLOG_CHECKPOINT, GTID_LIST
    **{code: EventLoop._on_framed_bookkeeping for code in (0x03, 0x1D, 0x23, 0xA0, 0xA1, 0xA3)},
}
