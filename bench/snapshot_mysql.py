"""The snapshot section on Oracle MySQL: the snapshot phase per read view mode, each against connectorx
reading the same table on the same server in the same run, quiet and under a concurrent single-row write load.

On a throwaway Oracle MySQL (``testing/mysql.py``: gtid_mode=ON; the CDC user may write the watermark table
its CDC URL names) with the MariaDB section's 6-column table (``--snapshot-rows``,
``engine_bench.load_table``):

- baseline: one connectorx connection reads ``SELECT *`` into Parquet, type-exact
  (``snapshot_bench.raw_read``, as on MariaDB), quiet and under the same write load as the snapshot it is put
  against;
- per read view mode, the source URL's ``read_view_mode``:

  - ``watermark_table``: the DBLog markers. Each chunk commits a low and a high marker row to the watermark
    table (two more GTID transactions per chunk, write grants) and reads the binlog between them (backfill);
  - ``gtid_executed``: read-only. The executed GTID set before and after the chunk's SELECT are its
    watermarks, the transactions between them applied from the binlog. While this engine does not accept the
    value, its rows say "not available" (no figure) and the section goes on; they run as soon as it does;

  the snapshot phase: plan + one Spark job over every chunk at one executor (``snapshot_bench.run_spark``, as
  on MariaDB; Spark start-up apart), once quiet and once under the write load. The chunk store tells the read
  view mode each chunk used (checked against the one asked) and the binlog events its backfill applied;
- the write load: a child process commits single-row ``UPDATE`` statements by random primary key
  (autocommit: one GTID transaction each) at ``rate`` transactions/s on a fixed schedule, from before the
  measured read starts until it ends (when behind, it sends those due in one multi-statement round trip, at
  most ``latency.MAX_BATCH``, each still its own transaction). Updates keep the row count: every run must
  commit every chunk with all the table's rows. The figures give the rate the writer reached; its CPU is
  counted apart (``writer``).

Run by ``bench/suite.py`` (``--only snapshot``, ``--snapshot-servers mysql``); the writer child is
``python bench/snapshot_mysql.py --write config.json``.
"""
from __future__ import annotations

import json
import random
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency
import snapshot_bench
from catchup import password_file
from cpu import Measure
from report import Figure
from spark_runs import SparkSetup, say

MODES = ("watermark_table", "gtid_executed")
EXECUTORS = 1
WARMUP_SECONDS = 2.0  # of write load before the measured read starts


@dataclass
class SectionResult:
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


# --- the write load -----------------------------------------------------------------------------------------


def writer_child(cfg: dict[str, Any]) -> int:
    """Single-row UPDATEs of ``bench.t`` by random key, ``rate`` transactions/s, until the stop file shows."""
    import pymysql
    from pymysql.constants import CLIENT

    conn = pymysql.connect(host="127.0.0.1", port=cfg["port"], user="root", password="", autocommit=True,
                           database="bench", client_flag=CLIENT.MULTI_STATEMENTS)
    rng, interval, stop = random.Random(cfg["seed"]), 1.0 / cfg["rate"], Path(cfg["stop"])
    sent = round_trips = 0
    Path(cfg["ready"]).write_text("ready")
    start = time.monotonic()
    with conn.cursor() as cur:
        while not stop.exists():
            now = time.monotonic()
            due = min(int((now - start) / interval) + 1 - sent, latency.MAX_BATCH)
            if due <= 0:
                time.sleep(min(start + sent * interval - now, 0.05))
                continue
            cur.execute(";".join(f"UPDATE t SET a = a + 1, b = 'upd-{sent + j}' "
                                 f"WHERE id = {rng.randint(1, cfg['rows'])}" for j in range(due)))
            while cur.nextset():
                pass
            sent, round_trips = sent + due, round_trips + 1
    seconds = time.monotonic() - start
    conn.close()
    Path(cfg["result"]).write_text(json.dumps({"transactions": sent, "seconds": seconds,
                                               "round_trips": round_trips}))
    return 0


