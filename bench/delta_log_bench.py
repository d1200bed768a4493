"""A Delta commit's cost as its log grows, with the table properties the package sets (issue 38, point 3).

A stream with a 1 s trigger adds 86,400 versions a day to each changed table's changelog and mirror. Here one
table of each kind takes ``versions`` commits in a row through the engine, with realistic actions:

* the changelog: one batch's file added per commit (``DeltaChangelog.commit_batch``, the batch id as its Delta
  application transaction), so its state grows by a file a batch;
* the mirror: 32 chunk files, two chunks rewritten per commit (``DeltaMirror.sync``: two adds, two removes),
  so its state stays at 32 files and the removes pile up as tombstones.

The log retention (``delta.logRetentionDuration``, ``delta_log.LOG_RETENTION``, 10 minutes) is a time, and
this loop commits far faster than once a second: after the first 100 commits the table's retention is set to
the time this loop takes for as many commits as a 1 s trigger makes in the default retention (600), so the log
holds what a day of 1 s batches leaves in it (delta-rs deletes the expired entries at each checkpoint, every
10 commits). The figure: the mean of the last 100 commits against the mean of the first 100 of the same
table, in the same run; the log's length at the end.

Checks (the section fails without them): the changelog's Delta table holds every batch once (rows, its
application transaction), the mirror's exactly the 32 current files.

By hand: ``python bench/delta_log_bench.py --versions 100000``; in the suite, the ``tables`` section
(``--delta-versions``: 100,000, ``--quick`` 2,000).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import Figure
from spark_runs import say

WINDOW = 100
CHUNKS = 32
TRIGGER_VERSIONS = 600  # versions a 1 s trigger makes in the default log retention (10 minutes)


def _write(data: bytes, path: str) -> None:
    with open(path, "wb") as out:
        out.write(data)


def _scaled_retention(uri: str, seconds_per_commit: float) -> int:
    """Set the table's log retention to the time this loop takes for ``TRIGGER_VERSIONS`` commits."""
    from deltalake import DeltaTable

    seconds = max(1, round(TRIGGER_VERSIONS * seconds_per_commit))
    DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": f"interval {seconds} seconds"})
    return seconds


