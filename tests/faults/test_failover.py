"""Failover, on real servers: a primary and a replica (a second server replicating from the first by GTID,
both started here: MariaDB, and Oracle MySQL where a test says so).

* capture from a replica: writers on the primary, the whole pipeline (plan, Spark snapshot, Spark stream)
  against the replica; the mirror equals the source;
* failover with GTIDs (both flavors: MariaDB's GTID position, MySQL's executed GTID set): the stream reads the
  primary under writes, the replica is promoted (writes go to it now), the stream is pointed at it and
  continues from its GTID state under writes; the mirror equals the source row by row, and every position the
  stream reports from the new server orders after the old server's;
* a server that is not of the topology, on the same checkpoint: the stream stops with the error that says so,
  and writes nothing; without a GTID position (or with the same server_id but another binlog) likewise;
* a failover in the middle of a parallel catch-up batch (the URL reaches the promoted replica through a proxy
  that moves while the partitions read): the stream stops with the error that says what happened and what
  the restart does, nothing of the batch is written, and the restart replays the batch on the new server.
"""
from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from airflow_provider_mysqlcdc.engine.binlog.gtid import (
    GtidNotFound,
    parse_gtid_state,
    position_after_gtid_set,
)
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, GenerationView, StreamChunk, TableView
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.stream.failover import (
    ServerChanged,
    resolve_offset,
    server_identity,
)
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import StreamFailed, mirror_refresh, run_stream
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.servers import binlog_end, start_server
from tests.support.tcp_proxy import CuttableProxy
from tests.support.topology import caught_up, promote, replicate, require_flavor, start_member
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci", "t_comp")]
SEED = 61
BOTH_FLAVORS = pytest.mark.parametrize("topology", ["mariadb", "mysql"], indirect=True)


class Topology(NamedTuple):
    primary: Any
    replica: Any
    flavor: str


@pytest.fixture
def topology(request) -> Iterator[Topology]:
    """A primary (server_id 11) and a replica (server_id 12) replicating from it by GTID; MariaDB unless the
    test asks for a flavor (``BOTH_FLAVORS``)."""
    flavor = getattr(request, "param", "mariadb")
    require_flavor(flavor)
    primary = start_member(flavor, 11)
    replica = start_member(flavor, 12)
    try:
        replicate(replica, primary, flavor)
        yield Topology(primary, replica, flavor)
    finally:
        replica.stop()
        primary.stop()


def _caught_up(topology: Topology) -> str:
    return caught_up(topology.replica, topology.primary, topology.flavor)


def _token(server: Any) -> str:
    with connect(MySQLSettings.from_url(server.cdc_url).with_database(None)) as conn:
        return server_identity(conn).token


def _described(server: Any) -> str:
    """As messages name a server: ``server_id 11`` (MariaDB), ``server_id 11, server_uuid ...`` (MySQL)."""
    with connect(MySQLSettings.from_url(server.cdc_url).with_database(None)) as conn:
        return server_identity(conn).describe()


def _writers(server: Any, db: str, seed: int) -> Workload:
    return Workload(lambda: server.admin(), db, seed=seed, writers=2, specs=SPECS, rotate_every=25,
                    pace=0.01).start()


def _create(server: Any, db: str) -> None:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        create_tables(conn, db, SPECS)
        seed_rows(conn, db, rows_per_table=200, seed=SEED, specs=SPECS)


def _snapshot(spark, settings: MySQLSettings, db: str, store: str, output: str, secret: str) -> list[TableId]:
    with ChunkStore(store) as chunk_store:
        plans = plan_tables(settings, chunk_store, [f"{db}.t_*"], chunk_size=120)
    for plan in plans:
        options = SnapshotOptions(mysql_url=settings.url_without_password(),
                                  table=str(plan.table), output=output,
                                  chunk_store=store, password_file=secret)
        result = run_chunk_group(spark, options)
        assert result.ok, result
    return [p.table for p in plans]


def _stream(spark, config: StreamConfig) -> None:
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)


def _ledgers(checkpoint: str) -> list[dict]:
    """The sink's ledger entries of the committed batches, in order."""
    folder = Path(checkpoint) / "mysqlcdc" / "batches"
    entries = [json.loads(p.read_text()) for p in folder.glob("batch=*.json")]
    return sorted((e for e in entries if e.get("state") == "committed"), key=lambda e: e["batch_id"])


def _committed_offset(checkpoint: str) -> dict:
    """The end offset of the last batch the sink committed."""
    return _ledgers(checkpoint)[-1]["end_offset"]


