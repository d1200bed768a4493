"""Parallel catch-up: a batch far behind the binlog end is cut at transaction boundaries into partitions that
Spark tasks decode at once; the output must be exactly one reader's, and resume must stay exact.

Real parts: the session's MariaDB (binlog on), the session's local Spark (2 cores: two partitions really run
at once), concurrent writers with fixed seeds. The reference is the same stream read by one partition.
"""

from __future__ import annotations

import itertools
import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from airflow_provider_mysqlcdc.engine.binlog.boundaries import iter_boundaries
from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids
from airflow_provider_mysqlcdc.engine.lake.layout import changelog_marker, read_json
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import connect
from airflow_provider_mysqlcdc.engine.stream.admission import cut_points
from airflow_provider_mysqlcdc.spark.stream.binlog_source import BinlogMicroBatchStream, BinlogSourceOptions
from airflow_provider_mysqlcdc.spark.stream.job import StreamFailed, run_stream
from tests.spark.test_stream import (
    _assert_mirror_equals_source,
    _binlog_end,
    _changelog,
    _comparable,
    _config,
    _ledgers,
    _let_binlog_grow,
    _settings,
    _setup,
)
from tests.support.servers import with_query

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def _marks(step: int, total: int) -> list[tuple[int, BinlogPosition]]:
    return [(b, BinlogPosition("mysql-bin.000001", 4 + b)) for b in range(step, total + 1, step)]


def test_cut_points_split_a_far_behind_batch_evenly_and_keep_small_ones_whole():
    marks = _marks(100, 10_000)
    cuts = cut_points(marks, 10_000, partitions=4, min_bytes=1000)
    assert [c.pos - 4 for c in cuts] == [2500, 5000, 7500]
    # never more parts than min_bytes allows: a caught-up stream's small batches stay whole
    assert [c.pos - 4 for c in cut_points(marks, 10_000, partitions=8, min_bytes=3000)] == [3400, 6700]
    assert cut_points(marks, 10_000, partitions=4, min_bytes=6000) == []
    assert cut_points(marks, 10_000, partitions=1, min_bytes=1) == []
    # sparse marks (one huge transaction): no empty part, no cut at the end, cuts strictly increasing
    sparse = [(9000, BinlogPosition("mysql-bin.000001", 9004)),
              (10_000, BinlogPosition("mysql-bin.000001", 10_004))]
    assert [c.pos for c in cut_points(sparse, 10_000, partitions=4, min_bytes=1000)] == [9004]
    assert cut_points([(10_000, BinlogPosition("mysql-bin.000001", 10_004))], 10_000, partitions=4,
                      min_bytes=1000) == []


def _reader(mysql_server, tmp_path, table: TableId, server_ids: str = "", **kw) -> BinlogMicroBatchStream:
    settings = _settings(mysql_server)
    url = settings.url_without_password()
    options = BinlogSourceOptions(
        mysql_url=with_query(url, server_id=server_ids) if server_ids else url, tables=(table,),
        chunk_store=str(tmp_path / "chunks.db"),
        max_bytes_per_batch=None, **kw,
    )
    return BinlogMicroBatchStream(options, settings.password)


def _decode(settings, table: TableId, schemas, start: BinlogOffset, end: BinlogOffset) -> list[tuple]:
    reader = BinlogReader(settings, allocate_server_id(settings, 0), {table}, schemas)
    items = [i for i in reader.read_with_heartbeats(start, end.position) if not isinstance(i, Heartbeat)]
    assert reader.last_offset.position == end.position  # the read ends exactly at the partition's end
    return [(i.key, "ddl", i.ddl.statement) if isinstance(i, SchemaChange) else
            (i.key, i.op, sorted(i.values.items())) for i in items]


