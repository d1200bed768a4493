"""Sizing figures for docs/operations.md#sizing: Spark memory and cores of a snapshot chunk group, and the
output's growth under a continuous stream, each through the real ``mysqlcdc`` command.

On a throwaway MariaDB (a free loopback port, its own datadir, the binlog as CDC needs it, a 2 GB buffer pool
that holds the tables):

- **snapshot**: three tables of ``--rows`` rows (narrow, medium and wide: about 130 B, 370 B and 2.2 KB a
  row as Arrow). Each run is ``mysqlcdc plan`` into a fresh chunk store, then ``mysqlcdc snapshot --master
  local[n] --json`` in a child process whose tree is sampled every 0.25 s: RSS of the CLI's Python (the
  driver's Python side), of the JVM (the driver, and in local mode the executors' scheduler) and of each
  Python worker (where a chunk is read and written: the executor's memory), CPU of each and of ``mariadbd``.
  Runs: each table alone on ``local[1]`` at every ``--chunk-sizes`` (memory against chunk size and row
  width), then the three tables in one chunk group on ``local[1]``, ``local[2]``, ``local[4]`` (throughput
  against concurrent reads), and on ``local[2]`` at the larger chunk sizes. Rates from the chunk store:
  per busy task (rows over the chunks' own time in their tasks), steady (a table's median full chunk: a warm
  worker) and of the group (rows over the time from the chunks marked running to the last commit: the
  Python workers' start included, the Spark start not). Each run first waits until the rest of the machine
  is quiet (``--quiet-timeout``); the table shows how busy it was during the run ("other CPU share").
- **stream**: three small tables take a steady write load from this process (single-row autocommit
  transactions, ``--rate`` a second, 30% inserts, 55% updates, 15% deletes, random generator seeded with
  ``--seed``). For each ``--triggers`` interval: plan and snapshot the tables into a fresh output, run
  ``mysqlcdc stream --interval 'T seconds'`` for ``--stream-minutes`` and measure bytes and files under the
  output (by part: snapshot, changelog data, changelog log and markers, mirror data, mirror log) and the Spark
  checkpoint every minute; then stop the stream (SIGINT) and run ``mysqlcdc gc --retention 1m`` (the CLI keeps
  the 15 minute grace, so it reclaims what is older than that), and after it the same collector with the grace
  lowered to zero (as ``bench/soak.py`` and the test suite do: what the CLI reclaims once 15 minutes passed).

CPU shares: 100% = one core. Writes ``bench/results/sizing.{md,json}`` and prints the markdown. Usage:
``python bench/sizing.py [--only snapshot,stream] [--rows 300000] [--chunk-sizes 32768,131072]
[--triggers 5,30] [--stream-minutes 7] [--rate 50] [--seed 1]`` (the defaults take about 25 minutes on
a quiet 2-core machine: not part of ``make bench``). ``--keep DIR`` keeps the outputs, chunk stores and logs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any, Self

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import machine, machine_busy, process_cpu, settle

REPO = Path(__file__).resolve().parent.parent
MYSQLCDC = str(Path(sys.executable).parent / "mysqlcdc")
RESULTS = REPO / "bench" / "results"
MB = 2**20


def say(msg: str) -> None:
    print(f"[sizing {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- sampling a process tree --------------------------------------------------------------------------------


@dataclass
class TreeSample:
    t: float
    rss: dict[str, int]  # kind -> RSS bytes summed over its processes
    worker_max_rss: int  # the largest single Python worker
    cpu: dict[str, float]  # kind -> CPU seconds so far (processes seen so far, at their last sighting)
    server_cpu: float
    busy: float  # the machine's busy CPU seconds so far


def _kind(proc: psutil.Process, root_pid: int) -> str:
    if proc.pid == root_pid:
        return "cli"
    name = proc.name()
    if name == "java":
        return "jvm"
    try:
        parents = {p.name() for p in proc.parents()}
    except psutil.Error:
        parents = set()
    return "workers" if "java" in parents else "other children"


class TreeSampler:
    """Samples RSS and CPU of the process tree under ``root_pid`` (by kind) every ``period`` seconds."""

    def __init__(self, root_pid: int, server_pid: int, period: float = 0.25) -> None:
        self.root_pid, self.server_pid, self.period = root_pid, server_pid, period
        self.samples: list[TreeSample] = []
        self._cpu_seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> TreeSample | None:
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        rss: dict[str, int] = {}
        worker_max = 0
        for proc in procs:
            try:
                kind = _kind(proc, self.root_pid)
                with proc.oneshot():
                    mem = proc.memory_info().rss
                    times = proc.cpu_times()
            except psutil.Error:
                continue
            rss[kind] = rss.get(kind, 0) + mem
            if kind == "workers":
                worker_max = max(worker_max, mem)
            self._cpu_seen[proc.pid] = (kind, times.user + times.system)
        cpu: dict[str, float] = {}
        for kind, seconds in self._cpu_seen.values():
            cpu[kind] = cpu.get(kind, 0.0) + seconds
        s = TreeSample(time.time(), rss, worker_max, cpu, process_cpu(self.server_pid), machine_busy())
        self.samples.append(s)
        return s

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def peak(self, kind: str) -> int:
        return max((s.rss.get(kind, 0) for s in self.samples), default=0)

    def peak_total(self) -> int:
        return max((sum(s.rss.values()) for s in self.samples), default=0)

    def peak_worker(self) -> int:
        return max((s.worker_max_rss for s in self.samples), default=0)

    def at(self, t: float) -> TreeSample:
        """The sample nearest to time ``t`` (seconds since the epoch)."""
        return min(self.samples, key=lambda s: abs(s.t - t))


# --- the server and its tables ------------------------------------------------------------------------------


def start_server() -> Any:
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    # the test servers' options (binlog ROW/FULL/FULL, server_id), on a free port; a buffer pool that holds
    # the tables, so a snapshot reads memory, not this machine's disk
    return MariaDBServer(options={"innodb-buffer-pool-size": "2G"}).start()


SNAPSHOT_TABLES = {
    "narrow": (("CREATE TABLE sz.narrow (id BIGINT PRIMARY KEY, a INT NOT NULL, b INT NOT NULL, c DOUBLE, "
                "d DATETIME)"),
               ("INSERT INTO sz.narrow SELECT seq, seq % 1000, seq * 7, seq / 3, "
                "'2024-01-01' + INTERVAL seq SECOND FROM sz.seq_{lo}_to_{hi}")),
    "medium": (("CREATE TABLE sz.medium (id BIGINT PRIMARY KEY, customer INT NOT NULL, name VARCHAR(64), "
                "email VARCHAR(128), city VARCHAR(32), amount DECIMAL(12,2), status TINYINT, "
                "note VARCHAR(255), created DATETIME(6), updated TIMESTAMP(6) NULL)"),
               ("INSERT INTO sz.medium SELECT seq, seq % 5000, CONCAT('name ', MD5(seq)), "
                "CONCAT(SHA1(seq), '@example.com'), CONCAT('city-', seq % 300), seq / 100, seq % 5, "
                "CONCAT(MD5(seq + 1), ' ', SHA1(seq + 2), ' ', MD5(seq + 3)), "
                "'2024-01-01' + INTERVAL seq SECOND, '2024-06-01' + INTERVAL seq SECOND "
                "FROM sz.seq_{lo}_to_{hi}")),
    "wide": ("CREATE TABLE sz.wide (id BIGINT PRIMARY KEY, kind VARCHAR(16), created DATETIME, body TEXT)",
             "INSERT INTO sz.wide SELECT seq, CONCAT('k', seq % 20), '2024-01-01' + INTERVAL seq SECOND, "
             "CONCAT(" + ", ".join(f"SHA2(seq + {i}, 512)" for i in range(16)) + ") "
             "FROM sz.seq_{lo}_to_{hi}"),
}


def load_snapshot_tables(server: Any, rows: int) -> None:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE sz")
        for create, insert in SNAPSHOT_TABLES.values():
            cur.execute(create)
            for lo in range(1, rows + 1, 20_000):
                cur.execute(insert.format(lo=lo, hi=min(rows, lo + 19_999)))


# --- running the CLI ----------------------------------------------------------------------------------------


def cli_env(server: Any) -> dict[str, str]:
    from airflow_provider_mysqlcdc.testing.server_process import CDC_PASSWORD, CDC_USER

    env = dict(os.environ, MYSQLCDC_MYSQL_URL=f"mysql://{CDC_USER}@127.0.0.1:{server.port}/",
               MYSQLCDC_MYSQL_PASSWORD=CDC_PASSWORD)
    env.pop("MYSQLCDC_CHUNK_STORE_URL", None)
    return env


def run_cli(args: list[str], env: dict[str, str], log: Path | None = None) -> str:
    result = subprocess.run([MYSQLCDC, *args], env=env, capture_output=True, text=True, check=False)
    if log is not None:
        log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"mysqlcdc {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result.stdout


# --- snapshot: memory and cores per chunk group -------------------------------------------------------------


def _ts(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value)
    parsed = datetime.fromisoformat(text)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def read_window(store: Path) -> tuple[float, float, int, float]:
    """(chunks marked running, last table committed, rows, the chunks' own seconds summed) from the store:
    ``total_s`` of a chunk is its time in the Spark task (read view, SELECT, binlog check, Parquet), without
    Spark's and the Python worker's start."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT started_at, finished_at, row_count, timings_json FROM mysqlcdc_chunks "
                          "WHERE status = 'committed'").fetchall()
    starts = [_ts(r[0]) for r in rows if r[0] is not None]
    ends = [_ts(r[1]) for r in rows if r[1] is not None]
    busy = sum(float(json.loads(r[3] or "{}").get("total_s", 0.0)) for r in rows)
    return min(starts), max(ends), sum(int(r[2] or 0) for r in rows), busy


