"""Snapshot phase on Spark against a raw single-connection read into Parquet, measured in the same run.

On a throwaway MariaDB with a generated 6-column table (default 5M rows):

- baseline: one connection, connectorx (Rust, Arrow record batches, binary protocol) reads ``SELECT *`` and
  pyarrow writes one Parquet file; once with connectorx's own types, once type-exact (DECIMAL as
  decimal(12,2) via CHAR, TIMESTAMP as a UTC instant), which is the baseline the ratios use;
- the whole snapshot phase of this project: ``plan_tables`` (SQLite chunk store) and one Spark job over
  every chunk (``run_chunk_group``, versioned Parquet + chunk store commits) at ``local[1]`` and ``local[2]``.
  Each parallelism runs in a fresh Python process (a fresh JVM), so Spark start-up (pyspark import, JVM,
  session and one trivial Python job) is measured on its own and reported separately;
- for the breakdown, the engine alone: the same per-chunk work as a Spark task, in this process, no Spark.

CPU share (100% = one core): client = this process (or the Spark driver process) and all its descendants
(JVM, Python workers), from /proc via psutil, including reaped children; server = the mariadbd process;
other = the rest of the machine's busy CPU (other work on the same cores skews the figures: look at it before
trusting a ratio).
Prints one markdown table. Usage:
``python bench/snapshot_bench.py [--rows 5000000] [--chunk-size 32768] [--parallelism 1,2] [--json FILE]``.
Needs ``pip install connectorx``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import Measure, Timer, machine, settle
from engine_bench import load_table  # same table shape as the engine benchmark

TABLE = "bench.t"
CX_BATCH_ROWS = 65_536


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


# --- baseline: connectorx, one connection -------------------------------------------------------------------


def raw_read(url: str, out: Path, server_pid: int, exact: bool,
             load: dict[str, int] | None = None) -> tuple[int, Measure, str]:
    """``SELECT *`` through connectorx into one Parquet file; ``exact`` keeps DECIMAL and TIMESTAMP exact;
    ``load``: the pids of load generators running meanwhile (counted apart, by name)."""
    import connectorx as cx

    if exact:
        # connectorx reads TIMESTAMP as a naive wall clock in the session zone and DECIMAL through its own
        # decimal128(38,10) (float64 with pandas): read TIMESTAMP in UTC, DECIMAL as text, convert here.
        query = "SELECT id, a, b, CAST(c AS CHAR) AS c, d, e FROM t"
        pre = ["SET time_zone = '+00:00'"]
        target = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.string()),
                            ("c", pa.decimal128(12, 2)), ("d", pa.timestamp("us")),
                            ("e", pa.timestamp("us", tz="UTC"))])
    else:
        query, pre, target = "SELECT * FROM t", None, None
    n = 0
    writer: pq.ParquetWriter | None = None
    with Timer(server_pid, extra=load) as t:
        reader = cx.read_sql(url, query, return_type="arrow_stream", protocol="binary",
                             pre_execution_query=pre, batch_size=CX_BATCH_ROWS)
        for batch in reader:
            if target is not None:
                batch = pa.RecordBatch.from_arrays(
                    [pc.cast(batch.column(i), target.field(i).type) for i in range(batch.num_columns)],
                    schema=target)
            if writer is None:
                writer = pq.ParquetWriter(out, batch.schema)
            writer.write_batch(batch)
            n += batch.num_rows
        assert writer is not None
        writer.close()
    return n, t.m, str(pq.read_schema(out)).replace("\n", ", ")


def cx_url(server: Any) -> str:
    """connectorx's URL of the ``bench`` database as the CDC user (an Oracle MySQL test server's CDC URL
    carries options connectorx does not take)."""
    from airflow_provider_mysqlcdc.testing.server_process import CDC_PASSWORD, CDC_USER

    return f"mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{server.port}/bench"


def load_with_baseline(server: Any, rows: int, work: Path) -> tuple[int, Measure, float]:
    """Load ``bench.t`` (``rows`` rows) on a started server of either flavor, wait for it to settle, and
    take the type-exact connectorx baseline: (server pid, the baseline's measurement, the table's MB as
    Arrow)."""
    assert server.process is not None
    pid = server.process.pid
    load_table(server, rows)
    settle(pid)
    n, raw, mb = baseline_read(server, work)
    assert n == rows, (n, rows)
    return pid, raw, mb


def baseline_read(server: Any, work: Path, load: dict[str, int] | None = None) -> tuple[int, Measure, float]:
    """One type-exact connectorx read of ``bench.t`` into Parquet (deleted after): rows, measurement, MB as
    Arrow in memory (one MB for both sides of a ratio)."""
    assert server.process is not None
    exact = work / "exact.parquet"
    n, raw, _ = raw_read(cx_url(server), exact, server.process.pid, exact=True, load=load)
    mb = pq.read_table(exact).nbytes / 2**20
    exact.unlink()
    return n, raw, mb


BASELINE_WHAT = "raw read: connectorx, 1 connection, `SELECT *` -> Parquet, type-exact"


def baseline_fields(rows: int, raw: Measure, data_mb: float, what: str = BASELINE_WHAT) -> dict[str, Any]:
    """A ``report.Figure``'s baseline fields for a read of ``rows`` rows (``data_mb`` as Arrow)."""
    return {"baseline_what": what, "baseline": rows / raw.wall,
            "baseline_detail": f"{data_mb / raw.wall:,.1f} MB/s", "baseline_cpu": raw}


