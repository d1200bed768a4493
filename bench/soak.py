"""Soak: minutes of random writes while tables are planned, snapshotted, streamed, rerun and re-planned.

Rounds of concurrent writers (tests/support/workload.py) on a throwaway MariaDB; during each round the driver
picks random steps: stream micro-batches, chunk reruns the stream is behind or ahead of, re-plans whose chunks
commit while the stream runs, stream restarts from the committed offset, and replayed batches (read, thrown
away, read again: the same records must come back). After each round the writers stop, the stream catches
up and every table's mirror is compared with ``SELECT``. At the end the whole changelog is audited against the
binlog as ``mariadb-binlog`` decodes it (``tests.support.binlog_audit``): no duplicate,
nothing invented, nothing missing past each table's largest HW, values right. Reruns move HWs while the
stream runs, so the exact per-chunk check of the tests is off here; the last round therefore only streams
(with restarts and replays), so that its changes all lie past the final HWs and are checked for completeness.

The engine writes its output as files in the documented layout (``tests/support/layout_pipeline.py``): after
each round the round's changes are committed as one changelog batch per table (marker, Delta commit, stream
progress) and every table's lake mirror is refreshed and compared with ``SELECT`` as well. At the end garbage
collection (``engine/lake/gc``) runs with a retention of one second (the test-only override of the 15 minute
grace) and the summary says what it reclaimed: superseded snapshot versions of reruns and re-plans, and the
mirror files the refreshes replaced.

Prints a markdown summary; exits 1 if a mirror differs or the audit is not clean.
Usage: ``python bench/soak.py [--minutes 5] [--seed 1] [--tables t_int,t_ci,...] [--round-seconds 30]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ holds the harness

from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import DeltaChangelog, batch_files
from airflow_provider_mysqlcdc.engine.lake.gc.collector import collect_garbage
from airflow_provider_mysqlcdc.engine.lake.gc.report import GcRun, bytes_text
from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention, utc_now
from airflow_provider_mysqlcdc.engine.lake.layout import (
    changelog_dir,
    changelog_marker,
    read_json,
    stream_progress_path,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
from tests.support.binlog_audit import (
    AuditReport,
    audit_changelog,
    entries_from_records,
    read_binlog,
)
from tests.support.engine_harness import Pipeline
from tests.support.layout_pipeline import LayoutPipeline
from tests.support.workload import TABLE_SPECS, Workload, WorkloadStats, create_tables, seed_rows

STEPS = {"pump": 10, "rerun_behind": 3, "rerun_ahead": 2, "replan": 1, "restart": 1, "replay": 2}
STREAM_ONLY = ("pump", "restart", "replay")  # the last round moves no HW: all its changes must be emitted


@dataclasses.dataclass
class Soak:
    pipe: Pipeline
    server: MariaDBServer
    database: str
    tables: list[TableId]
    rng: random.Random
    plans: dict[TableId, ChunkPlan] = dataclasses.field(default_factory=dict)
    steps: Counter = dataclasses.field(default_factory=Counter)
    chunk_reads: int = 0
    mirror_checks: dict[TableId, list[bool]] = dataclasses.field(default_factory=dict)
    mismatches: list[str] = dataclasses.field(default_factory=list)
    refresher: MirrorRefresher | None = None
    written: int = 0  # changelog records committed to the lake so far
    batch_id: int = 0
    lake_checks: dict[TableId, list[bool]] = dataclasses.field(default_factory=dict)

    def commit_lake(self) -> None:
        """The round's changes as one changelog batch per table (files, marker, Delta commit, stream
        progress), then every table's lake mirror refreshed and compared with the source."""
        pipe = self.pipe
        assert isinstance(pipe, LayoutPipeline) and pipe.offset is not None and self.refresher is not None
        records, self.written = pipe.changelog[self.written:], len(pipe.changelog)
        end = pipe.offset.to_dict()
        batch_id, self.batch_id = self.batch_id, self.batch_id + 1
        for table in self.tables:
            mine = [r for r in records if r.table == str(table)]
            if not mine:
                continue
            pipe.write_batch(table, batch_id, mine, end)
            marker_path = changelog_marker(pipe.root, table, batch_id)
            marker = read_json(marker_path) or {}
            names = sorted(os.listdir(changelog_dir(pipe.root, table, batch_id)))
            write_json_atomic(marker_path, {**marker, "files": names, "changelog_json_files": []})
            files = batch_files(pipe.root, table, batch_id, names)
            DeltaChangelog(pipe.root, table).commit(batch_id, files, end)
        write_json_atomic(stream_progress_path(pipe.root),
                          {"batch_id": batch_id, "end_offset": end, "tables": [str(t) for t in self.tables]})
        for table in self.tables:
            self.refresher.refresh(table, [batch_id])
            self.lake_checks.setdefault(table, []).append(
                lake_rows(pipe, table) == Counter(pipe.source(table))
            )

    def plan(self, tables: list[TableId]) -> list[ChunkPlan]:
        keys = {f"{self.database}.t_nopk": "ck"}
        plans = self.pipe.plan([str(t) for t in tables], chunk_keys=keys)
        for plan in plans:
            self.plans[plan.table] = plan
        return plans

    def snapshot(self, plan: ChunkPlan, chunk_id: int) -> None:
        self.pipe.snapshot(plan, chunk_id)
        self.chunk_reads += 1

    def step(self, stream_only: bool = False) -> None:
        pipe, rng = self.pipe, self.rng
        assert pipe.stream is not None
        names = [n for n in STEPS if not stream_only or n in STREAM_ONLY]
        name = rng.choices(names, weights=[STEPS[n] for n in names])[0]
        self.steps[name] += 1
        plan = self.plans[rng.choice(self.tables)]
        chunk_id = rng.choice(plan.chunks).chunk_id
        if name == "pump":
            pipe.pump(rng, batches=rng.randint(1, 3))
        elif name == "rerun_behind":  # the rerun commits; the stream then drops what its snapshot covers
            self.snapshot(plan, chunk_id)
            pipe.stream.refresh()
        elif name == "rerun_ahead":  # the stream reads past the rerun's HW before the rerun commits
            commit = pipe.read_uncommitted(plan, chunk_id)
            self.chunk_reads += 1
            pipe.stream.refresh()
            pipe.pump(rng, batches=2)
            commit()
            pipe.stream.refresh()
        elif name == "replan":  # a new generation whose chunks commit one by one while the stream runs
            new = self.plan([plan.table])[0]
            pipe.stream.refresh()
            for chunk in new.chunks:
                self.snapshot(new, chunk.chunk_id)
                pipe.stream.refresh()
                if rng.random() < 0.5:
                    pipe.pump(rng, batches=1)
        elif name == "restart":  # a new stream process resumes from the committed offset
            pipe.stream.close()
            pipe.stream = ChangeStream(pipe.settings, pipe.store, self.tables,
                                       allocate_server_id(pipe.settings, 0), schemas=dict(pipe.schemas))
        elif name == "replay":  # a batch lost before its commit is read again: the same records come back
            assert pipe.offset is not None
            max_rows = rng.randint(20, 400)
            first = [(r.table, r.key, r.op) for r in pipe.stream.read(pipe.offset, max_rows=max_rows).records]
            again = pipe.stream.read(pipe.offset, max_rows=max_rows)
            replayed = [(r.table, r.key, r.op) for r in again.records]
            if replayed[: len(first)] != first:  # the replay may read further: the binlog grew meanwhile
                self.mismatches.append(f"replay from {pipe.offset} returned different records")
            pipe.changelog.extend(again.records)
            pipe.offset = again.end

    def check_mirrors(self) -> None:
        for table in self.tables:
            mirror, source = Counter(self.pipe.mirror(table)), Counter(self.pipe.source(table))
            equal = mirror == source
            self.mirror_checks.setdefault(table, []).append(equal)
            if not equal:
                missing, extra = list((source - mirror).elements()), list((mirror - source).elements())
                self.mismatches.append(
                    f"{table}: mirror {sum(mirror.values())} rows, source {sum(source.values())}; "
                    f"missing {missing[:2]}; extra {extra[:2]}"
                )


