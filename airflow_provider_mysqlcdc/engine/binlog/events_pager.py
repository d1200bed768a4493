"""The binlog as the server lists it: its files (``SHOW BINARY LOGS``) and its event headers, page by page
(``SHOW BINLOG EVENTS``: the server decodes no rows for it).

Every reader of event headers (transaction boundaries, GTIDs) walks them through ``iter_events``.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pymysql

PAGE_EVENTS = 2000  # events per SHOW BINLOG EVENTS page


class EventHeader(NamedTuple):
    """One row of ``SHOW BINLOG EVENTS``: where the event starts and ends, its type and the server's info text
    (type and info as the server returned them)."""

    file: str
    pos: int  # the event's start
    event_type: Any
    end_pos: int  # the event's end: where the next one starts
    info: Any


def binary_logs(conn: pymysql.connections.Connection) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(str(r[0]), int(r[1])) for r in cur.fetchall()]


def iter_events(
    conn: pymysql.connections.Connection,
    names: Sequence[str],
    file: str,
    pos: int,
    *,
    page_events: int = PAGE_EVENTS,
) -> Iterator[EventHeader]:
    """The events from ``file:pos`` (an event start) on, through the later files in ``names``, in binlog
    order, read ``page_events`` at a time; ends at the current end of the binlog."""
    index = names.index(file)
    while True:
        with conn.cursor() as cur:
            cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s", (file, pos, page_events))
            rows = cur.fetchall()
        for _log, event_pos, event_type, _server, end_pos, info in rows:
            yield EventHeader(file, int(event_pos), event_type, int(end_pos), info)
        if len(rows) >= page_events:
            pos = int(rows[-1][4])  # the end of the last event: where the next one starts
            continue
        if index + 1 >= len(names):
            return
        index += 1
        file, pos = names[index], 4


def first_events(conn: pymysql.connections.Connection, file: str, count: int) -> list[EventHeader]:
    """The first ``count`` events of one binlog file (its format description, its GTID list, ...)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT %s", (file, count))
        rows = cur.fetchall()
    return [EventHeader(file, int(p), kind, int(end), info) for _log, p, kind, _server, end, info in rows]
