"""The compiled framer of the binlog event stream (engine/binlog/event_framer): on real servers of both
flavors its reads equal mysql-replication's (compare mode checks every framed event field by field on the
way), with checksums on and off, across a rotation, resumed mid-transaction; TABLE_MAPs are parsed once per
table id; an event type it does not know is refused, never skipped. Synthetic bytes test the packet framing
itself."""
from __future__ import annotations

import struct
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pymysql
import pytest

from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowChange, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import COMPARE, COMPILED, PYTHON
from airflow_provider_mysqlcdc.engine.binlog.errors import UnsupportedEvent
from airflow_provider_mysqlcdc.engine.binlog.event_framer import (
    PASS_MARK,
    PASS_NONE,
    PASS_OVER,
    FramedEvent,
    FramedStream,
    compiled,
)
from airflow_provider_mysqlcdc.engine.binlog.event_framer import stream as framer_stream
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from tests.engine.test_binlog_reader import execute, reader_for, status

frames = compiled.loaded()
pytestmark = pytest.mark.skipif(frames is None, reason="the compiled framer is not built")

TABLE_MAP, XID, QUERY, ROTATE = 0x13, 0x10, 0x02, 0x04
ROWS = {0x17, 0x18, 0x19, 0x1E, 0x1F, 0x20}


def _item(item) -> tuple:
    if isinstance(item, RowChange):
        return ("row", item.table, item.op, item.values, item.key, item.binlog_file, item.commit_ts,
                item.offset_after)
    if isinstance(item, SchemaChange):
        return ("ddl", item.table, item.key, item.ddl.statement, item.offset)
    assert isinstance(item, Heartbeat)
    return ("beat", item.offset, item.commit_ts)


def _read(server, db, start, end, monkeypatch, mode, tables=("t",)) -> list[tuple]:
    monkeypatch.setenv(ROWS_DECODER_ENV, mode)
    reader = reader_for(server, db, tables)
    return [_item(i) for i in reader.read_with_heartbeats(BinlogOffset.at(start), end)]


@pytest.fixture
def seen(monkeypatch) -> Counter:
    """The type codes of the events the framer parsed, counted (framed or not)."""
    counts: Counter = Counter()
    real = FramedStream.fetchone

    def counting(self):
        event = real(self)
        if isinstance(event, FramedEvent):
            counts[event.event_type] += 1
            counts["passable"] += event.passable  # compare mode: what compiled mode passes over in C
        elif event is not None:
            counts[type(event).__name__] += 1
        return event

    monkeypatch.setattr(FramedStream, "fetchone", counting)
    return counts


def _workload(admin, flavor: str) -> None:
    """Single-row statements in transactions of several, a table we do not capture in the same transactions,
    column DDL, a rotation, a transaction of one statement."""
    if flavor == "mysql":
        execute(admin, "SET SESSION binlog_rows_query_log_events = ON")  # ROWS_QUERY events
    for txn in range(6):
        admin.begin()
        for i in range(4):
            key = txn * 10 + i
            execute(admin, f"INSERT INTO t (id, v, n) VALUES ({key}, 'v{key}', {key})",
                    f"INSERT INTO u VALUES ({key}, {key})")
        execute(admin, f"UPDATE t SET n = n + 1 WHERE id = {txn * 10}",
                f"DELETE FROM t WHERE id = {txn * 10 + 1}", f"UPDATE u SET x = 0 WHERE id = {txn * 10}")
        admin.commit()
        if txn == 2:
            execute(admin, "ALTER TABLE t ADD COLUMN extra INT DEFAULT 7", "FLUSH BINARY LOGS")
    execute(admin, "UPDATE t SET v = 'last' WHERE id = 2")