def run(minutes: float, seed: int, table_names: list[str], round_seconds: float) -> int:
    specs = [s for s in TABLE_SPECS if s.name in table_names]
    if len(specs) != len(table_names):
        raise SystemExit(f"unknown tables: {sorted(set(table_names) - {s.name for s in TABLE_SPECS})}")
    database = "soak"
    started = time.monotonic()
    deadline = started + minutes * 60
    totals = WorkloadStats()
    with MariaDBServer() as server, tempfile.TemporaryDirectory(prefix="mysqlcdc-soak-") as tmp:
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}`")
            create_tables(conn, database, specs)
            seed_rows(conn, database, rows_per_table=700, seed=seed, specs=specs)
        settings = MySQLSettings.from_url(server.cdc_url)
        pipe = LayoutPipeline(settings, ChunkStore(str(Path(tmp) / "chunks.db")), database,
                              root=str(Path(tmp) / "out"))
        tables = [TableId(database, s.name) for s in specs]
        soak = Soak(pipe, server, database, tables, random.Random(seed),
                    refresher=MirrorRefresher(pipe.root, pipe.store, settings=settings))
        rounds, last = 0, False
        while not last:
            workload = Workload(server.admin, database, seed=seed * 1000 + rounds, writers=2, specs=specs)
            workload.start()
            try:
                if rounds == 0:  # plan and snapshot under writes, then open the stream
                    time.sleep(0.5)
                    for plan in soak.plan(tables):
                        for chunk in plan.chunks:
                            soak.snapshot(plan, chunk.chunk_id)
                    pipe.open_stream(tables)
                now = time.monotonic()
                last = now + 1.5 * round_seconds >= deadline
                round_end = max(deadline, now + 1) if last else now + round_seconds
                while time.monotonic() < round_end:
                    soak.step(stream_only=last)
            finally:
                stats = workload.stop()
            for name in ("transactions", "rollbacks", "conflicts", "rotations", "statements"):
                setattr(totals, name, getattr(totals, name) + getattr(stats, name))
            pipe.catch_up()
            soak.check_mirrors()
            soak.commit_lake()
            rounds += 1
        assert pipe.started is not None and pipe.offset is not None
        audit_started = time.monotonic()
        text = read_binlog(settings, pipe.started.file)
        expectations = [dataclasses.replace(pipe.expectation(t), chunks=(), chunk_key=()) for t in tables]
        report = audit_changelog(text, entries_from_records(pipe.changelog), expectations,
                                 start=pipe.started.position, end=pipe.offset.position)
        audit_seconds = time.monotonic() - audit_started
        before = _disk_bytes(pipe.root)
        # garbage collection with a retention of one second (test-only: no 15 minute grace), a moment later
        gc = collect_garbage(pipe.root, pipe.store, Retention(timedelta(seconds=1), min_grace=timedelta(0)),
                             now=utc_now() + timedelta(seconds=2))
        soak.refresher.close()
        for table in soak.tables:  # the lake mirror reads the same after GC
            if lake_rows(pipe, table) != Counter(pipe.source(table)):
                soak.mismatches.append(f"{table}: the lake mirror differs from the source after GC")
        print(summary(soak, totals, report, rounds, time.monotonic() - started, audit_seconds, seed,
                      gc, before, _disk_bytes(pipe.root)))
    lake_equal = all(all(checks) for checks in soak.lake_checks.values())
    return 0 if report.clean and not soak.mismatches and lake_equal else 1


def lake_rows(pipe: LayoutPipeline, table: TableId) -> Counter:
    """The table's lake mirror as ``read_mirror`` gives it, rows as the source's."""
    names = pipe.schemas[table].column_names
    return Counter(tuple(r[c] for c in names) for r in values.canonical_pylist(read_mirror(pipe.root, table)))


def _disk_bytes(root: str) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def summary(soak: Soak, stats: WorkloadStats, report: AuditReport, rounds: int, seconds: float,
            audit_seconds: float, seed: int, gc: GcRun | None = None, before: int = 0, after: int = 0) -> str:
    steps = ", ".join(f"{k} {soak.steps[k]}" for k in STEPS)
    lines = [
        f"## Soak: seed {seed}, {seconds / 60:.1f} min, {len(soak.tables)} tables, {rounds} rounds",
        "",
        "| workload and pipeline | |",
        "|---|---|",
        (f"| transactions committed | {stats.transactions} (rolled back {stats.rollbacks}, conflicts "
         f"{stats.conflicts}, binlog rotations {stats.rotations}) |"),
        f"| row changes in the binlog (captured tables, stream range) | {report.binlog_changes} |",
        f"| changelog records | {report.records} |",
        f"| chunk reads | {soak.chunk_reads} |",
        f"| driver steps | {steps} |",
        f"| audit (mariadb-binlog read + compare) | {audit_seconds:.1f} s |",
    ]
    if gc is not None:
        kinds = ", ".join(f"{k} {a.files} files {bytes_text(a.bytes)}" for k, a in gc.by_kind.items())
        errors = "; errors: " + "; ".join(gc.errors) if gc.errors else ""
        lines.append(f"| garbage collection (retention 1 s) | {gc.total.files} files, "
                     f"{bytes_text(gc.total.bytes)} reclaimed ({kinds or 'nothing'}) in {gc.seconds:.1f} s; "
                     f"output root {bytes_text(before)} -> {bytes_text(after)}{errors} |")
    lines += [
        "",
        ("| table | mirror equal (rounds) | lake mirror equal (rounds) | binlog changes | records "
         "| checked past max HW | missing | duplicates | invented | wrong values |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for table in soak.tables:
        checks = soak.mirror_checks.get(table, [])
        counts = report.by_table.get(str(table), Counter())
        verdict = "yes" if checks and all(checks) else "NO"
        lake = soak.lake_checks.get(table, [])
        lake_verdict = f"{'yes' if lake and all(lake) else 'NO'} ({sum(lake)}/{len(lake)})"
        lines.append(
            f"| {table.table} | {verdict} ({sum(checks)}/{len(checks)}) | {lake_verdict} "
            f"| {counts['binlog_changes']} "
            f"| {counts['records']} | {counts['checked_after_max_hw']} | {counts['missing']} "
            f"| {counts['duplicates']} | {counts['invented']} | {counts['wrong_values']} |"
        )
    lines += ["", f"Audit: {'clean' if report.clean else 'NOT CLEAN'}; {report.summary()}"]
    lines += [f"- {m}" for m in soak.mismatches]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tables", default=",".join(s.name for s in TABLE_SPECS),
                        help="comma-separated names from tests/support/workload.py TABLE_SPECS")
    parser.add_argument("--round-seconds", type=float, default=30.0,
                        help="writers stop for a mirror check after each round")
    args = parser.parse_args()
    sys.exit(run(args.minutes, args.seed, split_commas(args.tables),
                 args.round_seconds))


if __name__ == "__main__":
    main()
