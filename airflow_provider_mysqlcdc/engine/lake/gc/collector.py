"""One garbage collection over an output root, and the stream's periodic run of it.

Per table (the chunk store's, and those the stream writes): snapshot versions (``snapshot_garbage``), killed
attempts' changelog files (``changelog_garbage``), superseded mirror files and expired Delta log entries
(``delta_garbage``). A failure in one table and kind is recorded and the rest goes on; the run is written to
``_mysqlcdc_gc.json`` (``report``). ``PeriodicGc`` runs it from the stream's driver after a batch, at most
every N minutes, and never lets an error reach the stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.gc.changelog_garbage import changelog_garbage
from airflow_provider_mysqlcdc.engine.lake.gc.delta_garbage import (
    RemoveLog,
    cleanup_logs,
    mirror_garbage,
    mirror_log_retention,
)
from airflow_provider_mysqlcdc.engine.lake.gc.files import Garbage, delete, remove_if_empty
from airflow_provider_mysqlcdc.engine.lake.gc.report import GcRun, read_gc_report, record_run
from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention, utc_now
from airflow_provider_mysqlcdc.engine.lake.gc.snapshot_garbage import retired_parents, snapshot_garbage
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)


def gc_tables(root: str, store: ChunkStore) -> list[TableId]:
    """Every table whose files GC looks after: planned in the chunk store, or written by the stream."""
    progress = read_stream_progress(root)
    names = {*store.tables(), *(progress.tables if progress is not None else ())}
    return sorted(TableId.parse(n) for n in names)


def collect_garbage(
    root: str,
    store: ChunkStore,
    retention: Retention,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    tables: Iterable[TableId] | None = None,
    trigger: str = "cli",
    removes: RemoveLog | None = None,
) -> GcRun:
    """Find (and unless ``dry_run`` delete) everything no reader needs after ``retention``; ``now`` is the
    clock's (tests pass another). A run that deleted is recorded in ``_mysqlcdc_gc.json``."""
    started = time.monotonic()
    now = now or utc_now()
    cutoff = retention.cutoff(now)
    run = GcRun(now.isoformat(timespec="seconds"), retention.describe(), retention.keep.total_seconds(),
                dry_run, trigger, mirror_retention=retention.describe_mirror())
    removes = removes or RemoveLog()
    previous = read_gc_report(root)
    clean_before = previous.changelog_clean_through if previous is not None else {}

    def changelog(table: TableId) -> list[Garbage]:
        found = changelog_garbage(root, table, cutoff, clean_before.get(str(table)))
        if found.clean_through is not None:  # taken over only once its garbage is deleted (below)
            run.changelog_clean_through[str(table)] = found.clean_through
        return found.garbage

    finders: list[tuple[str, Callable[[TableId], list[Garbage]]]] = [
        ("snapshot versions", lambda t: snapshot_garbage(root, store, t, cutoff)),
        ("changelog attempts", changelog),
        ("mirror files", lambda t: mirror_garbage(
            root, t, retention.mirror_cutoff(now, mirror_log_retention(root, t)), removes)),
    ]
    for table in tables if tables is not None else gc_tables(root, store):
        for what, find in finders:
            try:
                found = find(table)
                if not dry_run:
                    for item in found:
                        delete(item)
                    for parent in retired_parents(root, table, [g for g in found if g.is_dir]):
                        remove_if_empty(parent)
            except Exception as exc:  # one table's failure must not stop the others
                if find is changelog:  # its garbage may not all be deleted: look at those batches again
                    run.changelog_clean_through.pop(str(table), None)
                run.errors.append(f"{table} {what}: {type(exc).__name__}: {exc}")
                log.warning("garbage collection of %s (%s) failed: %s", table, what, exc, exc_info=True)
                continue
            for item in found:
                run.count(item)
        try:
            for item in cleanup_logs(root, table, dry_run):
                run.count(item)
        except Exception as exc:
            run.errors.append(f"{table} Delta log cleanup: {type(exc).__name__}: {exc}")
            log.warning("Delta log cleanup of %s failed: %s", table, exc, exc_info=True)
    run.seconds = time.monotonic() - started
    run.finished_at = (now + timedelta(seconds=run.seconds)).isoformat(timespec="seconds")
    if not dry_run:
        record_run(root, run)
    log.info("garbage collection of %s: %s", root, run.describe())
    return run


@dataclass
class PeriodicGc:
    """GC from the stream's driver after a batch, at most every ``interval_minutes`` (0: never). Errors are
    logged with what to do, never raised: garbage is a cost, a stopped stream an outage."""

    root: str
    store: ChunkStore
    retention: Retention
    interval_minutes: float
    clock: Callable[[], float] = time.monotonic
    last_run: GcRun | None = None
    _next: float | None = None
    _removes: RemoveLog = field(default_factory=RemoveLog, repr=False)

    def maybe_run(self) -> GcRun | None:
        if self.interval_minutes <= 0:
            return None
        now = self.clock()
        if self._next is not None and now < self._next:
            return None
        self._next = now + self.interval_minutes * 60
        try:
            self.last_run = collect_garbage(self.root, self.store, self.retention, trigger="stream",
                                            removes=self._removes)
        except Exception as exc:  # the stream goes on
            log.warning("garbage collection of %s failed (%s: %s); the stream goes on and tries again in %g "
                        "minutes. Nothing was lost: at worst some garbage stays until a run succeeds; run "
                        "`mysqlcdc gc --output %s --chunk-store ...` to see the error in full",
                        self.root, type(exc).__name__, exc, self.interval_minutes, self.root, exc_info=True)
            return None
        if self.last_run.errors:
            log.warning("garbage collection of %s: %d error(s), the stream goes on: %s", self.root,
                        len(self.last_run.errors), "; ".join(self.last_run.errors))
        return self.last_run
