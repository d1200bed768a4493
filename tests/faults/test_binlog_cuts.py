"""A binlog read whose connection is cut mid-read (the network drops it after some of the events arrived)
resumes where it stopped and returns exactly what an uncut read returns: nothing skipped, nothing twice; an
outage is waited out for its budget only, and permanent errors are not waited on."""
from __future__ import annotations

import logging
import random
import threading
import time

import pytest

from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConnectionFailed, ServerUnavailable
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.outages import retry_while_unavailable
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
from airflow_provider_mysqlcdc.testing.mariadb import free_port
from tests.support.tcp_proxy import CuttableProxy, _ClientPackets

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def _binlog_end(conn) -> BinlogPosition:
    status = current_binlog_status(conn, server_info(conn))
    return BinlogPosition(status.file, status.position)


def test_binlog_read_cut_mid_read_resumes_exactly(mysql_server, mysql_db, tmp_path, caplog):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.executemany("INSERT INTO t VALUES (%s, 0, %s)", [(i, f"row {i}") for i in range(1500)])
        start = BinlogOffset.at(_binlog_end(conn))
        for round_ in range(3):  # three big transactions, ~1 MB of binlog in all
            conn.begin()
            for _ in range(4):
                cur.execute("UPDATE t SET v = v + 1, note = CONCAT('r', %s, ' ', id)", (round_,))
            cur.execute("DELETE FROM t WHERE id %% 50 = %s", (round_,))
            conn.commit()
        end = _binlog_end(conn)
    table = TableId(mysql_db, "t")
    direct = MySQLSettings.from_url(mysql_server.cdc_url)
    with connect(direct) as conn:
        schemas = {table: load_schema(conn, table)}
    store = ChunkStore(str(tmp_path / "chunks.db"))  # nothing planned: every change is emitted

    def read(settings: MySQLSettings) -> list[tuple]:
        stream = ChangeStream(settings, store, [table], allocate_server_id(settings, 0),
                              schemas=dict(schemas))
        try:
            batch = stream.read(start, end)
        finally:
            stream.close()
        assert batch.end.position == end
        return [(r.key, r.op, tuple(sorted(r.values.items()))) for r in batch.records]

    want = read(direct)
    assert len(want) > 30_000
    proxy = CuttableProxy(("127.0.0.1", mysql_server.port))
    try:
        cut = MySQLSettings.from_url(mysql_server.cdc_url.replace(f":{mysql_server.port}/",
                                                                  f":{proxy.port}/"))
        with caplog.at_level(logging.WARNING):
            # early, in the middle, late in the ~580 KB range
            for limit in (48 * 1024, 250 * 1024, 500 * 1024):
                proxy.cut_connection_after(limit)
                got = read(cut)
                assert proxy.connection_cuts == 1 and not proxy.armed, "the read was not cut"
                assert len(got) == len(want) and got == want, (
                    f"cut after {limit} bytes: {len(got)} vs {len(want)}")
                proxy.connection_cuts = 0
        assert caplog.text.count("binlog stream connection lost; reconnecting") >= 3, caplog.text[-2000:]
    finally:
        proxy.close()


def _packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def _arrivals(data: bytes, rng: random.Random) -> list[list[bytes]]:
    """The same bytes as the proxy may receive them: at once, byte by byte, and cut at random places."""
    cuts = [sorted(rng.sample(range(1, len(data)), 12)) for _ in range(20)]
    return [[data], [data[i:i + 1] for i in range(len(data))]] + [
        [data[a:b] for a, b in zip([0, *c], [*c, len(data)], strict=True)] for c in cuts]


