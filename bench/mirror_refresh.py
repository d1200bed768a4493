"""The cost of refreshing a table's mirror per stream micro-batch, now that each refresh also makes a Delta
Lake commit (issue 19), against the same refresh without the Delta commit, measured side by side in one run.

Input (identical for both sides): a throwaway MariaDB with the binlog on; one table ``bench.items`` of
``rows`` rows (``id BIGINT`` primary key; ``qty INT``, ``price DECIMAL(12,2)``, ``name VARCHAR(64)``,
``updated DATETIME``), planned into chunks of ``chunk_size`` rows and snapshotted through the engine
(``snapshot_chunk`` writing ``snapshot/generation=<g>/chunk=<id>/version=<v>/`` and committing the chunk store
row, as ``tests/support/layout_pipeline.py`` does). Then a seeded write load of ``batches`` batches of
``changes`` row changes in each of two variants, each batch read by the engine's stream (``ChangeStream``)
and written as one changelog batch (files, marker, the changelog's Delta commit: ``LayoutPipeline``):

- **spread**: 80% updates of keys drawn from the whole table, 10% inserts above the largest key, 10% deletes
  of random keys: every batch touches (nearly) every chunk;
- **hot**: 90% updates and 5% deletes within a hot range of 8,192 keys in a middle chunk, 5% inserts above
  the largest key (an auto-increment's new rows): a batch touches two chunks, the common OLTP case.

The snapshot and the changelog are copied to two output roots; each side builds its own mirror from the
snapshot (the first refresh, reported as a note) and then refreshes per batch as the stream's hook does,
``MirrorRefresher.refresh(table, [batch_id])``: the figure side as the package does it (rewrite the touched
chunks, switch ``mirror/_manifest.json``, one Delta commit: ``DeltaMirror.sync``), the baseline with the Delta
commit switched off (``_NoDeltaRefresher`` below: the refresh as it was before the mirror was a Delta table,
manifest only). The sides alternate which goes first on every batch, so machine noise hits both alike. Per
side: mean and p95 ms per batch, chunks rewritten per batch; on the figure side ``DeltaMirror.sync`` is timed
on its own too (its share of the refresh). Ratio = figure / baseline (lower is better). CPU shares with
``bench/cpu.py``'s ``measure`` around each refresh, summed per side (client = this process; the MySQL server
is idle during the refreshes, the write load ran before).

A third side, **deletion vectors** (``mirror_updates=deletion_vectors``, ``engine/lake/mirror_dv_refresh``),
refreshes a third copy the same way, timed like the figure side; its figures have the rewrite mode (the figure
side) as baseline. Bytes written per batch, per mode: the rewrite mode's new chunk files, the deletion-vector
mode's overlay file, vector file and compacted chunks, each plus the Delta commit's log entry (checkpoints
left out: both modes write them every 10 versions), against the batch's changelog Parquet bytes (the bytes
the stream wrote for the same changes).

Checks (the section fails without them): each refresh applied exactly its batch; the baseline made no Delta
table; the figure side's Delta table has one version per refresh; the final mirror read through delta-rs and
through the manifest equals ``SELECT`` of the table
(``tests.support.engine_harness.assert_mirror_equals_source``: row by row, typed, plus the Delta changelog
against the markers), and the baseline's mirror (manifest) equals the figure side's, row by row.

Through the suite (``python bench/suite.py --only mirror [--quick] [--mirror-rows N] [--mirror-batches B]
[--mirror-changes K]``), or by hand: ``python bench/mirror_refresh.py [--rows N] [--batches B] [--changes K]
[--seed S]`` prints the section's table.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.support drives the engine
from cpu import Measure, measure, settle
from report import Figure
from spark_runs import say

DATABASE, TABLE_NAME = "bench", "items"
TABLE = f"{DATABASE}.{TABLE_NAME}"
HOT_KEYS = 8192  # the hot variant's key range
VARIANTS = ("spread", "hot")
LABELS = {"spread": "changes spread over the table", "hot": "changes in a hot key range + appends"}


# --- the table and its write load ---------------------------------------------------------------------------


def load_table(server: Any, rows: int) -> None:
    step = 500_000
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY, qty INT NOT NULL, price DECIMAL(12,2) NOT "
                    "NULL, name VARCHAR(64) NOT NULL, updated DATETIME NULL)")
        for low in range(1, rows + 1, step):
            high = min(rows, low + step - 1)
            cur.execute(f"INSERT INTO {TABLE} SELECT seq, seq % 1000, (seq % 100000) / 100, CONCAT('item-', "
                        "seq), TIMESTAMP'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM "
                        f"{DATABASE}.seq_{low}_to_{high}")
        conn.commit()
        cur.execute(f"ANALYZE TABLE {TABLE}")
        cur.fetchall()


@dataclass
class Keys:
    """The live keys of the table (for seeded draws), a hot range among them, the next key to insert."""

    ids: list[int]
    hot: list[int]
    next_id: int
    _where: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: int, hot_low: int, hot_high: int) -> Keys:
        keys = cls(list(range(1, rows + 1)), list(range(hot_low, hot_high)), rows + 1)
        keys._where = {k: i for i, k in enumerate(keys.ids)}
        return keys

    def insert(self, n: int) -> list[int]:
        new = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        for k in new:
            self._where[k] = len(self.ids)
            self.ids.append(k)
        return new

    def delete(self, keys: list[int]) -> None:
        gone = set(keys)
        for k in keys:  # swap-remove
            i = self._where.pop(k)
            last = self.ids.pop()
            if last != k:
                self.ids[i] = last
                self._where[last] = i
        self.hot = [k for k in self.hot if k not in gone]


@dataclass(frozen=True)
class BatchLoad:
    updates: list[int]
    inserts: int
    deletes: list[int]

    @property
    def changes(self) -> int:
        return len(self.updates) + self.inserts + len(self.deletes)

    @property
    def records(self) -> int:
        """Changelog records the batch gives: an update is a ``-U`` and a ``+U``."""
        return 2 * len(self.updates) + self.inserts + len(self.deletes)


def draw(keys: Keys, rng: random.Random, variant: str, changes: int) -> BatchLoad:
    if variant == "spread":
        n_ins = n_del = changes // 10
        picked = rng.sample(keys.ids, changes - n_ins)
        return BatchLoad(sorted(picked[n_del:]), n_ins, sorted(picked[:n_del]))
    n_ins = n_del = changes // 20
    picked = rng.sample(keys.hot, min(len(keys.hot), changes - n_ins))
    return BatchLoad(sorted(picked[n_del:]), n_ins, sorted(picked[:n_del]))


def apply_load(server: Any, keys: Keys, load: BatchLoad, batch: int) -> None:
    """The batch's row changes in the source, a transaction per statement of at most 500 keys."""
    when = (datetime(2026, 6, 1) + timedelta(minutes=batch)).strftime("%Y-%m-%d %H:%M:%S")
    with server.admin() as conn, conn.cursor() as cur:
        for part in _parts(load.updates, 500):
            cur.execute(f"UPDATE {TABLE} SET qty = qty + 1, price = price + 0.01, "
                        f"name = CONCAT('b{batch}-', id), updated = %s WHERE id IN ({_in(part)})", (when,))
            conn.commit()
        new = keys.insert(load.inserts)
        for part in _parts(new, 500):
            cur.executemany(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s)",
                            [(k, k % 1000, f"{(k % 100000) / 100:.2f}", f"new-{batch}-{k}", when)
                             for k in part])
            conn.commit()
        for part in _parts(load.deletes, 500):
            cur.execute(f"DELETE FROM {TABLE} WHERE id IN ({_in(part)})")
            conn.commit()
    keys.delete(load.deletes)


