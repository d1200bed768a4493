"""Steady-state latency of the stream job: commit -> visible in the changelog, under a constant write load.

Three processes besides the server, all started here:

- a writer inserting ``--latency-rate`` rows/s (default 5,000) in transactions of ``--latency-txn-rows`` rows
  (default 1: single-row transactions, each one autocommit INSERT), paced on a fixed schedule; it logs each
  transaction's ids and the wall time its commit returned. Transactions fall due one by one; when the writer
  is behind, it sends those due in one round trip (multi-statement, at most ``MAX_BATCH``; each is still its
  own transaction, committed alone, and its commit time is the round trip's return, later than the commit by
  at most that round trip). Until the end of its time it writes as fast as it can, never more than the
  schedule: the rate it reaches is the rate asked or the highest this machine sustains alongside the stream,
  and the figures say which;
- the stream job (``stream_job.start_stream``) with ``trigger=processing-time=<interval>`` (default 1 second),
  no mirror refresh, in its own driver process. A row is *visible* when the changelog marker of the batch
  holding it is written (``changelog/_committed/batch=<id>.json``, its ``committed_at``): readers that
  follow markers see it from then on;
- the baseline, concurrently on the same load: a raw blocking ``BinLogStreamReader`` tailing the binlog,
  which notes the wall time each row arrives (what a bare replication client sees, nothing written).

After ``--latency-warmup`` seconds the rows committed during the next ``--latency-seconds`` (default 60) are
measured: p50 / p99 of visible time - commit time, the achieved write rate, and the CPU share of each side
(the stream's client tree; the writer and the raw tailer counted apart; the server is shared by all).
Run in children: ``python bench/latency.py --stream|--write|--tail cfg``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catchup import binlog_position, commit_plan_at, password_file
from cpu import Measure, Timer, settle
from report import Figure
from spark_runs import SparkSetup, child_session, say

TABLE = "bench.lat"
SEED_ROWS = 1000
MAX_BATCH = 50  # transactions per round trip, when the writer is behind
SUSTAINED = 0.97  # an achieved rate below this share of the rate asked is "the highest sustained"


# --- children -----------------------------------------------------------------------------------------------


def stream_child(cfg: dict[str, Any]) -> int:
    """Run the stream until the stop file appears; write the batches it committed."""
    from airflow_provider_mysqlcdc.spark.stream.job import StreamConfig, start_stream

    spark = child_session(cfg, f"mysqlcdc latency bench {cfg['label']}")
    config = StreamConfig(
        mysql_url=cfg["mysql_url"], tables=(TABLE,), chunk_store=cfg["store"], output=cfg["output"],
        checkpoint=cfg["checkpoint"], password_file=cfg["password_file"], trigger=cfg["trigger"],
    )
    batches: list[dict[str, Any]] = []
    run = start_stream(spark, config, on_progress=lambda b: batches.append(
        {"batch_id": b.batch_id, "rows": b.total_rows, "seconds": b.seconds, "at": time.time()}))
    Path(cfg["ready"]).write_text("ready")
    stop = Path(cfg["stop"])
    try:
        while not stop.exists():
            if run.await_termination(0.2):
                raise RuntimeError("the stream ended before it was stopped")
    finally:
        run.stop()
        spark.stop()
    Path(cfg["result"]).write_text(json.dumps({"batches": batches}))
    return 0


def writer_child(cfg: dict[str, Any]) -> int:
    """Insert ``rate`` rows/s for ``seconds``, ``txn_rows`` per transaction, on a fixed schedule (the module's
    docstring says how a writer behind schedule batches its round trips)."""
    import pymysql
    from pymysql.constants import CLIENT

    conn = pymysql.connect(host="127.0.0.1", port=cfg["port"], user="root", password="", autocommit=True,
                           database="bench", client_flag=CLIENT.MULTI_STATEMENTS,
                           init_command="SET time_zone = '+00:00'")
    rng = np.random.default_rng(cfg["seed"])
    k, interval = cfg["txn_rows"], cfg["txn_rows"] / cfg["rate"]
    next_id, log, round_trips = SEED_ROWS + 1, [], 0
    Path(cfg["ready"]).write_text("ready")
    start = time.monotonic()
    end = start + cfg["seconds"]
    i = 0
    with conn.cursor() as cur:
        while (now := time.monotonic()) < end:
            due = min(int((now - start) / interval) + 1 - i, MAX_BATCH)
            if due <= 0:
                time.sleep(start + i * interval - now)
                continue
            statements, firsts = [], []
            for _ in range(due):
                values = ", ".join(f"({next_id + j}, {int(rng.integers(0, 1_000_000))}, 'row-{next_id + j}', "
                                   "NOW(6))" for j in range(k))
                statements.append(f"INSERT INTO lat (id, v, note, created) VALUES {values}")
                firsts.append(next_id)
                next_id += k
            cur.execute(";".join(statements))
            while cur.nextset():
                pass
            at = time.time()
            log.extend((first, k, at) for first in firsts)
            round_trips += 1
            i += due
        cur.execute("INSERT INTO lat_stop VALUES (1)")  # the raw tailer stops here
    conn.close()
    Path(cfg["result"]).write_text(json.dumps({"transactions": log, "round_trips": round_trips}))
    return 0


def tail_child(cfg: dict[str, Any]) -> int:
    """The baseline: a blocking raw binlog client; the arrival time of each row of the table."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import WriteRowsEvent

    from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    settings = MySQLSettings.from_url(cfg["mysql_url"],
                                      password=Path(cfg["password_file"]).read_text().strip())
    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(), server_id=allocate_server_id(settings, 7),
        log_file=cfg["start_file"], log_pos=cfg["start_pos"], resume_stream=True, blocking=True,
        is_mariadb=False, only_events=[WriteRowsEvent], only_schemas=["bench"],
    )
    arrivals: list[tuple[int, float]] = []
    Path(cfg["ready"]).write_text("ready")
    try:
        for event in stream:
            now = time.time()
            if event.table == "lat_stop":
                break
            if event.table == "lat":
                arrivals.extend((row["values"]["id"], now) for row in event.rows)
    finally:
        stream.close()
    Path(cfg["result"]).write_text(json.dumps({"arrivals": arrivals}))
    return 0


