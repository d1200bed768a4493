"""Chunk planning time against one full ordered key scan measured in the same run, on a throwaway MariaDB.

Tables (default 10M rows each, ``--rows``):

- ``bench.ints``: ``id BIGINT`` primary key, dense: the *even* split (arithmetic);
- ``bench.strs``: ``k VARCHAR(64) utf8mb4_general_ci`` primary key (random hex behind mixed-case prefixes):
  the *uneven* split walking the primary key; and ``u VARCHAR(64) utf8mb4_general_ci``, no index, every key
  twice in two spellings the collation calls equal ('Key-..' / 'KEY-..'), 2% NULL, planned as a configured
  ``chunk_key``: the uneven split by one ordered pass.

Figures: the planner (``plan_table``: binlog position, schema, row estimate, boundaries), the old uneven
algorithm (one ``LIMIT 1 OFFSET`` query per chunk, equality of keys by a sort-key query per boundary; frozen
below) on the same tables, the one ordered pass forced on the primary key (what a scan-only planner would
cost), and the baseline of each key: ``SELECT key ... ORDER BY key`` streamed through pymysql's unbuffered
cursor, to the last row. The old algorithm needs a full sort per chunk on the unindexed key (quadratic): it is
measured on ``--old-rows`` rows (a copy of the table's first rows) next to the new planner and the baseline on
that copy, and extrapolated.

CPU share (100% = one core): client = this process, server = the mariadbd process, other = the rest of the
machine's busy CPU (other work on the same 2 cores skews the figures: look at it before trusting a ratio).
Prints one markdown table. Usage: ``python bench/planning.py [--rows 10000000] [--chunk-size 8096]
[--old-rows 300000] [--json FILE]``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pymysql.cursors

from airflow_provider_mysqlcdc.engine.chunks import planner
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.chunks.planner import plan_table
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ holds the reference
from tests.support.reference_planner import old_uneven_boundaries

try:
    import psutil
except ImportError:  # /proc instead
    psutil = None


# --- the old uneven split, frozen for comparison ------------------------------------------------------------


# --- CPU, memory and wall time ------------------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    if psutil is not None:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_cpu() -> float:
    """Busy CPU seconds of the whole machine (all cores)."""
    if psutil is not None:
        t = psutil.cpu_times()
        return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(p) for p in parts[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rss_mb() -> float:
    if psutil is not None:
        return psutil.Process().memory_info().rss / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Measure:
    wall: float = 0.0
    client: float = 0.0  # CPU seconds of this process
    server: float = 0.0  # CPU seconds of mariadbd
    other: float = 0.0  # CPU seconds of everything else on the machine
    rss_growth_mb: float = 0.0  # peak RSS of this process during the measurement, above its RSS before

    def shares(self) -> str:
        wall = max(self.wall, 1e-9)
        return f"{self.client / wall:.0%} / {self.server / wall:.0%} / {self.other / wall:.0%}"


@contextmanager
def measure(server_pid: int) -> Iterator[Measure]:
    m = Measure()
    me = os.getpid()
    start_rss = rss_mb()
    peak = [start_rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    client, server, busy = process_cpu(me), process_cpu(server_pid), machine_busy_cpu()
    wall = time.perf_counter()
    try:
        yield m
    finally:
        m.wall = time.perf_counter() - wall
        m.client = process_cpu(me) - client
        m.server = process_cpu(server_pid) - server
        m.other = max(0.0, machine_busy_cpu() - busy - m.client - m.server)
        done.set()
        sampler.join()
        m.rss_growth_mb = max(peak[0], rss_mb()) - start_rss


# --- data ---------------------------------------------------------------------------------------------------


def load(server: MariaDBServer, rows: int, old_rows: int) -> None:
    step = 500_000
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute("CREATE TABLE bench.ints (id BIGINT PRIMARY KEY, v INT NOT NULL)")
        cur.execute(
            "CREATE TABLE bench.strs (k VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
            "PRIMARY KEY, v INT NOT NULL, "
            "u VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL)"
        )
        for low in range(1, rows + 1, step):
            high = min(rows, low + step - 1)
            cur.execute(f"INSERT INTO bench.ints SELECT seq, seq % 1000 FROM bench.seq_{low}_to_{high}")
            cur.execute(
                "INSERT INTO bench.strs SELECT CONCAT(IF(seq % 3, 'user-', 'User-'), MD5(seq)), seq, "
                "IF(seq % 50 = 0, NULL, CONCAT(IF(seq % 2, 'Key-', 'KEY-'), MD5(seq DIV 2))) "
                f"FROM bench.seq_{low}_to_{high} ORDER BY 1"
            )
        cur.execute("CREATE TABLE bench.strs_small LIKE bench.strs")
        cur.execute("INSERT INTO bench.strs_small SELECT * FROM bench.strs WHERE v <= %s", (old_rows,))
        for table in ("ints", "strs", "strs_small"):
            cur.execute(f"ANALYZE TABLE bench.{table}")
            cur.fetchall()


def key_scan(settings: MySQLSettings, table: str, column: str, nullable: bool) -> int:
    """The baseline: every key in key order, streamed to the client."""
    where = f" WHERE {column} IS NOT NULL" if nullable else ""
    n = 0
    with connect(settings) as conn, conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT {column} FROM {table}{where} ORDER BY {column}")
        while rows := cur.fetchmany(10_000):
            n += len(rows)
    return n


def duration(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.0f} min"


@contextmanager
def patched(name: str, value: Any) -> Iterator[None]:
    original = getattr(planner, name)
    setattr(planner, name, value)
    try:
        yield
    finally:
        setattr(planner, name, original)


@dataclass
class Row:
    what: str
    rows: int
    chunks: int | None
    m: Any  # a Measure (this module's, or bench/cpu.py's when the suite passes its meter)
    baseline: Any | None
    note: str = ""
    kind: str = ""  # which variant: see VARIANTS


# Variants run_planning measures: the even split, the uneven split on the string primary key (index walk,
# the old algorithm, the one ordered pass forced), the one ordered pass on the unindexed key, and the old
# algorithm on the small copy of that key (quadratic: extrapolated).
VARIANTS = ("even", "uneven_index", "uneven_old", "uneven_forced", "unindexed", "unindexed_old")
# server pid -> context yielding a Measure filled at exit
Meter = Callable[[int], AbstractContextManager[Any]]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(server: MariaDBServer, rows: int, old_rows: int) -> str:
    """Load the tables and warm the buffer pool; returns the server version."""
    say(f"loading 2 x {rows:,} rows ...")
    started = time.perf_counter()
    load(server, rows, old_rows)
    say(f"loaded in {time.perf_counter() - started:.0f}s")
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        (version,) = cur.fetchone()
        for table in ("ints", "strs", "strs_small"):  # warm the buffer pool
            cur.execute(f"SELECT COUNT(*) FROM bench.{table}")
            cur.fetchall()
    return str(version)


def run_planning(server: MariaDBServer, rows: int, cs: int, old_rows: int, *,
                 variants: tuple[str, ...] = VARIANTS, meter: Meter = measure) -> list[Row]:
    """Plan the loaded tables (``prepare``) with each of ``variants``, each next to its key scan."""
    assert server.process is not None
    pid = server.process.pid
    settings = MySQLSettings.from_url(server.cdc_url)

    def factory() -> Any:
        return connect(settings)

    out: list[Row] = []

    def plan(table: str, chunk_key: str | None = None) -> tuple[ChunkPlan, Any]:
        with meter(pid) as m:
            result = plan_table(factory, TableId("bench", table), 1, chunk_size=cs, chunk_key=chunk_key)
        say(f"  plan {table} by {chunk_key or 'primary key'}: {m.wall:.2f}s, "
            f"{len(result.chunks)} chunks ({result.split})")
        return result, m

    def scan(table: str, column: str, nullable: bool) -> tuple[int, Any]:
        with meter(pid) as m:
            n = key_scan(settings, f"bench.{table}", column, nullable)
        say(f"  scan {table}.{column}: {m.wall:.2f}s, {n:,} keys")
        return n, m

    if "even" in variants:
        say("integer key, even split")
        _, base_ints = scan("ints", "id", False)
        even, m = plan("ints")
        assert even.split == "even"
        out.append(Row("even split, `BIGINT` primary key (arithmetic)", rows, len(even.chunks), m, base_ints,
                       kind="even"))

    if {"uneven_index", "uneven_old", "uneven_forced"} & set(variants):
        say("string primary key, uneven split")
        _, base_k = scan("strs", "k", False)
        plans = []
        if "uneven_index" in variants:
            walk, m = plan("strs")
            assert walk.split == "uneven"
            plans.append(walk)
            out.append(Row("uneven, `VARCHAR` utf8mb4_general_ci primary key: **new** (index walk)", rows,
                           len(walk.chunks), m, base_k, kind="uneven_index"))
        if "uneven_old" in variants:
            with patched("_uneven_boundaries", old_uneven_boundaries):
                old, m = plan("strs")
            plans.append(old)
            out.append(Row("uneven, same key: old algorithm", rows, len(old.chunks), m, base_k,
                           kind="uneven_old"))
        if "uneven_forced" in variants:
            with patched("_ordering_index", lambda *a: None):
                forced, m = plan("strs")
            plans.append(forced)
            out.append(Row("uneven, same key: one ordered pass forced (not used when an index exists)", rows,
                           len(forced.chunks), m, base_k, kind="uneven_forced"))
        assert all(p.chunks == plans[0].chunks for p in plans), "the strategies disagree on the primary key"

    if "unindexed" in variants:
        say("unindexed string chunk key, uneven split")
        n_u, base_u = scan("strs", "u", True)
        one_pass, m = plan("strs", "u")
        assert one_pass.split == "uneven"
        out.append(Row("uneven, unindexed `VARCHAR` chunk key, pairs equal under the collation: **new** "
                       "(one ordered pass)", rows, len(one_pass.chunks), m, base_u, f"{n_u:,} non-NULL keys",
                       kind="unindexed"))
    if "unindexed_old" in variants and old_rows:
        _, base_small = scan("strs_small", "u", True)
        small_new, m_new = plan("strs_small", "u")
        with patched("_uneven_boundaries", old_uneven_boundaries):
            small_old, m_old = plan("strs_small", "u")
        out.append(Row("uneven, unindexed key, small copy: **new** (one ordered pass)", old_rows,
                       len(small_new.chunks), m_new, base_small, kind="unindexed_small"))
        projected = m_old.wall * (rows / old_rows) ** 2
        out.append(Row("uneven, unindexed key, small copy: old algorithm (a sort per chunk)", old_rows,
                       len(small_old.chunks), m_old, base_small,
                       f"not run at {rows:,} rows: quadratic, ~{duration(projected)} projected"
                       if old_rows < rows else "", kind="unindexed_old"))
        # Equal under the collation; the spelling of a boundary ('Key-..' or 'KEY-..') may differ.
        assert len(small_new.chunks) == len(small_old.chunks), "the old and new plans disagree"
    return out


def print_table(out: list[Row], rows: int, cs: int, version: str) -> None:
    cores = os.cpu_count()
    print(f"\n### Chunk planning ({rows:,}-row tables, chunk size {cs:,}; {version}, buffer pool 2G; "
          f"{platform.machine()}, {cores} cores shared by server and client)\n")
    print("| planning | rows | chunks | time | CPU client / server / other | baseline: full ordered key scan "
          "| baseline CPU client / server / other | ratio to baseline | client RSS growth | note |")
    print("|---|---:|---:|---:|---|---:|---|---:|---:|---|")
    for r in out:
        base = r.baseline
        ratio = f"{r.m.wall / base.wall:.2f}x" if base else "-"
        print(f"| {r.what} | {r.rows:,} | {r.chunks:,} | {r.m.wall:.2f} s | {r.m.shares()} | "
              f"{base.wall:.2f} s | {base.shares()} | {ratio} | {r.m.rss_growth_mb:.0f} MB | {r.note} |")
    print("\nCPU shares: 100% = one core; other = the rest of the machine during the measurement. The "
          "baseline streams every key through pymysql (client-bound); the index walk ships one key per chunk "
          "and lets the server skip the rest, so it can run faster than the baseline.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk-size", type=int, default=8096)
    parser.add_argument("--old-rows", type=int, default=300_000,
                        help="rows for the old algorithm on the unindexed key (quadratic)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    rows, cs, old_rows = args.rows, args.chunk_size, min(args.old_rows, args.rows)
    with MariaDBServer(options={"innodb-buffer-pool-size": "2G"}) as server:
        version = prepare(server, rows, old_rows)
        out = run_planning(server, rows, cs, old_rows)
    print_table(out, rows, cs, version)
    if args.json:
        figures = [{"what": r.what, "rows": r.rows, "chunks": r.chunks, **asdict(r.m),
                    "baseline": asdict(r.baseline) if r.baseline else None} for r in out]
        args.json.write_text(json.dumps({"rows": rows, "chunk_size": cs, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
