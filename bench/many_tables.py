"""What a stream batch costs per table it touches, and per table it does not, against the same changes in one
table measured in the same run (issue 38, point 3); the stream filter's cost per event at 100,000 chunks
against 1,000; a Delta commit's cost as its log grows.

Input: a throwaway MariaDB with the binlog on; tables (``id BIGINT`` primary key, ``v INT``, ``s
VARCHAR(32)``, ``rows`` rows each): ``bench.one``, and N tables ``bench.n<N>_t00000`` .. for each N of
``sizes``. One pipeline per size (its own tables, chunk store and output root): ``bench.one`` alone (the
baseline), and the N tables for each N, each planned and snapshotted through the engine
(``tests/support/layout_pipeline.py``'s chunk writer), then every mirror built once (a stream run before this
one).

1. **First batch of a stream run over N quiet tables** (nothing changed since the last run): what the engine
   does on the driver, with fresh objects as a new run has them: the change stream opened (``ChangeStream``:
   the chunk store's view, plans, the filter), one read of the binlog, the changelog commit
   (``ChangelogCommit.begin`` + ``commit``: the ledger, each table's Delta changelog looked at, the progress
   record), and the mirror refresh hook (``MirrorRefresher.on_batch_committed``: each quiet table's snapshot
   checked against its mirror). Baseline: the same over ``bench.one``.
2. **A batch that changed N tables**: ``changes`` inserted rows spread evenly over the N tables (one statement
   per table), read by the stream (``ChangeStream.read``), written into the batch's changelog files as the
   sink's executors do (``BatchFiles.partition``), committed (``ChangelogCommit.commit``: markers, one Delta
   commit per table, progress) and the mirrors refreshed (``on_batch_committed``); the median of ``batches``
   batches after a first one (which creates each table's Delta changelog). Baseline: the same number of
   changes in ``bench.one``. Per changed table = (N tables - baseline) / N. The commits and refreshes of
   different tables run at once (``engine/lake/concurrent_commits.py``); the same with
   ``MYSQLCDC_COMMIT_THREADS=1`` (one after another, as before) in the same run is a second row.
3. **Stream filter per event** (no server): ``StreamFilter.apply_blocks`` on single-row events of a table of
   ``chunks`` chunks (each event located by bisect, then compared with its chunk's HW), against the same
   events on a table of 1,000 chunks.
4. **Delta commit vs log length** (no server, ``bench/delta_log_bench.py``): ``versions`` commits of a
   changelog (a file added a commit) and of a mirror (32 chunk files, 2 replaced a commit) with the package's
   table properties, the log retention scaled to what a 1 s trigger keeps; the mean of the last 100 against
   the mean of the first 100 of the same table.

Checks (the section fails without them): each batch's changelog holds exactly its rows; every pipeline's
mirror of a sample of tables (the first, the last, every 50th) equals ``SELECT`` of the table after the
batches (``tests.support.engine_harness.assert_mirror_equals_source``, with the Delta changelog against the
markers and the Delta mirror against the manifest).

Through the suite (``python bench/suite.py --only tables [--quick]``) or by hand: ``python
bench/many_tables.py [--sizes 300,1000] [--changes 60000]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.support drives the engine
import delta_log_bench
from report import Figure
from spark_runs import say

DATABASE = "bench"
ONE = f"{DATABASE}.one"
SERVER_ID = 4242


def table_names(n: int) -> list[str]:
    """The tables of the size-``n`` pipeline: its own (no other pipeline writes them, so each one's stream
    sees every change of its tables)."""
    return [f"{DATABASE}.n{n}_t{i:05d}" for i in range(n)]


def load_tables(server: Any, names: list[str], rows: int) -> None:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        for name in names:
            cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v INT NOT NULL, s VARCHAR(32) NULL)")
            values = ", ".join(f"({i}, {i % 97}, 'row-{i}')" for i in range(1, rows + 1))
            cur.execute(f"INSERT INTO {name} VALUES {values}")
        conn.commit()


@dataclass
class Lake:
    """One pipeline: its tables, chunk store, output root, and the stream's state between batches."""

    name: str
    tables: list[str]
    pipe: Any
    root: str
    next_key: dict[str, int] = field(default_factory=dict)
    batch_id: int = 0
    first_batch: list[float] = field(default_factory=list)  # seconds, per run
    first_parts: dict[str, float] = field(default_factory=dict)
    changed: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # by mode: parts per batch


def _binlog_end(settings: Any) -> Any:
    from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
    from airflow_provider_mysqlcdc.engine.source.connection import connect

    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return BinlogOffset(str(row[0]), int(row[1]))