@pytest.mark.both_flavors
@pytest.mark.parametrize("checksum", ["CRC32", "NONE"])
def test_framed_reads_equal_mysql_replication(mysql_server, mysql_db, server_flavor, checksum, monkeypatch,
                                              seen):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                "CREATE TABLE u (id INT PRIMARY KEY, x INT)")
        # mysql-replication strips checksums by the server's setting at connect time: read before restoring
        execute(admin, f"SET GLOBAL binlog_checksum = {checksum}")
        try:
            start = status(admin)
            _workload(admin, server_flavor)
            end = status(admin)
            framed = _read(mysql_server, mysql_db, start, end, monkeypatch, COMPARE)  # checked both ways
            python = _read(mysql_server, mysql_db, start, end, monkeypatch, PYTHON)
        finally:
            execute(admin, "SET GLOBAL binlog_checksum = CRC32")
    assert framed == python
    rows = [i for i in framed if i[0] == "row"]
    assert len(rows) == 6 * 4 + 6 * 2 + 6 + 2 and any(i[0] == "ddl" for i in framed)
    assert len({r[5] for r in rows}) == 2  # the rotation is inside the range
    assert ROWS & set(seen) and {TABLE_MAP, XID, ROTATE, QUERY} <= set(seen)
    if server_flavor == "mariadb":  # GTID, BINLOG_CHECKPOINT, GTID_LIST (ANNOTATE_ROWS is not asked for)
        assert {0xA2, 0xA1, 0xA3} <= set(seen), seen
    else:  # ROWS_QUERY, PREVIOUS_GTIDS, and GTID or ANONYMOUS_GTID
        assert {0x1D, 0x23} <= set(seen) and {0x21, 0x22} & set(seen), seen
    assert seen["FormatDescriptionEvent"] >= 1  # the types it leaves to mysql-replication still come through
    # each checked to change nothing in the loop: every TABLE_MAP of a transaction after its table's first
    assert seen["passable"] >= 6 * 11 + 1 - 6, seen


@pytest.mark.both_flavors
def test_table_maps_are_parsed_once_per_table_id_and_resumes_agree(mysql_server, mysql_db, monkeypatch):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                "CREATE TABLE u (id INT PRIMARY KEY, x INT)")
        start = status(admin)
        _workload(admin, "mariadb")
        end = status(admin)
    parsed: Counter = Counter()
    real = FramedStream.python_event

    def counting(self, event, follow=True):
        parsed[event.event_type] += 1
        return real(self, event, follow)

    monkeypatch.setattr(FramedStream, "python_event", counting)
    full = _read(mysql_server, mysql_db, start, end, monkeypatch, COMPILED, tables=("t",))
    # 2 tables x (before the DDL; after it, in the new file): the DDL and the rotation give new maps
    assert parsed[TABLE_MAP] <= 6 and not ROWS & set(parsed)
    rows = [i for i in full if i[0] == "row"]
    # resume after every row change (mid-transaction, mid-event), framed and with mysql-replication alone
    for mode in (COMPILED, PYTHON):
        monkeypatch.setenv(ROWS_DECODER_ENV, mode)
        reader = reader_for(mysql_server, mysql_db, ["t"])
        for k in (0, 3, 7, 20, len(rows) - 2):
            offset = rows[k][7]
            rest = [_item(i) for i in reader.read(offset, end)]
            assert rest == rows[k + 1:], (mode, k, offset)
    assert any(r[7].skip_events > 0 for r in rows)


@pytest.mark.both_flavors
def test_an_event_type_it_does_not_know_is_refused(mysql_server, mysql_db, monkeypatch):
    """An XID made into an unknown type (its checksum made right): handed to mysql-replication, refused."""
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
        start = status(admin)
        execute(admin, "INSERT INTO t VALUES (1, 'a', 1)")
        end = status(admin)
    real = FramedStream.fetchone

    def unknown_xid(self):
        event = real(self)
        if isinstance(event, FramedEvent) and event.event_type == XID:
            payload = bytearray(event.packet())
            payload[1 + 4] = 0x7E  # the header's type byte
            if self.checksum:
                payload[-4:] = struct.pack("<I", zlib.crc32(bytes(payload[1:-4])))
            framer = frames.Framer(self.checksum, 0)
            framer.feed(_packet(0, bytes(payload)))
            changed = framer.next_event()
            assert changed is not None and not changed.framed
            return self.python_event(changed)
        return event

    monkeypatch.setattr(FramedStream, "fetchone", unknown_xid)
    monkeypatch.setenv(ROWS_DECODER_ENV, COMPILED)
    with pytest.raises(UnsupportedEvent, match="0x7e"):
        list(reader_for(mysql_server, mysql_db, ["t"]).read(BinlogOffset.at(start), end))


def _passes_counted(monkeypatch) -> list[int]:
    """Events the framer passed over in C so far, as of each event it returned."""
    passed: list[int] = []
    real = FramedStream.fetchone

    def counting(self):
        event = real(self)
        passed.append(self.framer.passed if self.framer is not None else 0)
        return event

    monkeypatch.setattr(FramedStream, "fetchone", counting)
    return passed


