"""Oracle MySQL GTID sets: the executed GTID set at a binlog position, and the position after a GTID set.

A MySQL GTID is ``source_uuid[:tag]:gno`` (tags since MySQL 8.3), unique in the whole replication topology;
a GTID *set* (``uuid:1-57:60,uuid2:tag:1-9``) lists transactions by intervals. There is no order between
sources, so the set at a point of one server's binlog is read from that binlog:

* the set at a position (``set_at``): the file's ``Previous_gtids`` event (the executed set when the file
  began) plus ``gtid_purged`` (transactions the server took as executed without logging them: a replica
  provisioned with ``SET GLOBAL gtid_purged`` after ``RESET BINARY LOGS AND GTIDS``) plus the GTIDs of the
  transactions before the position in that file; or, the same set where the position is near the end of the
  binlog, ``gtid_executed`` minus the GTIDs after the position. Scans of the event headers (``SHOW BINLOG
  EVENTS``); each process keeps what it scanned forwards per file (``_SCANS``), so the next position of the
  same file scans only what lies between;
* the position after a set (``position_after``): the start of the first transaction of this server's binlog
  the set does not contain, once this server has executed all of the set, with no transaction the set
  contains after it (else the histories differ: errant transactions, another order).

Anonymous transactions (``gtid_mode`` OFF or in transition) have no GTID: a position after one has no GTID
set (None), and a stream there cannot move to another server.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs, first_events, iter_events
from airflow_provider_mysqlcdc.engine.binlog.gtid_errors import (
    GtidError,
    GtidNotFound,
    GtidsNotCommitted,
    GtidUnsupported,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([^']+)'", re.IGNORECASE)

Source = tuple[str, str]  # (uuid in its canonical dashed lower-case form, tag or "")


def _canonical_uuid(text: str) -> str | None:
    value = text.strip().lower()
    if not _UUID.match(value):
        return None
    digits = value.replace("-", "")
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


@dataclass(frozen=True)
class MysqlGtid:
    """One Oracle MySQL GTID: the source's server_uuid, an optional tag, the transaction number."""

    uuid: str
    tag: str
    gno: int

    @property
    def source(self) -> Source:
        return self.uuid, self.tag

    @classmethod
    def parse(cls, text: str) -> MysqlGtid:
        parts = text.strip().split(":")
        uuid = _canonical_uuid(parts[0]) if len(parts) in (2, 3) else None
        tag = parts[1].strip().lower() if len(parts) == 3 else ""
        if uuid is None or (tag and not _TAG.match(tag)) or not parts[-1].strip().isdigit():
            raise GtidUnsupported(f"{text.strip()!r} is not an Oracle MySQL GTID (uuid:57 or uuid:tag:57)")
        return cls(uuid, tag, int(parts[-1]))

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


