"""Transaction boundaries of the binlog, found from event headers alone (``SHOW BINLOG EVENTS``: the server
decodes no rows for it): where a batch may end, and where a stream may start.

A boundary is an offset that never points into a transaction:

* the start of a group: a GTID event (MariaDB ``Gtid``; MySQL ``Gtid``/``Anonymous_Gtid``/``Gtid_tagged``)
  and a ``Rotate`` event (a file ends only between groups);
* the end of a group: an ``Xid`` or ``XA_prepare`` event, a ``COMMIT``/``ROLLBACK`` query, or the single
  statement of a group that did not ``BEGIN`` (DDL). These make the last transaction of the binlog a boundary
  before another one follows it.

Two scans give the same boundaries. ``iter_boundaries`` pages through ``SHOW BINLOG EVENTS`` (no replication
session: every reader of a position uses it). ``iter_framed_boundaries`` reads the binlog's bytes as a replica
does and lets the compiled framer (``event_framer``, ``PASS_BOUNDARY``) pass over every event that is not a
boundary in C: on an OLTP binlog (2.4 events per row image) the server formats no text row per event and
Python sees two or three events per transaction (the stream's batch planning, ``stream/admission.py``).
"""
from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import PAGE_EVENTS, iter_events
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

GROUP_START_EVENTS = frozenset({"gtid", "anonymous_gtid", "gtid_tagged", "gtid_log_event"})
GROUP_END_EVENTS = frozenset({"xid", "xa_prepare"})


def iter_boundaries(
    conn: pymysql.connections.Connection,
    names: Sequence[str],
    file: str,
    pos: int,
    *,
    page_events: int = PAGE_EVENTS,
) -> Iterator[BinlogPosition]:
    """Boundaries of the events from ``file:pos`` (an event start) on, through the later files in ``names``,
    in binlog order; ends at the current end of the binlog."""
    begun = False  # inside a group that began with BEGIN (or XA START)
    for event in iter_events(conn, names, file, pos, page_events=page_events):
        kind = str(event.event_type).lower()
        if kind in GROUP_START_EVENTS:
            yield BinlogPosition(event.file, event.pos)
            # MariaDB's GTID event begins its group ("BEGIN GTID ...", "XA START ... GTID ..." for XA: a
            # boundary after its XA END would lie inside it); MySQL's is followed by a BEGIN query
            begun = str(event.info or "").upper().startswith(("BEGIN", "XA START"))
        elif kind in GROUP_END_EVENTS:
            yield BinlogPosition(event.file, event.end_pos)
            begun = False
        elif kind == "query":
            text = str(event.info or "").strip().upper()
            if text == "BEGIN" or text.startswith("XA START"):
                begun = True
            elif text.startswith("COMMIT") or text == "ROLLBACK" or not begun:
                yield BinlogPosition(event.file, event.end_pos)
                begun = False
        elif kind == "rotate":
            yield BinlogPosition(event.file, event.pos)


# type codes of the events a framed boundary scan acts on (``event_framer._frames``)
_QUERY, _ROTATE, _FORMAT_DESCRIPTION, _XID, _XA_PREPARE = 0x02, 0x04, 0x0F, 0x10, 0x26
_GROUP_STARTS = frozenset({0x21, 0x22, 0x2A, 0xA2})  # MySQL's GTID, ANONYMOUS/TAGGED GTID; MariaDB's GTID
_MARIADB_GTID, _MARIADB_FL_STANDALONE = 0xA2, 0x01
_NEEDS_FIELDS = frozenset({_QUERY, _ROTATE, _MARIADB_GTID})  # the scan reads more than their header


class FramingError(Exception):
    """An event the boundary scan must read the fields of, which the framer could not parse."""


def iter_framed_boundaries(
    settings: MySQLSettings, server_id: int, file: str, pos: int
) -> Generator[BinlogPosition, None, None]:
    """``iter_boundaries`` read off a replication session (replica ``server_id``, which the caller holds)
    through the compiled framer: the boundaries of the events from ``file:pos`` (an event start) on, up to
    the end of the binlog when the read starts. Close the iterator to end the read early."""
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_mysqlcdc.engine.binlog.event_framer import PASS_BOUNDARY, FramedStream
    from airflow_provider_mysqlcdc.engine.binlog.reader import _Connector

    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(), server_id=server_id, resume_stream=True,
        blocking=False, log_file=file, log_pos=pos, is_mariadb=False, filter_non_implemented_events=False,
        # no deadline, as SHOW BINLOG EVENTS has none: a batch planned without a byte limit scans the backlog
        freeze_schema=False, pymysql_wrapper=_Connector(None, settings.connect_timeout),
        enable_logging=False,
    )
    source = FramedStream(stream)
    source.pass_over(PASS_BOUNDARY)
    current, begun = file, False  # inside a group that began with BEGIN (or XA START)
    try:
        while (event := source.next_header()) is not None:
            code, end_pos = event.event_type, event.log_pos
            if code == _FORMAT_DESCRIPTION:
                source.python_event(event)  # its post-header lengths (QUERY's layout), the framer's too
                continue
            if end_pos == 0 or event.header_flags & 0x20:  # artificial: the rotate names the file streamed
                if code == _ROTATE:
                    current = str(event.next_binlog)
                continue
            if not event.framed and code in _NEEDS_FIELDS:
                raise FramingError(f"event of type {code:#04x} ending at {current}:{end_pos}: the framer "
                                   "could not read its fields")
            if code in _GROUP_STARTS:
                yield BinlogPosition(current, end_pos - event.event_size)
                begun = code == _MARIADB_GTID and not event.gtid_flags & _MARIADB_FL_STANDALONE
            elif code == _XID or code == _XA_PREPARE:
                yield BinlogPosition(current, end_pos)
                begun = False
            elif code == _QUERY:
                text = str(event.query).strip().upper()
                if text == "BEGIN" or text.startswith("XA START"):
                    begun = True
                elif text.startswith("COMMIT") or text == "ROLLBACK" or not begun:
                    yield BinlogPosition(current, end_pos)
                    begun = False
            elif code == _ROTATE:
                if event.timestamp == 0:
                    current = str(event.next_binlog)
                    continue
                yield BinlogPosition(current, end_pos - event.event_size)
                current = str(event.next_binlog)
    finally:
        stream.close()