def _committed_batches(output: str) -> list[str]:
    return sorted(str(p) for p in Path(output).rglob("changelog/_committed/*.json"))


@BOTH_FLAVORS
def test_capture_from_a_read_only_replica_and_through_its_promotion(topology, spark, tmp_path):
    """The whole pipeline reads a read-only replica (MySQL: ``super_read_only``, so the chunk reads write
    nothing: ``gtid_executed``) while the application writes to the primary; then the replica is promoted,
    the application writes to it, and the same stream goes on."""
    primary, replica, flavor = topology
    db = "fo_replica"
    _create(primary, db)
    _caught_up(topology)
    settings = MySQLSettings.from_url(replica.cdc_url)  # the whole pipeline reads the replica
    secret = password_file(tmp_path, settings)
    store, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    workload = _writers(primary, db, SEED)  # the application writes to the primary
    try:
        tables = _snapshot(spark, settings, db, store, output, secret)
        config = StreamConfig(mysql_url=settings.url_without_password(),
                              tables=(f"{db}.t_*",), chunk_store=store,
                              output=output, checkpoint=str(tmp_path / "ckpt"), password_file=secret,
                              max_bytes_per_batch=100_000)
        _stream(spark, config)  # under writes
    finally:
        stats = workload.stop()
    assert stats.transactions > 20, stats
    _caught_up(topology)
    _stream(spark, config)

    ledgers = _ledgers(config.checkpoint)
    assert len(ledgers) >= 3, "admission control should split the runs into several batches"
    for before, after in itertools.pairwise(ledgers):  # the batches tile the replica's binlog
        assert after["start_offset"] == before["end_offset"], (before, after)
    offset = ledgers[-1]["end_offset"]
    assert offset["server"] == _token(replica) and offset.get("gtid_position"), offset
    assert not offset.get("file_number_base"), offset
    with ChunkStore(store) as chunk_store:
        modes = {c.extra.get("read_view_mode") for t in tables for c in chunk_store.chunks(str(t))}
    assert modes == {"consistent_snapshot" if flavor == "mariadb" else "gtid_executed"}, modes
    assert_mirror_equals_source(settings, output, tables, min_rows=100)  # the replica ...
    primary_settings = MySQLSettings.from_url(primary.cdc_url)
    assert_mirror_equals_source(primary_settings, output, tables, min_rows=100)  # = the primary

    # the replica is promoted and takes the writes: the same stream, the same URL, goes on
    primary.stop()
    promote(replica, flavor)
    workload = _writers(replica, db, SEED + 2)
    try:
        workload.wait_for_transactions(25)
    finally:
        workload.stop()
    _stream(spark, config)
    assert _ledgers(config.checkpoint)[-1]["end_offset"]["server"] == _token(replica)
    assert_mirror_equals_source(settings, output, tables, min_rows=100)