@dataclass
class Run:
    """What a stream run keeps from batch to batch (the Spark stream's driver holds the same)."""

    stream: Any = None
    commit: Any = None
    refresher: Any = None

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        if self.refresher is not None:
            self.refresher.close()


def _run_batch(lake: Lake, settings: Any, start: Any, checkpoint: str, *, expect: int,
               run: Run | None = None) -> tuple[dict, Any]:
    """One stream batch from ``start`` (``run``: the objects of a run under way; None: a new run's first
    batch, its objects made and closed here): (seconds per part, end offset)."""
    from airflow_provider_mysqlcdc.engine.lake.changelog_commit import ChangelogCommit
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
    from airflow_provider_mysqlcdc.engine.model.arrow_batches import records_batch
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream

    schemas = {t: lake.pipe.schemas[t] for t in map(TableId.parse, lake.tables)}
    parts: dict[str, float] = {}

    def timed(part: str, work: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        out = work()
        parts[part] = parts.get(part, 0.0) + time.perf_counter() - began
        return out

    fresh = run is None
    run = Run() if run is None else run
    if run.stream is None:
        run.stream = timed("open", lambda: ChangeStream(settings, lake.pipe.store, list(schemas), SERVER_ID,
                                                        schemas))
    else:
        timed("open", run.stream.refresh)  # the source's refresh before each batch
    stream = run.stream
    batch = timed("read", lambda: stream.read(start))
    if batch.emitted != expect:
        raise AssertionError(f"{lake.name}: batch {lake.batch_id} read {batch.emitted} changes, expected "
                             f"{expect}")
    if run.commit is None:
        run.commit = ChangelogCommit(lake.root, checkpoint, {str(t): s for t, s in schemas.items()})
    commit = run.commit
    attempt = timed("commit", lambda: commit.begin(lake.batch_id))

    def write() -> list:
        files = commit.files(attempt).partition(0, 0)
        by_table: dict[str, list] = {}
        for record in batch.records:
            by_table.setdefault(record.table, []).append(record)
        for table, records in by_table.items():
            schema = schemas[TableId.parse(table)]
            files.write(table, schema.schema_id, records_batch(schema, records), {}, [])
        return files.close()

    written = timed("files", write)
    ranges = [{"start": start.to_dict(), "end": batch.end.to_dict(), "rows_read": batch.rows_read}]
    done = timed("commit", lambda: commit.commit(attempt, written, ranges, []))
    if run.refresher is None:
        run.refresher = MirrorRefresher(lake.root, lake.pipe.store, settings=settings, schemas=dict(schemas))
    refresher = run.refresher
    timed("mirror", lambda: refresher.on_batch_committed(lake.batch_id, done.tables_changed))
    if fresh:
        run.close()
    lake.batch_id += 1
    parts["total"] = sum(parts.values())
    return parts, batch.end


def _change(server: Any, lake: Lake, changes: int, rows: int) -> None:
    """``changes`` new rows spread evenly over the lake's tables, one INSERT per table, one transaction."""
    per, extra = divmod(changes, len(lake.tables))
    with server.admin() as conn, conn.cursor() as cur:
        for i, table in enumerate(lake.tables):
            n = per + (1 if i < extra else 0)
            if not n:
                continue
            first = lake.next_key.get(table, rows + 1)
            cur.execute(f"INSERT INTO {table} VALUES "
                        + ", ".join(f"({k}, {k % 97}, 's-{k}')" for k in range(first, first + n)))
            lake.next_key[table] = first + n
        conn.commit()


def tables_run(work: Path, *, sizes: list[int], changes: int, rows: int, batches: int,
               seed: int = 1) -> tuple[list[Figure], list[str]]:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.lake import concurrent_commits
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
    from tests.support.engine_harness import assert_mirror_equals_source
    from tests.support.layout_pipeline import LayoutPipeline

    notes: list[str] = []
    figures: list[Figure] = []
    with MariaDBServer(options={"innodb-buffer-pool-size": "256M"}) as server:
        settings = MySQLSettings.from_url(server.cdc_url)
        say(f"tables: creating {sum(sizes)} + 1 tables of {rows} rows ...")
        load_tables(server, [ONE, *(t for n in sizes for t in table_names(n))], rows)
        lakes = [Lake("one", [ONE], None, "")] + [Lake(f"{n}", table_names(n), None, "") for n in sizes]
        for lake in lakes:
            lake.root = str(work / f"lake-{lake.name}")
            lake.pipe = LayoutPipeline(settings, ChunkStore(str(work / f"chunks-{lake.name}.db")), DATABASE,
                                       root=lake.root, chunk_size=32768, keep_rows=False)
            began = time.perf_counter()
            plans = lake.pipe.plan(lake.tables)
            for plan in plans:
                for chunk in plan.chunks:
                    lake.pipe.snapshot(plan, chunk.chunk_id)
            with MirrorRefresher(lake.root, lake.pipe.store, settings=settings,
                                 schemas=dict(lake.pipe.schemas)) as refresher:
                refresher.refresh_tables(lake.tables)
            say(f"tables: {lake.name}: planned, snapshotted and mirrored {len(lake.tables)} table(s) in "
                f"{time.perf_counter() - began:.1f} s")

        modes = [("concurrent", None), ("sequential", "1")]
        for lake in lakes:  # 1. the first batch of a new run over quiet tables, twice (the better counts)
            for run in range(2):
                start = _binlog_end(settings)
                parts, _ = _run_batch(lake, settings, start, str(work / f"ck-{lake.name}-q{run}"), expect=0)
                lake.first_batch.append(parts["total"])
                if parts["total"] == min(lake.first_batch):
                    lake.first_parts = parts
            say(f"tables: {lake.name}: first batch over quiet tables {min(lake.first_batch):.2f} s "
                f"({_parts(lake.first_parts)})")
        for mode, threads in modes:  # 2. a batch that changed every table, vs the same changes in one
            previous = os.environ.get(concurrent_commits.THREADS_ENV)
            if threads is not None:
                os.environ[concurrent_commits.THREADS_ENV] = threads
            try:
                for lake in lakes:
                    lake.changed[mode] = []
                    run = Run()  # one stream run: its objects kept from batch to batch
                    for b in range(batches + 1):
                        start = _binlog_end(settings)
                        _change(server, lake, changes, rows)
                        parts, _ = _run_batch(lake, settings, start, str(work / f"ck-{lake.name}-{mode}"),
                                              expect=changes, run=run)
                        if b:  # the first one makes the run's objects (and each table's Delta changelog)
                            lake.changed[mode].append(parts)
                    run.close()
                    say(f"tables: {lake.name}, {mode}: a batch of {changes:,} changes "
                        f"{_median(lake.changed[mode], 'total'):.2f} s "
                        f"({_parts(_medians(lake.changed[mode]))})")
            finally:
                if previous is None:
                    os.environ.pop(concurrent_commits.THREADS_ENV, None)
                else:
                    os.environ[concurrent_commits.THREADS_ENV] = previous
        say("tables: checking the mirrors against the source ...")
        for lake in lakes:
            sample = sorted({0, len(lake.tables) - 1, *range(0, len(lake.tables), 50)})
            assert_mirror_equals_source(settings, lake.root, [TableId.parse(lake.tables[i]) for i in sample])

    one = lakes[0]
    for lake in lakes[1:]:
        n = len(lake.tables)
        first, base = min(lake.first_batch), min(one.first_batch)
        figures.append(Figure(
            "tables", f"first batch of a stream run over **{n:,} quiet tables** (open the stream, read, "
            "commit, mirror hook)", first, "s", _parts(lake.first_parts), None,
            baseline_what="the same over 1 quiet table", baseline=base,
            baseline_detail=_parts(one.first_parts),
            higher_is_better=False, cpu_text="-", baseline_cpu_text="-",
            note=f"{(first - base) / n * 1000:.1f} ms per quiet table; target: 1,000 tables under 5 s",
            short=f"first batch, {n} quiet"))
        for mode, _ in modes:
            got, base_parts = _medians(lake.changed[mode]), _medians(one.changed[mode])
            lake_ms = (got["commit"] + got["mirror"] - base_parts["commit"] - base_parts["mirror"]) / n * 1000
            total_ms = (got["total"] - base_parts["total"]) / n * 1000
            figures.append(Figure(
                "tables", f"a batch of {changes:,} changes in **{n:,} tables**, commits and refreshes "
                f"**{mode}**: median of {batches}", got["total"], "s", _parts(got), None,
                baseline_what=f"the same {changes:,} changes in 1 table", baseline=base_parts["total"],
                baseline_detail=_parts(base_parts), higher_is_better=False, cpu_text="-",
                baseline_cpu_text="-",
                note=f"per changed table: {total_ms:.1f} ms in all, of which commit + mirror refresh "
                     f"{lake_ms:.1f} ms (target: under 5 ms)", short=f"{n} changed, {mode}"))
    notes.append(f"Many tables: {rows} rows a table, one chunk each; each size its own chunk store and "
                 "output root on the same server; 'sequential' = MYSQLCDC_COMMIT_THREADS=1 (the tables' "
                 "Delta commits and mirror refreshes one after another, as before issue 38).")
    return figures, notes


def _parts(parts: dict[str, float]) -> str:
    return "; ".join(f"{k} {v * 1000:,.0f} ms" for k, v in parts.items() if k != "total")


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: _median(rows, k) for k in rows[0]}


