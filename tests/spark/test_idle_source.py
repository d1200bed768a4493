"""Idle sources: when the captured tables see no writes while the binlog moves on (other databases,
rotations), the stream's committed offset still advances, so a restart after the old binlogs were purged needs
none of them; and a plan warns when binlog retention is shorter than the snapshot is expected to take."""
from __future__ import annotations

import argparse
import json
import logging
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from airflow_provider_mysqlcdc.cli import status as cli_status
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream
from tests.engine.test_readiness_check import global_variable
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.statsd_listener import airflow_statsd

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def _committed_offset(output: str) -> dict:
    """The end offset of the stream's last committed batch (what a restart resumes from)."""
    progress = read_stream_progress(output)
    assert progress is not None, "the stream committed no batch"
    return progress.end_offset.to_dict()


def _purge_to(server, file: str) -> str:
    """PURGE BINARY LOGS TO ``file``; returns the oldest file left (MariaDB may keep files until its binlog
    checkpoint moves on: retried for a moment)."""
    with server.admin() as admin, admin.cursor() as cur:
        deadline = time.monotonic() + 20
        while True:
            cur.execute("PURGE BINARY LOGS TO %s", (file,))
            cur.execute("SHOW BINARY LOGS")
            oldest = cur.fetchall()[0][0]
            if oldest == file or time.monotonic() > deadline:
                return oldest
            time.sleep(0.3)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mysqlcdc")
    cli_status.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def _stream(spark, config: StreamConfig) -> None:
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)


def test_idle_tables_advance_the_offset_past_purged_binlogs(private_server, spark, tmp_path, monkeypatch,
                                                            capsys):
    server = private_server
    with server.admin() as admin, admin.cursor() as cur:
        cur.execute("CREATE DATABASE quiet")
        cur.execute("CREATE DATABASE busy")
        cur.execute("CREATE TABLE quiet.accounts (id INT PRIMARY KEY, balance DECIMAL(12,2))")
        cur.executemany("INSERT INTO quiet.accounts VALUES (%s, %s)", [(i, i * 1.5) for i in range(300)])
        cur.execute("CREATE TABLE busy.events (id INT AUTO_INCREMENT PRIMARY KEY, payload VARCHAR(64))")
    settings = MySQLSettings.from_url(server.cdc_url)
    secret = password_file(tmp_path, settings)
    store, output, checkpoint = str(tmp_path / "chunks.db"), str(tmp_path / "lake"), tmp_path / "ckpt"
    with ChunkStore(store) as chunk_store:
        plan_tables(settings, chunk_store, ["quiet.accounts"], chunk_size=100)
    assert run_chunk_group(spark, SnapshotOptions(mysql_url=settings.url_without_password(),
                                                  table="quiet.accounts",
                                                  output=output, chunk_store=store, password_file=secret)).ok
    config = StreamConfig(mysql_url=settings.url_without_password(),
                          tables=("quiet.accounts",), chunk_store=store,
                          output=output, checkpoint=str(checkpoint), password_file=secret)
    with server.admin() as admin, admin.cursor() as cur:
        cur.execute("UPDATE quiet.accounts SET balance = 0 WHERE id = 1")  # the last change for a while
    _stream(spark, config)
    first = _committed_offset(output)

    # days of other traffic, compressed: another database written, binlogs rotated; quiet.accounts untouched
    with server.admin() as admin, admin.cursor() as cur:
        for round_ in range(4):
            cur.executemany("INSERT INTO busy.events (payload) VALUES (%s)",
                            [(f"r{round_}-{i}",) for i in range(200)])
            cur.execute("FLUSH BINARY LOGS")
    _stream(spark, config)
    advanced = _committed_offset(output)
    assert (int(advanced["file"].rsplit(".", 1)[1]), advanced["pos"]) > (int(first["file"].rsplit(".", 1)[1]),
                                                                        first["pos"])
    assert advanced["file"] != first["file"], "the offset must move to the newest binlog file"

    # every binlog before the stream's file is purged (what days of expiry do); the stream needs none of them
    assert _purge_to(server, advanced["file"]) == advanced["file"]
    with server.admin() as admin, admin.cursor() as cur:
        cur.execute("UPDATE quiet.accounts SET balance = balance + 1 WHERE id < 10")
        cur.execute("DELETE FROM quiet.accounts WHERE id = 299")
    _stream(spark, config)
    assert _committed_offset(output) != advanced
    assert_mirror_equals_source(settings, output, [TableId("quiet", "accounts")], min_rows=299)
    _lag_headroom_and_metrics(server, settings, spark, config, monkeypatch, capsys)


def _server_now(server) -> datetime:
    with server.admin() as admin, admin.cursor() as cur:
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        return cur.fetchone()[0].replace(tzinfo=UTC)