@BOTH_FLAVORS
def test_failover_to_a_promoted_replica_continues_from_its_gtid_position(topology, spark, tmp_path):
    primary, replica, flavor = topology
    db = "fo_promote"
    _create(primary, db)
    old = MySQLSettings.from_url(primary.cdc_url)
    new = MySQLSettings.from_url(replica.cdc_url)
    secret = password_file(tmp_path, old)  # one CDC password on both servers
    store, output, checkpoint = str(tmp_path / "chunks.db"), str(tmp_path / "lake"), str(tmp_path / "ckpt")

    def config(settings: MySQLSettings) -> StreamConfig:
        return StreamConfig(mysql_url=settings.url_without_password(),
                            tables=(f"{db}.t_*",), chunk_store=store,
                            output=output, checkpoint=checkpoint, password_file=secret,
                            max_bytes_per_batch=100_000)

    workload = _writers(primary, db, SEED)
    try:
        tables = _snapshot(spark, old, db, store, output, secret)
        _stream(spark, config(old))
    finally:
        before = workload.stop()
    _stream(spark, config(old))  # the primary's last transactions
    on_primary = _committed_offset(checkpoint)
    assert on_primary["server"] == _token(primary), on_primary
    positions_before = _positions(output, tables, old)

    # the failover: the replica applied everything, is promoted and takes the writes from now on
    gtid_position = _caught_up(topology)
    # the offset's GTID state is everything the primary executed (MySQL: a set, stored as offset version 3)
    assert parse_gtid_state(on_primary["gtid_position"], flavor) == parse_gtid_state(gtid_position, flavor)
    assert on_primary["version"] == (3 if flavor == "mysql" else 1), on_primary
    promote(replica, flavor)
    workload = _writers(replica, db, SEED + 1)
    try:
        workload.wait_for_transactions(20)  # the new primary's own transactions exist before the stream moves
        _stream(spark, config(new))
    finally:
        after = workload.stop()
    _stream(spark, config(new))
    assert before.transactions > 20 and after.transactions > 20 and after.rotations >= 1, (before, after)

    moved = _committed_offset(checkpoint)
    assert moved["server"] == _token(replica), moved
    assert moved["file_number_base"] > int(on_primary["file"].rsplit(".", 1)[1]), moved
    positions_after = _positions(output, tables, new)
    assert len(positions_after) > len(positions_before)
    first_new = min(set(positions_after) - set(positions_before))
    assert first_new > max(positions_before), "a position of the new server orders before the old server's"
    assert_mirror_equals_source(new, output, tables, min_rows=100)
    failover_point = BinlogOffset.from_dict(on_primary).ordered_position
    for table in tables:  # each mirror says it is consistent, as of a position in the stream's order
        manifest = read_manifest(output, table)
        assert manifest.consistent and manifest.stream_position > failover_point, manifest.describe()

    # a server of another topology on the same checkpoint: a clear error, nothing written
    stranger = start_server(flavor, **{"server-id": "13"})
    try:
        _create(stranger, db)
        settings = MySQLSettings.from_url(stranger.cdc_url)
        written = _committed_batches(output)
        with pytest.raises(CdcError) as info:
            _stream(spark, config(settings))
        message = str(info.value)
        assert f"127.0.0.1:{stranger.port} is not the one this checkpoint streamed from" in message, message
        assert "server_id 12" in message and "-> server_id 13" in message, message
        assert "not comparable" in message and "has not applied GTID" in message, message
        assert settings.password not in message
        assert _committed_batches(output) == written, "nothing may be written"
        assert _committed_offset(checkpoint) == moved
    finally:
        stranger.stop()


def _binlog_bytes(server: Any) -> int:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return sum(int(row[1]) for row in cur.fetchall())


