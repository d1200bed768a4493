"""A thread of the stream task that turns the stream's progress into metrics while the task waits on Spark.

Every ``BATCH_LOOK_S`` it reads the stream's progress record from the output root and, at every batch
committed since, sends that batch's figures and the counters of what was committed. Every ``interval``
seconds (and once more when the Spark application ends) it also reads the server's binlog end, clock and
expiry (one short MySQL session as the CDC user) and the chunk store, and sends lag (seconds, bytes), binlog
headroom and each table's chunk progress (re-snapshots included). Sent from here, not from the Spark
driver: the lag and the headroom keep coming when the stream is stuck, which is when an alert matters, and
the backend is Airflow's. The record is written twice per batch (its timings after the mirror refresh): a
batch's figures are each sent once, as they appear.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.file_start import FileStarts
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.stream_figures import StreamTotals
from airflow_provider_mysqlcdc.engine.lake.stream_progress import StreamProgress, read_stream_progress
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.server_binlog import server_binlog
from airflow_provider_mysqlcdc.engine.status.stream_health import Needed, stream_health
from airflow_provider_mysqlcdc.engine.status.table_status import table_status
from airflow_provider_mysqlcdc.metrics.samples import (
    Sample,
    batch_samples,
    health_samples,
    snapshot_samples,
    totals_samples,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 15.0
BATCH_LOOK_S = 1.0  # a look at the progress record only: one small file read


class StreamWatcher:
    """``start()`` before the stream's Spark application, ``stop()`` after it (a last look, then it ends)."""

    def __init__(self, output: str, settings: MySQLSettings, store_url: str, tables: Sequence[str],
                 tags: dict[str, str], emit: Callable[[list[Sample]], None],
                 interval: float = DEFAULT_INTERVAL_S) -> None:
        self.output, self.settings, self.store_url = output, settings, store_url
        self.tables, self.tags, self.emit, self.interval = list(tables), tags, emit, interval
        self.file_starts = FileStarts(settings)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mysqlcdc-metrics", daemon=True)
        self._totals: StreamTotals | None = None
        self._batch: int | None = None
        self._sent: set[str] = set()  # the metrics of batch ``_batch`` already sent
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def start(self) -> None:
        progress = self._progress()  # the baseline: counters count what this task's stream commits
        self._totals = (progress.totals if progress is not None else None) or StreamTotals()
        self._batch = progress.batch_id if progress is not None else None
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=60)
        self.look()

    def _run(self) -> None:
        last_look = time.monotonic()
        while not self._halt.wait(min(BATCH_LOOK_S, self.interval)):
            try:
                if time.monotonic() - last_look >= self.interval:
                    last_look = time.monotonic()
                    self.look()
                else:
                    self.emit(self._batch_samples(self._quietly("progress", self._progress)))
            except Exception as exc:  # noqa: BLE001 - the watcher outlives a bad look; metrics never fail a task
                self._warn_once("look", exc)

    def look(self) -> None:
        """One whole look: read, then send (each part on its own: one that fails leaves the others)."""
        samples: list[Sample] = []
        progress = self._quietly("progress", self._progress)
        statuses = self._quietly("chunk store", self._statuses) or []
        samples += snapshot_samples(statuses, self.tags)
        hws = [t.min_hw for t in statuses if t.min_hw is not None]
        health = self._quietly("server", lambda: self._health(progress, min(hws) if hws else None))
        if health is not None:
            samples += health_samples(health, self.tags)
        samples += self._batch_samples(progress)
        self.emit(samples)

    def _batch_samples(self, progress: StreamProgress | None) -> list[Sample]:
        with self._lock:  # the thread's looks and a look of the caller's (``stop``, a test) change one state
            return self._new_batch_samples(progress)

    def _new_batch_samples(self, progress: StreamProgress | None) -> list[Sample]:
        """What was committed since the previous look: the counters, and the latest batch's figures not sent
        yet (each once)."""
        if progress is None:
            return []
        samples: list[Sample] = []
        totals = progress.totals or StreamTotals()
        # a new batch: another id, or the same id committed again with other content (a replay after a
        # restart), which changes the totals; the record's second write (the timings) changes neither
        sent = self._sent
        if progress.batch_id != self._batch or totals != (self._totals or StreamTotals()):
            samples += totals_samples(self._totals or StreamTotals(), totals, self.tags)
            sent = set()
        if progress.batch is not None:
            fresh = [x for x in batch_samples(progress.batch, self.tags) if x.name not in sent]
            sent = sent | {x.name for x in fresh}
            samples += fresh
        self._totals, self._batch, self._sent = totals, progress.batch_id, sent  # all computed: now recorded
        return samples

    def _progress(self) -> StreamProgress | None:
        return read_stream_progress(self.output)

    def _statuses(self) -> list[Any]:
        with ChunkStore(self.store_url) as store:
            return [table_status(store, name) for name in self.tables]

    def _health(self, progress: StreamProgress | None, min_hw: Any) -> Any:
        with contextlib.closing(connect(self.settings.with_database(None))) as conn:
            server = server_binlog(conn, [progress.end_offset.position] if progress is not None else [])
        return stream_health(server, Needed.of(progress, min_hw), self.file_starts)

    def _quietly(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - metrics never fail the task; said once per kind
            self._warn_once(what, exc)
            return None

    def _warn_once(self, what: str, exc: Exception) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("metrics: the %s failed (%s); its metrics are left out until it works again",
                        what, exc)