def _lag_headroom_and_metrics(server, settings, spark, config, monkeypatch, capsys) -> None:
    """Piggy-backed on the stream above (issue 40): lag in seconds (caught up: 0; behind by a known amount;
    caught up again: 0), binlog headroom from the private server's expiry and when the file after the
    stream's was started, ``status --json``, and the stream task's metrics watcher sending them through
    Airflow's StatsD to a listener on loopback."""
    table = "quiet.accounts"

    def status():
        with ChunkStore(config.chunk_store) as store:
            return collect_status(store, config.output, [table], settings=settings)

    progress = read_stream_progress(config.output)
    assert progress is not None and progress.batch is not None and progress.totals is not None
    figures = progress.batch
    assert figures.seconds is not None and figures.mirror_refresh_seconds is not None  # the hook's time
    assert progress.totals.rows[table] >= 11 and progress.totals.bytes[table] > 0
    last_read = datetime.fromisoformat(progress.last_event_at)  # the DELETE above: the last change read
    with global_variable(server, "binlog_expire_logs_seconds", 7200):
        report = status()
        health = report.health
        assert health.needed_by == "stream" and health.lag_seconds == 0.0, health  # idle: caught up
        assert abs((health.last_event_at - last_read).total_seconds()) < 1e-3
        assert health.headroom.at_least and health.headroom.seconds == 7200  # the server's current file
        assert report.tables[0].lag_seconds == 0.0
        # behind: a change the stream has not read, and the stream's binlog file rotated
        with server.admin() as admin, admin.cursor() as cur:
            cur.execute("UPDATE quiet.accounts SET balance = balance + 1 WHERE id = 2")
            cur.execute("FLUSH BINARY LOGS")
        rotated = _server_now(server)
        common = ["--chunk-store", config.chunk_store, "--output", config.output,
                  "--mysql-url", server.cdc_url]
        capsys.readouterr()
        assert _cli(["status", *common, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)["stream"]
        now = _server_now(server)
        assert data["needed_by"] == "stream" and data["lag_bytes"] > 0
        behind = (now - last_read).total_seconds()  # the DELETE's commit to now, on the server's clock
        assert behind - 2 <= data["lag_seconds"] <= behind + 1, (data, behind)
        assert data["expiry"] == "binlog_expire_logs_seconds=7200" and not data["headroom"]["at_least"]
        expected = 7200 - (now - rotated).total_seconds()  # the stream's file was rotated just now
        assert abs(data["headroom_seconds"] - expected) <= 2, (data, expected)
        assert data["batch"]["rows"] and data["totals"]["rows"][table] >= 11, data
        assert _cli(["status", *common]) == 0
        text = capsys.readouterr().out
        assert "stream lag " in text and "binlog headroom " in text and "purged at " in text, text

        # the stream task's metrics watcher, through Airflow's StatsD to a listener on loopback
        with airflow_statsd(monkeypatch) as listener:
            from airflow_provider_mysqlcdc.metrics.tasks import start_stream_watcher

            watcher = start_stream_watcher(config.output, settings, config.chunk_store, [table],
                                           {"dag": SimpleNamespace(dag_id="idle_source")}, interval=600)
            assert watcher is not None
            watcher.look()  # behind: lag and headroom; no batch since the watcher started
            _stream(spark, config)  # caught up again
            watcher.stop()  # the last look: the batch's figures and the counters since the start
            # UDP: received a moment later, each datagram on its own: the last look sends the lag before the
            # batch's counters and figures, so each is waited for (not only the lag)
            listener.wait_for("mysqlcdc.stream.lag_seconds", count=2)
            for name in ("rows_written", "batches", "batch_duration"):
                listener.wait_for(f"mysqlcdc.stream.{name}")
            got = {}
            for r in listener.received("mysqlcdc."):
                got.setdefault(r.name, []).append(r)
            lag = [r.value for r in got["mysqlcdc.stream.lag_seconds"]]
            assert lag[0] >= behind - 2 and lag[-1] == 0, lag
            headroom = got["mysqlcdc.stream.binlog_headroom_seconds"][0].value
            assert abs(headroom - expected) <= 10, (headroom, expected)
            rows = got.get("mysqlcdc.stream.rows_written")
            assert rows, (sorted(got), listener.lines)
            assert [(r.value, r.tags["table"], r.tags["db"], r.kind) for r in rows] == [
                (2.0, table, "quiet", "c")], rows  # the UPDATE's -U and +U
            assert got["mysqlcdc.stream.batches"][0].value >= 1 and "mysqlcdc.stream.batch_duration" in got
            with ChunkStore(config.chunk_store) as store:
                assert got["mysqlcdc.snapshot.chunks_done"][0].value == len(store.chunks(table))
            assert got["mysqlcdc.snapshot.chunks_remaining"][0].value == 0
            assert all(r.tags.get("dag_id") == "idle_source" for rs in got.values() for r in rs)
            assert settings.password not in "\n".join(listener.lines)
        after = status().health
        assert after.lag_seconds == 0.0 and after.last_event_at > last_read


def test_plan_warns_when_binlog_retention_is_shorter_than_the_snapshot(mysql_server, mysql_db, tmp_path,
                                                                       caplog):
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{mysql_db}`.big (id INT PRIMARY KEY)")
        cur.executemany(f"INSERT INTO `{mysql_db}`.big VALUES (%s)", [(i,) for i in range(3000)])
        cur.execute(f"ANALYZE TABLE `{mysql_db}`.big")
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = f"{mysql_db}.big"
    with ChunkStore(str(tmp_path / "chunks.db")) as store, caplog.at_level(logging.WARNING):
        with global_variable(mysql_server, "binlog_expire_logs_seconds", 3600):
            plan_tables(settings, store, [table], expected_rows_per_second=0.5)  # ~1.7 h for 3000 rows
            warned = caplog.text
            caplog.clear()
            plan_tables(settings, store, [table], expected_rows_per_second=1000.0)  # 3 s
            quiet = caplog.text
        with global_variable(mysql_server, "binlog_expire_logs_seconds", 0):  # never expire: nothing to say
            caplog.clear()
            plan_tables(settings, store, [table], expected_rows_per_second=0.5)
            never = caplog.text
    assert "binlog retention (1 h) is shorter than the estimated snapshot time" in warned, warned
    assert "binlog_expire_logs_seconds" in warned
    assert "binlog retention" not in quiet and "binlog retention" not in never