# MariaDB only: on Oracle MySQL the redirect (after 30k bytes of binlog dumps) lands while the driver reads
# the binlog end, so the whole batch moves by GTID before its partitions read (the failover between batches,
# which the promotion test covers) instead of during a partition's read; tuning the moment per flavor is open
def test_failover_in_a_parallel_catchup_partition_says_so_and_the_restart_replays_the_batch(
    topology, spark, tmp_path
):
    """The stream reaches the primary through a proxy (a virtual IP). It falls far behind; the replica catches
    up and is promoted; while the partitions of a parallel batch read, the proxy moves to the replica. The
    stream stops with the error that says so (not a GTID-position error), nothing of the batch is written,
    and the restart replays the batch on the new server from its GTID position: the mirror equals the source
    row by row, no change twice."""
    primary, replica, _flavor = topology
    db = "fo_partition"
    _create(primary, db)
    proxy = CuttableProxy(("127.0.0.1", primary.port))
    try:
        settings = MySQLSettings.from_url(primary.cdc_url.replace(f":{primary.port}/", f":{proxy.port}/"))
        secret = password_file(tmp_path, settings)
        store, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
        checkpoint = str(tmp_path / "ckpt")
        config = StreamConfig(mysql_url=settings.url_without_password(),
                              tables=(f"{db}.t_*",), chunk_store=store,
                              output=output, checkpoint=checkpoint, password_file=secret,
                              max_bytes_per_batch=200_000, catchup_partitions=3,
                              catchup_partition_bytes=20_000, rows_per_read=40)
        tables = _snapshot(spark, settings, db, store, output, secret)
        with primary.admin(db) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t_int SET v = v + 1 LIMIT 5")
        _stream(spark, config)  # past every chunk HW: a failover may move the stream
        before = _ledgers(checkpoint)
        assert before, "the stream committed no batch"

        # the stream falls far behind on the primary; the replica applies everything and is promoted
        target = _binlog_bytes(primary) + 300_000
        workload = _writers(primary, db, SEED + 2)
        try:
            deadline = time.monotonic() + 120
            while _binlog_bytes(primary) < target:
                assert time.monotonic() < deadline, "the writers are too slow"
                time.sleep(0.2)
        finally:
            workload.stop()
        _caught_up(topology)
        promote(replica, topology.flavor)
        written = _committed_batches(output)

        # the virtual IP moves to the replica while the first batch's partitions read (the bytes of the first
        # partition's reader count, the stream's own server_id: not those of the driver's boundary scan)
        proxy.redirect_after(("127.0.0.1", replica.port), dump_bytes=30_000,
                             server_id=allocate_server_id(settings, config.server_id_slot))
        with pytest.raises(StreamFailed) as info:
            _stream(spark, config)
        assert proxy.redirected.is_set()
        message = str(info.value)
        # the engine's own error is what the stream's error says, on one line (spark/errors.py keeps the line)
        error = message.split(" failed: ", 1)[1]
        assert error.startswith("FailoverDuringBatch: failover during batch ") and "\n" not in error, message
        failed_batch = before[-1]["batch_id"] + 1
        resume_from = before[-1]["end_offset"]  # where the batch starts
        assert error.startswith(
            f"FailoverDuringBatch: failover during batch {failed_batch}: the server at "
            f"127.0.0.1:{proxy.port} changed from {_described(primary)} to {_described(replica)} while "
            "partition "
        ), message
        assert f"Nothing of batch {failed_batch} was committed: readers see none of it" in error, message
        assert f"Restart the stream (it does not retry by itself): it replays batch {failed_batch}" in error
        assert f"after GTID position {resume_from['gtid_position']}" in error, message
        assert " of 3 of the batch was being read" in error, message  # a partition of a parallel batch
        assert settings.password not in message
        assert _committed_batches(output) == written, "nothing of the batch may be written"
        assert _ledgers(checkpoint) == before

        # the restart replays the batch on the new server, from the GTID position of its start
        _stream(spark, config)
        ledgers = _ledgers(checkpoint)
        replayed = [e for e in ledgers if e["batch_id"] == failed_batch]
        assert replayed and replayed[0]["replay"], ledgers
        start, end = replayed[0]["start_offset"], replayed[0]["end_offset"]
        assert start["server"] == _token(replica), start
        assert start["gtid_position"] == resume_from["gtid_position"], start
        assert start["file_number_base"] > 0 and end["server"] == _token(replica), replayed[0]
        # the batches tile the binlog, across the failover
        for before_, after_ in itertools.pairwise(ledgers):
            assert BinlogOffset.from_dict(after_["start_offset"]).key >= BinlogOffset.from_dict(
                before_["end_offset"]).key, (before_, after_)
        new = MySQLSettings.from_url(replica.cdc_url)
        assert_mirror_equals_source(new, output, tables, min_rows=100)
        positions = _positions(output, tables, new)
        assert len(set(positions)) == len(positions), "a change was written twice"
    finally:
        proxy.close()


def _positions(output: str, tables: list[TableId], settings: MySQLSettings) -> list[str]:
    from airflow_provider_mysqlcdc.engine.source.catalog import load_schema

    with connect(settings) as conn:
        schemas = [load_schema(conn, t) for t in tables]
    return sorted(r.position for schema in schemas for r in changelog_records(output, schema))