def _merge(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((a, b) for a, b in merged)


@dataclass(frozen=True)
class MysqlGtidSet:
    """An Oracle MySQL GTID set, normalized (sources sorted, intervals merged): equal sets compare equal."""

    sources: tuple[tuple[Source, tuple[tuple[int, int], ...]], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> MysqlGtidSet:
        """``uuid:1-5:7,uuid2:tag:1-3`` as the server prints it (newlines after the commas allowed)."""
        raw = "".join((text or "").split())
        builder = GtidSetBuilder()
        for part in (p for p in raw.split(",") if p):
            tokens = part.split(":")
            uuid = _canonical_uuid(tokens[0])
            if uuid is None or len(tokens) < 2:
                hint = " (it looks like a MariaDB GTID position)" if re.match(r"^\d+-\d+-\d+", part) else ""
                raise GtidUnsupported(
                    f"{part!r} is not part of an Oracle MySQL GTID set (uuid:1-57, e.g. "
                    f"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57){hint}"
                )
            tag = ""
            intervals = 0
            for token in tokens[1:]:
                match = _INTERVAL.match(token)
                if match:
                    start = int(match[1])
                    end = int(match[2]) if match[2] else start
                    if start < 1 or end < start:
                        raise GtidUnsupported(f"GTID set {text!r}: interval {token!r} is empty or has 0")
                    builder.add_interval((uuid, tag), start, end)
                    intervals += 1
                elif _TAG.match(token.lower()):
                    tag = token.lower()
                else:
                    raise GtidUnsupported(f"GTID set {text!r}: {token!r} is neither an interval nor a tag")
            if not intervals:
                raise GtidUnsupported(f"GTID set {text!r}: {part!r} names no transaction")
        return builder.freeze()

    @property
    def by_source(self) -> dict[Source, tuple[tuple[int, int], ...]]:
        return dict(self.sources)

    def contains(self, gtid: MysqlGtid) -> bool:
        return any(a <= gtid.gno <= b for a, b in self.by_source.get(gtid.source, ()))

    def covers(self, other: MysqlGtidSet) -> bool:
        """Every transaction ``other`` contains is contained here."""
        mine = self.by_source
        for source, intervals in other.sources:
            have = mine.get(source, ())
            for start, end in intervals:
                if not any(a <= start and end <= b for a, b in have):
                    return False
        return True

    def union(self, *others: MysqlGtidSet) -> MysqlGtidSet:
        builder = GtidSetBuilder(self)
        for other in others:
            builder.add_set(other)
        return builder.freeze()

    def minus(self, other: MysqlGtidSet) -> MysqlGtidSet:
        """The transactions of this set that ``other`` does not contain (for messages)."""
        theirs = other.by_source
        builder = GtidSetBuilder()
        for source, intervals in self.sources:
            for start, end in intervals:
                pieces = [(start, end)]
                for a, b in theirs.get(source, ()):
                    cut = ((s, min(e, a - 1)) for s, e in pieces), ((max(s, b + 1), e) for s, e in pieces)
                    pieces = [p for side in cut for p in side if p[0] <= p[1]]
                for s, e in pieces:
                    builder.add_interval(source, s, e)
        return builder.freeze()

    def __bool__(self) -> bool:
        return bool(self.sources)

    def __str__(self) -> str:
        by_uuid: dict[str, list[str]] = {}
        for (uuid, tag), intervals in self.sources:
            text = ":".join(f"{a}-{b}" if b > a else str(a) for a, b in intervals)
            by_uuid.setdefault(uuid, []).append(f"{tag}:{text}" if tag else text)
        return ",".join(f"{uuid}:{':'.join(parts)}" for uuid, parts in sorted(by_uuid.items()))


class GtidSetBuilder:
    """A GTID set under construction: adding the next transaction number of a source is O(1) (the binlog's
    common case), anything else merges."""

    def __init__(self, start: MysqlGtidSet | None = None) -> None:
        self._intervals: dict[Source, list[tuple[int, int]]] = {}
        if start is not None:
            self.add_set(start)

    def add(self, gtid: MysqlGtid) -> None:
        self.add_interval(gtid.source, gtid.gno, gtid.gno)

    def add_interval(self, source: Source, start: int, end: int) -> None:
        intervals = self._intervals.setdefault(source, [])
        if intervals and intervals[-1][0] <= start and start <= intervals[-1][1] + 1:
            if end > intervals[-1][1]:
                intervals[-1] = (intervals[-1][0], end)
            return
        intervals.append((start, end))
        if len(intervals) > 1 and intervals[-2][1] + 1 >= start:
            self._intervals[source] = list(_merge(intervals))

    def add_set(self, other: MysqlGtidSet) -> None:
        for source, intervals in other.sources:
            for start, end in intervals:
                self.add_interval(source, start, end)

    def freeze(self) -> MysqlGtidSet:
        return MysqlGtidSet(tuple(sorted((s, _merge(i)) for s, i in self._intervals.items() if i)))


def _gtid_of(event_info: object, where: str) -> MysqlGtid:
    match = _GTID_NEXT.search(str(event_info or ""))
    if not match:
        raise GtidError(f"cannot read the GTID of the event at {where}: {event_info!r}")
    return MysqlGtid.parse(match[1])


def _kind(event_type: object) -> str:
    return str(event_type).lower()


def previous_gtids(conn: pymysql.connections.Connection, name: str) -> MysqlGtidSet:
    """The executed GTID set when binlog file ``name`` began (its ``Previous_gtids`` event)."""
    for event in first_events(conn, name, 4):
        if _kind(event.event_type) == "previous_gtids":
            return MysqlGtidSet.parse(str(event.info or ""))
    raise GtidError(f"binlog file {name} has no Previous_gtids event: is this an Oracle MySQL binlog?")


# --- the set at a position -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Checkpoint:
    pos: int  # an event boundary of the file
    gtids: MysqlGtidSet  # the GTIDs of the file's transactions before ``pos``
    # (start, info) of an event of the file (the last GTID event before ``pos``, or the event at ``pos``),
    # checked on reuse: a binlog reset under the same name would not have it
    anchor: tuple[int, str] | None


_SCANS: OrderedDict[tuple[str, str, str], list[_Checkpoint]] = OrderedDict()  # (uuid, file, previous) ->
_SCANS_LOCK = threading.Lock()
_MAX_FILES, _MAX_CHECKPOINTS = 16, 32


COMMIT_WAIT_S = 120.0  # how long ``executed_after_commits`` waits for transactions already written to commit


def owned_gtids(text: str | None) -> str:
    """``@@global.gtid_owned`` (``uuid[:tag]:n#thread,...``) as a GTID set (``uuid[:tag]:n,...``)."""
    if not text:
        return ""
    return ",".join(part.split("#", 1)[0].strip() for part in text.split(",") if part.strip())


def executed_after_commits(conn: pymysql.connections.Connection, wait_s: float = COMMIT_WAIT_S) -> str:
    """``@@global.gtid_executed`` once every transaction written to the binlog before this call has committed.

    A transaction owns its GTID (``gtid_owned``) before its events are written to the binlog, and its GTID
    leaves ``gtid_owned`` for ``gtid_executed`` in one step, after the engine commit. So once every GTID owned
    now is executed (``WAIT_FOR_EXECUTED_GTID_SET``), the executed set holds every transaction written so far,
    and each of them is committed (visible to a read view opened after this)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_owned")
        owned = owned_gtids((cur.fetchone() or (None,))[0])
        if owned:
            cur.execute("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)", (owned, max(0.001, float(wait_s))))
            if (cur.fetchone() or (1,))[0] != 0:
                raise GtidsNotCommitted(
                    f"transactions {owned} were written to the binlog but did not commit within "
                    f"{wait_s:g}s (a long commit, or a replica's applier stopped inside a transaction): "
                    "rerun once they commit")
        cur.execute("SELECT @@global.gtid_executed")
        return str((cur.fetchone() or ("",))[0] or "")


def set_at(
    conn: pymysql.connections.Connection, position: BinlogPosition, *, scan: str | None = None
) -> MysqlGtidSet | None:
    """The executed GTID set at an event boundary of this server's binlog (see the module docstring); None
    where it has none: ``gtid_mode`` not ON, a file it does not have, not an event boundary, an anonymous
    transaction before the position in its file (forwards).

    Two ways to the same set, the one with fewer binlog bytes to scan taken (``scan`` forces one, for tests):
    forwards, the file's ``Previous_gtids`` and ``gtid_purged`` plus the GTIDs from the file's start (or the
    nearest point scanned before) to the position; backwards, ``gtid_executed`` minus the GTIDs from the
    position to the end of the binlog. ``gtid_executed`` is read before that scan, once every transaction
    written before it committed (``executed_after_commits``: so it holds every transaction before the
    position, the position being read earlier), and a transaction enters it only after its events are in the
    binlog, so every GTID of it that lies after the position is seen and taken away. A chunk HW or a batch
    end, near the end of the binlog, costs the few events after it; an older position, the events since the
    last one asked for."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_purged, @@server_uuid")
        mode, purged, uuid = cur.fetchone()
    if str(mode).upper() != "ON":
        return None
    logs = binary_logs(conn)
    sizes = dict(logs)
    if position.file not in sizes or position.pos > sizes[position.file] or position.pos < 4:
        return None
    head = first_events(conn, position.file, 4)
    previous = next((e for e in head if _kind(e.event_type) == "previous_gtids"), None)
    if previous is None:
        return None
    key = (str(uuid), position.file, "".join(str(previous.info or "").split()))
    names = [name for name, _ in logs]
    later = names[names.index(position.file) + 1:]
    behind = sizes[position.file] - position.pos + sum(sizes[name] for name in later)
    before_file = MysqlGtidSet.parse(str(previous.info or "")).union(MysqlGtidSet.parse(str(purged or "")))
    if scan == "backward" or (scan is None and behind < position.pos - _nearest(key, position.pos)):
        executed = executed_after_commits(conn)
        found = _backward(conn, names, position, MysqlGtidSet.parse(executed))
        if found is None:
            return None
        gtids, anchor = found
        if anchor is not None:  # the next position of this file scans forwards from here
            _remember(key, _Checkpoint(position.pos, gtids.minus(before_file), anchor))
        return gtids
    in_file = _in_file(conn, key, position.pos)
    if in_file is None:
        return None
    return before_file.union(in_file)


def _nearest(key: tuple[str, str, str], pos: int) -> int:
    """Where a forward scan to ``pos`` would start: the nearest point this process scanned to before."""
    with _SCANS_LOCK:
        return max((c.pos for c in _SCANS.get(key, ()) if c.pos <= pos), default=4)


def _backward(
    conn: pymysql.connections.Connection, names: list[str], position: BinlogPosition, executed: MysqlGtidSet
) -> tuple[MysqlGtidSet, tuple[int, str] | None] | None:
    """``executed`` (read before this) minus the GTIDs of the transactions from ``position`` on, and the event
    at the position (its start and info, to check a checkpoint there later; None at the file's end)."""
    after = GtidSetBuilder()
    anchor: tuple[int, str] | None = None
    try:
        for event in iter_events(conn, names, position.file, position.pos):
            if event.file == position.file and event.pos < position.pos:
                return None  # the server read from elsewhere: not an event boundary
            if event.file == position.file and event.pos == position.pos:
                anchor = (event.pos, str(event.info or ""))
            if _kind(event.event_type) == "gtid":
                after.add(_gtid_of(event.info, f"{event.file}:{event.pos}"))
    except pymysql.err.MySQLError:
        return None  # not an event boundary ("Wrong offset or I/O error")
    return executed.minus(after.freeze()), anchor


def _in_file(
    conn: pymysql.connections.Connection, key: tuple[str, str, str], pos: int
) -> MysqlGtidSet | None:
    """The GTIDs of the transactions before ``pos`` in the file, scanned from the nearest checkpoint."""
    file = key[1]
    with _SCANS_LOCK:
        known = list(_SCANS.get(key, ()))
    start = _Checkpoint(4, MysqlGtidSet(), None)
    for checkpoint in sorted(known, key=lambda c: c.pos, reverse=True):
        if checkpoint.pos <= pos and _anchor_holds(conn, file, checkpoint.anchor):
            start = checkpoint
            break
    builder = GtidSetBuilder(start.gtids)
    at, anchor = start.pos, start.anchor
    if at < pos:
        for event in iter_events(conn, [file], file, at):
            if event.pos != at:
                return None  # the checkpoint is not an event boundary of this file: scan again from 4
            kind = _kind(event.event_type)
            if kind == "anonymous_gtid":
                return None
            if kind == "gtid":
                builder.add(_gtid_of(event.info, f"{file}:{event.pos}"))
                anchor = (event.pos, str(event.info or ""))
            at = event.end_pos
            if at >= pos:
                break
    if at != pos:
        return None  # not an event boundary
    found = builder.freeze()
    _remember(key, _Checkpoint(pos, found, anchor))
    return found


def _remember(key: tuple[str, str, str], checkpoint: _Checkpoint) -> None:
    with _SCANS_LOCK:
        checkpoints = [c for c in _SCANS.pop(key, []) if c.pos != checkpoint.pos]
        checkpoints.append(checkpoint)
        _SCANS[key] = sorted(checkpoints, key=lambda c: c.pos)[-_MAX_CHECKPOINTS:]
        while len(_SCANS) > _MAX_FILES:
            _SCANS.popitem(last=False)


def _anchor_holds(conn: pymysql.connections.Connection, file: str, anchor: tuple[int, str] | None) -> bool:
    """The file still has the event a checkpoint was anchored on (a binlog reset under the same name and
    server_uuid, a restore, would not)."""
    if anchor is None:
        return True  # a checkpoint of no GTID at all: nothing to lose by reusing it
    with conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 1", (file, anchor[0]))
        row = cur.fetchone()
    return row is not None and int(row[1]) == anchor[0] and str(row[5] or "") == anchor[1]


def forget_scans() -> None:
    """Drop what this process scanned (tests)."""
    with _SCANS_LOCK:
        _SCANS.clear()


# --- the position after a set ----------------------------------------------------------------------------

def position_after(conn: pymysql.connections.Connection, wanted: MysqlGtidSet, where: str) -> BinlogOffset:
    """The start of the first transaction of this server's binlog that ``wanted`` does not contain (the
    current end of the binlog if there is none yet), as an offset carrying ``wanted`` as its GTID set.

    This server must have executed all of ``wanted`` (read before the scan, so a transaction of the set
    cannot land after it unseen). The scan starts in the newest binlog file whose ``Previous_gtids`` the set
    covers, and stops once the first transaction outside the set is found and every transaction of the set
    is known to be before it; a transaction of the set after that one means this server's history differs."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged")
        mode, executed_text, purged_text = cur.fetchone()
    if str(mode).upper() != "ON":
        raise GtidError(
            f"the server at {where} runs with gtid_mode={mode}: its binlog has no GTIDs to find the GTID set "
            "in. Set gtid_mode=ON (and enforce_gtid_consistency=ON) on every server of the topology"
        )
    executed = MysqlGtidSet.parse(str(executed_text or ""))
    missing = wanted.minus(executed)
    if missing:
        raise GtidNotFound(
            f"the server at {where} has not applied GTID {missing} (its gtid_executed is "
            f"{executed or '(empty)'}): it is behind the server the GTID set was taken from (a replica that "
            "has not caught up: wait for it), or it belongs to another replication topology"
        )
    names = [name for name, _ in binary_logs(conn)]
    if not names:
        raise GtidError(f"the server at {where} lists no binary logs: binary logging must be on")
    first_file = _start_file(conn, names, wanted, where)
    known = GtidSetBuilder(MysqlGtidSet.parse(str(purged_text or "")))
    start: BinlogPosition | None = None
    first_outside = ""
    end = BinlogPosition(first_file, 4)
    for event in iter_events(conn, names, first_file, 4):
        end = BinlogPosition(event.file, event.end_pos)
        kind = _kind(event.event_type)
        if kind == "previous_gtids":  # every transaction of the files before: before ``start`` too
            known.add_set(MysqlGtidSet.parse(str(event.info or "")))
        elif kind == "anonymous_gtid" and start is None:
            start, first_outside = BinlogPosition(event.file, event.pos), "an anonymous transaction"
        elif kind == "gtid":
            gtid = _gtid_of(event.info, f"{event.file}:{event.pos}")
            if wanted.contains(gtid):
                if start is not None:
                    raise GtidNotFound(
                        f"on {where}, transaction {gtid} (contained in the GTID set) follows "
                        f"{first_outside} at {start}, the first transaction the set does not contain: this "
                        "server executed transactions the stream's server did not (errant transactions, e.g. "
                        "writes on a replica) or applied them in another order, and resuming by position "
                        "would repeat or lose changes. Make the histories agree, or re-snapshot on this one"
                    )
                known.add(gtid)
                continue
            if start is not None:
                continue  # the set is unchanged: nothing new to check
            start, first_outside = BinlogPosition(event.file, event.pos), f"transaction {gtid}"
        else:
            continue
        if start is not None and known.freeze().covers(wanted):
            break  # every transaction of the set is before ``start``: none can follow it
    resume = start if start is not None else end  # nothing newer yet: the current end of the binlog
    return BinlogOffset(resume.file, resume.pos, gtid_position=str(wanted))


def _start_file(
    conn: pymysql.connections.Connection, names: list[str], wanted: MysqlGtidSet, where: str
) -> str:
    """The newest file whose ``Previous_gtids`` the set covers."""
    oldest = MysqlGtidSet()
    for name in reversed(names):
        oldest = previous_gtids(conn, name)
        if wanted.covers(oldest):
            return name
    raise GtidNotFound(
        f"the GTID set {wanted or '(empty)'} lies before the oldest binlog file {names[0]} on {where} "
        f"(which starts after {oldest}, including {oldest.minus(wanted)} the set does not contain): the "
        "transactions "
        "after it were purged from this server's binlog, or this server executed transactions the set does "
        "not contain (errant transactions), or it belongs to another replication topology"
    )