# --- 3. the stream filter per event -------------------------------------------------------------------------


def filter_ns_per_event(chunks: int, events: int, per_read: int = 1000) -> tuple[float, float, float]:
    """(ns per event, share emitted, seconds to build the filter once) of ``apply_blocks`` over single-row
    inserts spread over a table of ``chunks`` chunks of 100 keys, half the chunks committed after the events
    (those events dropped)."""
    import random

    from airflow_provider_mysqlcdc.engine.binlog.changes import RowBlock
    from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
    from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
    from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
    from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
    from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
    from airflow_provider_mysqlcdc.engine.stream.filter import GenerationFilter, StreamFilter, TableFilter

    table = TableId(DATABASE, "big")
    schema = TableSchema(table, (Column("id", "bigint", "bigint", False), Column("v", "int", "int", True)),
                         ("id",))
    bounds = [None, *((k * 100,) for k in range(1, chunks))]
    plan = ChunkPlan(table, 1, ("id",), tuple(Chunk(i, bounds[i], bounds[i + 1] if i + 1 < chunks else None)
                                             for i in range(chunks)), "even", 100, chunks * 100)
    order = KeyOrder(lambda: None, schema, ("id",))  # type: ignore[arg-type,return-value]  # integer keys
    hws = {i: BinlogPosition("mysql-bin.000001", 10_000_000 if i % 2 else 4) for i in range(chunks)}
    rng = random.Random(1)
    blocks = [RowBlock(table, schema, ["+I"], [0], [0], [[rng.randrange(chunks * 100)], [1]],
                       (1, 1000 + 10 * j), "mysql-bin.000001", None, "mysql-bin.000001", 4, 0, 0, 1, None)
              for j in range(events)]
    locator = ChunkLocator(plan, order)
    best, setup = float("inf"), float("inf")
    kept = 0
    for _ in range(3):
        began = time.perf_counter()  # what a batch's refresh of the filter costs (chunk store read aside)
        tf = TableFilter(schema, [GenerationFilter(1, ("id",), locator, dict(hws))])
        assert tf.max_high_watermark is not None
        flt = StreamFilter([tf])
        setup = min(setup, time.perf_counter() - began)
        began = time.perf_counter()
        kept = 0
        for i in range(0, events, per_read):
            kept += sum(len(r) for r in flt.apply_blocks(blocks[i:i + per_read]))
        best = min(best, time.perf_counter() - began)
    return best / events * 1e9, kept / events, setup


