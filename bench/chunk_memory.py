"""Peak memory of one chunk read against chunk size, and against table size at one chunk size.

A chunk read here is what a Spark snapshot task does for one chunk (``snapshot_writer.write_chunk``: the
engine's ``ChunkRead`` -- a fresh read view, rows streamed in Arrow batches of ``DEFAULT_BATCH_ROWS`` -- into
versioned Parquet), without Spark. The baseline reads the same key range in one query with connectorx into
one Arrow table (what a reader that materializes its chunk holds), measured in the same run.

Each read runs in a fresh process. After imports, session setup and a warm-up read of a 1,000-row chunk of
another table, the process's peak RSS (VmHWM) is reset (``/proc/self/clear_refs``); the figure is the peak
during the read above the RSS at that point: the memory the read itself needed. Without ``clear_refs`` (not
Linux, or not permitted) the figure falls back to ``ru_maxrss`` minus the RSS before the read, which can
only under-state the growth. Run in children: ``python bench/chunk_memory.py --chunk|--raw cfg``.
"""
from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import Measure, Timer, settle
from engine_bench import load_table
from report import Figure
from spark_runs import say

WARM_TABLE = "bench.w"
WARM_ROWS = 2000


# --- peak RSS of this process -------------------------------------------------------------------------------


def _status_kb(name: str) -> int:
    match = re.search(rf"^{name}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kb("VmHWM") <= _status_kb("VmRSS") + 64


def peak_mb(reset: bool) -> float:
    if reset:
        return _status_kb("VmHWM") / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- children -----------------------------------------------------------------------------------------------


def chunk_child(cfg: dict[str, Any]) -> int:
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
    from airflow_provider_mysqlcdc.spark.snapshot.writer import write_chunk

    def job(table: str) -> ChunkGroupJob:
        options = SnapshotOptions(mysql_url=cfg["mysql_url"], password_file=cfg["password_file"], table=table,
                                  output=cfg["output"], chunk_store=cfg["store"])
        with ChunkStore(options.store_url()) as store:
            return ChunkGroupJob.load(options, store)

    warm, target = job(WARM_TABLE), job(cfg["table"])
    write_chunk(warm, warm.chunk_ids[0], 0)
    reset = reset_peak()
    before = _status_kb("VmRSS") / 1024
    with Timer(cfg["server_pid"]) as t:
        written = write_chunk(target, cfg["chunk_id"], 0)
    peak = peak_mb(reset)
    Path(cfg["result"]).write_text(json.dumps({"rows": written.rows, "growth_mb": max(0.0, peak - before),
                                               "rss_before_mb": before, "exact_peak": reset,
                                               "measure": asdict(t.m)}))
    return 0


def raw_child(cfg: dict[str, Any]) -> int:
    import connectorx as cx

    url = cfg["cx_url"]
    pre = ["SET time_zone = '+00:00'"]
    columns = "id, a, b, CAST(c AS CHAR) AS c, d, e"
    cx.read_sql(url, f"SELECT {columns} FROM w LIMIT 1000", return_type="arrow", protocol="binary",
                pre_execution_query=pre)
    reset = reset_peak()
    before = _status_kb("VmRSS") / 1024
    table_name = cfg["table"].split(".", 1)[1]
    where = " AND ".join(p for p in (f"id >= {cfg['low']}" if cfg["low"] is not None else "",
                                     f"id < {cfg['high']}" if cfg["high"] is not None else "") if p)
    with Timer(cfg["server_pid"]) as t:
        table = cx.read_sql(url, f"SELECT {columns} FROM {table_name} WHERE {where}", return_type="arrow",
                            protocol="binary", pre_execution_query=pre)
    peak = peak_mb(reset)
    Path(cfg["result"]).write_text(json.dumps({"rows": table.num_rows, "growth_mb": max(0.0, peak - before),
                                               "arrow_mb": table.nbytes / 2**20, "exact_peak": reset,
                                               "measure": asdict(t.m)}))
    return 0


# --- the section --------------------------------------------------------------------------------------------


def run_child(flag: str, cfg: dict[str, Any], run_dir: Path, name: str) -> dict[str, Any]:
    cfg = {**cfg, "result": str(run_dir / f"{name}.json")}
    path = run_dir / f"{name}.config.json"
    path.write_text(json.dumps(cfg))
    subprocess.run([sys.executable, str(Path(__file__).resolve()), flag, str(path)], check=True)
    return json.loads(Path(cfg["result"]).read_text())


def run_section(work: Path, *, table_rows: int, small_rows: int, chunk_sizes: tuple[int, ...],
                independence_size: int) -> list[Figure]:
    from catchup import password_file

    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    run_dir = work / "memory"
    run_dir.mkdir(parents=True)
    configs = [("bench.t", table_rows, cs) for cs in chunk_sizes]
    configs.append(("bench.s", small_rows, independence_size))
    out: list[Figure] = []
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        assert server.process is not None
        pid = server.process.pid
        settings = MySQLSettings.from_url(server.cdc_url)
        say(f"memory: loading {table_rows:,} rows ...")
        load_table(server, table_rows)
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE bench.s LIKE bench.t")
            cur.execute("INSERT INTO bench.s SELECT * FROM bench.t WHERE id <= %s", (small_rows,))
            cur.execute("CREATE TABLE bench.w LIKE bench.t")
            cur.execute("INSERT INTO bench.w SELECT * FROM bench.t WHERE id <= %s", (WARM_ROWS,))
        settle(pid)
        pw = password_file(run_dir, settings.password)
        common = {"mysql_url": settings.redacted_url(), "password_file": str(pw), "server_pid": pid,
                  "cx_url": server.cdc_url.rstrip("/") + "/bench"}
        for i, (table, rows, cs) in enumerate(configs):
            store = run_dir / f"chunks-{i}.db"
            with ChunkStore(str(store)) as s:
                plan = plan_tables(settings, s, [table], chunk_size=cs)[0]
                plan_tables(settings, s, [WARM_TABLE], chunk_size=WARM_ROWS // 2)
            chunk = plan.chunks[len(plan.chunks) // 2]  # a full chunk in the middle, bounded on both sides
            low = chunk.start[0] if chunk.start is not None else None
            high = chunk.end[0] if chunk.end is not None else None
            cfg = {**common, "table": table, "store": str(store), "output": str(run_dir / f"out-{i}"),
                   "chunk_id": chunk.chunk_id, "low": low, "high": high}
            say(f"memory: {table} ({rows:,} rows), chunk size {cs:,}: chunk {chunk.chunk_id} of "
                f"{len(plan.chunks)} ...")
            ours = run_child("--chunk", cfg, run_dir, f"chunk-{i}")
            raw = run_child("--raw", cfg, run_dir, f"raw-{i}")
            assert ours["rows"] == raw["rows"], (ours["rows"], raw["rows"])
            out.append(figure(table, rows, cs, ours, raw))
    return out


def figure(table: str, rows: int, cs: int, ours: dict[str, Any], raw: dict[str, Any]) -> Figure:
    m, b = Measure(**ours["measure"]), Measure(**raw["measure"])
    exact = "" if ours["exact_peak"] and raw["exact_peak"] else "; peak from ru_maxrss (under-states)"
    return Figure(
        "memory", f"chunk read (`write_chunk`: ChunkRead -> Parquet), **chunk size {cs:,}**, "
        f"{rows:,}-row table", ours["growth_mb"], "MB", f"{ours['rows'] / m.wall:,.0f} rows/s", m,
        "connectorx, same key range into one Arrow table", raw["growth_mb"],
        f"{raw['rows'] / b.wall:,.0f} rows/s", b, higher_is_better=False,
        note=f"peak RSS above the process's RSS before the read; {ours['rows']:,} rows, "
             f"{raw['arrow_mb']:,.1f} MB as Arrow{exact}", short=f"chunk {cs:,} of {rows:,} rows")


if __name__ == "__main__":
    children = {"--chunk": chunk_child, "--raw": raw_child}
    if len(sys.argv) == 3 and sys.argv[1] in children:
        sys.exit(children[sys.argv[1]](json.loads(Path(sys.argv[2]).read_text())))
    print(__doc__)
    sys.exit(2)
