"""The events of mysql-replication's replication connection, framed in compiled code.

mysql-replication keeps what it is good at: it connects, registers as a replica, asks for the binlog from a
position (``BinLogStreamReader``), reconnects where it stopped, and parses every event type the framer leaves
unframed. What it is slow at, reading a packet and building an event object in Python for every event, is
done here: the connection's bytes are read in large pieces straight off its socket buffer and cut into events
by ``_frames.Framer``.

Its state stays true, so that its own parsing and its reconnects work as if it had read every event itself:
the position it resumes from (``log_file``/``log_pos``) follows every event (those the framer passes over
inside a transaction too, before a reconnect), its table map follows every TABLE_MAP it is shown
(``python_event``), a non-artificial rotation clears it, and a FORMAT_DESCRIPTION sets its server version and
post-header lengths (and the framer's).
"""
from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.packet import BinLogPacketWrapper

from airflow_provider_mysqlcdc.engine.binlog.event_framer import compiled

if TYPE_CHECKING:
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_mysqlcdc.engine.binlog.event_framer._frames import FramedEvent, Framer

_READ_SIZE = 1 << 18  # bytes asked of the socket buffer at once (a read returns what has arrived)
_LOST = (2013, 2006)  # the error codes on which mysql-replication reconnects (MYSQL_EXPECTED_ERROR_CODES)
_P = "_BinLogStreamReader__"  # mysql-replication 1.0.17's private attributes (pinned)