# --- the section --------------------------------------------------------------------------------------------


def spawn(flag: str, cfg: dict[str, Any], run_dir: Path, name: str,
          script: Path = Path(__file__)) -> tuple[subprocess.Popen, dict[str, Any]]:
    """Start ``script flag config.json`` (default: this module's children); the config names its ready and
    result files."""
    cfg = {**cfg, "ready": str(run_dir / f"{name}.ready"), "result": str(run_dir / f"{name}.json")}
    path = run_dir / f"{name}.config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.Popen([sys.executable, str(script.resolve()), flag, str(path)]), cfg


def wait_for(path: str, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout:.0f}s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """End a child this section started (by its own handle), politely first."""
    if proc.poll() is None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def visible_times(output: str) -> dict[int, float]:
    """id -> wall time its batch's marker was written (the first batch holding it)."""
    from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
    from airflow_provider_mysqlcdc.engine.model.tables import TableId

    tid = TableId.parse(TABLE)
    out: dict[int, float] = {}
    for batch_id in committed_batch_ids(output, tid):
        batch = read_batch(output, tid, batch_id)
        at = datetime.fromisoformat(batch.marker["committed_at"]).timestamp()
        for path in batch.files:
            for key in pq.read_table(path, columns=["id"]).column("id").to_pylist():
                out.setdefault(key, at)
    return out


@dataclass
class Latencies:
    p50: float
    p99: float
    mean: float
    rows: int
    first: float = 0.0  # mean latency of the window's first tenth of rows (by commit time)
    last: float = 0.0  # and of its last tenth

    @property
    def steady(self) -> bool:
        """Latency moved across the window by at most a second (the default trigger): otherwise the reader was
        falling behind the load (latency growing with the window's length) or still draining a backlog of
        the warm-up (latency falling), and the percentiles are not a steady state's."""
        return abs(self.last - self.first) <= 1.0

    def trend(self) -> str:
        if self.steady:
            words = "steady: mean"
        elif self.last > self.first:
            words = "**not steady, fell behind the load**: mean latency grew from"
        else:
            words = "**not steady, still draining a backlog**: mean latency fell from"
        return f"{words} {self.first:,.1f} s (first tenth of the window) to {self.last:,.1f} s (last tenth)"