def steady_rates(store: Path) -> dict[str, dict[str, float]]:
    """Per table: the median seconds of its full chunks (``total_s``; a robust figure of a core that reads
    steadily, once its Python worker is warm), rows a second at that, and how much longer its slowest chunk
    took (the first chunk a fresh Python worker reads pays its imports and first connection)."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT table_name, row_count, timings_json FROM mysqlcdc_chunks "
                          "WHERE status = 'committed'").fetchall()
    out: dict[str, dict[str, float]] = {}
    for table in sorted({r[0] for r in rows}):
        chunks = [(int(r[1] or 0), float(json.loads(r[2] or "{}").get("total_s", 0.0)))
                  for r in rows if r[0] == table]
        full = max(n for n, _ in chunks)
        seconds = [t for n, t in chunks if n == full]
        if len(seconds) < 5:  # too few for a median to leave the warm-up out
            continue
        med = median(seconds)
        out[table.split(".", 1)[1]] = {"median_chunk_s": med, "rows_per_s": full / med if med else 0.0,
                                       "slowest_extra_s": max(seconds) - med, "chunks": len(seconds)}
    return out


def arrow_width(output: Path, table: str) -> tuple[float, float]:
    """(Arrow bytes per row in memory, Parquet bytes per row on disk) of a table's snapshot output."""
    import pyarrow.parquet as pq

    files = sorted((output / "sz" / table / "snapshot").rglob("*.parquet"))
    rows = nbytes = disk = 0
    for f in files:
        t = pq.read_table(f)
        rows += t.num_rows
        nbytes += t.nbytes
        disk += f.stat().st_size
    return (nbytes / rows, disk / rows) if rows else (0.0, 0.0)