def changelog_commits(work: Path, versions: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from airflow_provider_mysqlcdc.engine.lake.delta_changelog import (
        APP_ID,
        DeltaChangelog,
        changelog_table_uri,
    )
    from airflow_provider_mysqlcdc.engine.model.tables import TableId

    root = tempfile.mkdtemp(dir=work)
    table = TableId("bench", "changelog")
    changelog = DeltaChangelog(root, table)
    base = changelog_table_uri(root, table)
    os.makedirs(base)
    src = os.path.join(root, "part.parquet")
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), src)
    data = Path(src).read_bytes()  # copied, not hard-linked: a file takes at most 65,000 links (ext4)
    times, retention, marks = [], None, {}
    for b in range(versions):
        directory = os.path.join(base, f"batch={b:012d}")
        os.mkdir(directory)
        _write(data, os.path.join(directory, "part.parquet"))
        began = time.perf_counter()
        changelog.commit_batch(b, ["part.parquet"])
        times.append(time.perf_counter() - began)
        if b + 1 == WINDOW:
            retention = _scaled_retention(base, statistics.mean(times))
        if (b + 1) % max(versions // 10, WINDOW) == 0 or b + 1 == WINDOW:
            marks[b + 1] = statistics.mean(times[-WINDOW:]) * 1000
            say(f"tables: Delta changelog, {b + 1:,} versions: {marks[b + 1]:.1f} ms a commit")
    delta = DeltaTable(base)
    rows = delta.to_pyarrow_table().num_rows
    if rows != versions or delta.transaction_version(APP_ID) != versions - 1:
        raise AssertionError(f"the changelog holds {rows} rows, last batch "
                             f"{delta.transaction_version(APP_ID)}; {versions} batches were committed")
    changelog.log.load()
    return _result(times, base, retention, marks, len(changelog.log.files()))


def _result(times: list[float], base: str, retention: int | None, marks: dict, files: int) -> dict:
    return {"first": statistics.mean(times[:WINDOW]) * 1000, "last": statistics.mean(times[-WINDOW:]) * 1000,
            "entries": len(os.listdir(os.path.join(base, "_delta_log"))), "retention": retention,
            "marks": marks, "files": files}


def mirror_commits(work: Path, versions: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_mysqlcdc.engine.lake.delta_mirror import DeltaMirror, mirror_table_uri
    from airflow_provider_mysqlcdc.engine.model.tables import TableId

    root = tempfile.mkdtemp(dir=work)
    table = TableId("bench", "mirror")
    mirror = DeltaMirror(root, table)
    base = mirror_table_uri(root, table)
    src = os.path.join(root, "part.parquet")
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), src)
    data = Path(src).read_bytes()  # copied, not hard-linked: a file takes at most 65,000 links (ext4)
    current = {}
    for chunk in range(CHUNKS):
        os.makedirs(os.path.join(base, f"chunk={chunk}"))
        current[chunk] = f"chunk={chunk}/v0.parquet"
        _write(data, os.path.join(base, current[chunk]))
    times, retention, marks = [], None, {}
    for b in range(versions + 1):
        if b:  # version 0 creates the table with every chunk
            for chunk in (b % CHUNKS, (b * 7 + 3) % CHUNKS):
                current[chunk] = f"chunk={chunk}/v{b}.parquet"
                _write(data, os.path.join(base, current[chunk]))
        manifest = SimpleNamespace(files=[f"mirror/{p}" for p in current.values()], through_batch=b,
                                   stream_position=b, consistent=False, as_of=None)
        began = time.perf_counter()
        mirror.sync(manifest)
        if not b:
            continue
        times.append(time.perf_counter() - began)
        if b == WINDOW:
            retention = _scaled_retention(base, statistics.mean(times))
        if b % max(versions // 10, WINDOW) == 0 or b == WINDOW:
            marks[b] = statistics.mean(times[-WINDOW:]) * 1000
            say(f"tables: Delta mirror, {b:,} versions: {marks[b]:.1f} ms a commit")
    mirror.log.load()
    files = set(mirror.log.files())
    if files != set(current.values()):
        raise AssertionError(f"the mirror's Delta table holds {len(files)} files, not the {CHUNKS} current")
    return _result(times, base, retention, marks, len(files))


def delta_figures(work: Path, versions: int,
                  kinds: tuple[str, ...] = ("changelog", "mirror")) -> list[Figure]:
    say(f"tables: Delta commits, {versions:,} versions of a {' and of a '.join(kinds)} ...")
    out = []
    for what, run, state in (("changelog", changelog_commits, "one file added a commit"),
                             ("mirror", mirror_commits, f"{CHUNKS} files, 2 replaced a commit")):
        if what not in kinds:
            continue
        got = run(work, versions)
        marks = ", ".join(f"{n:,}: {ms:.1f}" for n, ms in sorted(got["marks"].items()))
        out.append(Figure(
            "tables", f"Delta {what} commit at **{versions:,} versions** (mean of the last 100)", got["last"],
            "ms",
            f"{got['entries']:,} files in _delta_log, {got['files']:,} in the table", None,
            baseline_what="the first 100 commits of the same table", baseline=got["first"],
            higher_is_better=False, cpu_text="-", baseline_cpu_text="-",
            note=f"{state}; log retention scaled to {got['retention']} s = 600 commits of this loop (10 "
                 f"minutes of a 1 s trigger), checkpoint every 10; ms a commit at versions {marks}",
            short=f"Delta {what}, {versions} versions"))
    return out


def main() -> int:
    from report import Report, markdown

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--only", default="changelog,mirror", help="changelog, mirror or both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-deltalog-") as tmp:
        figures = delta_figures(Path(tmp), args.versions, tuple(args.only.split(",")))
    print(markdown(Report(figures=figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
