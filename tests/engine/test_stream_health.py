"""Lag in seconds, binlog headroom and the stream's recorded figures, as pure computations (no server): the
rules that the server tests (tests/spark/test_idle_source.py) then check against real binlogs."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from airflow_provider_mysqlcdc.engine.lake.layout import stream_progress_path, write_json_atomic
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.status.binlog_expiry import binlog_expiry
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog
from airflow_provider_mysqlcdc.engine.status.stream_health import (
    Needed,
    binlog_headroom,
    lag_seconds,
    stream_health,
)

NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
FILES = (("mysql-bin.000010", 9000), ("mysql-bin.000011", 7000), ("mysql-bin.000012", 800))


def _server(expire: dict[str, str | None]) -> ServerBinlog:
    return ServerBinlog(BinlogPosition("mysql-bin.000012", 800), FILES, NOW, binlog_expiry(expire))


def test_the_expiry_follows_the_servers_settings():
    assert binlog_expiry({"binlog_expire_logs_seconds": "7200", "expire_logs_days": "0"}).seconds == 7200
    # MySQL 8.0 with the seconds at 0 and days set; MariaDB before 10.6 (no seconds variable), fractional days
    assert binlog_expiry({"binlog_expire_logs_seconds": "0", "expire_logs_days": "3"}).seconds == 3 * 86400
    assert binlog_expiry({"binlog_expire_logs_seconds": None, "expire_logs_days": "0.5"}).seconds == 43200
    never = binlog_expiry({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"})
    assert never.seconds is None and never.setting == "binlog_expire_logs_seconds=0"
    off = binlog_expiry({"binlog_expire_logs_seconds": "600", "binlog_expire_logs_auto_purge": "OFF"})
    assert off.seconds is None and "auto_purge=OFF" in off.setting
    sized = binlog_expiry({"binlog_expire_logs_seconds": "600", "max_binlog_total_size": "1073741824"})
    assert sized.seconds == 600 and "total size" in sized.notes[0]


def test_an_idle_stream_does_not_lag_however_old_its_last_change():
    server = _server({"binlog_expire_logs_seconds": "7200"})
    last = NOW - timedelta(days=3)
    assert lag_seconds(server, BinlogPosition("mysql-bin.000012", 800), last) == 0.0
    assert lag_seconds(server, BinlogPosition("mysql-bin.000012", 500), NOW - timedelta(seconds=42)) == 42.0
    assert lag_seconds(server, BinlogPosition("mysql-bin.000012", 500), None) is None  # an earlier release
    assert lag_seconds(None, BinlogPosition("mysql-bin.000012", 500), last) is None  # no server
    # the server rotated after the stream's last transaction: only file bookkeeping follows, nothing to read
    rotated = BinlogPosition("mysql-bin.000011", 6900)
    quiet = ServerBinlog(server.position, FILES, NOW, server.expiry, frozenset({rotated}))
    assert lag_seconds(quiet, rotated, last) == 0.0 and quiet.lag(rotated) == (100 + 800, 1)


def test_headroom_counts_from_when_the_next_file_was_started():
    server = _server({"binlog_expire_logs_seconds": "7200"})
    started = {"mysql-bin.000011": NOW - timedelta(seconds=1000),
               "mysql-bin.000012": NOW - timedelta(seconds=10)}
    asked: list[str] = []

    def starts(file: str, size: int) -> datetime | None:
        asked.append(file)
        return started.get(file)

    rotated = binlog_headroom(server, BinlogPosition("mysql-bin.000010", 500), starts)
    assert rotated.seconds == 6200 and rotated.purge_at == NOW + timedelta(seconds=6200)
    assert not rotated.at_least
    assert asked == ["mysql-bin.000011"]  # the file after the needed one
    current = binlog_headroom(server, BinlogPosition("mysql-bin.000012", 4), starts)
    assert current.seconds == 7200 and current.at_least
    purged = binlog_headroom(server, BinlogPosition("mysql-bin.000007", 4), starts)
    assert purged.seconds == 0 and "purged" in (purged.note or "")
    overdue = binlog_headroom(_server({"binlog_expire_logs_seconds": "600"}),
                              BinlogPosition("mysql-bin.000010", 500), starts)
    assert overdue.seconds == 0 and overdue.purge_at == NOW - timedelta(seconds=400)
    never = binlog_headroom(_server({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}),
                            BinlogPosition("mysql-bin.000010", 500), starts)
    assert never.seconds is None and "purges no binlog by age" in (never.note or "")


def test_a_progress_record_of_an_earlier_release_reads_as_unknown(tmp_path):
    """Written before the stream kept its last event time and figures: no crash, lag in seconds unknown."""
    root = str(tmp_path)
    offset = BinlogOffset("mysql-bin.000012", 500)
    write_json_atomic(stream_progress_path(root), {"batch_id": 7, "end_offset": offset.to_dict(),
                                                   "tables": ["shop.orders"], "committed_at": "then"})
    progress = read_stream_progress(root)
    assert progress is not None and progress.last_event_at is None and progress.batch is None
    health = stream_health(_server({"binlog_expire_logs_seconds": "7200"}), Needed.of(progress, None))
    assert health.needed_by == "stream" and health.lag_seconds is None and health.lag_bytes == 300
    assert "unknown" in health.notes[-1] and json.dumps(health.as_dict())
    # bad values in the new fields are left out, not fatal
    write_json_atomic(stream_progress_path(root), {"batch_id": 7, "end_offset": offset.to_dict(),
                                                   "last_event_at": 5, "batch": "x", "totals": [1]})
    progress = read_stream_progress(root)
    assert progress is not None and (progress.last_event_at, progress.batch, progress.totals) == (None,) * 3
