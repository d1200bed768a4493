"""Two streams on one MySQL server with overlapping server_id ranges: the second fails at start, on Spark.

Their readers (each stream's own, its parallel catch-up partitions, its backfills) would take the same replica
server_ids, and the server drops one of two readers with one id. A running stream holds its whole range; a
second one (another checkpoint and output, the same chunk store) whose range overlaps it is refused at once,
the error naming both checkpoints and the fix; a stream with a disjoint range runs beside it; once the first
stops, its range is free. The engine side (killed holders, lost sessions) is
tests/engine/test_server_id_claims.py.
"""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.server_id_claims import ServerIdRangeTaken
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import start_stream
from tests.support.engine_harness import Pipeline, password_file
from tests.support.servers import with_query
from tests.support.workload import TABLE_SPECS, create_tables, seed_rows

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

SPECS = [s for s in TABLE_SPECS if s.name == "t_int"]


def test_overlapping_server_id_ranges_fail_at_start(mysql_server, mysql_db, tmp_path, spark):
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=40, seed=3, specs=SPECS)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store = str(tmp_path / "chunks.db")
    pipe = Pipeline(settings, ChunkStore(store), mysql_db, chunk_size=20)
    for plan in pipe.plan([f"{mysql_db}.t_*"]):
        for chunk in plan.chunks:
            pipe.snapshot(plan, chunk.chunk_id)
    pipe.store.close()

    def config(name: str, ids: str) -> StreamConfig:
        url = MySQLSettings.from_url(with_query(mysql_server.cdc_url, server_id=ids)).url_without_password()
        return StreamConfig(mysql_url=url, tables=(f"{mysql_db}.t_*",), chunk_store=store,
                            output=str(tmp_path / f"out-{name}"), checkpoint=str(tmp_path / f"ckpt-{name}"),
                            password_file=password_file(tmp_path, settings),
                            trigger="processing-time=1 second", lock_lease_seconds=20.0)

    first, second, third = config("a", "6500-6519"), config("b", "6510-6529"), config("c", "6520-6539")
    run = start_stream(spark, first)
    try:
        started = time.monotonic()
        with pytest.raises(ServerIdRangeTaken) as refused:
            start_stream(spark, second)
        assert time.monotonic() - started < 15, "the second stream must fail at start"
        message = str(refused.value)
        assert (f"the stream on checkpoint {second.checkpoint} "
                "cannot claim its server_id range 6510-6529") in message
        assert f"held by the stream on checkpoint {first.checkpoint} (server_id range 6500-6519" in message
        assert "disjoint" in message and "?server_id=" in message, message
        assert not (tmp_path / "ckpt-b" / "mysqlcdc" / "startup.json").exists(), "nothing of it started"
        beside = start_stream(spark, third)  # a disjoint range: both run
        try:
            assert run.query.isActive and beside.query.isActive
        finally:
            beside.stop()
    finally:
        run.stop()
    again = start_stream(spark, replace(second, trigger="available-now"))  # the first one's range is free
    again.await_termination()