def _parts(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _in(keys: list[int]) -> str:
    return ",".join(str(int(k)) for k in keys)


# --- the two refreshers -------------------------------------------------------------------------------------


def _refresher_classes() -> tuple[type, type]:
    """The refresher as the package has it, with ``DeltaMirror.sync`` timed; and the baseline, without it."""
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher

    if not callable(getattr(MirrorRefresher, "_delta", None)):
        raise RuntimeError(  # noqa: TRY004 - the package changed, not an argument's type
            "MirrorRefresher._delta(table) is gone: adapt bench/mirror_refresh.py's refreshers"
        )

    class _TimedSync:
        def __init__(self, delta: Any, times: list[float]) -> None:
            self.delta, self.times = delta, times

        def sync(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return self.delta.sync(*args, **kwargs)
            finally:
                self.times.append(time.perf_counter() - t0)

    class _NoSync:
        def sync(self, *args: Any, **kwargs: Any) -> bool:
            return False

    class TimedRefresher(MirrorRefresher):
        """The package's refresh; the time of each ``DeltaMirror.sync`` goes to ``sync_times``."""

        sync_times: list[float]

        def _delta(self, table: Any) -> Any:
            if not hasattr(self, "sync_times"):
                self.sync_times = []
            return _TimedSync(super()._delta(table), self.sync_times)

    class NoDeltaRefresher(MirrorRefresher):
        """The baseline: the refresh before the mirror was a
        Delta table (files and manifest, no Delta commit)."""

        def _delta(self, table: Any) -> Any:
            return _NoSync()

    return TimedRefresher, NoDeltaRefresher


@dataclass
class Side:
    name: str  # "delta", "baseline" or "dv"
    root: Path
    refresher: Any
    ms: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    chunks: dict[str, list[int]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    written: dict[str, list[int]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    compacted: dict[str, list[int]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    cpu: dict[str, Measure] = field(default_factory=dict)
    build: Measure | None = None

    def refresh(self, pid: int, table: Any, batch_id: int | None) -> tuple[Any, Measure, float]:
        with measure(pid) as m:
            t0 = time.perf_counter()
            result = self.refresher.refresh(table, None if batch_id is None else [batch_id])
            seconds = time.perf_counter() - t0
        if result.manifest is None:
            raise AssertionError(f"{self.name}: the refresh built no mirror: {result.reason}")
        return result, m, seconds


# --- the section --------------------------------------------------------------------------------------------


def run_sizes(work: Path, *, sizes: list[int], batches: int, changes: int, chunk_size: int = 32768,
              seed: int = 1, rewrite_batches: int = 5) -> tuple[list[Figure], list[str]]:
    """The section at each table size in ``sizes`` (one run; each size on its own server and copies,
    removed before the next), then the deletion-vector refresh per batch at each larger size against the
    first (the issue's target: within 1.5x from 1M to 10M rows). The first size runs all three sides; the
    larger ones the deletion-vector side and the rewrite side, the latter timed on its first
    ``rewrite_batches`` batches of each variant only (a spread batch rewrites the whole table: ~7 s at
    10M)."""
    figures: list[Figure] = []
    notes: list[str] = []
    firsts: dict[str, tuple[int, float, Measure]] = {}
    for i, rows in enumerate(sizes):
        where = work / f"rows-{rows}"
        try:
            got, more, dv = run_section(where, rows=rows, batches=batches, changes=changes,
                                        chunk_size=chunk_size, seed=seed,
                                        rewrite_batches=None if i == 0 else rewrite_batches)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        figures += got
        notes += more
        for variant in VARIANTS:
            ms, cpu = dv[variant]
            if variant not in firsts:
                firsts[variant] = (rows, ms, cpu)
                continue
            first_rows, first_ms, first_cpu = firsts[variant]
            figures.append(Figure(
                "mirror", f"deletion vectors, **{LABELS[variant]}**: refresh per batch at {rows:,} rows "
                f"against {first_rows:,} rows (target: within 1.5x)", ms, "ms",
                f"CPU {cpu.client / batches * 1000:,.0f} ms a batch", None,
                baseline_what=f"the same at {first_rows:,} rows, same run",
                baseline=first_ms, baseline_detail=f"CPU {first_cpu.client / batches * 1000:,.0f} ms a batch",
                higher_is_better=False, cpu_text="(above)", baseline_cpu_text="(above)",
                note=f"{changes:,} row changes a batch at both sizes",
                short=f"{variant}: DV {_rows_label(rows)} vs {_rows_label(first_rows)}"))
    return figures, notes


def _rows_label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1000}k"


def run_section(work: Path, *, rows: int, batches: int, changes: int, chunk_size: int = 32768,
                seed: int = 1, rewrite_batches: int | None = None,
                ) -> tuple[list[Figure], list[str], dict[str, tuple[float, Measure]]]:
    """One table size. ``rewrite_batches`` None: the three sides on every batch, the final mirrors checked
    row by row in memory; a number: no baseline side, the rewrite side timed on that many batches of each
    variant (then brought up to date in one refresh, untimed), and the final mirrors checked range by range
    (``check_by_ranges``: the row-by-row check holds every row as Python tuples, 22 GiB at 10M rows).
    Also returns the deletion-vector side's mean ms and CPU per variant."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
    from airflow_provider_mysqlcdc.engine.lake.layout import (
        changelog_dir,
        new_version,
        snapshot_dir,
        table_dir,
    )
    from airflow_provider_mysqlcdc.engine.model.arrow_batches import record_schema
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
    from tests.support.layout_pipeline import LayoutPipeline

    class Pipeline(LayoutPipeline):
        """LayoutPipeline's chunk writer without its in-memory copy of every snapshot row."""

        def _writer(self, plan: Any, chunk_id: int) -> Callable[[Iterator[pa.RecordBatch]], str]:
            schema = self.schemas[plan.table]

            def write(parts: Iterator[pa.RecordBatch]) -> str:
                data = pa.Table.from_batches(list(parts), schema=record_schema(schema))
                version = new_version()
                directory = snapshot_dir(self.root, plan.table, plan.generation, chunk_id, version)
                os.makedirs(directory)
                pq.write_table(data, os.path.join(directory, "part-00000.parquet"))
                return version

            return write

    Timed, NoDelta = _refresher_classes()
    table = TableId.parse(TABLE)
    rng = random.Random(seed)
    notes: list[str] = []
    src = work / "source"
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        assert server.process is not None
        pid = server.process.pid
        settings = MySQLSettings.from_url(server.cdc_url)
        say(f"mirror: loading {rows:,} rows ...")
        load_table(server, rows)
        settle(pid)
        pipe = Pipeline(settings, ChunkStore(str(work / "chunks.db")), DATABASE, root=str(src),
                        chunk_size=chunk_size)
        (plan,) = pipe.plan([TABLE])
        pipe.tables = [table]
        say(f"mirror: snapshot, {len(plan.chunks)} chunks of {chunk_size:,} ...")
        with measure(pid) as snap:
            for chunk in plan.chunks:
                pipe.snapshot(plan, chunk.chunk_id)
        say(f"mirror: snapshot {snap.wall:.1f} s")
        hot_chunk = plan.chunks[len(plan.chunks) // 2]
        hot_low = max(1, _int_bound(hot_chunk.start, 1))
        hot_high = min(_int_bound(hot_chunk.end, rows + 1), hot_low + HOT_KEYS, rows + 1)
        keys = Keys.of(rows, hot_low, hot_high)

        sides = [Side("delta", work / "delta", None), Side("baseline", work / "baseline", None),
                 Side("dv", work / "dv", None)]
        if rewrite_batches is not None:
            sides.pop(1)
        for side in sides:  # the snapshot only: each side builds its own mirror from it
            shutil.copytree(src, side.root)
        pipe.open_stream([table])
        loads: dict[str, list[tuple[int, BatchLoad]]] = {v: [] for v in VARIANTS}
        say(f"mirror: write load, {len(VARIANTS)} x {batches} batches of {changes:,} row changes, "
            "streamed ...")
        for variant in VARIANTS:
            for _ in range(batches):
                load = draw(keys, rng, variant, changes)
                apply_load(server, keys, load, pipe.next_batch)
                batch_id, _changed = pipe.stream_batch()
                got = sum(1 for r in pipe.changelog if r.table == TABLE)
                pipe.changelog.clear()
                if got != load.records:
                    raise AssertionError(f"batch {batch_id}: the stream read {got} records of {TABLE}, "
                                         f"the load made {load.records}")
                loads[variant].append((batch_id, load))
        src_table, n_chunks = Path(table_dir(str(src), table)), len(plan.chunks)
        settle(pid)

        # the mirrors: each side builds its own from the snapshot, then the changelog arrives
        by_name = {side.name: side for side in sides}
        by_name["delta"].refresher = Timed(str(by_name["delta"].root), pipe.store, settings=settings,
                                           schemas=dict(pipe.schemas))
        if "baseline" in by_name:
            by_name["baseline"].refresher = NoDelta(str(by_name["baseline"].root), pipe.store,
                                                    settings=settings, schemas=dict(pipe.schemas))
        by_name["dv"].refresher = Timed(str(by_name["dv"].root), pipe.store, settings=settings,
                                        schemas=dict(pipe.schemas), updates="deletion_vectors")
        for side in sides:
            say(f"mirror: {side.name}: first build from the snapshot ...")
            result, side.build, _ = side.refresh(pid, table, None)
            assert len(result.rebuilt) == n_chunks, (side.name, result.rebuilt)
        by_name["delta"].refresher.sync_times.clear()
        by_name["dv"].refresher.sync_times.clear()
        for side in sides:
            shutil.copytree(src_table / "changelog", Path(table_dir(str(side.root), table)) / "changelog")
        delta_builds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        changelog_bytes: dict[str, list[int]] = {v: [] for v in VARIANTS}

        say("mirror: refresh per batch, the sides alternating ...")
        turn = 0
        n = len(sides)
        for variant in VARIANTS:
            for index, (batch_id, load) in enumerate(loads[variant]):
                changelog_bytes[variant].append(_dir_bytes(changelog_dir(str(src), table, batch_id)))
                for side in sides[turn % n:] + sides[:turn % n]:
                    if side.name == "delta" and rewrite_batches is not None and index >= rewrite_batches:
                        continue  # brought up to date after the last batch, untimed
                    result, m, seconds = side.refresh(pid, table, batch_id)
                    if tuple(result.batches) != (batch_id,):
                        raise AssertionError(f"{side.name}: the refresh of batch {batch_id} applied "
                                             f"{result.batches}")
                    side.ms[variant].append(seconds * 1000)
                    side.chunks[variant].append(len(result.rewritten))
                    side.compacted[variant].append(len(result.compacted))
                    side.written[variant].append(_written(side, table, result, mirror_table_uri))
                    side.cpu[variant] = side.cpu[variant] + m if variant in side.cpu else m
                turn += 1
            delta_builds[variant] = [t * 1000 for t in by_name["delta"].refresher.sync_times]
            if rewrite_batches is not None:  # the rewrite side catches up, untimed
                by_name["delta"].refresher.refresh(table, [loads[variant][-1][0]])
            by_name["delta"].refresher.sync_times.clear()
            by_name["dv"].refresher.sync_times.clear()
        say("mirror: checking the mirrors ...")
        if rewrite_batches is None:
            check_mirrors(settings, sides, table, mirror_table_uri,
                          expected_versions=1 + len(VARIANTS) * batches)
        else:
            check_by_ranges(settings, sides, table, mirror_table_uri,
                            expected_versions=1 + len(VARIANTS) * batches, high=keys.next_id)
        checkpointed = checkpoint_versions(mirror_table_uri(str(sides[0].root), table))
    say(f"mirror: the mirror's Delta log has checkpoints at versions {sorted(checkpointed)}")
    delta, dv = by_name["delta"], by_name["dv"]
    base = by_name.get("baseline")
    figures: list[Figure] = []
    size = (f"{rows:,}-row table, {n_chunks} chunks of {chunk_size:,}; {batches} batches of {changes:,} row "
            f"changes")
    at = f"{_rows_label(rows)} rows: "
    for variant in VARIANTS if base is not None else ():
        d_ms, b_ms, sync_ms = delta.ms[variant], base.ms[variant], delta_builds[variant]
        records = statistics.mean(load.records for _, load in loads[variant])
        chunks = statistics.mean(delta.chunks[variant])
        if delta.chunks[variant] != base.chunks[variant]:
            raise AssertionError(f"{variant}: the sides rewrote different chunks: {delta.chunks[variant]} vs "
                                 f"{base.chunks[variant]}")
        common = {"baseline_what": "the same refresh without the Delta commit (the mirror before issue 19: "
                                   "chunk files + manifest)", "higher_is_better": False}
        label = LABELS[variant]
        note = (f"{size} ({records:,.0f} changelog records each); {chunks:.1f} of {n_chunks} chunks "
                "rewritten a batch")
        figures.append(Figure(
            "mirror", f"{at}refresh per batch (rewrite chunks, manifest, Delta commit), **{label}**: mean",
            statistics.mean(d_ms), "ms", f"median {statistics.median(d_ms):,.0f} ms; {chunks:.1f} chunks",
            delta.cpu[variant], baseline=statistics.mean(b_ms),
            baseline_detail=f"median {statistics.median(b_ms):,.0f} ms", baseline_cpu=base.cpu[variant],
            note=note, short=f"{variant}: mean", **common))
        figures.append(Figure(
            "mirror", f"{at}same, **{label}**: p95", p95(d_ms), "ms", f"max {max(d_ms):,.0f} ms", None,
            baseline=p95(b_ms), baseline_detail=f"max {max(b_ms):,.0f} ms", note="", cpu_text="(row above)",
            baseline_cpu_text="(row above)", short=f"{variant}: p95", **common))
        d_cpu, b_cpu = delta.cpu[variant], base.cpu[variant]
        figures.append(Figure(
            "mirror",
            f"{at}same, **{label}**: CPU time per batch (this process, delta-rs's threads included)",
            d_cpu.client / len(d_ms) * 1000, "ms", "", None, baseline=b_cpu.client / len(b_ms) * 1000,
            cpu_text="(row above)", baseline_cpu_text="(row above)",
            note="less sensitive than wall time to other work on the cores", short=f"{variant}: CPU",
            **common))
        share = statistics.mean(sync_ms) / statistics.mean(d_ms)
        first = 1 + VARIANTS.index(variant) * batches  # the Delta version of the variant's first batch
        checkpoints = [t for i, t in enumerate(sync_ms) if first + i in checkpointed]
        plain = [t for i, t in enumerate(sync_ms) if first + i not in checkpointed]
        figures.append(Figure(
            "mirror", f"{at}of which the Delta commit (`DeltaMirror.sync`), **{label}**: mean",
            statistics.mean(sync_ms), "ms", f"{share:.0%} of the refresh; p95 {p95(sync_ms):,.0f} ms", None,
            baseline=statistics.mean(b_ms), baseline_detail="(the whole refresh)",
            cpu_text="(in the refresh)", baseline_cpu_text="(row above)",
            note="ratio = what the commit adds to the refresh before; "
                 + (f"the {len(checkpoints)} commits that wrote a checkpoint "
                    f"{statistics.mean(checkpoints):,.0f} ms, the others {statistics.mean(plain):,.0f} ms"
                    if checkpoints and plain else "no commit of these wrote a checkpoint"),
            short=f"{variant}: Delta commit", **common))
    for variant in VARIANTS:
        label = LABELS[variant]
        log_bytes = statistics.mean(changelog_bytes[variant])
        dv_ms, rw_ms = dv.ms[variant], delta.ms[variant]
        compactions = sum(dv.compacted[variant])
        limited = "" if rewrite_batches is None else f", timed on its first {len(rw_ms)} batches"
        common = {"baseline_what": f"the rewrite mode (touched chunks rewritten{limited})",
                  "higher_is_better": False}
        figures.append(Figure(
            "mirror", f"{at}refresh per batch, **deletion vectors** (`mirror_updates=deletion_vectors`), "
            f"**{label}**: mean", statistics.mean(dv_ms), "ms",
            f"median {statistics.median(dv_ms):,.0f} ms; p95 {p95(dv_ms):,.0f} ms; {compactions} chunk "
            f"compactions in {len(dv_ms)} batches", dv.cpu[variant], baseline=statistics.mean(rw_ms),
            baseline_detail=f"median {statistics.median(rw_ms):,.0f} ms", baseline_cpu=delta.cpu[variant],
            note=f"{size}", short=f"{_rows_label(rows)} {variant}: DV mean", **common))
        for side, mode in ((dv, "deletion vectors"), (delta, "rewrite")):
            written = statistics.mean(side.written[variant])
            figures.append(Figure(
                "mirror", f"{at}bytes written per batch, **{mode}**, **{label}**", written / 1024, "KiB",
                f"max {max(side.written[variant]) / 1024:,.0f} KiB", None,
                baseline_what="the batch's changelog Parquet bytes (ratio: target within 5x)",
                baseline=log_bytes / 1024, higher_is_better=False, cpu_text="-", baseline_cpu_text="-",
                note="data, vector, manifest and Delta log files the refresh wrote (checkpoints aside)",
                short=f"{_rows_label(rows)} {variant}: bytes {'DV' if side is dv else 'rewrite'}"))
    for side in sides:
        b = side.build
        assert b is not None
        notes.append(f"Mirror refresh: the first build of the {rows:,}-row mirror from the snapshot "
                     f"({n_chunks} chunks), "
                     f"{side.name}: {b.wall:,.2f} s ({b.compact()}).")
    notes.append("Mirror refresh: the input, same for both sides: snapshot through the engine in "
                 f"{snap.wall:,.1f} s; "
                 "spread = 80% updates / 10% inserts / 10% deletes over the whole table, hot = 90% updates "
                 f"/ 5% deletes in keys {hot_low:,}..{hot_high - 1:,} + 5% inserts above the largest key; "
                 f"per-batch times at {rows:,} rows: delta {_series(delta.ms)}; dv {_series(dv.ms)}"
                 + (f"; baseline {_series(base.ms)}." if base is not None else "."))
    dv_means = {v: (statistics.mean(dv.ms[v]), dv.cpu[v]) for v in VARIANTS}
    return figures, notes, dv_means


def _dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _written(side: Side, table: Any, result: Any, mirror_table_uri: Callable[..., str]) -> int:
    """Bytes one refresh wrote: data and vector files (the result's count in deletion-vector mode, the
    rewritten chunks' new files in rewrite mode) plus the manifest and its Delta commit's log entry."""
    from airflow_provider_mysqlcdc.engine.lake.layout import table_dir

    if side.name == "dv":
        data = result.bytes_written
    else:
        base = Path(table_dir(str(side.root), table))
        rewritten = set(result.rewritten)
        data = sum((base / f).stat().st_size for c in result.manifest.chunks if c.chunk_id in rewritten
                   for f in c.files)
    mirror = Path(mirror_table_uri(str(side.root), table))
    log_dir = mirror / "_delta_log"
    commits = sorted(log_dir.glob("*.json")) if log_dir.is_dir() else []
    manifest = (mirror / "_manifest.json").stat().st_size
    return data + manifest + (commits[-1].stat().st_size if commits and side.name != "baseline" else 0)


def _int_bound(bound: Any, default: int) -> int:
    """A chunk bound of the integer key as an int (None: unbounded)."""
    if bound is None:
        return default
    value = bound[0] if isinstance(bound, (tuple, list)) else bound
    return int(value) if value is not None else default


def checkpoint_versions(uri: str) -> set[int]:
    """The Delta versions whose commit wrote a checkpoint (``delta_log``: ``delta.checkpointInterval`` 10).
    Version 0 is the first build, then one version per batch, the variants in order."""
    log_dir = Path(uri) / "_delta_log"
    return {int(p.name.split(".", 1)[0]) for p in log_dir.iterdir() if ".checkpoint." in p.name}


def p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _series(ms: dict[str, list[float]]) -> str:
    return "; ".join(f"{v} " + " ".join(f"{t:.0f}" for t in ms[v]) for v in VARIANTS)


def check_mirrors(settings: Any, sides: list[Side], table: Any, mirror_table_uri: Callable[..., str],
                  expected_versions: int) -> None:
    """Both final mirrors equal the source, read through delta-rs and through the manifest."""
    from deltalake import DeltaTable

    from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest_files
    from tests.support.engine_harness import assert_mirror_equals_source

    delta, base, dv = sides
    if DeltaTable.is_deltatable(mirror_table_uri(str(base.root), table)):
        raise AssertionError("the baseline made a Delta commit: its refresh was not without Delta")
    versions = DeltaTable(mirror_table_uri(str(delta.root), table)).version() + 1
    if versions != expected_versions:
        raise AssertionError(
            f"the mirror's Delta table has {versions} versions, {expected_versions} refreshes"
        )
    # the figure side: read through delta-rs (read_mirror) row by row against SELECT, Delta == manifest,
    # the Delta changelog == the markers
    assert_mirror_equals_source(settings, str(delta.root), [table])
    ours = read_manifest_files(str(delta.root), table).sort_by("id")
    theirs = read_manifest_files(str(base.root), table).sort_by("id")
    if ours.num_rows != theirs.num_rows or not ours.equals(theirs.cast(ours.schema)):
        raise AssertionError(f"the baseline's mirror ({theirs.num_rows} rows) differs from the Delta side's "
                             f"({ours.num_rows} rows)")
    # the deletion-vector side: its Delta table (one version per refresh) and read_mirror equal the source,
    # and the same rows as the rewrite side's
    dv_versions = DeltaTable(mirror_table_uri(str(dv.root), table)).version() + 1
    if dv_versions != expected_versions:
        raise AssertionError(f"the deletion-vector mirror has {dv_versions} versions, {expected_versions} "
                             "refreshes")
    assert_mirror_equals_source(settings, str(dv.root), [table])
    from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror

    vectored = read_mirror(str(dv.root), table).sort_by("id")
    if not vectored.equals(read_mirror(str(delta.root), table).sort_by("id").cast(vectored.schema)):
        raise AssertionError("the deletion-vector mirror differs from the rewrite mode's")
    say(f"mirror: the three mirrors equal the source ({ours.num_rows:,} rows)")


def check_by_ranges(settings: Any, sides: list[Side], table: Any, mirror_table_uri: Callable[..., str],
                    expected_versions: int, high: int, step: int = 250_000) -> None:
    """The large sizes' check, in bounded memory: each side's mirror read through delta-rs
    (``read_mirror``, Arrow, sorted by key) equals its manifest's files and the other side's, and equals
    ``SELECT`` range by range of ``step`` keys (typed, row by row, as ``assert_mirror_equals_source`` compares
    them); the Delta table holds the manifest's files and, on the deletion-vector side, one version per
    refresh."""
    from deltalake import DeltaTable

    from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest, read_manifest_files
    from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
    from airflow_provider_mysqlcdc.engine.model import values
    from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from tests.support.engine_harness import assert_same_rows

    dv = next(side for side in sides if side.name == "dv")
    versions = DeltaTable(mirror_table_uri(str(dv.root), table)).version() + 1
    if versions != expected_versions:
        raise AssertionError(f"the deletion-vector mirror has {versions} versions, {expected_versions} "
                             "refreshes")
    first = None
    for side in sides:
        uri = mirror_table_uri(str(side.root), table)
        files = {f.split("/mirror/", 1)[1] for f in DeltaTable(uri).file_uris()}
        manifest = read_manifest(str(side.root), table)
        assert manifest is not None
        if files != {f.split("mirror/", 1)[1] for f in manifest.files}:
            raise AssertionError(f"{side.name}: the Delta table's files are not the manifest's")
        mirror = read_mirror(str(side.root), table).sort_by("id")
        listed = read_manifest_files(str(side.root), table).sort_by("id")
        if not mirror.equals(listed.cast(mirror.schema)):
            raise AssertionError(f"{side.name}: the Delta table reads other rows than the manifest's files")
        del listed
        if first is None:
            first = mirror
        elif not mirror.equals(first.cast(mirror.schema)):
            raise AssertionError(f"the {side.name} mirror differs from the {sides[0].name} mirror")
    assert first is not None
    ids = first.column("id").to_numpy()
    with connect(settings) as conn:
        schema = load_schema(conn, table)
        normalize = values.snapshot_normalizer(schema)
        names = [n for n in first.column_names if n in schema.column_by_name]
        for low in range(0, high + 1, step):
            with conn.cursor() as cur:
                cur.execute(f"SELECT {values.select_list(schema)} FROM {table.quoted} WHERE `id` >= %s AND "
                            "`id` < %s ORDER BY `id`", (low, low + step))
                rows = [dict(zip(schema.column_names, normalize(r))) for r in cur.fetchall()]
            source = [tuple(r[c] for c in names) for r in rows]
            a, b = np.searchsorted(ids, [low, low + step])
            got = [tuple(r[c] for c in names) for r in values.canonical_pylist(first.slice(a, b - a))]
            if got != source:
                assert_same_rows(got, source, table)
                raise AssertionError(f"keys {low}..{low + step - 1}: the mirror differs from the source")
    say(f"mirror: the mirrors equal the source, range by range ({first.num_rows:,} rows)")


def main() -> int:
    import tempfile

    from report import Report, markdown

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000",
                        help="table sizes, comma-separated, each in the same run")
    parser.add_argument("--batches", type=int, default=30, help="batches of each variant")
    parser.add_argument("--changes", type=int, default=2000, help="row changes per batch")
    parser.add_argument("--chunk-size", type=int, default=32768)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rewrite-batches", type=int, default=5,
                        help="batches of each variant the rewrite side is timed on past the first size")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-mirror-"))
    try:
        figures, notes = run_sizes(work, sizes=[int(n) for n in args.rows.split(",")], batches=args.batches,
                                   changes=args.changes, chunk_size=args.chunk_size, seed=args.seed,
                                   rewrite_batches=args.rewrite_batches)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(Report(header=["### Mirror refresh per batch"], figures=figures, notes=notes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