def latencies(commits: dict[int, float], seen: dict[int, float]) -> Latencies:
    missing = sum(1 for k in commits if k not in seen)
    if missing:
        raise RuntimeError(f"{missing} rows committed in the window never became visible")
    by_commit = sorted((t, seen[k] - t) for k, t in commits.items())
    values = np.array([lat for _, lat in by_commit])
    tenth = max(len(values) // 10, 1)
    return Latencies(float(np.percentile(values, 50)), float(np.percentile(values, 99)), float(values.mean()),
                     len(values), float(values[:tenth].mean()), float(values[-tenth:].mean()))


def run_section(setup: SparkSetup, work: Path, *, rate: int, txn_rows: int, warmup: float, seconds: float,
                interval: str, seed: int, executors: int = 1) -> list[Figure]:
    from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    run_dir = work / "latency"
    run_dir.mkdir(parents=True)
    trigger = f"processing-time={interval}"
    with MariaDBServer(options={"innodb-buffer-pool-size": "512M"}) as server:
        assert server.process is not None
        pid = server.process.pid
        settings = MySQLSettings.from_url(server.cdc_url)
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute("CREATE TABLE bench.lat (id BIGINT PRIMARY KEY, v INT NOT NULL, "
                        "note VARCHAR(64) NOT NULL, created DATETIME(6) NOT NULL)")
            cur.execute("CREATE TABLE bench.lat_stop (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO bench.lat SELECT seq, seq, CONCAT('seed-', seq), NOW(6) "
                        f"FROM bench.seq_1_to_{SEED_ROWS}")
        start = binlog_position(settings)
        commit_plan_at(settings, run_dir / "chunks.db", TABLE, start, chunk_size=SEED_ROWS)
        settle(pid)
        pw = password_file(run_dir, settings.password)
        common = {"mysql_url": settings.redacted_url(), "password_file": str(pw)}
        say(f"latency: starting the stream ({trigger}, {setup.label(executors)}) ...")
        stream_proc, stream_cfg = spawn("--stream", {
            **setup.child_config(executors), **common, "store": str(run_dir / "chunks.db"),
            "output": str(run_dir / "out"), "checkpoint": str(run_dir / "checkpoint"), "trigger": trigger,
            "stop": str(run_dir / "stop")}, run_dir, "stream")
        tail_proc = writer_proc = None
        try:
            wait_for(stream_cfg["ready"], stream_proc, 300, "the stream")
            tail_proc, tail_cfg = spawn("--tail",
                                        {**common, "start_file": start.file, "start_pos": start.pos},
                                        run_dir, "tail")
            wait_for(tail_cfg["ready"], tail_proc, 60, "the raw binlog tailer")
            writer_proc, writer_cfg = spawn("--write", {
                "port": server.port, "rate": rate, "txn_rows": txn_rows, "seconds": warmup + seconds + 2.0,
                "seed": seed}, run_dir, "writer")
            wait_for(writer_cfg["ready"], writer_proc, 60, "the writer")
            say(f"latency: writing {rate:,} rows/s in transactions of {txn_rows}; warm-up {warmup:.0f}s, "
                f"then {seconds:.0f}s measured ...")
            time.sleep(warmup)
            window_start = time.time()
            with Timer(pid, extra={"writer": writer_proc.pid, "raw tailer": tail_proc.pid}) as t:
                time.sleep(seconds)
            window_end = time.time()
            stop(writer_proc, timeout=120)
            if writer_proc.returncode:
                raise RuntimeError(f"the writer failed ({writer_proc.returncode})")
            written = json.loads(Path(writer_cfg["result"]).read_text())
            log = written["transactions"]
            total = sum(n for _, n, _ in log)
            # Let the stream show every written row before it is stopped (a stream behind the load drains
            # its backlog first).
            deadline = time.monotonic() + max(180.0, 3 * (warmup + seconds))
            tid = TableId.parse(TABLE)
            while sum(read_batch(stream_cfg["output"], tid, b).marker.get("rows", 0)
                      for b in committed_batch_ids(stream_cfg["output"], tid)) < total:
                if time.monotonic() > deadline or stream_proc.poll() is not None:
                    raise RuntimeError("the stream did not show every written row")
                time.sleep(0.5)
        finally:
            Path(stream_cfg["stop"]).write_text("stop")
            stop(stream_proc, timeout=120)
            for proc in (tail_proc, writer_proc):
                if proc is not None:
                    stop(proc, timeout=60)
        if stream_proc.returncode:
            raise RuntimeError(f"the stream failed ({stream_proc.returncode})")
        arrivals = {int(k): float(at)
                    for k, at in json.loads(Path(tail_cfg["result"]).read_text())["arrivals"]}
    window = [(first, n, at) for first, n, at in log if window_start <= at < window_end]
    commits = {first + j: at for first, n, at in window for j in range(n)}
    ours = latencies(commits, visible_times(stream_cfg["output"]))
    raw = latencies(commits, arrivals)
    load = Load(rate, txn_rows, len(commits) / (window_end - window_start),
                len(window) / (window_end - window_start), len(log) / max(written["round_trips"], 1))
    say(f"latency: {load.describe()}; the stream {ours.trend()}; the raw tailer {raw.trend()}")
    return figures(ours, raw, t.m, load, trigger, setup.label(executors), warmup, seconds)


@dataclass
class Load:
    """The write load asked and the one the writer reached in the measured window."""

    rate: int  # rows/s asked
    txn_rows: int
    rows_per_s: float
    txns_per_s: float
    txns_per_round_trip: float  # over the writer's whole run

    @property
    def sustained(self) -> bool:
        return self.rows_per_s >= SUSTAINED * self.rate

    def describe(self) -> str:
        kind = "single-row transactions" if self.txn_rows == 1 else f"transactions of {self.txn_rows} rows"
        reached = (f"achieved {self.txns_per_s:,.0f} {kind}/s ({self.rows_per_s:,.0f} rows/s) of "
                   f"{self.rate / self.txn_rows:,.0f}/s asked")
        if not self.sustained:
            reached += ("; **the highest rate the writer sustained on this machine alongside the stream, "
                        "not the rate asked**")
        return f"{reached}; {self.txns_per_round_trip:.1f} transactions per writer round trip"

    def short(self) -> str:
        return f"{self.txns_per_s:,.0f} tx/s" + ("" if self.sustained else " (max sustained)")


def figures(ours: Latencies, raw: Latencies, m: Measure, load: Load, trigger: str, label: str, warmup: float,
            seconds: float) -> list[Figure]:
    client, server = m.share(m.client), m.share(m.server)
    writer, tailer = m.share(m.extra.get("writer", 0.0)), m.share(m.extra.get("raw tailer", 0.0))
    cpu = f"{client:.0%} / {server:.0%} shared ({m.share(m.other):.0%}); writer {writer:.0%}"
    base_cpu = f"tailer {tailer:.0%} / server {server:.0%} shared"
    note = (f"{ours.rows:,} rows committed in {seconds:.0f} s after {warmup:.0f} s warm-up; "
            f"{load.describe()}; mean {ours.mean * 1000:,.0f} ms (raw {raw.mean * 1000:,.1f} ms); the stream "
            f"{ours.trend()}; the raw tailer {raw.trend()}; target p99 < 2 s at 5,000 single-row "
            "transactions/s")
    base = {"baseline_what": "raw blocking `BinLogStreamReader` tailing the same binlog at the same time: "
                             "commit -> row received"}
    return [
        Figure("latency",
               f"commit -> visible in the changelog (batch marker), **p50**, `{trigger}`, {load.short()} "
               f"({label})",
               ours.p50 * 1000, "ms", cpu=m, cpu_text=cpu, baseline=raw.p50 * 1000,
               baseline_cpu_text=base_cpu, higher_is_better=False, note=note, short="p50", **base),
        Figure("latency", "same, **p99**", ours.p99 * 1000, "ms", cpu=m, cpu_text=cpu,
               baseline=raw.p99 * 1000, baseline_cpu_text=base_cpu, higher_is_better=False, short="p99",
               **base),
    ]


if __name__ == "__main__":
    children = {"--stream": stream_child, "--write": writer_child, "--tail": tail_child}
    if len(sys.argv) == 3 and sys.argv[1] in children:
        sys.exit(children[sys.argv[1]](json.loads(Path(sys.argv[2]).read_text())))
    print(__doc__)
    sys.exit(2)