@BOTH_FLAVORS
def test_offsets_move_only_within_the_topology(topology, tmp_path):
    """The engine side of failover without Spark: GTID states found again on the replica; a server whose
    binlog is not the one the offset names although it has the same identity (MariaDB: the same server_id;
    MySQL: the same server_uuid, a restore), and an offset without a GTID state, stop with the error."""
    primary, replica, flavor = topology
    with primary.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE fo_engine")
        cur.execute("CREATE TABLE fo_engine.t (id INT PRIMARY KEY, v INT)")
        for i in range(5):
            cur.execute("INSERT INTO fo_engine.t VALUES (%s, %s)", (i, i))
    position = _caught_up(topology)
    promote(replica, flavor)
    with replica.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid" if flavor == "mysql" else "SELECT '0-12-'")
        (mine,) = cur.fetchone()
        cur.execute("INSERT INTO fo_engine.t VALUES (100, 100)")  # the new primary's first own transaction
        cur.execute("SHOW BINLOG EVENTS")
        events = cur.fetchall()
    own = [(row[0], row[1]) for row in events if row[2] == "Gtid" and str(mine) in row[5]]
    with connect(MySQLSettings.from_url(replica.cdc_url).with_database(None)) as conn:
        found = position_after_gtid_set(conn, position)
        assert (found.file, found.pos) == own[0]
        assert parse_gtid_state(found.gtid_position, flavor) == parse_gtid_state(position, flavor)
        ahead = "0-12-999" if flavor == "mariadb" else f"{mine}:1-999"
        with pytest.raises(GtidNotFound, match="has not applied GTID"):  # ahead of this server
            position_after_gtid_set(conn, ahead)
        if flavor == "mariadb":
            with pytest.raises(GtidNotFound, match="does not hold GTID 0-99-3: it has 0-11-3 in its place"):
                position_after_gtid_set(conn, "0-99-3")  # same seq, another origin
        else:
            stranger = "5ca1ab1e-0000-4000-8000-000000000001:1-3"  # a source this topology never had
            with pytest.raises(GtidNotFound, match=f"has not applied GTID {stranger}"):
                position_after_gtid_set(conn, f"{position},{stranger}")
            # a hole in the set, followed by transactions it contains: another history, not a position
            uuid, _, interval = position.partition(":")
            last = int(interval.rpartition("-")[2])
            holed = f"{uuid}:1-{last - 3}:{last - 1}-{last}"
            follows = rf"{uuid}:{last - 1} \(contained in the GTID set\) follows"
            with pytest.raises(GtidNotFound, match=follows):
                position_after_gtid_set(conn, holed)

    with connect(MySQLSettings.from_url(primary.cdc_url).with_database(None)) as conn:
        end = binlog_end(conn)
        file, pos = end.file, end.pos
        identity = server_identity(conn)
        on_primary = resolve_offset(conn, BinlogOffset(file, pos), identity, dict)
    assert on_primary.server == identity.token and on_primary.gtid_position is not None
    assert parse_gtid_state(on_primary.gtid_position, flavor) == parse_gtid_state(position, flavor)

    # on the promoted replica: moved by GTID once the stream is past every chunk HW, else stopped
    table = "fo_engine.t"
    hw_before, hw_after = BinlogPosition(file, pos - 1), BinlogPosition(file, pos + 1)
    with connect(MySQLSettings.from_url(replica.cdc_url).with_database(None)) as conn:
        identity = server_identity(conn)
        past = {table: _view(table, [hw_before, hw_before])}
        moved = resolve_offset(conn, on_primary, identity, lambda: past)
        assert (moved.file, moved.pos) == own[0] and moved.server == identity.token
        assert moved.key > on_primary.key and moved.gtid_position == on_primary.gtid_position
        assert resolve_offset(conn, moved, identity, dict) == moved  # its binlog holds it: used as it is
        for hws in ([hw_before, hw_after], [hw_before, None]):  # a chunk HW after the stream; one uncommitted
            with pytest.raises(ServerChanged, match=rf"not past the snapshot of {table}.*redone on the new"):
                resolve_offset(conn, on_primary, identity, lambda hws=hws: {table: _view(table, hws)})

    # MariaDB: another server configured with the same server_id; MySQL: a server with the primary's
    # server_uuid (restored from a backup) whose binlog is not the one the stream read
    twin = start_member(flavor, 11)
    try:
        if flavor == "mysql":
            with primary.admin() as conn, conn.cursor() as cur:
                cur.execute("SELECT @@server_uuid")
                (primary_uuid,) = cur.fetchone()
            (twin.basedir / "data" / "auto.cnf").write_text(f"[auto]\nserver-uuid={primary_uuid}\n")
            twin.restart()
        with connect(MySQLSettings.from_url(twin.cdc_url).with_database(None)) as conn:
            identity = server_identity(conn)
            assert identity.same_server(on_primary.server or "")
            restored = (r"server_id 11(, server_uuid \S+)? as before, but its binlog.*cannot continue from "
                        r"the stream's GTID position.*has not applied GTID")
            with pytest.raises(ServerChanged, match=restored):
                resolve_offset(conn, on_primary, identity, dict)
            # an offset without a GTID state cannot move at all
            bare = BinlogOffset(file, pos, server=moved.server)
            with pytest.raises(ServerChanged, match=r"server_id 12.* -> server_id 11.*not comparable.*no GT"):
                resolve_offset(conn, bare, identity, dict)
    finally:
        twin.stop()


def _view(table: str, hws: list[BinlogPosition | None]) -> TableView:
    chunks = tuple(StreamChunk(i, None, None, hw, hw, "committed" if hw else "planned")
                   for i, hw in enumerate(hws))
    committed = [hw for hw in hws if hw is not None]
    return TableView(table, 1, 1 if len(committed) == len(hws) else None, (GenerationView(1, True, chunks),),
                     min(committed), max(committed))
