"""GTID positions: the name of a binlog point that every server of a replication topology shares.

A binlog position (file, pos) means something on one server only. A GTID names a transaction on every server
that applied it, so the GTID state at a point names that point on every server of the topology. The stream
records it at every batch end (``gtid_position_at``), and on another server finds the same point again
(``position_after_gtid_set``): the start of the first transaction the state does not contain. One type per
flavor (``GtidState``), parsed by ``parse_gtid_state``:

* MariaDB (``GtidPosition``, here): ``domain-server-seq``; the GTID *position*, the last GTID of each
  replication domain (``0-11-57,1-12-3``), read at a point with ``BINLOG_GTID_POS``;
* Oracle MySQL (``MysqlGtidSet``, ``engine/binlog/mysql_gtid.py``): ``uuid:gno``; the executed GTID *set* at
  a point (``uuid:1-57,uuid2:1-9``), read from the file's ``Previous_gtids`` event and the GTID events before
  the point. It needs ``gtid_mode=ON``; without it there is none (None: the stream cannot move to another
  server, and stops with an error saying so, see ``engine/stream/failover.py``).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.engine.binlog import mysql_gtid
from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs, first_events, iter_events
from airflow_provider_mysqlcdc.engine.binlog.gtid_errors import GtidError, GtidNotFound, GtidUnsupported
from airflow_provider_mysqlcdc.engine.binlog.mysql_gtid import MysqlGtid, MysqlGtidSet
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.server import server_info

_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_GTID_IN_INFO = re.compile(r"\bGTID (\d+)-(\d+)-(\d+)\b")


@dataclass(frozen=True, order=True)
class Gtid:
    """One MariaDB GTID: replication domain, originating server, sequence number (ordered within a domain)."""

    domain: int
    server_id: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Gtid:
        match = _GTID.match(text.strip())
        if not match:
            hint = " (it looks like an Oracle MySQL GTID set: for a MySQL server)" if ":" in text else ""
            raise GtidUnsupported(
                f"GTID {text.strip()!r} is not a MariaDB GTID (domain-server-seq, e.g. 0-1-57){hint}"
            )
        domain, server_id, seq = (int(g) for g in match.groups())
        return cls(domain, server_id, seq)

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"


@dataclass(frozen=True)
class GtidPosition:
    """The last GTID of each replication domain (MariaDB's ``gtid_binlog_pos`` form: ``0-11-57,1-12-3``).

    It contains every transaction of its domains up to those sequence numbers: within a domain MariaDB
    numbers transactions in binlog order (``gtid_strict_mode`` enforces it)."""

    gtids: tuple[Gtid, ...]  # one per domain, sorted by domain

    @classmethod
    def parse(cls, text: str | None) -> GtidPosition:
        items = [Gtid.parse(part) for part in split_commas(text)]
        domains = [g.domain for g in items]
        if len(set(domains)) != len(domains):
            raise GtidUnsupported(f"GTID position {text!r} names a domain twice: give one GTID per domain")
        return cls(tuple(sorted(items)))

    @property
    def by_domain(self) -> dict[int, Gtid]:
        return {g.domain: g for g in self.gtids}

    def contains(self, gtid: Gtid) -> bool:
        last = self.by_domain.get(gtid.domain)
        return last is not None and gtid.seq <= last.seq

    def covers(self, other: GtidPosition) -> bool:
        """Every transaction ``other`` contains is contained here."""
        return all(self.contains(g) for g in other.gtids)

    def __str__(self) -> str:
        return ",".join(str(g) for g in self.gtids)


GtidState = GtidPosition | MysqlGtidSet  # the GTID state at a binlog point, per flavor
__all__ = ["Gtid", "GtidError", "GtidNotFound", "GtidPosition", "GtidState", "GtidUnsupported", "MysqlGtid",
           "MysqlGtidSet", "gtid_position_at", "parse_gtid_state", "position_after_gtid_set"]


def parse_gtid_state(text: str | None, flavor: str) -> GtidState:
    """A stored or given GTID state as the type of ``flavor`` (``GtidUnsupported`` if it is not of it)."""
    if flavor == "mariadb":
        return GtidPosition.parse(text)
    return MysqlGtidSet.parse(text)


def gtid_position_at(
    conn: pymysql.connections.Connection, position: BinlogPosition, flavor: str
) -> GtidState | None:
    """The GTID state at a transaction boundary of this server's binlog; None where it cannot be known (a file
    this server does not have; not an event start; Oracle MySQL without ``gtid_mode=ON``).

    MariaDB: ``BINLOG_GTID_POS`` reads the file's ``Gtid_list`` and the event headers up to ``pos``: ~15 ms
    for a 160 MB file here, cheap enough for every batch end. Oracle MySQL: ``mysql_gtid.set_at``, which
    scans the event headers since the last point this process asked for in the same file."""
    if flavor != "mariadb":
        return mysql_gtid.set_at(conn, position)
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
        row = cur.fetchone()
    text = row[0] if row else None
    if text is None:
        return None
    return GtidPosition.parse(text.decode() if isinstance(text, bytes) else str(text))


def position_after_gtid_set(
    conn: pymysql.connections.Connection, gtid_set: str | GtidState
) -> BinlogOffset:
    """The start of the first transaction of this server's binlog that ``gtid_set`` does not contain (the
    current end of the binlog if there is none yet), as an offset carrying ``gtid_set`` as its GTID position.
    Oracle MySQL: ``mysql_gtid.position_after``; MariaDB below.

    The scan starts in the newest binlog file whose ``Gtid_list`` (the GTID position at the file's start) the
    set covers, and checks that this server's history holds the set: the set's last GTID of every domain
    must be in it, with the same originating server (else the servers diverged: transactions the set names
    never reached this server, or it belongs to another topology). Transactions the set contains must not
    follow one it does not contain (domains interleaved differently than on the server the set was taken
    from: a resume there would repeat them)."""
    where = f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"
    info = server_info(conn)
    if isinstance(gtid_set, str):
        parsed = parse_gtid_state(gtid_set, info.flavor)
    elif isinstance(gtid_set, GtidPosition) == (info.flavor == "mariadb"):
        parsed = gtid_set
    else:
        raise GtidUnsupported(f"GTID state {gtid_set} is not one of {info.label} at {where}")
    if isinstance(parsed, MysqlGtidSet):
        return mysql_gtid.position_after(conn, parsed, where)
    wanted = parsed
    names = [name for name, _ in binary_logs(conn)]
    if not names:
        raise GtidError(f"the server at {where} lists no binary logs: binary logging must be on")
    first_file, at_start = _start_file(conn, names, wanted, where)
    last = wanted.by_domain
    found = {d: at_start.get(d) == g for d, g in last.items()}
    for domain, last_gtid in last.items():
        before = at_start.get(domain)
        if before is not None and before.seq == last_gtid.seq and before.server_id != last_gtid.server_id:
            raise _diverged(where, last_gtid, before)
    start: BinlogPosition | None = None
    open_domains = set(last)  # domains not yet past the set after ``start``: a contained GTID may still come
    end = BinlogPosition(first_file, 4)
    for file, pos, end_pos, gtid in _gtid_events(conn, names, first_file):
        end = BinlogPosition(file, end_pos)
        if gtid is None:
            continue
        if wanted.contains(gtid):
            if start is not None:
                raise GtidNotFound(
                    f"on {where}, transaction {gtid} (contained in {wanted}) follows {start}, the first "
                    "transaction the GTID position does not contain: the replication domains are interleaved "
                    "differently than on the server the position was taken from, and resuming by position "
                    "would repeat it (multi-domain failover with a different order is not supported)"
                )
            if gtid.seq == last[gtid.domain].seq:
                if gtid.server_id != last[gtid.domain].server_id:
                    raise _diverged(where, last[gtid.domain], gtid)
                found[gtid.domain] = True
            continue
        mine = last.get(gtid.domain)
        if mine is not None and not found[gtid.domain]:
            raise _diverged(where, mine, gtid)
        if start is None:
            start = BinlogPosition(file, pos)
        open_domains.discard(gtid.domain)
        if not open_domains:
            break
    missing = [str(g) for d, g in last.items() if not found[d]]
    if missing:
        raise GtidNotFound(
            f"the server at {where} has not applied GTID {', '.join(missing)} (its binlog ends at {end}): it "
            "is behind the server the GTID position was taken from (a replica that has not caught up: wait "
            "for it), or it belongs to another replication topology"
        )
    resume = start if start is not None else end  # nothing newer yet: the current end of the binlog
    return BinlogOffset(resume.file, resume.pos, gtid_position=str(wanted))


def _start_file(
    conn: pymysql.connections.Connection, names: list[str], wanted: GtidPosition, where: str
) -> tuple[str, dict[int, Gtid]]:
    """The newest file whose ``Gtid_list`` the position covers, with that list by domain."""
    oldest: GtidPosition | None = None
    for name in reversed(names):
        at_start = _gtid_list(conn, name)
        if wanted.covers(at_start):
            return name, at_start.by_domain
        oldest = at_start
    raise GtidNotFound(
        f"the GTID position {wanted} lies before the oldest binlog file {names[0]} on {where} (which starts "
        f"after {oldest}): the transactions after it were purged, or the position is from another "
        "replication topology"
    )


def _gtid_list(conn: pymysql.connections.Connection, name: str) -> GtidPosition:
    for event in first_events(conn, name, 4):
        if str(event.event_type).lower() == "gtid_list":
            text = str(event.info or "").strip().strip("[]")
            return GtidPosition(tuple(sorted(Gtid.parse(p) for p in split_commas(text))))
    raise GtidError(f"binlog file {name} has no Gtid_list event: is this a MariaDB binlog?")


def _gtid_events(
    conn: pymysql.connections.Connection, names: list[str], file: str
) -> Iterator[tuple[str, int, int, Gtid | None]]:
    """(file, event start, event end, GTID or None) of every event from ``file`` on, in binlog order."""
    for event in iter_events(conn, names, file, 4):
        gtid = None
        if str(event.event_type).lower() == "gtid":
            match = _GTID_IN_INFO.search(str(event.info or ""))
            if not match:
                raise GtidError(
                    f"cannot read the GTID of the event at {event.file}:{event.pos}: {event.info!r}"
                )
            gtid = Gtid(*(int(g) for g in match.groups()))
        yield event.file, event.pos, event.end_pos, gtid


def _diverged(where: str, expected: Gtid, found: Gtid) -> GtidNotFound:
    return GtidNotFound(
        f"the binlog of {where} does not hold GTID {expected}: it has {found} in its place (domain "
        f"{expected.domain}). Its history diverged from the stream's: transactions the stream already read "
        "never reached this server (lost in the failover), or it belongs to another replication topology"
    )