@dataclass
class SnapshotRun:
    tables: list[str]
    master: str
    chunk_size: int
    chunks: int
    rows: int
    wall_s: float  # the whole command: Spark start to exit
    read_window_s: float  # the chunks marked running .. the last table committed (workers' start included)
    busy_s: float  # the chunks' own seconds in their tasks, summed (``read_window``)
    peak_cli_mb: float
    peak_jvm_mb: float
    peak_workers_mb: float  # all Python workers (the daemon and its forks) together
    peak_worker_mb: float  # the largest single worker
    peak_total_mb: float
    cpu_workers: float  # CPU seconds over the whole command (the workers' start included)
    cpu_jvm: float
    cpu_cli: float
    cpu_server: float
    cpu_other: float  # the rest of the machine over the whole command
    chunk_mb: float = 0.0  # Arrow size of the run's largest chunk
    steady: dict[str, dict[str, float]] = field(default_factory=dict)  # ``steady_rates``

    @property
    def rows_per_s(self) -> float:
        """The group's rate over its read window."""
        return self.rows / self.read_window_s if self.read_window_s else 0.0

    @property
    def rows_per_busy_s(self) -> float:
        """Rows a second of one task slot while it reads (chunk time only)."""
        return self.rows / self.busy_s if self.busy_s else 0.0


QUIET_TIMEOUT = [900.0]  # seconds a snapshot run waits for a quiet machine (``--quiet-timeout``)


def wait_quiet(server_pid: int, max_other: float = 0.25, timeout: float | None = None) -> float:
    """Wait (up to ``timeout``) until the rest of the machine uses less than ``max_other`` of a core over 5 s
    (another job on the same cores skews every figure); returns that share, logged when it stays above."""
    deadline = time.monotonic() + (QUIET_TIMEOUT[0] if timeout is None else timeout)
    me = psutil.Process()
    while True:
        busy0, server0 = machine_busy(), process_cpu(server_pid)
        mine0 = sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)] if p.pid != server_pid)
        time.sleep(5.0)
        mine1 = sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)] if p.pid != server_pid)
        other = max(0.0, machine_busy() - busy0 - (process_cpu(server_pid) - server0) - (mine1 - mine0)) / 5.0
        if other < max_other:
            return other
        if time.monotonic() > deadline:
            say(f"the machine stays busy ({other:.0%} of a core in other processes): measuring anyway")
            return other
        say(f"waiting for a quiet machine ({other:.0%} of a core in other processes)")
        time.sleep(25.0)


