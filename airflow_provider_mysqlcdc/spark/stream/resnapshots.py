"""Snapshot a table again in the background while the stream goes on (after TRUNCATE, RENAME, partition DDL).

Such DDL changes rows without row events, so the stream's query stops at it. The driver then only *plans* the
table anew (seconds) and restarts the query at once: the new generation's chunks count as HW = -inf, so the
stream emits every change of the table from the DDL on, and every other table never waits. The new plan is
read in its own Spark job, in the FAIR scheduler pool ``mysqlcdc_resnapshot`` (the stream's batches keep their
share of the executors), and the mirror switches to the new generation when its last chunk commits.

A second such DDL while the table is being read plans it again; the job in flight is cancelled and the newest
plan is read. Pending re-snapshots are kept in ``<checkpoint>/mysqlcdc/resnapshots.json``: a stream stopped or
killed meanwhile takes them up at its next start. A re-snapshot that fails is retried with backoff; until it
commits, nothing is lost (the stream emits all of the table's changes) and ``mysqlcdc status`` shows its
chunks.
"""
from __future__ import annotations

import logging
import posixpath
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.layout import read_json, write_json_atomic
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.replan import replan_table
from airflow_provider_mysqlcdc.spark.session import activate_in_thread
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig

log = logging.getLogger(__name__)

LEDGER_FILE = "mysqlcdc/resnapshots.json"  # in the checkpoint: re-snapshots planned and not committed yet
POOL = "mysqlcdc_resnapshot"  # the FAIR scheduler pool of the background snapshot jobs
RETRY_DELAYS_S = (10.0, 60.0, 300.0)  # waits before the 2nd, 3rd, 4th try of a failed re-snapshot


class ResnapshotPlanFailed(ConfigurationError):
    """The table needs a new snapshot after DDL and cannot be planned (dropped or renamed away for good)."""


@dataclass
class Pending:
    """One re-snapshot: the table, the generation planned for it, the DDL that needed it."""

    table: str
    generation: int
    position: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ResnapshotLedger:
    """``<checkpoint>/mysqlcdc/resnapshots.json``: the re-snapshots this stream still owes."""

    def __init__(self, checkpoint: str) -> None:
        self.path = posixpath.join(checkpoint.rstrip("/"), LEDGER_FILE)
        self._lock = threading.Lock()

    def pending(self) -> list[Pending]:
        data = read_json(self.path) or {}
        return [Pending(**entry) for entry in data.get("pending", [])]

    def put(self, entry: Pending) -> None:
        with self._lock:
            entries = {p.table: p for p in self.pending()}
            entries[entry.table] = entry
            self._write(list(entries.values()))

    def done(self, table: str, generation: int) -> None:
        with self._lock:
            self._write([p for p in self.pending() if not (p.table == table and p.generation <= generation)])

    def _write(self, entries: list[Pending]) -> None:
        write_json_atomic(self.path, {"version": 1, "pending": [e.as_dict() for e in entries]})


Snapshotter = Callable[[Any, StreamConfig, TableId, "tuple[int, ...] | None", str], Any]
"""``(spark, config, table, chunk_ids, job_group) -> ChunkGroupResult`` (``job.snapshot_table``)."""


class BackgroundResnapshots:
    """The stream driver's re-snapshots: plan now, read in a background Spark job, one worker per table."""

    def __init__(self, spark: Any, config: StreamConfig, snapshot: Snapshotter,
                 on_committed: Callable[[TableId], None] | None = None) -> None:
        self.spark, self.config, self.snapshot, self.on_committed = spark, config, snapshot, on_committed
        self.ledger = ResnapshotLedger(config.checkpoint)
        self.failures: dict[str, str] = {}  # table -> why its last try failed (cleared when it commits)
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._stop = threading.Event()
        self._warned_fifo = False

    # -- the driver's calls ----------------------------------------------------------------------------------

    def request(self, table: TableId, position: str) -> None:
        """The stream stopped at DDL of ``table`` at ``position``:
        plan it again now, read it in the background."""
        with ChunkStore(self.config.chunk_store) as store:
            try:
                plan = replan_table(self.config.settings(), store, table)
            except ConfigurationError as exc:
                raise ResnapshotPlanFailed(
                    f"{table} needs a new snapshot after the DDL at {position}, but it cannot be planned "
                    f"({exc}). If it was dropped or renamed away for good, take it out of the pipeline "
                    f"(mysqlcdc remove-table {table}) and restart the stream"
                ) from None
        self.ledger.put(Pending(str(table), plan.generation, position))
        log.warning("%s changed without row events at %s: planned again (generation %s, %d chunk(s)); the "
                    "stream goes on and emits all of its changes while the new snapshot is read in the "
                    "background", table, position, plan.generation, len(plan.chunks))
        self._start(str(table))

    def resume(self) -> None:
        """At a stream start: take up the re-snapshots an earlier run of this checkpoint left unfinished."""
        pending = self.ledger.pending()
        if not pending:
            return
        with ChunkStore(self.config.chunk_store) as store:
            active = set(store.active_tables())
        for entry in pending:
            if entry.table not in active:  # taken out of the pipeline meanwhile: nothing is owed
                self.ledger.done(entry.table, entry.generation)
                continue
            log.warning("taking up the re-snapshot of %s (generation %s, after the DDL at %s) that an "
                        "earlier run of this stream left unfinished", entry.table, entry.generation,
                        entry.position)
            self._start(entry.table)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(t for t, w in self._workers.items() if not w.finished)

    def wait(self) -> None:
        """Until every re-snapshot committed or gave up (an available-now run ends consistent)."""
        while True:
            with self._lock:
                threads = [w.thread for w in self._workers.values() if w.thread.is_alive()]
            if not threads:
                return
            for thread in threads:
                thread.join()

    def cancel(self) -> None:
        """The stream stops: cancel the jobs in flight (their chunks are recorded failed; the ledger keeps the
        re-snapshots for the next start)."""
        self._stop.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.cancel(self.spark)
        for worker in workers:
            worker.thread.join(timeout=60)

    # -- workers ---------------------------------------------------------------------------------------------

    def _start(self, table: str) -> None:
        self._check_scheduler()
        with self._lock:
            worker = self._workers.get(table)
            if worker is not None and not worker.finished:
                worker.superseded(self.spark)  # a newer plan: drop the read in flight, read the newest
                return
            worker = _Worker(table, self)
            self._workers[table] = worker
            worker.thread.start()

    def _check_scheduler(self) -> None:
        mode = self.spark.sparkContext.getConf().get("spark.scheduler.mode", "FIFO").upper()
        if mode != "FAIR" and not self._warned_fifo:
            self._warned_fifo = True
            log.warning("spark.scheduler.mode is %s: the stream's batches wait behind the background "
                        "re-snapshot's tasks; start the stream's Spark application with "
                        "--conf spark.scheduler.mode=FAIR", mode)

    def _uncommitted(self, table: str) -> tuple[int, tuple[int, ...]] | None:
        """The latest generation of ``table`` and its chunks without a committed snapshot (None: no plan)."""
        with ChunkStore(self.config.chunk_store) as store:
            generation = store.latest_generation(table)
            if generation is None:
                return None
            return generation, tuple(c.chunk_id for c in store.chunks(table, generation)
                                     if c.status != COMMITTED or c.hw is None)


