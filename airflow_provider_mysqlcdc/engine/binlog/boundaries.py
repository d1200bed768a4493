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

from typing import Iterator, Sequence

import pymysql

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

GROUP_START_EVENTS = frozenset({"gtid", "anonymous_gtid", "gtid_tagged", "gtid_log_event"})
GROUP_END_EVENTS = frozenset({"xid", "xa_prepare"})
PAGE_EVENTS = 2000


def binary_logs(conn: pymysql.connections.Connection) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(str(r[0]), int(r[1])) for r in cur.fetchall()]


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
    index = names.index(file)
    begun = False  # inside a group that began with BEGIN (or XA START)
    while True:
        with conn.cursor() as cur:
            cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s", (file, pos, page_events))
            rows = cur.fetchall()
        for _log, event_pos, event_type, _server, end_pos, info in rows:
            kind = str(event_type).lower()
            if kind in GROUP_START_EVENTS:
                yield BinlogPosition(file, int(event_pos))
                begun = str(info or "").upper().startswith("BEGIN")
            elif kind in GROUP_END_EVENTS:
                yield BinlogPosition(file, int(end_pos))
                begun = False
            elif kind == "query":
                text = str(info or "").strip().upper()
                if text == "BEGIN" or text.startswith("XA START"):
                    begun = True
                elif text.startswith("COMMIT") or text == "ROLLBACK" or not begun:
                    yield BinlogPosition(file, int(end_pos))
                    begun = False
            elif kind == "rotate":
                yield BinlogPosition(file, int(event_pos))
        if len(rows) >= page_events:
            pos = int(rows[-1][4])  # the end of the last event: where the next one starts
            continue
        if index + 1 >= len(names):
            return
        index += 1
        file, pos = names[index], 4