def filter_figures(chunks: int, events: int) -> list[Figure]:
    say(f"tables: stream filter, {events:,} events on tables of {chunks:,} and 1,000 chunks ...")
    big, big_kept, big_setup = filter_ns_per_event(chunks, events)
    small, small_kept, small_setup = filter_ns_per_event(1000, events)
    return [Figure("tables", f"stream filter per event (`StreamFilter.apply_blocks`), table of **{chunks:,} "
                   "chunks**", big, "ns", f"{big_kept:.0%} emitted", None,
                   baseline_what="the same events, table of 1,000 chunks", baseline=small,
                   baseline_detail=f"{small_kept:.0%} emitted", higher_is_better=False, cpu_text="-",
                   baseline_cpu_text="-",
                   note=f"{events:,} single-row events, 1,000 per read; building the table's filter "
                        f"(once per batch, with its largest HW) {big_setup * 1000:.0f} ms at {chunks:,} "
                        "chunks, "
                        f"{small_setup * 1000:.1f} ms at 1,000",
                   short=f"filter, {chunks} chunks")]


def run_section(work: Path, *, sizes: list[int], changes: int, rows: int, batches: int, chunks: int,
                events: int, versions: int, seed: int = 1) -> tuple[list[Figure], list[str]]:
    figures, notes = tables_run(work, sizes=sizes, changes=changes, rows=rows, batches=batches, seed=seed)
    figures += filter_figures(chunks, events)
    figures += delta_log_bench.delta_figures(work, versions)
    return figures, notes


def main() -> int:
    from report import Report, markdown

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--changes", type=int, default=60_000)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--versions", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        figures, notes = run_section(Path(tmp), sizes=[int(s) for s in args.sizes.split(",")],
                                     changes=args.changes, rows=args.rows, batches=args.batches,
                                     chunks=args.chunks, events=args.events, versions=args.versions)
    print(markdown(Report(figures=figures)))
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
