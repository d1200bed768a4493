"""Admission control for stream micro-batches: where the next batch ends, without decoding rows on the driver.

A batch ends at a *transaction boundary* (``engine.binlog.boundaries``: an offset that never points into a
transaction), so the batch's end is exact and a replay of the batch reads the very same changes. The batch
takes the last boundary within ``max_bytes`` of binlog from its start; a first transaction larger than the
budget is admitted whole (a batch always makes progress). ``until`` bounds the batch end (the binlog end
observed when an ``AvailableNow`` run started). The binlog reader re-checks every end it is given and fails
loudly if one lies inside a transaction, so a wrong boundary can never drop rows silently.

The same scan leaves *marks* (a boundary about every ``mark_bytes``) from which ``cut_points`` splits a batch
that is far behind into partitions decoded in parallel (parallel catch-up), at no extra scan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.boundaries import iter_boundaries, iter_framed_boundaries
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import COMPARE, PYTHON, decoder_mode
from airflow_provider_mysqlcdc.engine.binlog.errors import BinlogPurged
from airflow_provider_mysqlcdc.engine.binlog.event_framer import FramerMismatch, framer_available
from airflow_provider_mysqlcdc.engine.binlog.events_pager import PAGE_EVENTS, binary_logs
from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError, ServerNotReady
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

LISTED, FRAMED = "listed", "framed"  # how a batch's boundaries were read (Admission.scan)


@dataclass(frozen=True)
class Admission:
    """The end of the next batch and the binlog bytes it spans (``end == start``: nothing to read)."""

    end: BinlogOffset
    bytes: int
    boundaries_scanned: int
    marks: tuple[tuple[int, BinlogPosition], ...] = ()  # (bytes after start, boundary), in binlog order
    scan: str = LISTED  # how the boundaries were read: LISTED (SHOW BINLOG EVENTS) or FRAMED

MARK_BYTES = 512 * 1024
# A range this small is listed: the framed scan's fixed cost (a reader server_id claimed, a replication
# session opened: 7 ms on MariaDB, 21 ms on MySQL here) exceeds what one page of SHOW BINLOG EVENTS costs for
# it (~0.3 ms per KiB listed, ~0.05 framed: even at 32 KiB, 10 ms listed). What a stream that has caught up
# plans at every trigger.
LISTED_SCAN_BYTES = 32 * 1024


def next_batch_end(
    conn: pymysql.connections.Connection,
    start: BinlogOffset,
    *,
    max_bytes: int | None,
    until: BinlogPosition | None = None,
    page_events: int = PAGE_EVENTS,
    mark_bytes: int = MARK_BYTES,
    settings: MySQLSettings | None = None,
    listed_below: int = LISTED_SCAN_BYTES,
) -> Admission:
    """The last transaction boundary after ``start`` within ``max_bytes`` (None: no limit) and ``until``,
    with the boundaries that lie at least ``mark_bytes`` apart on the way (``Admission.marks``).

    With ``settings`` (the server of ``conn``) the boundaries are read by a replication session through the
    compiled framer (``boundaries.iter_framed_boundaries``, a reader ``server_id`` claimed for the scan);
    without them, or without the framer, or when the binlog holds less than ``listed_below`` bytes after
    ``start`` (up to ``until``), from ``SHOW BINLOG EVENTS``. In ``compare`` mode (the suite) both, stopping
    at the first boundary that differs."""
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
    until_key = until.key if until is not None else None
    scanned = 0
    marks: list[tuple[int, BinlogPosition]] = []
    if settings is not None and _bytes_after(names, sizes, start, until) < listed_below:
        settings = None  # a small range: listed (LISTED_SCAN_BYTES)
    with _boundaries(conn, names, start, page_events, settings) as (scan, boundaries):
        for boundary in boundaries:
            scanned += 1
            if boundary.file == start.file and boundary.pos <= start.pos:
                continue
            if until_key is not None and boundary.key > until_key:
                break
            if boundary.file not in sizes:  # a binlog file made after the list was read (a rotation or a
                break  # restart meanwhile; the framed scan reads on to the binlog's end): the next batch's
            used = _bytes_between(names, sizes, start, boundary)
            if max_bytes is not None and used > max_bytes and found:
                break
            best, best_bytes, found = BinlogOffset.at(boundary), used, True
            if used - (marks[-1][0] if marks else 0) >= mark_bytes:
                marks.append((used, boundary))
            if max_bytes is not None and used >= max_bytes:
                break
    return Admission(best, best_bytes, scanned, tuple(marks), scan)


@contextlib.contextmanager
def _boundaries(conn: pymysql.connections.Connection, names: list[str], start: BinlogOffset, page_events: int,
                settings: MySQLSettings | None) -> Iterator[tuple[str, Iterator[BinlogPosition]]]:
    """The boundaries from ``start`` on: framed when it can (see ``next_batch_end``), else listed."""
    with contextlib.ExitStack() as stack:
        server_id = None
        if settings is not None and decoder_mode() != PYTHON and framer_available():
            try:
                server_id = stack.enter_context(claimed_server_id(settings))
            except (ConfigurationError, ServerNotReady):
                server_id = None  # no reader id to spare (a range of two ids, all in use): listed
        if server_id is None or settings is None:
            yield LISTED, iter_boundaries(conn, names, start.file, start.pos, page_events=page_events)
            return
        scan = stack.enter_context(
            contextlib.closing(iter_framed_boundaries(settings, server_id, start.file, start.pos))
        )
        if decoder_mode() == COMPARE:  # the suite: each framed boundary must be the listed one
            listed = iter_boundaries(conn, names, start.file, start.pos, page_events=page_events)
            yield FRAMED, _compared(scan, listed)
            return
        yield FRAMED, scan


def _compared(framed: Iterator[BinlogPosition], listed: Iterator[BinlogPosition]) -> Iterator[BinlogPosition]:
    """The framed boundaries, each checked against the listed one in its place (until either ends: the binlog
    may grow between the two reads)."""
    for boundary in framed:
        expected = next(listed, None)
        if expected is not None and boundary != expected:
            raise FramerMismatch(
                f"the framed boundary scan found a transaction boundary at {boundary}, SHOW BINLOG EVENTS at "
                f"{expected}"
            )
        yield boundary


def cut_points(
    marks: Sequence[tuple[int, BinlogPosition]], total: int, *, partitions: int, min_bytes: int
) -> list[BinlogPosition]:
    """Boundaries inside a range of ``total`` bytes that split it into at most ``partitions`` parts of about
    equal size, none planned smaller than ``min_bytes``: [] (one part) when the range is small, which is when
    the stream has caught up."""
    parts = min(partitions, total // max(min_bytes, 1))
    cuts: list[tuple[int, BinlogPosition]] = []
    for k in range(1, parts):
        target = total * k // parts
        after = cuts[-1][0] if cuts else 0
        mark = next((m for m in marks if m[0] >= target and after < m[0] < total), None)
        if mark is not None:
            cuts.append(mark)
    return [position for _, position in cuts]


def _bytes_after(names: list[str], sizes: dict[str, int], start: BinlogOffset,
                 until: BinlogPosition | None) -> int:
    """The binlog bytes from ``start`` to ``until`` (None, or a file not listed: to the binlog's end)."""
    last = BinlogPosition(names[-1], sizes[names[-1]])
    end = until if until is not None and until.file in sizes else last
    return max(0, _bytes_between(names, sizes, start, end)) if end.key >= start.position.key else 0


def _bytes_between(names: list[str], sizes: dict[str, int], start: BinlogOffset, end: BinlogPosition) -> int:
    if end.file == start.file:
        return end.pos - start.pos
    first, last = names.index(start.file), names.index(end.file)
    return sizes[start.file] - start.pos + sum(sizes[n] for n in names[first + 1:last]) + end.pos