@pytest.mark.both_flavors
def test_events_that_change_nothing_are_passed_over_in_c(mysql_server, mysql_db, server_flavor, monkeypatch,
                                                         seen):
    """Inside a transaction the framer passes over a TABLE_MAP the loop took with the same bytes (and
    ROWS_QUERY): no Python object for them, and the read is still mysql-replication's, resumes included."""
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                "CREATE TABLE u (id INT PRIMARY KEY, x INT)")
        start = status(admin)
        _workload(admin, server_flavor)
        end = status(admin)
    python = _read(mysql_server, mysql_db, start, end, monkeypatch, PYTHON)
    passed = _passes_counted(monkeypatch)
    compiled_read = _read(mysql_server, mysql_db, start, end, monkeypatch, COMPILED)
    assert compiled_read == python
    # 6 transactions of 11 statements (2 tables) and one of 1: each table's first TABLE_MAP of a connection,
    # and the first after the DDL and the rotation, reach the loop; the others are passed over
    assert seen[TABLE_MAP] <= 6 and max(passed) >= 6 * 11 + 1 - 6, (seen, max(passed))
    if server_flavor == "mysql":
        assert 0x1D not in seen  # ROWS_QUERY: every one passed over
    rows = [i for i in compiled_read if i[0] == "row"]
    monkeypatch.setenv(ROWS_DECODER_ENV, COMPILED)
    reader = reader_for(mysql_server, mysql_db, ["t"])
    for k in (0, 5, 21, len(rows) - 2):  # resumed mid-transaction: the framer starts with nothing to pass
        assert [_item(i) for i in reader.read(rows[k][7], end)] == rows[k + 1:], k


@pytest.mark.both_flavors
def test_a_connection_lost_after_events_passed_over_resumes_after_them(mysql_server, mysql_db, server_flavor,
                                                                      monkeypatch):
    with mysql_server.admin(mysql_db) as admin:
        execute(admin, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                "CREATE TABLE u (id INT PRIMARY KEY, x INT)")
        start = status(admin)
        _workload(admin, server_flavor)
        end = status(admin)
    python = _read(mysql_server, mysql_db, start, end, monkeypatch, PYTHON)
    monkeypatch.setattr(framer_stream, "_READ_SIZE", 64)  # the bytes come in small pieces
    real = FramedStream._read_more
    resumed: list[int] = []

    def lost_once(self, framer):
        if not resumed and framer.passed_log_pos:  # events passed over since the last one returned
            resumed.append(framer.passed_log_pos)
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
        real(self, framer)

    monkeypatch.setattr(FramedStream, "_read_more", lost_once)
    monkeypatch.setattr(FramedStream, "_connect", _recording_connect(resumed))
    assert _read(mysql_server, mysql_db, start, end, monkeypatch, COMPILED) == python
    assert len(resumed) == 2 and resumed[1] == resumed[0], resumed  # reconnected after the events passed over


def _recording_connect(log: list[int]):
    real = FramedStream._connect

    def connect(self, frames_module):
        if log:  # a reconnect: from where mysql-replication resumes
            log.append(self.stream.log_pos)
        real(self, frames_module)

    return connect


# --- the packet framing, on synthetic bytes --------------------------------------------------------------


def _packet(seq: int, payload: bytes) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


def _event(code: int, body: bytes, log_pos: int, checksum: bool) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    event = struct.pack("<IBIIIH", 1700000000, code, 7, size, log_pos, 0) + body
    return b"\x00" + event + (struct.pack("<I", zlib.crc32(event)) if checksum else b"")


@pytest.mark.parametrize("checksum", [True, False])
def test_packets_split_anywhere_and_fields_parsed(checksum):
    xid = _event(XID, struct.pack("<Q", 42), 100, checksum)
    rotate = _event(ROTATE, struct.pack("<Q", 4) + b"mysql-bin.000002", 150, checksum)
    gtid = _event(0xA2, struct.pack("<QIB", 9, 3, 1), 200, checksum)
    unknown = _event(0x7E, b"\x01\x02", 230, checksum)
    stream = b"".join(_packet(i + 1, p) for i, p in enumerate([xid, rotate, gtid, unknown]))
    stream += _packet(5, b"\xfe\x00\x00\x02\x00")  # EOF
    for cut in range(0, len(stream), 7):  # bytes arriving in two pieces, cut anywhere
        framer = frames.Framer(checksum, 1)
        framer.feed(stream[:cut])
        got = []
        while (event := framer.next_event()) is not None:
            got.append(event)
        framer.feed(stream[cut:])
        while (event := framer.next_event()) is not None:
            got.append(event)
        assert [e.event_type for e in got] == [XID, ROTATE, 0xA2, 0x7E, frames.PACKET_EOF]
        assert got[0].xid == 42 and got[0].log_pos == 100 and got[0].framed
        assert (got[1].position, got[1].next_binlog) == (4, "mysql-bin.000002")
        assert got[2].gtid == "3-7-9" and got[2].gtid_flags == 1
        assert not got[3].framed and got[3].packet() == unknown


