"""Repairing what ``verify`` found: the chunks that differ read again (a re-snapshot, as a rerun is), then
verified again in the same verify run, where a chunk that matches now is *repaired*.

A re-snapshot replaces the chunk's committed snapshot and HW in one chunk store transaction; the running
stream keeps every change after the new HW (the stream filter counts a chunk being re-read as HW = -inf), and
its mirror refresh rebuilds the chunk from the new snapshot. So a repair needs the stream to run: with none,
the chunks are re-snapshotted and stay unverified until a stream has passed their new HW and the run is
resumed (``mysqlcdc verify --resume``). The re-snapshot itself is the caller's (Spark for the CLI): the engine
says which chunks, of which plan generation, with which columns left out.
"""
from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MISMATCH
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.verify.verify_run import ChunkVerdict, VerifyRun

# (table, plan generation, chunk ids, excluded columns): read those chunks again and commit them
Resnapshot = Callable[[TableId, int, list[int], tuple[str, ...]], None]


def chunks_to_repair(verdicts: Sequence[ChunkVerdict]) -> list[int]:
    return sorted(v.chunk_id for v in verdicts if v.result == MISMATCH)


def excluded_columns(store: ChunkStore, table: TableId, generation: int) -> tuple[str, ...]:
    """The columns the table's snapshot left out (recorded with each chunk): a re-snapshot leaves them out
    too, or its files would not fit the others'."""
    names: list[str] = []
    for chunk in store.chunks(str(table), generation):
        for name in (chunk.extra or {}).get("excluded_columns") or ():
            if str(name) not in names:
                names.append(str(name))
    return tuple(names)


def repair_table(run: VerifyRun, table: TableId, verdicts: Sequence[ChunkVerdict], resnapshot: Resnapshot,
                 refresh: Callable[[TableId], object] | None = None) -> list[ChunkVerdict]:
    """Re-snapshot the chunks of ``verdicts`` that differ and verify them again in ``run``; their new
    verdicts (repaired, or still a mismatch, or unverified while the stream has not passed them).
    ``refresh``: refreshes the table's mirror when the stream has not rebuilt the chunks within the run's
    wait (an idle stream refreshes only after a batch); None leaves it to the stream."""
    bad = chunks_to_repair(verdicts)
    if not bad:
        return []
    generation = verdicts[0].generation
    resnapshot(table, generation, bad, excluded_columns(run.store, table, generation))
    if not _wait_for_mirror(run, table, bad) and refresh is not None:
        refresh(table)
    again = dataclasses.replace(run, options=dataclasses.replace(run.options, chunks=bad, sample=None),
                                views=Counter())  # the re-snapshotted chunks get their read views afresh
    return again.verify_table(table)


def _wait_for_mirror(run: VerifyRun, table: TableId, chunk_ids: list[int]) -> bool:
    """Until the mirror is rebuilt on the chunks' new snapshots (a running stream's refresh does it), at most
    the run's wait; whether it was."""
    deadline = time.monotonic() + run.options.wait_s
    while True:
        view = run.store.mirror_view(str(table))
        manifest = read_manifest(run.root, table)
        if view is not None and manifest is not None and manifest.generation == view.generation:
            versions = {c.chunk_id: c.output_version for c in view.chunks}
            built = {e.chunk_id: e.snapshot_version for e in manifest.chunks}
            if all(built.get(c) == versions.get(c) for c in chunk_ids):
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