@dataclass
class WriteLoad:
    rate: int  # transactions/s asked
    pid: int
    transactions: int = 0
    seconds: float = 0.0

    @property
    def reached(self) -> float:
        return self.transactions / self.seconds if self.seconds else 0.0

    def describe(self) -> str:
        kept = "kept" if self.reached >= latency.SUSTAINED * self.rate else "**not kept**"
        return (f"writer: {self.reached:,.0f} of {self.rate:,} single-row UPDATE transactions/s asked "
                f"({kept}; {self.transactions:,} in {self.seconds:.0f} s, Spark start-up included)")


@contextmanager
def write_load(server: Any, run_dir: Path, rate: int, rows: int, seed: int) -> Iterator[WriteLoad]:
    """The writer running for the block (after ``WARMUP_SECONDS``); its figures once the block ends."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stop = run_dir / "writer.stop"
    proc, cfg = latency.spawn("--write", {"port": server.port, "rate": rate, "rows": rows, "seed": seed,
                                          "stop": str(stop)}, run_dir, "writer", script=Path(__file__))
    load = WriteLoad(rate, proc.pid)
    try:
        latency.wait_for(cfg["ready"], proc, 60.0, "the writer")
        time.sleep(WARMUP_SECONDS)
        yield load
    finally:
        try:
            stop.write_text("stop")
        finally:
            latency.stop(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"the writer exited with {proc.returncode}")
    result = json.loads(Path(cfg["result"]).read_text())
    load.transactions, load.seconds = result["transactions"], result["seconds"]


# --- the section --------------------------------------------------------------------------------------------


def unavailable(url: str) -> str | None:
    """Why this engine does not take the source URL ``url`` (its ``read_view_mode``), or None if it does."""
    from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    try:
        MySQLSettings.from_url(url)
    except ConfigurationError as exc:
        return str(exc).splitlines()[0]
    return None


def mode_url(server: Any, mode: str) -> str:
    """The CDC user's source URL (no password) reading with ``mode``; the watermark table the server's CDC URL
    names goes with the mode that writes it."""
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    url = f"mysql://cdc@127.0.0.1:{server.port}/?read_view_mode={mode}"
    table = MySQLSettings.from_url(server.cdc_url).watermark_table
    return url + (f"&watermark_table={table}" if mode == "watermark_table" and table else "")


def run_section(setup: SparkSetup, work: Path, *, rows: int, chunk_size: int, rate: int,
                seed: int) -> SectionResult:
    from airflow_provider_mysqlcdc.testing.mysql import MySQLServer
    from airflow_provider_mysqlcdc.testing.server_process import CDC_PASSWORD

    out = SectionResult()
    work.mkdir(parents=True, exist_ok=True)
    with MySQLServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        say(f"snapshot (MySQL): loading {rows:,} rows, then the baseline, connectorx ...")
        pid, raw, data_mb = snapshot_bench.load_with_baseline(server, rows, work)
        say("snapshot (MySQL): the baseline under the write load ...")
        with write_load(server, work / "cx-load", rate, rows, seed) as cx_load:
            n, raw_loaded, _ = snapshot_bench.baseline_read(server, work, load={"writer": cx_load.pid})
        assert n == rows, (n, rows)
        what = "raw read: connectorx, 1 connection, `SELECT *` -> Parquet, type-exact, same MySQL"
        quiet_base = snapshot_bench.baseline_fields(rows, raw, data_mb, what)
        loaded_base = snapshot_bench.baseline_fields(rows, raw_loaded, data_mb, f"{what}, same write load")
        cfg = {"password_file": str(password_file(work, CDC_PASSWORD)), "server_pid": pid, "rows": rows,
               "chunk_size": chunk_size, **setup.child_config(EXECUTORS)}
        for mode in MODES:
            url = mode_url(server, mode)
            if reason := unavailable(url):
                say(f"snapshot (MySQL): read_view_mode={mode} is not available: {reason}")
                out.figures.append(Figure(
                    "snapshot", f"**Oracle MySQL**, `read_view_mode={mode}`: snapshot phase", None, "rows/s",
                    note=f"not available: this engine does not take it yet ({reason})", **quiet_base))
                continue
            try:
                out.figures += mode_figures(setup, server, work / mode, {**cfg, "mysql_url": url}, mode,
                                            rate, seed, data_mb, quiet_base, loaded_base)
            except Exception as exc:  # noqa: BLE001 - one mode's failure must not hide the other's figures
                traceback.print_exc()
                out.failures.append(f"MySQL read_view_mode={mode}: {type(exc).__name__}: "
                                    f"{(str(exc).splitlines() or [''])[0][:300]}")
        version = server_version(server)
    out.notes.append(f"Oracle MySQL snapshot rows: MySQL {version} (throwaway, gtid_mode=ON, binlog "
                     f"ROW/FULL, buffer pool 1G, on the same cores); {rows:,} rows ({data_mb:,.0f} MB as "
                     f"Arrow), chunks of {chunk_size:,}; the write load: single-row UPDATEs by random key at "
                     f"{rate:,} transactions/s, its CPU counted apart (`writer`).")
    return out


def mode_figures(setup: SparkSetup, server: Any, work: Path, cfg: dict[str, Any], mode: str, rate: int,
                 seed: int, data_mb: float, quiet_base: dict[str, Any],
                 loaded_base: dict[str, Any]) -> list[Figure]:
    """The snapshot phase with ``mode``, quiet then under the write load."""
    rows = cfg["rows"]
    work.mkdir(parents=True, exist_ok=True)
    say(f"snapshot (MySQL, {mode}): Spark, {setup.label(EXECUTORS)} ...")
    quiet = checked_run(work / "quiet", cfg, mode)
    say(f"snapshot (MySQL, {mode}): Spark under {rate:,} single-row transactions/s ...")
    with write_load(server, work / "load", rate, rows, seed) as load:
        loaded = checked_run(work / "load", {**cfg, "load_pids": {"writer": load.pid}}, mode)
    title = f"**Oracle MySQL**, `read_view_mode={mode}`"
    figures = []
    for run, base, under in ((quiet, quiet_base, ""), (loaded, loaded_base, f", **under {rate:,} txn/s**")):
        phase: Measure = run["plan"] + run["job"]
        events, chunks = run["backfill_events"], run["chunks"]
        figures.append(Figure(
            "snapshot", f"{title}{under}: snapshot phase = plan + Spark job, {setup.label(EXECUTORS)}",
            rows / phase.wall, "rows/s", f"{data_mb / phase.wall:,.1f} MB/s<br>{events:,} backfill events",
            phase, note=f"{chunks} chunks; backfill: {events:,} binlog events applied, in "
                        f"{run['chunks_with_backfill']} chunks; read + write per chunk {per_chunk(run)}; "
                        f"job alone {rows / run['job'].wall:,.0f} rows/s; Spark start-up "
                        f"{run['startup'].wall:.0f} s not included"
                        + (f"; {load.describe()}" if under else ""),
            short=f"MySQL {mode}{' + writes' if under else ''}", **base))
    return figures


def per_chunk(run: dict[str, Any]) -> str:
    """The chunk reads' mean times from the chunk store: ``99 ms (backfill 32 ms)``: read + write of a chunk
    (``write_total_s``), of which the binlog window's scan and correction (``backfill_s``; 0 where a chunk
    had none). The engine's ``read_s`` is not given: it spans the write too where the rows stream out."""
    seconds, chunks = run.get("chunk_seconds", {}), max(1, run["chunks"])
    total, backfill = (1000 * seconds.get(key, 0.0) / chunks for key in ("write_total_s", "backfill_s"))
    return f"{total:,.0f} ms (backfill {backfill:,.0f} ms)"


def checked_run(run_dir: Path, cfg: dict[str, Any], mode: str) -> dict[str, Any]:
    """One snapshot phase on Spark (its row counts checked by the child); every chunk read with ``mode``."""
    run_dir = run_dir / "spark"
    run_dir.mkdir(parents=True)
    try:
        result = snapshot_bench.run_spark(run_dir, cfg, EXECUTORS)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if result["read_view_modes"] != [mode]:
        raise AssertionError(f"asked read_view_mode={mode}, the chunks read with {result['read_view_modes']}")
    return result


def server_version(server: Any) -> str:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        return str(cur.fetchone()[0])


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        return writer_child(json.loads(Path(argv[1]).read_text()))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
