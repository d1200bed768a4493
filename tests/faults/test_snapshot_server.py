"""A stream never starts from chunk HWs of another server, on real servers.

The snapshot (on Spark) reads the session's server; a second server of the same flavor, started here from its
own datadir, stands for "another server behind the stream's URL": on MariaDB a restored backup or a replica
configured with the same server_id (every MariaDB starts with 1), then (``SET GLOBAL server_id``) a server
with another id; on Oracle MySQL a server with another server_uuid, then (its ``auto.cnf`` rewritten) one
restored with the snapshot server's server_uuid. Its databases and tables are the same, so everything but the
binlog looks right (told apart by the GTID state recorded at the HWs: MariaDB's GTID position, MySQL's
executed GTID set). ``start_stream`` against it
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
from tests.support.engine_harness import password_file
from tests.support.servers import start_server
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


@pytest.mark.both_flavors
def test_a_stream_refuses_a_snapshot_read_on_another_server(mysql_server, server_flavor, mysql_db, tmp_path,
                                                            spark):
    store = str(tmp_path / "chunks.db")
    settings, tables = _snapshot(spark, mysql_server, mysql_db, store, tmp_path)
    server_id, uuid = _identity(mysql_server, server_flavor)
    token = f"mysql:{server_id}:{uuid}" if uuid else f"mariadb:{server_id}"
    named = f"server_id {server_id}" + (f", server_uuid {uuid}" if uuid else "")
    with ChunkStore(store) as chunk_store:  # every HW and plan says whose binlog it names
        for table in tables:
            chunks = chunk_store.chunks(table)
            assert len(chunks) >= 3 and all(c.hw_server == token and c.hw_gtid_position
                                            for c in chunks), chunks
            assert chunk_store.plan(table).plan["planned_on"] == token

    other = start_server(server_flavor, **{"server-id": str(server_id)})
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
        if server_flavor == "mysql":  # another server_uuid first, then the snapshot server's restored
            _refused_by_id(spark, config, other, names, named)
            (other.basedir / "data" / "auto.cnf").write_text(f"[auto]\nserver-uuid={uuid}\n")
            other.restart()

        # the same identity (a restored backup, a twin): told apart by the GTID state at the HWs
        with pytest.raises(SnapshotOnAnotherServer) as refused:
            start_stream(spark, config)
        message = str(refused.value)
        assert f"the stream would start on the server at 127.0.0.1:{other.port} ({named})" in message, message
        assert f"but the snapshot of {names} was read on another server" in message, message
        assert f"{named} as its snapshot's, but its binlog" in message, message
        assert f"Tables to re-snapshot: {names}. Re-plan and snapshot them on this server" in message, (
            message)
        assert f"mysqlcdc plan --tables {names.replace(', ', ',')}, then mysqlcdc snapshot" in message, (
            message)
        assert "or point the stream at the server the snapshot read" in message, message
        _assert_nothing_started(config, other)

        if server_flavor == "mariadb":  # another server_id
            with other.admin() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL server_id = %s", (server_id + 1,))
            _refused_by_id(spark, config, other, names, named)
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


def _identity(server, flavor: str) -> tuple[int, str]:
    """server_id and server_uuid (MariaDB: none, "")."""
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@server_uuid" if flavor == "mysql" else "SELECT @@server_id, ''")
        server_id, uuid = cur.fetchone()
    return int(server_id), str(uuid)


def _refused_by_id(spark, config: StreamConfig, other, names: str, named: str) -> None:
    """``other`` has another server_id (MariaDB) or server_uuid (MySQL) than the snapshot's server."""
    other_id, other_uuid = _identity(other, "mysql" if "server_uuid" in named else "mariadb")
    other_named = f"server_id {other_id}" + (f", server_uuid {other_uuid}" if other_uuid else "")
    with pytest.raises(SnapshotOnAnotherServer) as refused:
        start_stream(spark, config)
    message = str(refused.value)
    assert f"({other_named}), but the snapshot of {names}" in message, message
    assert f"({names}: its chunk HWs are positions of {named})" in message, message
    _assert_nothing_started(config, other)


def _assert_nothing_started(config: StreamConfig, server) -> None:
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