def test_a_bad_checksum_and_a_packet_out_of_order_are_errors():
    xid = bytearray(_event(XID, struct.pack("<Q", 42), 100, True))
    xid[20] ^= 0xFF
    framer = frames.Framer(True, 1)
    framer.feed(_packet(1, bytes(xid)))
    with pytest.raises(frames.FramingError, match="CRC32"):
        framer.next_event()
    framer = frames.Framer(False, 1)
    framer.feed(_packet(2, _event(XID, struct.pack("<Q", 1), 100, False)))
    with pytest.raises(frames.FramingError, match="sequence"):
        framer.next_event()


def test_an_event_of_16_mib_and_more_is_joined_from_its_packets():
    body = struct.pack("<Q", 4) + b"f" * (0xFFFFFF + 100)  # a ROTATE too large for one packet
    payload = _event(ROTATE, body, 0, False)
    parts = [payload[:0xFFFFFF], payload[0xFFFFFF:]]
    framer = frames.Framer(False, 1)
    framer.feed(_packet(1, parts[0]))
    assert framer.next_event() is None
    framer.feed(_packet(2, parts[1]))
    event = framer.next_event()
    assert event.event_type == ROTATE and len(event.next_binlog) == 0xFFFFFF + 100


def _table_map(table_id: int, table: bytes, log_pos: int, checksum: bool, extra: bytes = b"") -> bytes:
    names = b"\x02db\x00" + bytes([len(table)]) + table + b"\x00"
    body = table_id.to_bytes(6, "little") + b"\x01\x00" + names + b"\x01\x03\x00"  # one INT column
    return _event(TABLE_MAP, body + extra, log_pos, checksum)


@pytest.mark.parametrize("checksum", [True, False])
def test_what_the_framer_passes_over(checksum):
    """PASS_OVER: a TABLE_MAP equal to the one remembered for its table id and ROWS_QUERY are passed over,
    a changed TABLE_MAP, another table's and everything after a rotation come through; PASS_MARK returns them
    marked; PASS_NONE (outside a transaction) returns everything."""
    first = _table_map(5, b"t", 100, checksum)
    events = [
        first,
        _event(0x1D, b"\x05query", 140, checksum),  # ROWS_QUERY
        _table_map(5, b"t", 180, checksum),  # the same bytes: passed over
        _table_map(5, b"t", 220, checksum, extra=b"\x00"),  # changed: through
        _table_map(6, b"u", 260, checksum),  # another table id: through
        _table_map(5, b"t", 300, checksum),  # its bytes are no longer the remembered ones: through
        _event(ROTATE, struct.pack("<Q", 4) + b"mysql-bin.000002", 340, checksum),
    ]
    rotated = [_table_map(5, b"t", 400, checksum)]  # a rotation forgets: through
    stream = b"".join(_packet(i + 1, p) for i, p in enumerate(events + rotated))

    def through(mode: int, after_first: Callable[[Any, Any], None]) -> tuple[list, Any]:
        framer = frames.Framer(checksum, 1)
        framer.pass_over = mode
        framer.feed(stream)
        got = [framer.next_event()]
        after_first(framer, got[0])
        while (event := framer.next_event()) is not None:
            got.append(event)
            if event.log_pos == 220:
                framer.remember(event)
        return got, framer

    got, framer = through(frames.PASS_OVER, lambda f, e: f.remember(e))
    assert [e.log_pos for e in got] == [100, 220, 260, 300, 340, 400] and framer.passed == 2
    assert not any(e.passable for e in got)
    got, framer = through(frames.PASS_MARK, lambda f, e: f.remember(e))
    assert [e.log_pos for e in got if e.passable] == [140, 180] and framer.passed == 0 and len(got) == 8
    got, framer = through(frames.PASS_NONE, lambda f, e: f.remember(e))
    assert len(got) == 8 and not any(e.passable for e in got)
    # where the last event passed over ended, until an event comes through
    framer = frames.Framer(checksum, 1)
    framer.pass_over = frames.PASS_OVER
    framer.feed(b"".join(_packet(i + 1, p) for i, p in enumerate(events[:3])))
    framer.remember(framer.next_event())
    assert framer.next_event() is None and framer.passed_log_pos == 180
    assert (frames.PASS_NONE, frames.PASS_OVER, frames.PASS_MARK) == (PASS_NONE, PASS_OVER, PASS_MARK)