class _Worker:
    """Reads the newest plan of one table until all its chunks committed, retrying failures with backoff."""

    def __init__(self, table: str, owner: BackgroundResnapshots) -> None:
        self.table, self.owner = table, owner
        self.group: str | None = None
        self.finished = False  # set under the owner's lock: a newer plan then starts a new worker
        self._newer = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"mysqlcdc-resnapshot-{table}")

    def superseded(self, spark: Any) -> None:
        self._newer.set()
        self.cancel(spark)

    def cancel(self, spark: Any) -> None:
        if self.group is not None:
            spark.sparkContext.cancelJobGroup(self.group)

    def _run(self) -> None:
        owner, table = self.owner, self.table
        sc = owner.spark.sparkContext
        activate_in_thread(owner.spark)
        sc.setLocalProperty("spark.scheduler.pool", POOL)
        failures = 0
        try:
            while not owner._stop.is_set():
                self._newer.clear()
                todo = owner._uncommitted(table)
                if todo is None or not todo[1]:
                    if todo is not None:
                        self._committed(todo[0])
                    if self._finish():
                        return
                    continue
                generation, chunk_ids = todo
                self.group = f"mysqlcdc-resnapshot-{uuid.uuid4().hex[:12]}"
                error = self._read(chunk_ids, generation)
                self.group = None
                if error is None or self._newer.is_set():
                    continue  # committed (the loop sees it), or a newer plan replaced this one
                if owner._stop.is_set():
                    log.warning("the re-snapshot of %s (generation %s) stopped with the stream; its next "
                                "start takes it up", table, generation)
                    return
                failures += 1
                owner.failures[table] = error
                if failures > len(RETRY_DELAYS_S):
                    if not self._finish():
                        failures = 0
                        continue
                    log.error("the re-snapshot of %s (generation %s) failed %d times, last: %s. The stream "
                              "goes on emitting all of its changes; the mirror keeps the previous snapshot "
                              "until it commits. Fix the cause and restart the stream (it takes the "
                              "re-snapshot up again), or run it yourself: mysqlcdc snapshot --table %s",
                              table, generation, failures, error, table)
                    return
                delay = RETRY_DELAYS_S[failures - 1]
                log.warning("the re-snapshot of %s (generation %s) failed: %s; trying again in %.0f s", table,
                            generation, error, delay)
                owner._stop.wait(delay)
        finally:
            with owner._lock:
                self.finished = True
            sc.setLocalProperty("spark.scheduler.pool", None)

    def _finish(self) -> bool:
        """Done, unless a newer plan arrived meanwhile (then the loop reads it)."""
        with self.owner._lock:
            if self._newer.is_set():
                return False
            self.finished = True
            return True

    def _read(self, chunk_ids: tuple[int, ...], generation: int) -> str | None:
        owner = self.owner
        log.info("re-snapshot of %s: reading %d chunk(s) of generation %s in the background", self.table,
                 len(chunk_ids), generation)
        try:
            result = owner.snapshot(owner.spark, owner.config, TableId.parse(self.table), chunk_ids,
                                    self.group or "")
        except Exception as exc:  # noqa: BLE001 - reported and retried; the stream must not die of it
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None if result.ok else (result.error or "some chunks did not commit")

    def _committed(self, generation: int) -> None:
        owner = self.owner
        owner.ledger.done(self.table, generation)
        owner.failures.pop(self.table, None)
        log.info("re-snapshot of %s committed (generation %s): the mirror switches to it", self.table,
                 generation)
        if owner.on_committed is not None:
            try:
                owner.on_committed(TableId.parse(self.table))
            except Exception:  # the next batch refreshes the mirror again
                log.exception("refreshing the mirror of %s after its re-snapshot failed; the next batch "
                              "refreshes it", self.table)
