"""Every metric the pipeline sends: name, type, tags and meaning (docs/monitoring.md lists the same).

Names start with ``mysqlcdc.`` (Airflow's ``[metrics] statsd_prefix`` goes in front, ``airflow`` by default).
Tags: ``dag_id`` on every metric, ``table`` (``db.table``) and ``db`` on per-table ones. Plain StatsD has no
tags (Airflow drops them unless ``statsd_influxdb_enabled``): per-table counters then add up over the tables,
and the untagged pipeline-wide gauges stay meaningful.
"""
from __future__ import annotations

from dataclasses import dataclass

GAUGE, COUNTER, TIMER = "gauge", "counter", "timer"


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # gauge, counter or timer
    per_table: bool
    meaning: str


LAG_SECONDS = Metric("mysqlcdc.stream.lag_seconds", GAUGE, False,
                     "server clock minus the commit time of the last change the stream read; 0 at the "
                     "binlog's end (an idle stream does not lag)")
LAG_BYTES = Metric("mysqlcdc.stream.lag_bytes", GAUGE, False,
                   "binlog bytes between the stream and the server's end")
HEADROOM = Metric("mysqlcdc.stream.binlog_headroom_seconds", GAUGE, False,
                  "time until the server purges the oldest binlog file the pipeline needs (not sent when the "
                  "server never purges by age)")
BATCHES = Metric("mysqlcdc.stream.batches", COUNTER, False, "micro-batches committed")
BATCH_DURATION = Metric("mysqlcdc.stream.batch_duration", TIMER, False,
                        "a batch from the sink's start to its mirror refresh's end (each batch the watcher "
                        "sees: the latest one at each look)")
MIRROR_REFRESH = Metric("mysqlcdc.stream.mirror_refresh_duration", TIMER, False,
                        "the mirror refresh after a batch (garbage collection included when it was due)")
BATCH_ROWS = Metric("mysqlcdc.stream.batch_rows", GAUGE, False, "changes the latest batch wrote")
BATCH_BYTES = Metric("mysqlcdc.stream.batch_bytes", GAUGE, False, "changelog bytes the latest batch wrote")
ROWS_WRITTEN = Metric("mysqlcdc.stream.rows_written", COUNTER, True, "changes written to the changelog")
BYTES_WRITTEN = Metric("mysqlcdc.stream.bytes_written", COUNTER, True,
                       "changelog file bytes written (Parquet, and changelog-json when on)")
EVENTS_DROPPED = Metric("mysqlcdc.stream.events_dropped", COUNTER, False,
                        "row images the stream filter dropped (a committed chunk snapshot holds them)")
CHUNKS_DONE = Metric("mysqlcdc.snapshot.chunks_done", GAUGE, True, "committed chunks of the latest plan")
CHUNKS_REMAINING = Metric("mysqlcdc.snapshot.chunks_remaining", GAUGE, True,
                          "chunks of the latest plan not committed yet (failed ones included)")
CHUNKS_FAILED = Metric("mysqlcdc.snapshot.chunks_failed", GAUGE, True,
                       "chunks whose latest attempt failed (a snapshot task's or a re-snapshot's)")
ROWS_PER_SECOND = Metric("mysqlcdc.snapshot.rows_per_second", GAUGE, True,
                         "committed snapshot rows over the time chunks were read")

ALL = (LAG_SECONDS, LAG_BYTES, HEADROOM, BATCHES, BATCH_DURATION, MIRROR_REFRESH, BATCH_ROWS, BATCH_BYTES,
       ROWS_WRITTEN, BYTES_WRITTEN, EVENTS_DROPPED, CHUNKS_DONE, CHUNKS_REMAINING, CHUNKS_FAILED,
       ROWS_PER_SECOND)
