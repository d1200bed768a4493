"""Faults of the stream phase on Spark that need a server of their own: binlogs purged past the position the
stream needs must stop it with an error that names the missing file and the way out, and write nothing."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import run_stream
from tests.support.engine_harness import password_file
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def _purge_all_but_current(server) -> tuple[str, str]:
    """FLUSH twice and purge up to the newest file; returns (oldest file before, oldest file now)."""
    with server.admin() as admin, admin.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        before = cur.fetchall()[0][0]
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("FLUSH BINARY LOGS")
        newest = binlog_end(admin).file
        deadline = time.monotonic() + 20
        while True:  # MariaDB keeps files until its binlog checkpoint moves on: retry for a moment
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [newest] or time.monotonic() > deadline:
                return before, newest
            time.sleep(0.05)


def test_stream_from_a_purged_position_stops_with_the_way_out(private_server, spark, tmp_path):
    with private_server.admin() as admin, admin.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.orders (id INT PRIMARY KEY, v INT)")
        cur.executemany("INSERT INTO shop.orders VALUES (%s, %s)", [(i, i) for i in range(200)])
    settings = MySQLSettings.from_url(private_server.cdc_url)
    secret = password_file(tmp_path, settings)
    url = settings.url_without_password()
    store, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    with ChunkStore(store) as chunk_store:
        plan_tables(settings, chunk_store, ["shop.orders"], chunk_size=50)
    result = run_chunk_group(spark, SnapshotOptions(mysql_url=url, table="shop.orders", output=output,
                                                    chunk_store=store, password_file=secret))
    assert result.ok
    with private_server.admin() as admin, admin.cursor() as cur:
        cur.execute("UPDATE shop.orders SET v = v + 1 WHERE id < 10")  # changes the stream would need
    needed, oldest = _purge_all_but_current(private_server)

    config = StreamConfig(mysql_url=url, tables=("shop.orders",), chunk_store=store, output=output,
                          checkpoint=str(tmp_path / "ckpt"), password_file=secret)
    with pytest.raises(CdcError) as info:
        run_stream(spark, config)
    message = str(info.value)
    assert needed in message and oldest in message, message
    assert "snapshot" in message.lower(), message  # the way out: snapshot again (a new plan generation)
    assert settings.password not in message
    assert not list(Path(output).rglob("changelog/_committed/*.json")), "nothing may be written"
