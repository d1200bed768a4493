"""A stream never starts from chunk HWs of another server, on real servers.

The snapshot (on Spark) reads the session's MariaDB; a second MariaDB, started here from its own datadir,
stands for "another server behind the stream's URL": a restored backup or a replica configured with the same
server_id (every MariaDB starts with 1), then (``SET GLOBAL server_id``) a server with another id. Its
databases and tables are the same, so everything but the binlog looks right. ``start_stream`` against it
refuses before anything is written, naming the tables to re-snapshot and what to do; against the snapshot's
own server the stream's first offset records that server (so a later restart against another one is caught
by failover).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.server_id_claims import lock_name
from airflow_provider_mysqlcdc.engine.stream.snapshot_server import SnapshotOnAnotherServer
from airflow_provider_mysqlcdc.engine.stream.startup import StartupMode
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.checkpoint import startup_offset
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import start_stream
from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
from tests.support.engine_harness import password_file
from tests.support.workload import TABLE_SPECS, create_tables, seed_rows

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_comp")]


def _snapshot(spark, mysql_server, db: str, store: str, tmp_path) -> tuple[MySQLSettings, list[TableId]]:
    """Plan, and snapshot on Spark (the HW servers travel from the executors' reads to the driver's
    commit)."""
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # the HWs lie in a file the other server's binlog does not reach
        create_tables(conn, db, SPECS)
        seed_rows(conn, db, rows_per_table=120, seed=23, specs=SPECS)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with ChunkStore(store) as chunk_store:
        plans = plan_tables(settings, chunk_store, [f"{db}.t_*"], chunk_size=50)
    for plan in plans:
        options = SnapshotOptions(mysql_url=settings.url_without_password(), table=str(plan.table),
                                  output=str(tmp_path / "snapshot-lake"), chunk_store=store,
                                  password_file=password_file(tmp_path, settings))
        result = run_chunk_group(spark, options)
        assert result.ok, result
    return settings, sorted(p.table for p in plans)


# A twin with the same server_id is told apart by MariaDB's GTID position at the HWs; Oracle MySQL's GTID
# positions and server identity are issue 36's
@pytest.mark.mariadb_only
def test_a_stream_refuses_a_snapshot_read_on_another_server(mysql_server, mysql_db, tmp_path, spark):
    store = str(tmp_path / "chunks.db")
    settings, tables = _snapshot(spark, mysql_server, mysql_db, store, tmp_path)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_id")
        (server_id,) = cur.fetchone()
    token = f"mariadb:{server_id}"
    with ChunkStore(store) as chunk_store:  # every HW and plan says whose binlog it names
        for table in tables:
            chunks = chunk_store.chunks(table)
            assert len(chunks) >= 3 and all(c.hw_server == token and c.hw_gtid_position
                                            for c in chunks), chunks
            assert chunk_store.plan(table).plan["planned_on"] == token

    other = MariaDBServer(options={"server-id": str(server_id)}).start()
    try:
        with other.admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{mysql_db}`")
            create_tables(conn, mysql_db, SPECS)
        elsewhere = MySQLSettings.from_url(other.cdc_url)
        config = StreamConfig(mysql_url=elsewhere.url_without_password(), tables=(f"{mysql_db}.t_*",),
                              chunk_store=store, output=str(tmp_path / "lake"),
                              checkpoint=str(tmp_path / "ckpt"),
                              password_file=password_file(tmp_path, elsewhere))
        names = ", ".join(map(str, tables))

        # the same server_id (a restored backup, a twin): told apart by the GTID position at the HWs
        with pytest.raises(SnapshotOnAnotherServer) as refused:
            start_stream(spark, config)
        message = str(refused.value)
        assert (f"the stream would start on the server at 127.0.0.1:{other.port} "
                f"(server_id {server_id})") in message
        assert f"but the snapshot of {names} was read on another server" in message, message
        assert f"server_id {server_id} as its snapshot's, but its binlog" in message, message
        assert f"Tables to re-snapshot: {names}. Re-plan and snapshot them on this server" in message, (
            message)
        assert f"mysqlcdc plan --tables {names.replace(', ', ',')}, then mysqlcdc snapshot" in message, (
            message)
        assert "or point the stream at the server the snapshot read" in message, message
        _assert_nothing_started(config, other)

        # another server_id
        with other.admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL server_id = %s", (server_id + 1,))
        with pytest.raises(SnapshotOnAnotherServer) as refused:
            start_stream(spark, config)
        message = str(refused.value)
        assert f"(server_id {server_id + 1}), but the snapshot of {names}" in message, message
        assert f"({names}: its chunk HWs are positions of server_id {server_id})" in message, message
        _assert_nothing_started(config, other)
    finally:
        other.stop()

    # the server the snapshot read: the first offset is min(HW), and records that server and its GTID position
    checkpoint = str(tmp_path / "ckpt-here")
    offset = startup_offset(checkpoint, settings, StartupMode(), store, tables)
    with ChunkStore(store) as chunk_store:
        hws = [c for t in tables for c in chunk_store.chunks(t)]
    first = min(hws, key=lambda c: c.hw)
    assert offset.position == first.hw and offset.server == token, offset
    assert offset.gtid_position == first.hw_gtid_position, offset
    recorded = json.loads((Path(checkpoint) / "mysqlcdc" / "startup.json").read_text())
    assert recorded["start"]["server"] == token, recorded


def _assert_nothing_started(config: StreamConfig, server: MariaDBServer) -> None:
    checkpoint = Path(config.checkpoint)
    assert not (checkpoint / "mysqlcdc" / "startup.json").exists(), "a refused start must not record a start"
    assert not (checkpoint / "offsets").exists() and not any(Path(config.output).iterdir()), "nothing written"
    assert StreamLock(config.checkpoint).read() is None, "the refused start keeps no lock"
    # the claim's session was closed: the server frees its locks once it has processed the quit, a moment
    # after the client's close() returned
    deadline = time.monotonic() + 10
    with server.admin() as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT IS_FREE_LOCK(%s)", (lock_name(config.settings().server_id_range[0]),))
            free = cur.fetchone()[0] == 1
            if free or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert free, "the refused start keeps no server_id claim"
