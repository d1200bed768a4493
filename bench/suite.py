"""The benchmark suite: one markdown table of figures measured side by side in one run, each next to its
baseline measured in the same run, with the CPU share each side used (client tree / MySQL server / other).

Sections (``--only`` picks some; each starts its own throwaway MariaDB with the binlog on, and the snapshot
section an Oracle MySQL too):

1. ``snapshot``: the snapshot phase on Spark (plan + one job over every chunk) at 1 and 2 executors vs one
   connectorx connection reading the table into Parquet (``bench/snapshot_bench.py``); then every column
   type (the conformance suite's wide tables) and many small tables, each vs connectorx reading the same
   tables one after another (``bench/snapshot_cases.py``); then on Oracle MySQL the same table per read view
   mode (``watermark_table``, ``gtid_executed``), quiet and under a single-row write load, each vs connectorx
   on the same server under the same load (``bench/snapshot_mysql.py``); ``--snapshot-servers`` picks the
   servers;
2. ``planning``: even and uneven (string key) chunk planning vs one full ordered key scan
   (``bench/planning.py``);
3. ``catchup``: the stream job, ``available-now``, at 1 and 2 partitions per batch vs raw mysql-replication
   over the same binlog range, on a bulk range (multi-row statements) and an OLTP range (single-row
   statements in transactions of 1-10, ``bench/oltp.py``) (``bench/catchup.py``);
4. ``latency``: commit -> visible in the changelog under a constant load of single-row transactions,
   processing-time trigger, vs a raw binlog tailer on the same load (``bench/latency.py``);
5. ``memory``: peak memory of one chunk read vs chunk size and table size, vs connectorx materializing the
   same range (``bench/chunk_memory.py``);
6. ``mirror``: the mirror refresh per stream micro-batch (rewrite the touched chunks, manifest, one Delta
   commit), changes spread over the table and in a hot key range, vs the same refresh without the Delta
   commit on a copy of the same snapshot and changelog, the sides alternating (``bench/mirror_refresh.py``);
   and a third side with ``mirror_updates=deletion_vectors``: its refresh time against the rewrite mode, and
   each mode's bytes written per batch against the batch's changelog bytes; all at 1M and at 10M rows in one
   run, and the deletion-vector refresh at 10M against 1M (at 10M no baseline side, the rewrite side timed on
   5 batches of each variant);
7. ``dag``: the example DAG's snapshot phase run by a real Airflow deployment (scheduler with the
   LocalExecutor, triggerer), with the group runner and (case a) with a ``spark-submit`` per chunk group, and
   its fixed overhead per chunk group, vs the CLI's one-job snapshot of the same tables
   (``bench/dag_snapshot.py``; Spark ``local[2]`` on both sides, not the standalone cluster);
8. ``verify``: ``mysqlcdc verify``'s run over a whole table (source digests per chunk + the lake side), rows
   verified per second and the server's CPU per row, vs one full-scan ``CHECKSUM TABLE t EXTENDED`` and one
   ``SELECT COUNT(*), SUM(CRC32(CONCAT_WS(...)))`` of the same table on the same server
   (``bench/verify_bench.py``);
9. ``tables``: a stream batch that changed 300 and 1,000 tables, and the first batch of a stream run over as
   many quiet tables, each vs the same over one table (the engine's driver side: open the stream, read,
   files, changelog commit, mirror refresh hook), the tables' commits at once and one after another; the
   stream filter per event at 100,000 chunks vs 1,000; a Delta changelog and mirror commit at 100,000
   versions vs the first 100 (``bench/many_tables.py``, ``bench/delta_log_bench.py``);
10. ``storage``: the output's size after ``--storage-minutes`` (30; ``--quick``: 2) of continuous 5 s
   batches of ``mysqlcdc stream`` over three small tables under a steady single-row write load, GC at its
   defaults, per mirror mode (``rewrite``, ``deletion_vectors``, side by side), by area, vs the source
   tables' size (``bench/storage.py``).

Spark runs on a standalone cluster started here (n executors of one core) unless ``--spark local`` (or the
cluster does not start: then local[n], said in the table). Prints the table and writes it to
``bench/results/latest.md`` with a chart ``latest.png`` and the figures ``latest.json``. ``--quick``: small
sizes (a few minutes), for checking the suite itself. Exits 1 if a section failed (the table says which).
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import catchup
import chunk_memory
import dag_snapshot
import latency
import many_tables
import mirror_refresh
import planning
import snapshot_bench
import snapshot_cases
import snapshot_mysql
import storage
import verify_bench
from cpu import Measure, cpu_model, measure, os_name, settle
from report import Figure, Report, chart, markdown
from spark_runs import SparkSetup, say

SECTIONS = ("snapshot", "planning", "catchup", "latency", "memory", "mirror", "dag", "verify", "tables",
            "storage")
SPARK_SECTIONS = ("snapshot", "catchup", "latency")
MiB = 2**20

# name: (full default, --quick default)
SIZES: dict[str, tuple[Any, Any]] = {
    "snapshot_rows": (5_000_000, 200_000),
    "snapshot_write_rate": (1000, 1000),
    "types_rows": (100_000, 5_000),
    "many_tables": (500, 40),
    "many_rows": (2_000, 2_000),
    "chunk_size": (32768, 32768),
    "planning_rows": (10_000_000, 300_000),
    "catchup_changes": (2_000_000, 100_000),
    "catchup_txn_rows": (1000, 500),
    "catchup_max_bytes": (64 * MiB, 2 * MiB),
    "catchup_oltp_images": (2_000_000, 100_000),
    "catchup_oltp_tables": (3, 3),
    "latency_rate": (5000, 5000),
    "latency_txn_rows": (1, 1),
    "latency_seconds": (60.0, 20.0),
    "latency_warmup": (15.0, 8.0),
    "memory_rows": (5_000_000, 500_000),
    "memory_small_rows": (1_000_000, 100_000),
    "memory_chunk_sizes": ("10000,100000,1000000", "1000,10000,100000"),
    "memory_independence_size": (100_000, 10_000),
    "mirror_rows": ("1000000,10000000", "50000,200000"),
    "mirror_batches": (30, 10),
    "mirror_rewrite_batches": (5, 3),
    "mirror_changes": (2000, 2000),
    "dag_tables": (9, 3),
    "dag_rows": ("3000-5000", "3000-3600"),
    "dag_many_tables": (300, 60),
    "dag_many_rows": (2000, 2000),
    "verify_rows": (1_000_000, 50_000),
    "verify_batches": (5, 3),
    "tables_sizes": ("300,1000", "40"),
    "tables_changes": (60_000, 4_000),
    "tables_rows": (20, 20),
    "tables_batches": (3, 2),
    "filter_chunks": (100_000, 100_000),
    "filter_events": (50_000, 10_000),
    "delta_versions": (100_000, 2_000),
    "storage_minutes": (30.0, 2.0),
    "storage_rate": (200, 200),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the suite in a few minutes")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated: {','.join(SECTIONS)}")
    parser.add_argument("--spark", choices=("cluster", "local"), default="cluster",
                        help="standalone cluster of 1-core executors (default) or local[n]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (outputs, event logs)")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where latest.md, latest.png and latest.json go")
    sizes = parser.add_argument_group("sizes (defaults: the full run; --quick: small)")
    sizes.add_argument("--snapshot-rows", type=int,
                       help="rows of the snapshot table, on MariaDB and on Oracle MySQL (5000000)")
    sizes.add_argument("--snapshot-servers", default="mariadb,mysql",
                       help="the snapshot section's servers, comma-separated: mariadb (the 5M-row table, "
                       "every column type, many tables), mysql (the same table per read view mode) (both)")
    sizes.add_argument("--snapshot-write-rate", type=int,
                       help="single-row UPDATE transactions/s of the write load on Oracle MySQL (1000)")
    sizes.add_argument("--types-rows", type=int,
                       help="rows of each of the six wide tables of every type (100000)")
    sizes.add_argument("--many-tables", type=int, help="tables of the many-tables case (500)")
    sizes.add_argument("--many-rows", type=int, help="rows of each of them (2000)")
    sizes.add_argument("--chunk-size", type=int,
                       help="snapshot, planning and mirror chunk size (32768, the default)")
    sizes.add_argument("--planning-rows", type=int)
    sizes.add_argument("--catchup-changes", type=int, help="row changes in the binlog range (2M)")
    sizes.add_argument("--catchup-txn-rows", type=int, help="rows per transaction of that range (1000)")
    sizes.add_argument("--catchup-max-bytes", type=int, help="max_bytes_per_batch (64 MiB)")
    sizes.add_argument("--catchup-partition-bytes", type=int,
                       help="catchup_partition_bytes (default: a quarter of the batch size, so batches "
                       "split)")
    sizes.add_argument("--catchup-oltp-images", type=int,
                       help="row images of the OLTP catch-up range: single-row statements in transactions "
                       "of 1-10 (2M; 0 skips the OLTP case)")
    sizes.add_argument("--catchup-oltp-tables", type=int, help="tables the OLTP range writes to (3)")
    sizes.add_argument("--catchup-partitions", default="1,2",
                       help="partitions per batch of the catch-up runs, comma-separated (1,2)")
    sizes.add_argument("--latency-rate", type=int,
                       help="row changes per second (5000 = 5,000 single-row transactions/s; the figures say "
                       "if the writer could not sustain it)")
    sizes.add_argument("--latency-txn-rows", type=int,
                       help="rows per writer transaction (1: single-row transactions)")
    sizes.add_argument("--latency-interval", default="1 second", help="the processing-time trigger interval")
    sizes.add_argument("--latency-seconds", type=float, help="measured seconds (60)")
    sizes.add_argument("--latency-warmup", type=float, help="seconds of load before measuring (15)")
    sizes.add_argument("--memory-rows", type=int, help="rows of the big table (5M)")
    sizes.add_argument("--memory-small-rows", type=int, help="rows of the small table (1M)")
    sizes.add_argument("--memory-chunk-sizes", help="comma-separated (10000,100000,1000000)")
    sizes.add_argument("--memory-independence-size", type=int,
                       help="chunk size also read on the small table (100000)")
    sizes.add_argument("--mirror-rows", help="rows of the mirror refresh's table, comma-separated: each "
                       "size in the same run (1000000,10000000)")
    sizes.add_argument("--mirror-rewrite-batches", type=int,
                       help="batches of each variant the rewrite side is timed on past the first size (5)")
    sizes.add_argument("--mirror-batches", type=int,
                       help="stream batches of each mirror refresh variant, spread and hot (30)")
    sizes.add_argument("--mirror-changes", type=int, help="row changes per batch (2000)")
    sizes.add_argument("--dag-tables", type=int,
                       help="example DAG, case (a): tables of mixed widths, chunk_size 300, 4 chunks a "
                       "group (9)")
    sizes.add_argument("--dag-rows", help="rows of each of them, LO-HI drawn with --seed (3000-5000: 32 "
                       "groups; 3000-15000 gives 71, whose spark-submit-per-group run takes ~12 min here)")
    sizes.add_argument("--dag-many-tables", type=int, help="example DAG, case (b): tables (300)")
    sizes.add_argument("--dag-many-rows", type=int, help="rows of each of them (2000)")
    sizes.add_argument("--dag-parallelism", type=int, default=4, help="the LocalExecutor's parallelism (4)")
    sizes.add_argument("--dag-no-before", action="store_true",
                       help="case (a) without the spark-submit-per-group run (shared_spark_app=false)")
    sizes.add_argument("--verify-rows", type=int, help="rows of the verified table (1M)")
    sizes.add_argument("--verify-batches", type=int,
                       help="stream batches of writes (~1%% of the rows in all) before verify (5)")
    sizes.add_argument("--tables-sizes",
                       help="tables changed / quiet in the many-tables case, comma-separated (300,1000)")
    sizes.add_argument("--tables-changes", type=int, help="row changes per batch, spread over them (60000)")
    sizes.add_argument("--tables-rows", type=int, help="rows of each table (20)")
    sizes.add_argument("--tables-batches", type=int, help="measured batches per case (3)")
    sizes.add_argument("--filter-chunks", type=int, help="chunks of the stream filter's table (100000)")
    sizes.add_argument("--filter-events", type=int, help="events through the stream filter (50000)")
    sizes.add_argument("--delta-versions", type=int, help="Delta changelog, mirror commits in a row (100000)")
    sizes.add_argument("--storage-minutes", type=float,
                       help="minutes of continuous 5 s batches under the write load (30)")
    sizes.add_argument("--storage-rate", type=int, help="single-row transactions/s of that load (200)")
    sizes.add_argument("--storage-modes", default="rewrite,deletion_vectors",
                       help="mirror modes, one stream each, side by side (rewrite,deletion_vectors)")
    args = parser.parse_args(argv)
    for name, (full, quick) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    args.snapshot_servers = [s.strip() for s in str(args.snapshot_servers).split(",") if s.strip()]
    if not args.snapshot_servers or set(args.snapshot_servers) - {"mariadb", "mysql"}:
        parser.error(f"--snapshot-servers takes mariadb and/or mysql, got {args.snapshot_servers}")
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {','.join(SECTIONS)}")
    return args


# --- sections that reuse the older scripts ------------------------------------------------------------------


def snapshot_section(args: argparse.Namespace, setup: SparkSetup,
                     work: Path) -> tuple[list[Figure], list[str], list[str]]:
    """MariaDB's (the 5M-row table, every column type, many tables), then Oracle MySQL's per read view mode
    (``bench/snapshot_mysql.py``), as ``--snapshot-servers`` asks."""
    figures: list[Figure] = []
    notes: list[str] = []
    failures: list[str] = []
    if "mariadb" in args.snapshot_servers:
        figures += mariadb_snapshot_figures(args, setup, work)
    if "mysql" in args.snapshot_servers:
        mysql = snapshot_mysql.run_section(setup, work / "mysql", rows=args.snapshot_rows,
                                           chunk_size=args.chunk_size, rate=args.snapshot_write_rate,
                                           seed=args.seed)
        figures += mysql.figures
        notes += mysql.notes
        failures += mysql.failures
    return figures, notes, failures


def mariadb_snapshot_figures(args: argparse.Namespace, setup: SparkSetup, work: Path) -> list[Figure]:
    from airflow_provider_mysqlcdc.testing.mariadb import CDC_PASSWORD, MariaDBServer

    rows, figures = args.snapshot_rows, []
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        say(f"snapshot: loading {rows:,} rows, then the baseline, connectorx ...")
        pid, raw, data_mb = snapshot_bench.load_with_baseline(server, rows, work)
        pw = catchup.password_file(work, CDC_PASSWORD)
        cfg = {"mysql_url": f"mysql://cdc@127.0.0.1:{server.port}/", "password_file": str(pw),
               "server_pid": pid, "rows": rows, "chunk_size": args.chunk_size}
        runs = []
        for p in (1, 2):
            say(f"snapshot: Spark, {setup.label(p)} ...")
            runs.append((p, snapshot_bench.run_spark(work, {**cfg, **setup.child_config(p)}, p)))
    base = snapshot_bench.baseline_fields(rows, raw, data_mb)
    for p, run in runs:
        phase: Measure = run["plan"] + run["job"]
        figures.append(Figure(
            "snapshot", f"snapshot phase = plan + Spark job, **{setup.label(p)}**", rows / phase.wall,
            "rows/s", f"{data_mb / phase.wall:,.1f} MB/s", phase,
            note=f"{rows:,} rows, {data_mb:,.0f} MB as Arrow; {run['chunks']} chunks of {args.chunk_size:,}; "
                 f"job alone {rows / run['job'].wall:,.0f} rows/s; Spark start-up {run['startup'].wall:.0f} "
                 "s not included", short=setup.label(p), **base))
    figures += snapshot_case_figures(args, setup, work)
    return figures


def snapshot_case_figures(args: argparse.Namespace, setup: SparkSetup, work: Path) -> list[Figure]:
    """Every column type, and many small tables, each against connectorx reading the same tables."""
    from airflow_provider_mysqlcdc.testing.mariadb import CDC_PASSWORD, MariaDBServer

    figures = []
    pw = catchup.password_file(work, CDC_PASSWORD)
    cases = (
        ("types", (1,), lambda server: snapshot_cases.load_types(server, args.types_rows, args.seed),
         "every column type: the conformance suite's 6 wide tables (89 types)",
         f"6 tables x {args.types_rows:,} rows"),
        ("many", (1, 2), lambda server: snapshot_cases.load_many(server, args.many_tables, args.many_rows),
         f"{args.many_tables} tables", f"{args.many_tables} tables x {args.many_rows:,} rows"),
    )
    for name, executor_counts, load, what, size in cases:
        with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
            assert server.process is not None
            pid = server.process.pid
            say(f"snapshot ({name}): loading {size} ...")
            tables = load(server)
            settle(pid)
            selects = {t: snapshot_cases.readable_select(server.cdc_url, t) for t in tables}
            say(f"snapshot ({name}): baseline, connectorx ...")
            n, raw = snapshot_cases.connectorx_tables(server.cdc_url, selects, work / f"cx-{name}", pid)
            shutil.rmtree(work / f"cx-{name}", ignore_errors=True)
            cfg = {"mysql_url": f"mysql://cdc@127.0.0.1:{server.port}/", "password_file": str(pw),
                   "server_pid": pid, "tables": tables, "chunk_size": args.chunk_size}
            for p in executor_counts:
                say(f"snapshot ({name}): Spark, {setup.label(p)} ...")
                run = snapshot_cases.run_spark(work, {**cfg, **setup.child_config(p)}, name, p)
                assert run["rows"] == n, (name, run["rows"], n)
                figures.append(Figure(
                    "snapshot", f"{what} = plan + Spark job, **{setup.label(p)}**", n / run["run"].wall,
                    "rows/s", f"{run['run'].wall:,.1f} s", run["run"],
                    baseline_what="connectorx, one table after another, `SELECT` -> Parquet",
                    baseline=n / raw.wall, baseline_detail=f"{raw.wall:,.1f} s", baseline_cpu=raw,
                    note=f"{size} ({n:,} rows); {run['chunks']} chunks; Spark start-up "
                         f"{run['startup'].wall:.0f} s not included", short=f"{name}, {setup.label(p)}"))
    return figures


SHORT_PLANNING = {"even": "even, BIGINT key", "uneven_index": "uneven, VARCHAR primary key",
                  "unindexed": "uneven, unindexed VARCHAR key"}


def planning_section(args: argparse.Namespace, work: Path) -> list[Figure]:
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    rows, cs = args.planning_rows, args.chunk_size
    with MariaDBServer(options={"innodb-buffer-pool-size": "2G"}) as server:
        planning.prepare(server, rows, 0)
        out = planning.run_planning(server, rows, cs, 0, variants=("even", "uneven_index", "unindexed"),
                                    meter=measure)
    return [Figure("planning", f"{r.what}, {r.rows:,} rows", r.m.wall, "s", f"{r.chunks:,} chunks", r.m,
                   "one full ordered key scan (pymysql, unbuffered)", r.baseline.wall if r.baseline else None,
                   "", r.baseline, higher_is_better=False, note=r.note,
                   short=SHORT_PLANNING.get(r.kind, r.kind))
            for r in out]


def mirror_section(args: argparse.Namespace, work: Path) -> tuple[list[Figure], list[str]]:
    return mirror_refresh.run_sizes(work, sizes=[int(n) for n in str(args.mirror_rows).split(",")],
                                    batches=args.mirror_batches, changes=args.mirror_changes,
                                    chunk_size=args.chunk_size, seed=args.seed,
                                    rewrite_batches=args.mirror_rewrite_batches)


def storage_section(args: argparse.Namespace, work: Path) -> tuple[list[Figure], list[str]]:
    modes = [m.strip() for m in str(args.storage_modes).split(",") if m.strip()]
    figures, notes, data = storage.run_section(work, minutes=args.storage_minutes, modes=modes,
                                               rate=args.storage_rate, seed=args.seed)
    return figures, [*notes, "storage by area (MB / files):\n\n" + storage.table_text(data)]


def tables_section(args: argparse.Namespace, work: Path) -> tuple[list[Figure], list[str]]:
    return many_tables.run_section(
        work, sizes=[int(n) for n in str(args.tables_sizes).split(",")], changes=args.tables_changes,
        rows=args.tables_rows, batches=args.tables_batches, chunks=args.filter_chunks,
        events=args.filter_events, versions=args.delta_versions, seed=args.seed)


# --- the run ------------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib.metadata import version

    import pyspark

    from airflow_provider_mysqlcdc.testing.mariadb import find_mariadbd

    try:
        mariadb = subprocess.run([find_mariadbd(), "--version"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        mariadb = mariadb.split("Ver ", 1)[-1].split(" for ")[0]
    except (OSError, subprocess.CalledProcessError, RuntimeError):
        mariadb = "unknown"
    out = {"mariadb": mariadb, "spark": pyspark.__version__, "python": platform.python_version()}
    try:
        from airflow_provider_mysqlcdc.testing.mysql import mysql_version

        out["mysql"] = mysql_version().split("Ver ", 1)[-1].split(" for ")[0]
    except (OSError, subprocess.CalledProcessError, RuntimeError):
        out["mysql"] = "unknown"
    for name in ("connectorx", "mysql-replication", "pyarrow", "pymysql"):
        try:
            out[name] = version(name)
        except Exception:  # noqa: BLE001 - not installed
            out[name] = "-"
    return out


def header(args: argparse.Namespace, setup: SparkSetup | None, started: datetime) -> list[str]:
    import psutil

    v = versions()
    quick = " (**--quick sizes**: a check of the suite, not representative)" if args.quick else ""
    lines = [
        f"### mysqlcdc benchmark suite{quick}",
        "",
        (f"- machine: {cpu_model()}, {psutil.cpu_count()} cores, "
         f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM; {os_name()}"),
        (f"- MariaDB {v['mariadb']} (throwaway, binlog ROW/FULL, on the same cores); Spark {v['spark']}; "
         f"Python {v['python']}; connectorx {v['connectorx']}, mysql-replication {v['mysql-replication']}, "
         f"pyarrow {v['pyarrow']}"),
        f"- date: {started:%Y-%m-%d %H:%M} UTC; sections: {', '.join(args.sections)}; seed {args.seed}",
    ]
    if "snapshot" in args.sections and "mysql" in args.snapshot_servers:
        lines.insert(3, f"- Oracle MySQL {v['mysql']} (throwaway, gtid_mode=ON, binlog ROW/FULL, on the same "
                        "cores): the snapshot section's MySQL rows")
    if setup is not None:
        lines.append(f"- Spark: {setup.describe()}")
    lines.append("- CPU shares: 100% = one core; client = the benchmark process tree (Spark driver, JVMs, "
                 "executors, Python workers), server = mariadbd (mysqld), (other) = the rest of the machine; "
                 "ratio = figure / baseline")
    return lines


def run(args: argparse.Namespace) -> Report:
    started = datetime.now(UTC)
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-suite-"))
    needs_spark = [s for s in args.sections if s in SPARK_SECTIONS]
    setup = SparkSetup.start(args.spark) if needs_spark else None
    by_section: dict[str, list[Figure]] = {}
    notes: dict[str, list[str]] = {}
    timings: dict[str, float] = {}

    def attempt(section: str, work_dir: Path, fn: Any) -> None:
        say(f"== {section} ==")
        t0 = time.perf_counter()
        work_dir.mkdir(parents=True, exist_ok=True)
        try:
            result = fn()  # figures, or (figures, note lines), or (figures, note lines, failures)
            figures, section_notes, *failures = result if isinstance(result, tuple) else (result, [])
            by_section[section], notes[section] = figures, section_notes
            report.failures += [f"{section}: {failure}" for failure in (failures[0] if failures else [])]
        except Exception as exc:  # noqa: BLE001 - one failed section must not hide the others' figures
            traceback.print_exc()
            first = (str(exc).splitlines() or [""])[0]  # an assertion without a message has no line
            report.failures.append(f"{section}: {type(exc).__name__}: {first[:300]}")
        timings[section] = time.perf_counter() - t0
        say(f"== {section}: {timings[section]:.0f}s ==")

    try:
        # Spark sections first, so the cluster can stop before the others run.
        if "snapshot" in args.sections:
            attempt("snapshot", work / "snapshot", lambda: snapshot_section(args, setup, work / "snapshot"))
        if "catchup" in args.sections:
            attempt("catchup", work / "catchup", lambda: catchup.run_section(
                setup, work / "catchup", changes=args.catchup_changes, txn_rows=args.catchup_txn_rows,
                max_bytes=args.catchup_max_bytes, partition_bytes=args.catchup_partition_bytes,
                oltp_images=args.catchup_oltp_images, oltp_tables=args.catchup_oltp_tables, seed=args.seed,
                partitions=tuple(int(p) for p in args.catchup_partitions.split(","))))
        if "latency" in args.sections:
            attempt("latency", work / "latency", lambda: latency.run_section(
                setup, work / "latency", rate=args.latency_rate, txn_rows=args.latency_txn_rows,
                warmup=args.latency_warmup, seconds=args.latency_seconds, interval=args.latency_interval,
                seed=args.seed))
        if setup is not None:
            setup.stop()
        if "planning" in args.sections:
            attempt("planning", work / "planning", lambda: planning_section(args, work / "planning"))
        if "memory" in args.sections:
            sizes = tuple(int(s) for s in str(args.memory_chunk_sizes).split(",") if s.strip())
            attempt("memory", work / "memory", lambda: chunk_memory.run_section(
                work / "memory", table_rows=args.memory_rows, small_rows=args.memory_small_rows,
                chunk_sizes=sizes, independence_size=args.memory_independence_size))
        if "tables" in args.sections:
            attempt("tables", work / "tables", lambda: tables_section(args, work / "tables"))
        if "mirror" in args.sections:
            # not work / "mirror": a "/mirror/" in the output root's path confuses the Delta checks
            attempt("mirror", work / "refresh", lambda: mirror_section(args, work / "refresh"))
        if "storage" in args.sections:
            attempt("storage", work / "storage-run", lambda: storage_section(args, work / "storage-run"))
        if "dag" in args.sections:
            attempt("dag", work / "dag", lambda: dag_snapshot.run_section(
                work / "dag", tables=args.dag_tables, rows=str(args.dag_rows),
                many_tables=args.dag_many_tables, many_rows=args.dag_many_rows, seed=args.seed,
                parallelism=args.dag_parallelism, before=not args.dag_no_before, keep=args.keep))
        if "verify" in args.sections:
            attempt("verify", work / "verify", lambda: verify_bench.run_section(
                work / "verify", rows=args.verify_rows, chunk_size=args.chunk_size,
                batches=args.verify_batches, seed=args.seed))
    finally:
        if setup is not None:
            setup.stop()
        if args.keep:
            say(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report.header = header(args, setup, started)
    for section in SECTIONS:  # the table keeps the sections' order, whatever order they ran in
        report.figures += by_section.get(section, [])
        report.notes += notes.get(section, [])
    total = sum(timings.values())
    report.notes.append("Section wall times: "
                        + ", ".join(f"{s} {t / 60:.1f} min" for s, t in timings.items())
                        + f"; total {total / 60:.1f} min.")
    return report


def save(report: Report, args: argparse.Namespace) -> None:
    args.results.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    (args.results / "latest.md").write_text(text)
    chart(report, args.results / "latest.png", report.header[0].lstrip("# ").replace("**", ""))
    figures = []
    for f in report.figures:
        item = asdict(f)
        item["ratio"] = f.ratio
        figures.append(item)
    (args.results / "latest.json").write_text(json.dumps(
        {"header": report.header, "figures": figures, "failures": report.failures, "notes": report.notes,
         "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}, indent=2))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    print(markdown(report))
    save(report, args)
    say(f"saved {args.results / 'latest.md'}, latest.png, latest.json")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
