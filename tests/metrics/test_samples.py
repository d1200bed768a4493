"""The metric samples: counters are the difference of two looks at the stream's totals (a replayed batch
counted once), gauges left out when unknown; the monitoring page lists every metric with its type."""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.lake.stream_progress import (
    StreamProgress,
    read_stream_progress,
    write_stream_progress,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.status.binlog_expiry import binlog_expiry
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog
from airflow_provider_mysqlcdc.engine.status.stream_health import Needed, stream_health
from airflow_provider_mysqlcdc.metrics import names
from airflow_provider_mysqlcdc.metrics.samples import health_samples, totals_samples

NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
FILES = (("mysql-bin.000010", 9000), ("mysql-bin.000011", 7000), ("mysql-bin.000012", 800))


def test_totals_count_a_replayed_batch_once_and_counters_are_their_difference(tmp_path):
    first = BatchFigures(3, {"shop.orders": 5}, {"shop.orders": 900}, rows_read=9, dropped=4)
    totals = StreamTotals().plus(first)
    replayed = BatchFigures(3, {"shop.orders": 5, "shop.items": 1}, {"shop.orders": 900, "shop.items": 80},
                            rows_read=10, dropped=4, replay=True)
    again = totals.plus(first, sign=-1).plus(replayed)
    assert again == StreamTotals(1, {"shop.orders": 5, "shop.items": 1},
                                 {"shop.orders": 900, "shop.items": 80}, 4)
    write_stream_progress(str(tmp_path), _progress(again, replayed))
    back = read_stream_progress(str(tmp_path))
    assert back is not None and back.totals == again and back.batch == replayed
    samples = {(s.name, s.tags.get("table")): s.value for s in totals_samples(totals, again, {"dag_id": "d"})}
    assert samples == {(names.ROWS_WRITTEN.name, "shop.items"): 1,
                       (names.BYTES_WRITTEN.name, "shop.items"): 80}
    grown = StreamTotals(3, {"shop.orders": 8}, {"shop.orders": 1500}, 6)
    samples = {(s.name, s.tags.get("table")): s.value for s in totals_samples(totals, grown, {})}
    assert samples == {(names.BATCHES.name, None): 2, (names.ROWS_WRITTEN.name, "shop.orders"): 3,
                       (names.BYTES_WRITTEN.name, "shop.orders"): 600, (names.EVENTS_DROPPED.name, None): 2}


def _progress(totals: StreamTotals, batch: BatchFigures) -> StreamProgress:
    return StreamProgress(batch.batch_id, BinlogOffset("mysql-bin.000012", 500), ("shop.orders",), None,
                          NOW.isoformat(), batch, totals)


def test_health_samples_leave_out_what_is_unknown_or_unlimited():
    server = ServerBinlog(BinlogPosition("mysql-bin.000012", 800), FILES, NOW,
                          binlog_expiry({"binlog_expire_logs_seconds": "0"}))
    progress = _progress(StreamTotals(), BatchFigures(1))
    health = stream_health(server, Needed.of(progress, None))
    sent = {s.name: s.value for s in health_samples(health, {})}
    # no headroom: the server never purges, nothing to alert on
    assert sent == {names.LAG_SECONDS.name: 0.0, names.LAG_BYTES.name: 300}


def test_the_monitoring_page_lists_every_metric_with_its_type():
    page = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in page.splitlines()
            if line.startswith("| `mysqlcdc.")}
    assert rows == {m.name: m.kind for m in names.ALL}


def test_the_watcher_sends_each_batch_once_as_its_figures_appear(tmp_path):
    """The record is written twice per batch (the timings after the mirror refresh); the watcher's per-batch
    look sends the counters once per batch and each figure once, as it appears."""
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.metrics.stream_watcher import StreamWatcher

    sent: list = []
    watcher = StreamWatcher(str(tmp_path), MySQLSettings.from_url("mysql://cdc@127.0.0.1:1"), "unused",
                            [], {"dag_id": "d"}, sent.extend)
    first = BatchFigures(1, {"shop.orders": 2}, {"shop.orders": 100})
    written = _progress(StreamTotals().plus(first), first)
    timed = dataclasses.replace(first, seconds=0.5, mirror_refresh_seconds=0.2)
    for progress in (written, written, _progress(StreamTotals().plus(timed), timed)):
        sent += watcher._batch_samples(progress)
    names_sent = [s.name for s in sent]
    assert sorted(names_sent) == sorted([names.BATCHES.name, names.ROWS_WRITTEN.name,
                                         names.BYTES_WRITTEN.name,
                                         names.BATCH_ROWS.name, names.BATCH_BYTES.name,
                                         names.BATCH_DURATION.name, names.MIRROR_REFRESH.name]), names_sent


def test_the_watcher_counts_a_batch_id_committed_again_with_other_content(tmp_path):
    """A restarted stream may commit a batch id the record already holds (a replay): its totals changed, so
    its counters and figures are sent."""
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.metrics.stream_watcher import StreamWatcher

    watcher = StreamWatcher(str(tmp_path), MySQLSettings.from_url("mysql://cdc@127.0.0.1:1"), "unused",
                            [], {"dag_id": "d"}, lambda samples: None)
    first = BatchFigures(4, {"shop.orders": 2}, {"shop.orders": 100})
    watcher._batch_samples(_progress(StreamTotals().plus(first), first))
    replayed = BatchFigures(4, {"shop.orders": 3}, {"shop.orders": 150}, replay=True)
    sent = watcher._batch_samples(_progress(StreamTotals().plus(replayed), replayed))
    got = {s.name: s.value for s in sent}
    assert got[names.ROWS_WRITTEN.name] == 1 and got[names.BATCH_ROWS.name] == 3, got