def test_batch_partitions_tile_the_range_at_transaction_boundaries(mysql_server, mysql_db, tmp_path):
    """The driver cuts a large batch into contiguous partitions at transaction boundaries (across a binlog
    rotation, around a big transaction and a DDL); decoded one by one they give exactly the whole range's
    rows, each with the columns of its time. A replayed batch (a new driver: no marks from planning) is cut
    again the same way."""
    db, settings = mysql_db, _settings(mysql_server)
    table = TableId(db, "par")
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.par (id INT PRIMARY KEY, pad VARCHAR(200) NOT NULL)")
        start = _binlog_end(conn)
        sql = f"INSERT INTO `{db}`.par VALUES (%s, %s)"
        for i in range(150):
            cur.execute(sql, (i, "a" * 120))
        cur.execute("BEGIN")
        cur.executemany(sql, [(1000 + i, "b" * 150) for i in range(300)])  # ~50 KB in one transaction
        cur.execute("COMMIT")
        cur.execute("FLUSH BINARY LOGS")
        for i in range(150):
            if i == 75:  # partitions after it decode by the new columns, as a reader resumed there does
                cur.execute(f"ALTER TABLE `{db}`.par ADD COLUMN extra INT NOT NULL DEFAULT 7")
            cur.execute(f"UPDATE `{db}`.par SET pad = %s WHERE id = %s", ("c" * 100, i))
    with connect(settings) as conn:
        schemas = {table: load_schema(conn, table)}

    reader = _reader(mysql_server, tmp_path, table, catchup_partitions=4, catchup_partition_bytes=10_000)
    end = reader.latestOffset(start.to_dict(), ReadAllAvailable())
    parts = reader.partitions(start.to_dict(), end)
    assert len(parts) == 4 and [p.index for p in parts] == [0, 1, 2, 3] and {p.count for p in parts} == {4}
    assert BinlogOffset.from_dict(parts[0].start).position == start.position
    assert parts[-1].end == end
    for before, after in itertools.pairwise(parts):
        assert before.end == after.start
    with connect(settings.with_database(None)) as conn:
        names = [n for n, _ in binary_logs(conn)]
        boundaries = set(iter_boundaries(conn, names, start.file, start.pos))
    cuts = [BinlogOffset.from_dict(p.start) for p in parts[1:]]
    assert all(c.position in boundaries and c.at_boundary and c.server for c in cuts), cuts

    whole = _decode(settings, table, schemas, start, BinlogOffset.from_dict(end))
    pieces = [row for p in parts
              for row in _decode(settings, table, schemas, BinlogOffset.from_dict(p.start),
                                 BinlogOffset.from_dict(p.end))]
    assert len(whole) == 150 + 300 + 300 + 1 and pieces == whole
    assert [len(values) for _, op, values in whole if op == "+U"] == [2] * 75 + [3] * 75
    assert all(0 < sum(1 for _ in _decode(settings, table, schemas, BinlogOffset.from_dict(p.start),
                                          BinlogOffset.from_dict(p.end))) for p in parts)

    replayed = _reader(mysql_server, tmp_path, table, catchup_partitions=4, catchup_partition_bytes=10_000)
    again = replayed.partitions(start.to_dict(), end)
    assert [(p.start, p.end) for p in again] == [(p.start, p.end) for p in parts]
    # off, or a batch too small to split: one partition, as before
    for kw in ({"catchup_partitions": 1}, {"catchup_partitions": 4, "catchup_partition_bytes": 10**9}):
        whole_batch = _reader(mysql_server, tmp_path, table, **kw).partitions(start.to_dict(), end)
        assert [(p.index, p.count, p.end) for p in whole_batch] == [(0, 1, end)]
    # no more partitions than readers the server_id range has ids for (5400 the stream's, 5402 check's)
    narrow = _reader(mysql_server, tmp_path, table, "5400-5402", catchup_partitions=4,
                     catchup_partition_bytes=10_000)
    assert len(narrow.partitions(start.to_dict(), end)) == 2
    # a byte-limited batch is cut from the marks of its own planning scan
    limited = _reader(mysql_server, tmp_path, table, catchup_partitions=2, catchup_partition_bytes=5_000)
    first_end = limited.latestOffset(start.to_dict(), ReadMaxBytes(30_000))
    assert BinlogOffset.from_dict(first_end).key < BinlogOffset.from_dict(end).key
    assert len(limited.partitions(start.to_dict(), first_end)) == 2