def test_the_proxy_knows_a_binlog_dump_however_its_bytes_arrive():
    """The cut above is armed for binlog dump connections only: the proxy must know one whether the client's
    packets arrive one per read or several together (a loaded machine: the SSL request and the TLS
    ClientHello in one read made a TLS dump connection look like any other, and the read was never cut)."""
    ssl_request = _packet(1, (0x0800 | 0x0200 | 0x8000).to_bytes(4, "little") + bytes(28))
    client_hello = b"\x16\x03\x01\x02\x00" + bytes(512)
    handshake = _packet(1, (0x0200 | 0x8000).to_bytes(4, "little") + bytes(28) + b"cdc\0" + bytes(21))
    auth_switch = _packet(3, b"\x12" + bytes(19))  # scrambled auth data that starts like COM_BINLOG_DUMP
    query = _packet(0, b"\x03SET @master_binlog_checksum = @@global.binlog_checksum")
    register = _packet(0, b"\x15" + bytes(17))
    dump = _packet(0, b"\x12" + bytes(10) + b"mysql-bin.000001")
    rng = random.Random(37)
    for data, is_dump in [
        (ssl_request + client_hello, True),  # TLS hides the commands: a possible dump
        (handshake + auth_switch + query + register + dump, True),
        (handshake + auth_switch + query + _packet(0, b"\x01"), False),  # a control session
    ]:
        for pieces in _arrivals(data, rng):
            packets = _ClientPackets()
            seen = [packets.feed(p) for p in pieces]  # the pump feeds it until it says so
            assert any(seen) == is_dump, pieces


def test_outage_budget_and_permanent_errors(mysql_server):
    """A server that stays away is waited out for the budget, then named; a wrong password fails at once."""
    gone = MySQLSettings.from_url(f"mysql://cdc:cdc-secret-pw@127.0.0.1:{free_port()}/")
    started = time.monotonic()
    with pytest.raises(ServerUnavailable,
                       match=r"stayed unavailable for \d+ s while reading .*reconnect_timeout"):
        retry_while_unavailable(lambda: connect(gone), what="reading", where="127.0.0.1", budget_s=2.0)
    assert 1.0 <= time.monotonic() - started < 10
    wrong = MySQLSettings.from_url(f"mysql://cdc:not-the-password@127.0.0.1:{mysql_server.port}/")
    started = time.monotonic()
    with pytest.raises(ConnectionFailed, match="refused the credentials") as info:
        retry_while_unavailable(lambda: connect(wrong), what="reading", where="127.0.0.1", budget_s=60.0)
    assert not isinstance(info.value, ServerUnavailable) and time.monotonic() - started < 5


def test_a_silent_network_path_does_not_hang_the_stream_driver(mysql_server, mysql_db, tmp_path, monkeypatch):
    """A NAT or firewall that forgot the driver's session drops its traffic without closing it: the driver's
    read times out (its ping reconnects, or the outage retry opens a new session) and the batch is planned."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from airflow_provider_mysqlcdc.spark.stream import binlog_source
    from airflow_provider_mysqlcdc.spark.stream.binlog_source import (
        BinlogMicroBatchStream,
        BinlogSourceOptions,
    )

    silent_s = 1.0  # the driver's read timeout here: what the test waits out
    monkeypatch.setattr(binlog_source, "DRIVER_READ_TIMEOUT_S", silent_s)
    proxy = CuttableProxy(("127.0.0.1", mysql_server.port))
    try:
        settings = MySQLSettings.from_url(mysql_server.cdc_url)
        url = settings.url_without_password().replace(f":{mysql_server.port}", f":{proxy.port}")
        options = BinlogSourceOptions(mysql_url=url, tables=(TableId(mysql_db, "t"),),
                                      chunk_store=str(tmp_path / "chunks.db"), reconnect_timeout=60.0)
        reader = BinlogMicroBatchStream(options, settings.password)
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            start = BinlogOffset.at(_binlog_end(conn))
            first = reader.latestOffset(start.to_dict(), ReadAllAvailable())  # opens the driver's session
            cur.execute("INSERT INTO t VALUES (1)")
            end = _binlog_end(conn)
        # the batch planning's own sessions (a server_id claim, a replication session for the boundary scan)
        # closed when it returned: only the driver's session stays, and it goes silent
        deadline = time.monotonic() + 30
        while proxy.live() > 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # the proxy's pumps see the closes
        assert proxy.blackhole_live() == 1
        result: dict = {}
        planner = threading.Thread(
            target=lambda: result.update(end=reader.latestOffset(first, ReadAllAvailable())), daemon=True)
        started = time.monotonic()
        planner.start()
        planner.join(timeout=30)
        assert not planner.is_alive(), "the driver hangs on its dead session"
        assert time.monotonic() - started >= silent_s, "the dead session was not even tried"
        assert BinlogOffset.from_dict(result["end"]).position == end
        reader.stop()
    finally:
        proxy.close()
