"""Transaction boundaries of the binlog, found from event headers alone (``SHOW BINLOG EVENTS``: the server
decodes no rows for it): where a batch may end, and where a stream may start.

A boundary is an offset that never points into a transaction:

* the start of a group: a GTID event (MariaDB ``Gtid``; MySQL ``Gtid``/``Anonymous_Gtid``/``Gtid_tagged``)
  and a ``Rotate`` event (a file ends only between groups);
* the end of a group: an ``Xid`` or ``XA_prepare`` event, a ``COMMIT``/``ROLLBACK`` query, or the single
  statement of a group that did not ``BEGIN`` (DDL). These make the last transaction of the binlog a boundary
  before another one follows it.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import PAGE_EVENTS, iter_events
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

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
            begun = str(event.info or "").upper().startswith("BEGIN")
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
