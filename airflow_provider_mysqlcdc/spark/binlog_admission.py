"""Admission control for stream micro-batches: where the next batch ends, without decoding rows on the driver.

A batch ends at a *transaction boundary* (an offset that never points into a transaction, so the batch's end
is exact and a replay of the batch reads the very same changes). The driver finds boundaries with
``SHOW BINLOG EVENTS`` (event headers and a short info text; the server decodes no rows for it), paging from
the batch start:

* the start of a group: a GTID event (MariaDB ``Gtid``; MySQL ``Gtid``/``Anonymous_Gtid``/``Gtid_tagged``)
  and a ``Rotate`` event (a file ends only between groups);
* the end of a group: an ``Xid`` or ``XA_prepare`` event, a ``COMMIT``/``ROLLBACK`` query, or the single
  statement of a group that did not ``BEGIN`` (DDL). These make the last transaction of the binlog
  admissible before another one follows it.

The batch takes the last boundary within ``max_bytes`` of binlog from its start; a first transaction larger
than the budget is admitted whole (a batch always makes progress). ``until`` bounds the batch end (the binlog
end observed when an ``AvailableNow`` run started). The binlog reader re-checks every end it is given and
fails loudly if one lies inside a transaction, so a wrong boundary can never drop rows silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from ..engine.binlog_reader import BinlogPurged
from ..engine.offsets import BinlogOffset
from ..engine.positions import BinlogPosition, file_number

GROUP_START_EVENTS = frozenset({"gtid", "anonymous_gtid", "gtid_tagged", "gtid_log_event"})
GROUP_END_EVENTS = frozenset({"xid", "xa_prepare"})
PAGE_EVENTS = 2000


@dataclass(frozen=True)
class Admission:
    """The end of the next batch and the binlog bytes it spans (``end == start``: nothing to read)."""

    end: BinlogOffset
    bytes: int
    events_scanned: int


def binary_logs(conn: pymysql.connections.Connection) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(str(r[0]), int(r[1])) for r in cur.fetchall()]


def next_batch_end(
    conn: pymysql.connections.Connection,
    start: BinlogOffset,
    *,
    max_bytes: int | None,
    until: BinlogPosition | None = None,
    page_events: int = PAGE_EVENTS,
) -> Admission:
    """The last transaction boundary after ``start`` within ``max_bytes`` (None: no limit) and ``until``."""
    logs = binary_logs(conn)
    names = [name for name, _ in logs]
    if start.file not in names:
        oldest = names[0] if names else "none"
        raise BinlogPurged(
            f"the stream's offset {start} names binlog file {start.file}, which the server no longer has "
            f"(oldest: {oldest}): the changes since the offset are gone. Re-snapshot the tables and start a "
            "new stream "
            "(new checkpoint); keep binlogs longer so the stream can fall behind safely"
        )
    sizes = dict(logs)
    best, best_bytes, found = start, 0, False
    scanned = 0
    until_key = until.key if until is not None else None
    begun = False  # inside a group that began with BEGIN (or XA START)
    consumed_before = 0  # bytes of the files before the current one, counted from the start offset
    index = names.index(start.file)
    file, pos, file_base = start.file, start.pos, start.pos
    while True:
        with conn.cursor() as cur:
            cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s", (file, pos, page_events))
            rows = cur.fetchall()
        number = file_number(file)
        for _log, event_pos, event_type, _server, end_pos, info in rows:
            scanned += 1
            kind = str(event_type).lower()
            candidates: list[int] = []
            if kind in GROUP_START_EVENTS:
                candidates.append(int(event_pos))
                begun = str(info or "").upper().startswith("BEGIN")
            elif kind in GROUP_END_EVENTS:
                candidates.append(int(end_pos))
                begun = False
            elif kind == "query":
                text = str(info or "").strip().upper()
                if text == "BEGIN" or text.startswith("XA START"):
                    begun = True
                elif text.startswith("COMMIT") or text == "ROLLBACK" or not begun:
                    candidates.append(int(end_pos))
                    begun = False
            elif kind == "rotate":
                candidates.append(int(event_pos))
            for candidate in candidates:
                if file == start.file and candidate <= start.pos:
                    continue
                if until_key is not None and (number, candidate) > until_key:
                    return Admission(best, best_bytes, scanned)
                used = consumed_before + candidate - file_base
                if max_bytes is not None and used > max_bytes and found:
                    return Admission(best, best_bytes, scanned)
                best, best_bytes, found = BinlogOffset(file, candidate), used, True
                if max_bytes is not None and used >= max_bytes:
                    return Admission(best, best_bytes, scanned)
        if len(rows) >= page_events:
            pos = int(rows[-1][4])  # the end of the last event: where the next one starts
            continue
        if index + 1 >= len(names):
            return Admission(best, best_bytes, scanned)  # the current end of the binlog
        consumed_before += sizes[file] - file_base
        index += 1
        file, pos, file_base = names[index], 4, 0