class FramedStream:
    """``fetchone()`` like ``BinLogStreamReader.fetchone``: the next event, a ``FramedEvent`` when the framer
    parsed it, else mysql-replication's event object; None at the end of a non-blocking read."""

    def __init__(self, stream: BinLogStreamReader) -> None:
        self.stream = stream
        self.framer: Framer | None = None
        self._pass_over = 0  # the framer's pass_over, kept across reconnects

    def pass_over(self, mode: int) -> None:
        """The framer's ``pass_over`` from now on (``_frames.PASS_*``: the loop is inside a transaction)."""
        self._pass_over = mode
        if self.framer is not None:
            self.framer.pass_over = mode

    def remember(self, event: FramedEvent) -> None:
        """The loop took this TABLE_MAP (its table id's schema version): the framer may pass over twins."""
        if self.framer is not None:
            self.framer.remember(event)

    @property
    def checksum(self) -> bool:
        return bool(getattr(self.stream, _P + "use_checksum"))

    def fetchone(self) -> Any:
        while True:
            event = self._next_framed()
            if event is None:
                return None
            if event.framed:
                self._follow(event)
                return event
            parsed = self.python_event(event)
            if parsed is not None:
                return parsed

    def next_header(self) -> FramedEvent | None:
        """The next event as the framer cut it, framed or not (its header's fields always hold), with
        mysql-replication's resume point moved past it; None at the end of a non-blocking read. A boundary
        scan (``PASS_BOUNDARY``) reads its events this way: no mysql-replication object for any of them."""
        event = self._next_framed()
        if event is not None:
            self._follow(event)
        return event

    def close(self) -> None:
        self.stream.close()

    # -- mysql-replication's side -----------------------------------------------------------------------

    def python_event(self, event: FramedEvent, follow: bool = True) -> Any:
        """mysql-replication's event object of the same packet, with its state moved past it as its own
        ``fetchone`` does (``follow``); None where it would have passed over the event."""
        stream = self.stream
        packet = MysqlPacket(event.packet(), stream._ctl_connection.encoding)
        wrapper = BinLogPacketWrapper(
            packet, stream.table_map, stream._ctl_connection, stream.mysql_version, self.checksum,
            getattr(stream, _P + "allowed_events_in_packet"), getattr(stream, _P + "only_tables"),
            getattr(stream, _P + "ignored_tables"), getattr(stream, _P + "only_schemas"),
            getattr(stream, _P + "ignored_schemas"), getattr(stream, _P + "freeze_schema"),
            getattr(stream, _P + "ignore_decode_errors"), getattr(stream, _P + "verify_checksum"),
            getattr(stream, _P + "optional_meta_data"), getattr(stream, _P + "enable_logging"),
            getattr(stream, _P + "use_column_name_cache"), getattr(stream, _P + "post_header_lengths"),
        )
        parsed = wrapper.event
        if not follow:
            return parsed
        kind = wrapper.event_type
        if kind == BINLOG.ROTATE_EVENT:
            stream.log_pos, stream.log_file = parsed.position, parsed.next_binlog
            if wrapper.timestamp != 0:
                stream.table_map = {}
        elif wrapper.log_pos:
            stream.log_pos = wrapper.log_pos
        if kind == BINLOG.FORMAT_DESCRIPTION_EVENT and parsed is not None:
            stream.mysql_version = parsed.mysql_version
            setattr(stream, _P + "post_header_lengths", parsed.post_header_len)
            if self.framer is not None:
                self.framer.set_post_header_lengths(parsed.post_header_len)
        if kind == BINLOG.TABLE_MAP_EVENT and parsed is not None:
            stream.table_map[parsed.table_id] = parsed.get_table()
        return parsed

    def _follow(self, event: FramedEvent) -> None:
        """Move mysql-replication's resume point (and table map, at a rotation) past a framed event."""
        stream = self.stream
        if event.event_type == BINLOG.ROTATE_EVENT:
            stream.log_pos, stream.log_file = event.position, event.next_binlog
            if event.timestamp != 0:
                stream.table_map = {}
        elif event.log_pos:
            stream.log_pos = event.log_pos

    # -- the connection's bytes ---------------------------------------------------------------------------

    def _next_framed(self) -> FramedEvent | None:
        frames = compiled.module()
        assert frames is not None
        while True:
            if self.framer is None:
                self._connect(frames)
            framer = self.framer
            assert framer is not None
            event = framer.next_event()
            if event is None:
                try:
                    self._read_more(framer)
                except pymysql.err.OperationalError as exc:
                    if exc.args and exc.args[0] in _LOST:  # mysql-replication reconnects from log_pos
                        self._disconnect()
                        continue
                    raise
                continue
            if event.event_type == frames.PACKET_EOF:
                self.stream.close()
                return None
            if event.event_type == frames.PACKET_ERROR:
                try:
                    MysqlPacket(event.packet(), "utf8").raise_for_error()
                except pymysql.err.OperationalError as exc:
                    if exc.args and exc.args[0] in _LOST:
                        self._disconnect()
                        continue
                    raise
            return event

    def _connect(self, frames: Any) -> None:
        stream = self.stream
        if not getattr(stream, _P + "connected_stream"):
            getattr(stream, _P + "connect_to_stream")()
        if not getattr(stream, _P + "connected_ctl"):
            getattr(stream, _P + "connect_to_ctl")()
        conn = stream._stream_connection
        self.framer = frames.Framer(self.checksum, conn._next_seq_id)
        self.framer.set_post_header_lengths(getattr(stream, _P + "post_header_lengths"))
        self.framer.pass_over = self._pass_over

    def _disconnect(self) -> None:
        if self.framer is not None and self.framer.passed_log_pos:
            self.stream.log_pos = self.framer.passed_log_pos  # resume after the events passed over
        self.stream._stream_connection.close()
        setattr(self.stream, _P + "connected_stream", False)
        self.framer = None

    def _read_more(self, framer: Framer) -> None:
        """Whatever the socket has (at least a byte; all of a large event's missing bytes at once)."""
        conn = self.stream._stream_connection
        size = max(_READ_SIZE, framer.wanted())
        while True:
            try:
                chunk = conn._rfile.read1(size)
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise _lost(conn, f"Lost connection to MySQL server during query ({exc})", exc) from None
        if not chunk:
            raise _lost(conn, "Lost connection to MySQL server during query", None)
        framer.feed(chunk)


def _lost(conn: Any, message: str, cause: OSError | None) -> pymysql.err.OperationalError:
    """The error pymysql raises for a lost connection (our connections name the server and the setting)."""
    conn._force_close()
    error = pymysql.err.OperationalError(2013, message)
    error.__context__ = cause
    timed_out = getattr(conn, "_timed_out", None)
    if timed_out is not None:
        named = timed_out(error, 2013, "no reply from", conn._read_timeout)
        if named is not None:
            return named
    return error