# --- the engine's per-chunk work without Spark --------------------------------------------------------------


def engine_without_spark(cfg: dict[str, Any], work: Path) -> tuple[int, Measure]:
    """Plan + what each Spark task does (``write_chunk``: chunk read -> versioned Parquet), one chunk after
    another in this process, without Spark and without chunk store commits: the engine's own cost."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
    from airflow_provider_mysqlcdc.spark.snapshot.writer import write_chunk

    run_dir = work / "engine"
    run_dir.mkdir()
    options = SnapshotOptions(mysql_url=cfg["mysql_url"], password_file=cfg["password_file"], table=TABLE,
                              output=str(run_dir / "out"), chunk_store=str(run_dir / "chunks.db"))
    with ChunkStore(options.store_url()) as store, Timer(cfg["server_pid"]) as t:
        plan_tables(options.settings(), store, [TABLE], chunk_size=cfg["chunk_size"])
        job = ChunkGroupJob.load(options, store)
        rows = sum(write_chunk(job, c, options.reader_slot_base).rows for c in job.chunk_ids)
    shutil.rmtree(run_dir, ignore_errors=True)
    return rows, t.m


# --- the snapshot phase on Spark (runs in a child process: one fresh JVM per parallelism) -------------------


def spark_child(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables

    p, server_pid, rows = cfg["parallelism"], cfg["server_pid"], cfg["rows"]
    # load generators (a concurrent writer): their CPU is counted apart, not as the client's
    load = {name: int(pid) for name, pid in cfg.get("load_pids", {}).items()}
    # The suite runs the job on a standalone cluster it started: its executors are not this process's
    # descendants, so the client tree is rooted at the suite process (``client_root``).
    master, root = cfg.get("master") or f"local[{p}]", cfg.get("client_root")
    label = cfg.get("label") or master
    out: dict[str, Any] = {"parallelism": p}

    def say(msg: str) -> None:
        print(f"[{label}] {msg}", file=sys.stderr, flush=True)

    with ChunkStore(cfg["store"]) as store:
        from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
        password = Path(cfg["password_file"]).read_text().strip()
        settings = MySQLSettings.from_url(cfg["mysql_url"], password=password)
        with Timer(server_pid, root, extra=load) as t_plan:
            plan = plan_tables(settings, store, [TABLE], chunk_size=cfg["chunk_size"])[0]
        out["chunks"] = len(plan.chunks)
        say(f"planned {len(plan.chunks)} chunks in {t_plan.m.wall:.1f}s")

    with Timer(server_pid, root, extra=load) as t_start:
        from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
        from airflow_provider_mysqlcdc.spark.session import build_session
        from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group

        spark = build_session(master=master, app_name=f"mysqlcdc snapshot bench {label}",
                              conf={"spark.ui.enabled": "false", **cfg.get("spark_conf", {})})
        spark.sparkContext.setLogLevel("WARN")
        # A trivial job that starts the Python workers too.
        assert spark.sparkContext.parallelize(range(p), p).map(lambda x: x + 1).sum() == p * (p + 1) // 2
    say(f"Spark started in {t_start.m.wall:.1f}s")
    try:
        options = SnapshotOptions(mysql_url=cfg["mysql_url"], password_file=cfg["password_file"], table=TABLE,
                                  output=cfg["output"], chunk_store=cfg["store"])
        with Timer(server_pid, root, extra=load) as t_job:
            result = run_chunk_group(spark, options, progress=say, raise_on_failure=True)
        out["spark_reported_seconds"] = result.seconds
        out["spark_version"] = spark.version
    finally:
        spark.stop()

    # Verify: every chunk committed, committed rows == table rows == rows in the manifest's Parquet files.
    table = TableId.parse(TABLE)
    with ChunkStore(cfg["store"]) as store:
        states = store.chunks(TABLE, plan.generation)
    committed = sum(s.rows or 0 for s in states if s.status == COMMITTED)
    assert all(s.status == COMMITTED for s in states), [s.status for s in states if s.status != COMMITTED][:5]
    manifest = read_snapshot_manifest(cfg["output"], table)
    assert manifest is not None
    files = [f for fs in manifest.chunk_files().values() for f in fs]
    parquet_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert result.rows == committed == parquet_rows == rows, (result.rows, committed, parquet_rows, rows)
    # what each chunk's read did: its read view mode and the binlog events its backfill applied
    out["read_view_modes"] = sorted({str(s.extra.get("read_view_mode")) for s in states})
    out["backfill_events"] = sum(int(s.extra.get("backfill_events") or 0) for s in states)
    out["chunks_with_backfill"] = sum(1 for s in states if s.extra.get("backfill_events"))
    out["chunk_seconds"] = {k: sum(float(s.timings.get(k) or 0.0) for s in states)  # read_s, backfill_s, ...
                            for k in sorted({k for s in states for k, v in s.timings.items()
                                             if isinstance(v, int | float)})}
    out.update(rows=committed, files=len(files), output_mb=dir_mb(Path(cfg["output"])),
               output_schema=str(pq.read_schema(files[0])).replace("\n", ", "),
               plan=asdict(t_plan.m), startup=asdict(t_start.m), job=asdict(t_job.m))
    Path(cfg["result"]).write_text(json.dumps(out))
    return 0


def run_spark(work: Path, cfg: dict[str, Any], parallelism: int) -> dict[str, Any]:
    run_dir = work / f"spark-{parallelism}"
    run_dir.mkdir()
    cfg = {**cfg, "parallelism": parallelism, "store": str(run_dir / "chunks.db"),
           "output": str(run_dir / "out"), "result": str(run_dir / "result.json")}
    cfg_path = run_dir / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    child = [sys.executable, str(Path(__file__).resolve()), "--spark-child", str(cfg_path)]
    subprocess.run(child, check=True)
    result = json.loads(Path(cfg["result"]).read_text())
    shutil.rmtree(run_dir / "out", ignore_errors=True)
    for key in ("plan", "startup", "job"):
        result[key] = Measure(**result[key])
    return result


# --- main ---------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--chunk-size", type=int, default=32768)
    parser.add_argument("--parallelism", default="1,2", help="Spark local[n] runs, e.g. 1,2")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--spark-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spark_child:
        return spark_child(args.spark_child)

    import connectorx
    import pyspark

    from airflow_provider_mysqlcdc.testing.mariadb import CDC_PASSWORD, MariaDBServer

    parallelisms = [int(p) for p in args.parallelism.split(",") if p.strip()]
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-snapshot-bench-"))
    try:
        with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
            assert server.process is not None
            server_pid = server.process.pid
            with server.admin() as conn, conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                db_version = cur.fetchone()[0]
            print(f"loading {args.rows:,} rows ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            load_table(server, args.rows)
            settle(server_pid)
            print(f"loaded in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)

            cx_url = server.cdc_url.rstrip("/") + "/bench"
            print("baseline: connectorx ...", file=sys.stderr, flush=True)
            n_plain, m_plain, schema_plain = raw_read(cx_url, work / "plain.parquet", server_pid, exact=False)
            n_exact, m_exact, schema_exact = raw_read(cx_url, work / "exact.parquet", server_pid, exact=True)
            assert n_plain == n_exact == args.rows, (n_plain, n_exact, args.rows)
            exact_mb = (work / "exact.parquet").stat().st_size / 2**20

            password_file = work / "mysql.password"
            password_file.write_text(CDC_PASSWORD + "\n")
            password_file.chmod(0o600)
            port = server.cdc_url.rsplit(":", 1)[1].strip("/")
            cfg = {"mysql_url": f"mysql://cdc@127.0.0.1:{port}/", "password_file": str(password_file),
                   "server_pid": server_pid, "rows": args.rows, "chunk_size": args.chunk_size}
            print("engine without Spark ...", file=sys.stderr, flush=True)
            n_engine, m_engine = engine_without_spark(cfg, work)
            assert n_engine == args.rows, (n_engine, args.rows)
            spark_runs = []
            for p in parallelisms:
                print(f"snapshot phase on Spark local[{p}] ...", file=sys.stderr, flush=True)
                spark_runs.append(run_spark(work, cfg, p))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = args.rows
    base = rows / m_exact.wall
    figures: dict[str, Any] = {
        "rows": rows, "chunk_size": args.chunk_size, "machine": machine(), "mariadb": db_version,
        "connectorx": connectorx.__version__, "pyspark": pyspark.__version__, "pyarrow": pa.__version__,
        "raw_plain": {**asdict(m_plain), "rows_s": rows / m_plain.wall, "schema": schema_plain},
        "raw_exact": {**asdict(m_exact), "rows_s": base, "schema": schema_exact, "output_mb": exact_mb},
    }

    def line(label: str, m: Measure, rate: bool = True) -> str:
        if not rate:
            return f"| {label} | {m.wall:.1f} s | - | - | - | {m.shares()} |"
        r = rows / m.wall
        return f"| {label} | {m.wall:.1f} s | {r:,.0f} | {base:,.0f} | {r / base:.2f} | {m.shares()} |"

    print(f"\n### Snapshot phase vs raw read ({rows:,}-row 6-column table; {machine()}; MariaDB {db_version} "
          f"on the same cores, buffer pool 1G)\n")
    print("| measurement | time | rows/s | baseline rows/s (same run) | ratio | CPU share |")
    print("|---|---|---|---|---|---|")
    print(line(f"raw read: connectorx {connectorx.__version__}, 1 connection, `SELECT *` -> Parquet "
               "(connectorx types: DECIMAL decimal128(38,10), TIMESTAMP naive session-zone)", m_plain))
    print(line("**baseline** raw read, type-exact: DECIMAL via CHAR -> decimal128(12,2), "
               "TIMESTAMP UTC instant", m_exact))
    print(line("engine alone, no Spark: plan + each chunk read and written to Parquet (the Spark task's "
               "`write_chunk`) one after another in one process, no commits", m_engine))
    figures["engine_without_spark"] = {**asdict(m_engine), "rows_s": rows / m_engine.wall}
    for run in spark_runs:
        p, n_chunks = run["parallelism"], run["chunks"]
        plan, startup, job = run["plan"], run["startup"], run["job"]
        print(line(f"local[{p}]: Spark start-up (pyspark import, JVM, session, trivial Python job)", startup,
                   rate=False))
        print(line(f"local[{p}]: plan ({n_chunks} chunks of {args.chunk_size})", plan, rate=False))
        print(line(f"local[{p}]: Spark snapshot job ({run['files']} Parquet files, chunk store commits)",
                   job))
        print(line(f"**local[{p}]: snapshot phase = plan + job (without start-up)**", plan + job))
        print(line(f"local[{p}]: snapshot phase with start-up", plan + startup + job))
        figures[f"local_{p}"] = {
            "chunks": n_chunks, "files": run["files"], "output_mb": run["output_mb"],
            "output_schema": run["output_schema"], "spark_reported_seconds": run["spark_reported_seconds"],
            "plan": asdict(plan), "startup": asdict(startup), "job": asdict(job),
            "job_rows_s": rows / job.wall, "phase_rows_s": rows / (plan + job).wall,
            "phase_with_startup_rows_s": rows / (plan + startup + job).wall,
            "ratio_phase": rows / (plan + job).wall / base,
            "ratio_phase_with_startup": rows / (plan + startup + job).wall / base,
            "startup_share_of_phase": startup.wall / (plan + startup + job).wall,
        }
    print(f"\nrow counts verified: {rows:,} rows read by each raw read, committed in the chunk store and in "
          "the snapshot Parquet files of each Spark run")
    print(f"Parquet size: raw type-exact {exact_mb:,.0f} MB; snapshot "
          + ", ".join(f"local[{r['parallelism']}] {r['output_mb']:,.0f} MB" for r in spark_runs)
          + f". Peak client RSS: raw {m_exact.peak_rss_mb:,.0f} MB; Spark "
          + ", ".join(f"local[{r['parallelism']}] {r['job'].peak_rss_mb:,.0f} MB" for r in spark_runs))
    for run in spark_runs:
        kinds = run["job"].client_by_kind or {}
        print(f"client CPU of the local[{run['parallelism']}] snapshot job: "
              + ", ".join(f"{k} {v:,.0f} s" for k, v in kinds.items()) + f" (wall {run['job'].wall:,.0f} s)")
    print(f"versions: connectorx {connectorx.__version__}, pyspark {pyspark.__version__}, "
          f"pyarrow {pa.__version__}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