def test_catchup_options_are_checked():
    with pytest.raises(ConfigurationError, match="catchup_partitions"):
        BinlogSourceOptions.from_options({"mysql_url": "mysql://u@h:3306", "tables": "d.t",
                                          "chunk_store": "x", "catchup_partitions": "-1"})


def _partitions_of(output: str, table: TableId, batch_id: int) -> set[str]:
    marker = read_json(changelog_marker(output, table, batch_id))
    return {name.split("-")[1] for name in marker["files"]}


def test_parallel_catchup_under_writes_equals_one_reader(mysql_server, mysql_db, tmp_path, spark, caplog):
    """Writers run while a stream far behind catches up with three partitions per batch, each read in parts
    of a few dozen row images (resumed inside transactions), is killed after a batch's output is written
    (the replay is cut again by a new driver), and is restarted; then the changelog equals a one-partition
    stream's over the same binlog, change for change, and the mirror equals the
    source. A small batch once caught up is read by one partition."""
    pipe, plans, workload = _setup(mysql_server, mysql_db, tmp_path, seed=31)
    # parts of 37 row images: every partition is read in several parts, cut inside transactions too
    parallel = _config(mysql_server, mysql_db, tmp_path, name="par", max_bytes_per_batch=70_000,
                       catchup_partitions=3, catchup_partition_bytes=12_000, rows_per_read=37)
    single = _config(mysql_server, mysql_db, tmp_path, name="one", max_bytes_per_batch=70_000,
                     catchup_partitions=1)
    crashed: list[int] = []

    def crash_once(batch_id: int, tables: list[TableId]) -> None:
        if batch_id == 1 and not crashed:  # the batch's files and markers are written; not committed by Spark
            crashed.append(batch_id)
            raise RuntimeError("killed after the batch's output")

    caplog.set_level(logging.INFO, logger="airflow_provider_mysqlcdc")
    try:
        _let_binlog_grow(mysql_server, 200_000, timeout=120, workload=workload)
        with pytest.raises(StreamFailed, match="killed after the batch's output"):
            run_stream(spark, parallel, on_batch_committed=crash_once)
        _let_binlog_grow(mysql_server, 60_000, timeout=120, workload=workload)
        run_stream(spark, parallel)
    finally:
        stats = workload.stop()
    run_stream(spark, parallel)
    run_stream(spark, single)
    assert stats.transactions > 100, stats

    ledgers = _ledgers(parallel.checkpoint)
    assert [e["batch_id"] for e in ledgers if e["replay"]] == [1]
    for before, after in itertools.pairwise(ledgers):
        assert after["start_offset"] == before["end_offset"], (before, after)
    split = {b for plan in plans for b in committed_batch_ids(parallel.output, plan.table)
             if len(_partitions_of(parallel.output, plan.table, b)) > 1}
    assert len(split) >= 2, "large batches should be read by several partitions"
    assert 1 in split, "the replayed batch should be cut again"

    got, want = _changelog(parallel.output, pipe), _changelog(single.output, pipe)
    assert len({(r.table, r.key) for r in got}) == len(got), "a change was written twice"
    assert _comparable(got) == _comparable(want)
    assert len(got) > 1000
    _assert_mirror_equals_source(pipe, plans, parallel.output)

    # caught up: a small batch is one partition again
    busy = plans[0].table
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{busy.table}` SET `v` = `v` + 1 LIMIT 3")
    run_stream(spark, parallel)
    last = committed_batch_ids(parallel.output, busy)[-1]
    assert _partitions_of(parallel.output, busy, last) == {"00000"}