def snapshot_run(server: Any, work: Path, tables: list[str], master: str, chunk_size: int,
                 widths: dict[str, float], disk: dict[str, float], rows_per_table: int) -> SnapshotRun:
    env = cli_env(server)
    run_dir = Path(tempfile.mkdtemp(prefix="snap-", dir=work))
    store, output = run_dir / "chunks.db", run_dir / "out"
    names = ",".join(f"sz.{t}" for t in tables)
    run_cli(["plan", "--tables", names, "--chunk-size", str(chunk_size), "--chunk-store", str(store)], env)
    settle(server.process.pid)
    wait_quiet(server.process.pid)
    started = time.perf_counter()
    proc = subprocess.Popen([MYSQLCDC, "snapshot", "--tables", names, "--chunk-store", str(store), "--output",
                             str(output), "--master", master, "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with TreeSampler(proc.pid, server.process.pid) as sampler:
        out, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"mysqlcdc snapshot exited {proc.returncode}:\n{err[-3000:]}")
    result = json.loads(out)
    chunks = sum(len(t["chunks"]) for t in result["tables"])
    first, last, rows, busy = read_window(store)
    a, b = sampler.samples[0], sampler.samples[-1]
    ours = sum(b.cpu.values()) - sum(a.cpu.values())
    server_cpu = b.server_cpu - a.server_cpu
    for t in tables:
        if t not in widths:
            widths[t], disk[t] = arrow_width(output, t)
    chunk_mb = max(min(chunk_size, rows_per_table) * widths[t] for t in tables) / MB
    run = SnapshotRun(
        tables=tables, master=master, chunk_size=chunk_size, chunks=chunks, rows=rows, wall_s=wall,
        read_window_s=last - first, busy_s=busy, peak_cli_mb=sampler.peak("cli") / MB,
        peak_jvm_mb=sampler.peak("jvm") / MB, peak_workers_mb=sampler.peak("workers") / MB,
        peak_worker_mb=sampler.peak_worker() / MB, peak_total_mb=sampler.peak_total() / MB,
        cpu_workers=b.cpu.get("workers", 0.0) - a.cpu.get("workers", 0.0),
        cpu_jvm=b.cpu.get("jvm", 0.0) - a.cpu.get("jvm", 0.0),
        cpu_cli=b.cpu.get("cli", 0.0) - a.cpu.get("cli", 0.0),
        cpu_server=server_cpu, cpu_other=max(0.0, (b.busy - a.busy) - ours - server_cpu), chunk_mb=chunk_mb,
        steady=steady_rates(store))
    say(f"snapshot {names} {master} chunk {chunk_size}: {rows} rows in {run.read_window_s:.1f}s "
        f"({run.rows_per_s:,.0f} rows/s; {run.rows_per_busy_s:,.0f} per busy task), "
        f"peak worker {run.peak_worker_mb:.0f} MiB, "
        f"jvm {run.peak_jvm_mb:.0f} MiB, total {run.peak_total_mb:.0f} MiB")
    return run


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def snapshot_part(server: Any, work: Path, rows: int, chunk_sizes: list[int]) -> dict[str, Any]:
    say(f"loading three tables of {rows:,} rows")
    t = time.perf_counter()
    load_snapshot_tables(server, rows)
    say(f"loaded in {time.perf_counter() - t:.0f}s")
    settle(server.process.pid)
    widths: dict[str, float] = {}
    disk: dict[str, float] = {}
    runs: list[SnapshotRun] = []
    for table in SNAPSHOT_TABLES:
        for size in chunk_sizes:
            runs.append(snapshot_run(server, work, [table], "local[1]", size, widths, disk, rows))
    every = list(SNAPSHOT_TABLES)
    for master in ("local[1]", "local[2]", "local[4]"):
        runs.append(snapshot_run(server, work, every, master, chunk_sizes[0], widths, disk, rows))
    for size in chunk_sizes[1:]:
        runs.append(snapshot_run(server, work, every, "local[2]", size, widths, disk, rows))
    return {"rows_per_table": rows, "arrow_bytes_per_row": widths, "parquet_bytes_per_row": disk,
            "runs": [{**asdict(r), "rows_per_s": r.rows_per_s, "rows_per_busy_s": r.rows_per_busy_s}
                     for r in runs]}


def snapshot_markdown(part: dict[str, Any]) -> str:
    widths = part["arrow_bytes_per_row"]
    lines = [(f"### Snapshot: {part['rows_per_table']:,} rows per table "
              f"(Arrow bytes per row: " + ", ".join(f"{t} {w:,.0f}" for t, w in widths.items()) + ")"), "",
             ("| tables | master | chunk size | chunks | largest chunk as Arrow | rows/s per busy task | "
              "rows/s of the group (read window) | wall (s) | CPU-s per 100k rows: workers / server | "
              "JVM CPU-s (whole run) | other CPU share | peak RSS: CLI / JVM / largest worker / all "
              "workers / total (MiB) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in part["runs"]:
        per = 100_000 / max(1, r["rows"])
        lines.append(
            f"| {'+'.join(r['tables'])} | {r['master']} | {r['chunk_size']:,} | {r['chunks']} | "
            f"{r['chunk_mb']:,.0f} MiB | {r['rows_per_busy_s']:,.0f} | {r['rows_per_s']:,.0f} | "
            f"{r['wall_s']:.1f} | {r['cpu_workers'] * per:.2f} / {r['cpu_server'] * per:.2f} | "
            f"{r['cpu_jvm']:.1f} | {r['cpu_other'] / r['wall_s']:.0%} | {r['peak_cli_mb']:.0f} / "
            f"{r['peak_jvm_mb']:.0f} / {r['peak_worker_mb']:.0f} / {r['peak_workers_mb']:.0f} / "
            f"{r['peak_total_mb']:.0f} |")
    single = [r for r in part["runs"] if len(r["tables"]) == 1]
    a, b = fit([(r["chunk_mb"], r["peak_worker_mb"]) for r in single])
    part["worker_fit"] = {"base_mb": a, "mb_per_arrow_mb": b}
    lines += ["", ("Largest single worker's peak RSS against its chunk's Arrow size (local[1], one table a "
                   f"run, least squares): {a:.0f} MiB + {b:.2f} x chunk Arrow MiB."), "",
              ("Steady rate of one task (the median full chunk's time in its task; runs with at least 5 "
               "full chunks a table):"), "",
              ("| tables | master | chunk size | table | median chunk (s) | rows/s | "
               "slowest chunk's extra (s) |"),
              "|---|---|---|---|---|---|---|"]
    for r in part["runs"]:
        for table, st in r.get("steady", {}).items():
            lines.append(f"| {'+'.join(r['tables'])} | {r['master']} | {r['chunk_size']:,} | {table} | "
                         f"{st['median_chunk_s']:.3f} | {st['rows_per_s']:,.0f} | "
                         f"{st['slowest_extra_s']:.2f} |")
    return "\n".join(lines)


# --- stream: output growth ----------------------------------------------------------------------------------


STREAM_TABLES = {
    "orders": ("CREATE TABLE st.orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer INT NOT NULL, "
               "status TINYINT NOT NULL, amount DECIMAL(12,2) NOT NULL, created DATETIME(6) NOT NULL, "
               "updated TIMESTAMP(6) NULL)"),
    "customers": ("CREATE TABLE st.customers (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(64), "
                  "email VARCHAR(128), city VARCHAR(32), balance DECIMAL(14,2), note VARCHAR(255), "
                  "updated TIMESTAMP(6) NULL)"),
    "events": ("CREATE TABLE st.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, kind VARCHAR(16) NOT NULL, "
               "created DATETIME(6) NOT NULL, payload TEXT)"),
}
TABLE_WEIGHTS = {"orders": 0.5, "customers": 0.3, "events": 0.2}
OPS = (("insert", 0.30), ("update", 0.55), ("delete", 0.15))


def _values(rng: random.Random, table: str) -> tuple[str, tuple[Any, ...]]:
    """(INSERT column list and placeholders, values) for a new row of ``table``."""
    def text(n: int) -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))

    if table == "orders":
        return ("(customer, status, amount, created, updated) VALUES (%s, %s, %s, %s, NOW(6))",
                (rng.randrange(5000), rng.randrange(5), round(rng.uniform(1, 5000), 2),
                 datetime(2024, 1, 1) + timedelta(seconds=rng.randrange(10**7))))
    if table == "customers":
        return ("(name, email, city, balance, note, updated) VALUES (%s, %s, %s, %s, %s, NOW(6))",
                (text(20), text(24) + "@example.com", text(10), round(rng.uniform(0, 10**6), 2), text(80)))
    return ("(kind, created, payload) VALUES (%s, NOW(6), %s)", (f"k{rng.randrange(20)}", text(800)))


def load_stream_tables(server: Any, rows: int, seed: int) -> dict[str, list[int]]:
    rng = random.Random(seed)
    ids: dict[str, list[int]] = {}
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE st")
        for table, create in STREAM_TABLES.items():
            cur.execute(create)
            for lo in range(0, rows, 1000):
                batch = [_values(rng, table) for _ in range(min(1000, rows - lo))]
                sql = f"INSERT INTO st.{table} " + batch[0][0]
                cur.executemany(sql, [v for _, v in batch])
            cur.execute(f"SELECT id FROM st.{table}")
            ids[table] = [r[0] for r in cur.fetchall()]
    return ids


class Writer(threading.Thread):
    """Single-row autocommit transactions at ``rate`` a second, on schedule, from a seeded generator."""

    def __init__(self, server: Any, ids: dict[str, list[int]], rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.ids, self.rate = server, ids, rate
        self.rng = random.Random(seed)
        self.done = {op: 0 for op, _ in OPS}
        self.stop_event = threading.Event()
        self.started = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def _run(self) -> None:
        tables, weights = list(TABLE_WEIGHTS), list(TABLE_WEIGHTS.values())
        ops, op_weights = [o for o, _ in OPS], [w for _, w in OPS]
        with self.server.admin() as conn, conn.cursor() as cur:
            self.started = next_at = time.monotonic()
            while not self.stop_event.is_set():
                table = self.rng.choices(tables, weights)[0]
                op = self.rng.choices(ops, op_weights)[0]
                live = self.ids[table]
                if op != "insert" and len(live) < 100:
                    op = "insert"
                if op == "insert":
                    cols, values = _values(self.rng, table)
                    cur.execute(f"INSERT INTO st.{table} {cols}", values)
                    live.append(cur.lastrowid)
                elif op == "update":
                    key = live[self.rng.randrange(len(live))]
                    if table == "orders":
                        cur.execute("UPDATE st.orders SET status = %s, amount = %s, updated = NOW(6) "
                                    "WHERE id = %s",
                                    (self.rng.randrange(5), round(self.rng.uniform(1, 5000), 2), key))
                    elif table == "customers":
                        cur.execute("UPDATE st.customers SET balance = %s, updated = NOW(6) WHERE id = %s",
                                    (round(self.rng.uniform(0, 10**6), 2), key))
                    else:
                        cur.execute("UPDATE st.events SET kind = %s WHERE id = %s",
                                    (f"k{self.rng.randrange(20)}", key))
                else:
                    index = self.rng.randrange(len(live))
                    live[index], live[-1] = live[-1], live[index]
                    cur.execute(f"DELETE FROM st.{table} WHERE id = %s", (live.pop(),))
                self.done[op] += 1
                next_at += 1.0 / self.rate
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop_event.wait(delay)

    def achieved(self) -> float:
        return sum(self.done.values()) / max(1e-9, time.monotonic() - self.started)


PARTS = ("snapshot", "changelog data", "changelog log+markers", "mirror data", "mirror log+manifest", "other")


def output_usage(output: Path) -> dict[str, tuple[int, int]]:
    """part -> (bytes, files) under the output root."""
    usage = {p: [0, 0] for p in PARTS}
    for path in output.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(output).parts
        part = "other"
        if len(rel) >= 4:
            area, rest = rel[2], rel[3]
            if area == "snapshot":
                part = "snapshot"
            elif area == "changelog":
                part = "changelog data" if rest.startswith("batch=") else "changelog log+markers"
            elif area == "mirror":
                part = "mirror data" if rest.startswith("chunk=") else "mirror log+manifest"
        try:
            size = path.stat().st_size
        except OSError:
            continue
        usage[part][0] += size
        usage[part][1] += 1
    return {p: (b, f) for p, (b, f) in usage.items()}


def tree_usage(path: Path) -> tuple[int, int]:
    total = files = 0
    for p in path.rglob("*"):
        if p.is_file():
            try:
                total += p.stat().st_size
            except OSError:
                continue
            files += 1
    return total, files


def committed_batches(output: Path) -> int:
    return len({p.name for p in output.glob("st/*/changelog/_committed/batch=*.json")})


@dataclass
class StreamMinute:
    minute: float
    usage: dict[str, tuple[int, int]]
    checkpoint: tuple[int, int]
    batches: int  # distinct batch ids with a marker in any table
    writes: int
    stream_rss_mb: float
    stream_cpu: float
    server_cpu: float


@dataclass
class StreamRun:
    trigger_s: int
    minutes: list[StreamMinute] = field(default_factory=list)
    after_stop: dict[str, tuple[int, int]] = field(default_factory=dict)
    gc_cli: dict[str, Any] = field(default_factory=dict)
    after_gc_cli: dict[str, tuple[int, int]] = field(default_factory=dict)
    gc_no_grace: dict[str, Any] = field(default_factory=dict)
    after_gc_no_grace: dict[str, tuple[int, int]] = field(default_factory=dict)
    peak_stream_rss_mb: float = 0.0
    write_rate: float = 0.0
    exit_code: int | None = None
    batch_seconds: list[float] = field(default_factory=list)  # as the stream logs them ("batch N: ... in Xs")


def stream_run(server: Any, work: Path, writer: Writer, trigger: int, minutes: float) -> StreamRun:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.gc.collector import collect_garbage
    from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention

    env = cli_env(server)
    root = work / f"stream-{trigger}s"
    output, checkpoint = root / "out", root / "checkpoint"
    output.mkdir(parents=True)
    store = output / "_mysqlcdc_chunks.db"
    run_cli(["plan", "--tables", "st.*", "--chunk-store", str(store)], env)
    run_cli(["snapshot", "--tables", "st.*", "--output", str(output), "--master", "local[2]"], env)
    say(f"stream, trigger {trigger}s: snapshot done, streaming for {minutes:g} minutes")
    log = (root / "stream.log").open("w")
    proc = subprocess.Popen([MYSQLCDC, "stream", "--tables", "st.*", "--output", str(output), "--checkpoint",
                             str(checkpoint), "--interval", f"{trigger} seconds", "--master", "local[2]"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    run = StreamRun(trigger)
    t0 = time.monotonic()
    writes0 = sum(writer.done.values())
    with TreeSampler(proc.pid, server.process.pid, period=1.0) as sampler:
        for minute in range(int(minutes) + 1):
            wait = t0 + 60 * minute - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if proc.poll() is not None:
                raise RuntimeError(f"mysqlcdc stream exited {proc.returncode}: see {root / 'stream.log'}")
            s = sampler.samples[-1] if sampler.samples else None
            m = StreamMinute(minute, output_usage(output), tree_usage(checkpoint), committed_batches(output),
                             sum(writer.done.values()) - writes0, sum(s.rss.values()) / MB if s else 0.0,
                             sum(s.cpu.values()) if s else 0.0, process_cpu(server.process.pid))
            run.minutes.append(m)
            total = sum(b for b, _ in m.usage.values())
            files = sum(f for _, f in m.usage.values())
            say(f"  minute {minute}: output {total / MB:.1f} MiB in {files} files, {m.batches} batches, "
                f"stream RSS {m.stream_rss_mb:.0f} MiB")
        run.peak_stream_rss_mb = sampler.peak_total() / MB
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout=60)
    log.close()
    run.exit_code = proc.returncode
    logged = (root / "stream.log").read_text()
    run.batch_seconds = [float(m.group(1))
                         for m in re.finditer(r"^batch \d+: .* in ([0-9.]+)s$", logged, re.MULTILINE)]
    run.write_rate = writer.achieved()
    run.after_stop = output_usage(output)
    gc_out = run_cli(["gc", "--output", str(output), "--retention", "1m", "--json"], env)
    run.gc_cli = json.loads(gc_out)["run"]
    run.after_gc_cli = output_usage(output)
    with ChunkStore(str(store)) as chunk_store:  # the same collector, the 15 minute grace lowered to zero
        no_grace = Retention(timedelta(seconds=1), min_grace=timedelta(0))
        gc = collect_garbage(str(output), chunk_store, no_grace)
    run.gc_no_grace = gc.as_dict()
    run.after_gc_no_grace = output_usage(output)
    return run


def stream_part(server: Any, work: Path, triggers: list[int], minutes: float, rate: float, seed: int,
                rows: int) -> dict[str, Any]:
    say(f"loading three stream tables of {rows:,} rows")
    ids = load_stream_tables(server, rows, seed)
    writer = Writer(server, ids, rate, seed)
    writer.start()
    runs = []
    try:
        for trigger in triggers:
            runs.append(stream_run(server, work, writer, trigger, minutes))
            if writer.error:
                raise RuntimeError(f"the writer failed: {writer.error!r}")
    finally:
        writer.stop_event.set()
        writer.join()
    return {"rate": rate, "seed": seed, "rows_per_table": rows, "minutes": minutes,
            "writes": writer.done, "runs": [asdict(r) for r in runs]}


def window(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The minutes growth is measured between: minute 1 to the last (minute 0 holds the snapshot, before the
    first batch's catch-up), or from minute 0 in a run too short for that."""
    minutes = run["minutes"]
    return (minutes[1] if len(minutes) > 2 else minutes[0]), minutes[-1]


def _per_hour(run: dict[str, Any], part: str | None, files: bool = False) -> float:
    """Growth per hour from minute 1 to the last minute (minute 0 holds the snapshot and the first batch)."""
    first, last = window(run)
    index = 1 if files else 0

    def value(m: dict[str, Any]) -> float:
        usage = m["usage"]
        return sum(v[index] for k, v in usage.items() if part is None or k == part)

    return (value(last) - value(first)) * 60 / (last["minute"] - first["minute"])


def stream_markdown(part: dict[str, Any]) -> str:
    lines = [(f"### Stream: {part['rate']:g} single-row transactions/s on three tables of "
              f"{part['rows_per_table']:,} rows (seed {part['seed']}), {part['minutes']:g} minutes per "
              "trigger, growth from minute 1 to the last, extrapolated to an hour"), "",
             ("| trigger | batches/h | median batch (s) | output MiB/h | files/h | changelog data MiB/h | "
              "changelog log+markers MiB/h | mirror data MiB/h | mirror log MiB/h | checkpoint at end "
              "(KiB, files) | stream peak RSS MiB | stream CPU share | server CPU share (with the writes) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in part["runs"]:
        first, last = window(run)
        span = (last["minute"] - first["minute"]) * 60
        batches = (last["batches"] - first["batches"]) * 3600 / span

        def mb(part_name: str | None, run: dict[str, Any] = run) -> float:
            return _per_hour(run, part_name) / MB

        lines.append(
            f"| {run['trigger_s']} s | {batches:,.0f} | {median(run['batch_seconds'] or [0]):.1f} | "
            f"{mb(None):,.1f} | {_per_hour(run, None, True):,.0f} | "
            f"{mb('changelog data'):,.1f} | {mb('changelog log+markers'):,.1f} | {mb('mirror data'):,.1f} | "
            f"{mb('mirror log+manifest'):,.1f} | "
            f"{last['checkpoint'][0] / 1024:.0f}, {last['checkpoint'][1]} | "
            f"{run['peak_stream_rss_mb']:,.0f} | "
            f"{(last['stream_cpu'] - first['stream_cpu']) / span:.0%} | "
            f"{(last['server_cpu'] - first['server_cpu']) / span:.0%} |")
    lines += ["", ("| trigger | output after stop (MiB, files) | `mysqlcdc gc --retention 1m` deleted | "
                   "collector, grace 0, deleted | left (MiB, files) |"), "|---|---|---|---|---|"]
    for run in part["runs"]:
        def tot(u: dict[str, Any]) -> str:
            return f"{sum(v[0] for v in u.values()) / MB:,.1f} MiB, {sum(v[1] for v in u.values()):,}"

        def deleted(gc: dict[str, Any]) -> str:
            return f"{gc.get('files', 0):,} files, {gc.get('bytes', 0) / MB:,.1f} MiB"

        lines.append(f"| {run['trigger_s']} s | {tot(run['after_stop'])} | {deleted(run['gc_cli'])} | "
                     f"{deleted(run['gc_no_grace'])} | {tot(run['after_gc_no_grace'])} |")
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="snapshot,stream",
                        help="snapshot, stream or both (comma-separated)")
    parser.add_argument("--rows", type=int, default=300_000, help="rows per snapshot table")
    parser.add_argument("--chunk-sizes", default="32768,131072", help="chunk sizes, the default first")
    parser.add_argument("--triggers", default="5,30", help="stream trigger intervals, seconds")
    parser.add_argument("--stream-minutes", type=float, default=7.0)
    parser.add_argument("--stream-rows", type=int, default=20_000, help="rows per stream table at the start")
    parser.add_argument("--rate", type=float, default=50.0, help="write transactions per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quiet-timeout", type=float, default=900.0,
                        help="seconds each snapshot run waits for the rest of the machine to go quiet")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (outputs, logs); default: a "
                        "temporary directory, removed")
    args = parser.parse_args()
    only = {p.strip() for p in args.only.split(",")}
    QUIET_TIMEOUT[0] = args.quiet_timeout
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results: dict[str, Any] = {"machine": machine(), "started": started, "args": vars(args)}
    md = [f"## Sizing ({results['started']}, {results['machine']})"]
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-sizing-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        server = start_server()
        say(f"MariaDB on 127.0.0.1:{server.port}")
        try:
            if "snapshot" in only:
                results["snapshot"] = snapshot_part(server, work, args.rows,
                                                    [int(c) for c in args.chunk_sizes.split(",")])
                (RESULTS / "sizing.json").write_text(json.dumps(results, indent=2, default=str))
                md.append(snapshot_markdown(results["snapshot"]))
            if "stream" in only:
                results["stream"] = stream_part(server, work, [int(t) for t in args.triggers.split(",")],
                                                args.stream_minutes, args.rate, args.seed, args.stream_rows)
                (RESULTS / "sizing.json").write_text(json.dumps(results, indent=2, default=str))
                md.append(stream_markdown(results["stream"]))
        finally:
            server.stop()
    text = "\n\n".join(md) + "\n"
    (RESULTS / "sizing.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS / "sizing.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
