"""The stream phase on Spark survives what production does to it, and loses or repeats nothing.

One continuous stream app (spark_apps/binlog_stream.py in its own process, as spark-submit runs it) streams a
private MariaDB under concurrent writers while the test, in turn:

1. cuts the network connection of a binlog read in the middle of a big transaction (twice, through a proxy),
   then KILLs every session of the CDC user over and over for a while: reads resume or run again, the app
   keeps going;
2. restarts the server (clean shutdown, a few seconds down, sessions cut and connections refused): the app
   waits it out with backoff and resumes;
3. SIGKILLs the app at a random moment (a fixed seed per flavor) and starts it again from its checkpoint
   (each restart is a Spark start: one here; ``tests/spark/test_stream.py`` kills at the sink's commit).

Then an available-now catch-up runs, and the changelog equals an uninterrupted engine read of the same binlog
range record for record, passes the independent audit against ``mariadb-binlog`` (no duplicate, nothing
missing, nothing invented), and the mirror (read as consumers do) equals the source row by row.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.lake.layout import read_json
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream
from tests.support.binlog_audit import assert_clean
from tests.support.engine_harness import Pipeline, assert_mirror_equals_source, password_file
from tests.support.servers import binlog_end
from tests.support.tcp_proxy import CuttableProxy
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

REPO = Path(__file__).resolve().parents[2]
SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci", "t_comp", "t_dt")]
DB = "recovery"
SEED = 31


class StreamApp:
    """The stream app in a process group of its own, so a SIGKILL takes Spark's JVM with it."""

    def __init__(self, argv: list[str], env: dict, log_dir: Path) -> None:
        self.argv, self.env, self.log_dir = argv, env, log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_dir / f"stream-{self.starts}.log", "wb") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return "\n".join((self.log_dir / f"stream-{i}.log").read_text(errors="replace")
                         for i in range(1, self.starts + 1))

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _committed_batches(checkpoint: Path) -> int:
    folder = checkpoint / "mysqlcdc" / "batches"
    ledgers = (read_json(str(p)) for p in folder.glob("batch=*.json")) if folder.exists() else ()
    return sum(1 for entry in ledgers if entry and entry.get("state") == "committed")


def _wait_for_batches(app: StreamApp, checkpoint: Path, more: int, timeout: float = 120.0) -> None:
    target = _committed_batches(checkpoint) + more
    _wait_for(app, lambda: _committed_batches(checkpoint) >= target, f"{more} more batch(es)", timeout)


def _big_batches(checkpoint: Path) -> set[str]:
    """Committed batches holding a big transaction (10,000+ changes of t_int)."""
    folder = checkpoint / "mysqlcdc" / "batches"
    entries = {p.name: read_json(str(p)) or {} for p in folder.glob("batch=*.json")}
    return {name for name, e in entries.items()
            if e.get("state") == "committed" and e.get("rows", {}).get(f"{DB}.t_int", 0) >= 10_000}


def _lag_bytes(server, checkpoint: Path) -> int:
    """How far the stream's last committed batch is behind the end of the binlog (same file only)."""
    folder = checkpoint / "mysqlcdc" / "batches"
    entries = [read_json(str(p)) or {} for p in sorted(folder.glob("batch=*.json"))]
    done = [e["end_offset"] for e in entries if e.get("state") == "committed"]
    with server.admin() as admin:
        end = binlog_end(admin)
        file, position = end.file, end.pos
    if not done or done[-1]["file"] != file:
        return 1 << 30
    return int(position) - int(done[-1]["pos"])


def _wait_for(app: StreamApp, reached, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not reached():
        assert app.alive(), f"the stream app died:\n{app.log()[-4000:]}"
        assert time.monotonic() < deadline, f"{what} never happened:\n{app.log()[-4000:]}"
        time.sleep(0.2)


def _kill_cdc_sessions(server, rounds: int, seconds: float) -> dict[str, int]:
    """KILL every session of the CDC user, again and again: until ``rounds`` rounds found sessions to kill
    (the stream had come back each time), for at most ``seconds``; returns kills per command."""
    killed: dict[str, int] = {}
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    # Oracle MySQL's information_schema.processlist copies every session's statement text into utf8mb3 and
    # fails on a statement holding a 4-byte character (error 3854); its performance_schema table does not
    processlist = ("performance_schema.processlist" if server.FLAVOR == "mysql"
                   else "information_schema.processlist")
    with server.admin() as admin, admin.cursor() as cur:
        while time.monotonic() < deadline and rounds > 0:
            cur.execute(f"SELECT id, command FROM {processlist} WHERE user = 'cdc'")
            found = [(i, c) for i, c in cur.fetchall() if i not in seen]  # new sessions: the stream came back
            seen.update(i for i, _ in found)
            rounds -= 1 if found else 0
            for session_id, command in found:
                try:
                    cur.execute("KILL %s", (session_id,))
                    killed[command] = killed.get(command, 0) + 1
                except Exception:  # noqa: BLE001, S110 - the session ended by itself meanwhile
                    pass
            time.sleep(0.05)
    return killed


BIG_UPDATES = 6000  # row updates of the big transaction: ~500 KB of binlog, past both cut points below


def _big_transaction(server) -> None:
    """One transaction of at least BIG_UPDATES row updates of t_int (12,000+ changes), however many rows the
    writers left in t_int: whole-table UPDATEs, as many as that takes."""
    with server.admin(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM t_int")
        (rows,) = cur.fetchone()
        conn.begin()
        for _ in range(max(2, -(-BIG_UPDATES // max(rows, 1)))):
            cur.execute("UPDATE t_int SET v = v + 1")
        conn.commit()


def test_stream_survives_cut_sessions_a_server_restart_and_kills(private_server, spark, tmp_path):
    server = private_server
    rng = random.Random(f"{SEED}-{server.FLAVOR}")  # the kill's moment differs per flavor
    settings = MySQLSettings.from_url(server.cdc_url)
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{DB}`")
        create_tables(conn, DB, SPECS)
        seed_rows(conn, DB, rows_per_table=200, seed=SEED, specs=SPECS)

    def writers(seed: int) -> Workload:
        # paced so that the stream, which commits two Delta tables per table and batch in its driver, can
        # catch up between the faults on this 2-core machine
        return Workload(lambda: server.admin(), DB, seed=seed, writers=2, specs=SPECS, rotate_every=40,
                        pace=0.05).start()

    workload = writers(SEED)
    store, output, secret = (str(tmp_path / "chunks.db"), str(tmp_path / "out"),
                             password_file(tmp_path, settings))
    with ChunkStore(store) as chunk_store:
        plans = plan_tables(settings, chunk_store, [f"{DB}.t_*"], chunk_size=80)
    for plan in plans:
        result = run_chunk_group(spark, SnapshotOptions(mysql_url=settings.url_without_password(),
                                                        table=str(plan.table), output=output,
                                                        chunk_store=store, password_file=secret))
        assert result.ok, result

    config = StreamConfig(
        mysql_url=settings.url_without_password(), tables=(f"{DB}.t_*",), chunk_store=store, output=output,
        checkpoint=str(tmp_path / "ckpt"), password_file=secret, max_bytes_per_batch=200_000,
        reconnect_timeout=120.0, lock_lease_seconds=15.0,
    )
    checkpoint = Path(config.checkpoint)
    proxy = CuttableProxy(("127.0.0.1", server.port))  # the app's way to MySQL: the test can cut it
    argv = [
        sys.executable, str(REPO / "spark_apps" / "binlog_stream.py"),
        "--mysql-url", config.mysql_url.replace(f":{server.port}", f":{proxy.port}"),
        "--password-file", str(config.password_file),
        "--tables", config.tables[0], "--chunk-store", config.chunk_store, "--output", config.output,
        "--checkpoint", config.checkpoint, "--max-bytes-per-batch", str(config.max_bytes_per_batch),
        "--reconnect-timeout", "120", "--lock-lease-seconds", "15", "--trigger", "processing-time=1 second",
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop(MYSQL_PASSWORD_ENV, None)
    assert settings.password not in " ".join(argv)
    app = StreamApp(argv, env, tmp_path)
    app.start()
    try:
        _wait_for_batches(app, checkpoint, 2, timeout=180)

        # 1. binlog reads cut mid-read by the network, then every CDC session KILLed, again and again
        for limit in (100_000, 350_000):  # the network cuts the binlog read of a big transaction mid-read
            # caught up, only the big batch's dump carries this much (a dump runs to the end of the binlog)
            _wait_for(app, lambda: _lag_bytes(server, checkpoint) < 50_000, "catching up")
            seen = _big_batches(checkpoint)
            proxy.cut_connection_after(limit)
            _big_transaction(server)
            _wait_for(app, lambda seen=seen: _big_batches(checkpoint) - seen, "the big batch")
            assert proxy.connection_cuts == 1 and not proxy.armed, "the read was not cut"
            proxy.connection_cuts = 0
        _wait_for_batches(app, checkpoint, 2)
        killed = _kill_cdc_sessions(server, rounds=4, seconds=3.0)
        assert sum(killed.values()) >= 3, killed
        _wait_for_batches(app, checkpoint, 2)

        # 2. the server restarts (writers stop for it: their sessions die too), the stream waits it out
        workload.stop()
        # down long enough for several of the stream's reconnect tries (backoff 0.5 s, doubling)
        server.restart(down_seconds=2.0)
        workload = writers(SEED + 1)
        _wait_for_batches(app, checkpoint, 2)
        assert "is unavailable while" in app.log() and "is back after" in app.log(), app.log()[-3000:]

        # 3. SIGKILL at a random moment, restart from the checkpoint
        time.sleep(rng.uniform(0.3, 2.0))  # a moment within the next batch or two (about 1 s each)
        app.kill()
        app.start()
        _wait_for_batches(app, checkpoint, 1, timeout=180)
    finally:
        stats = workload.stop()
        if app.alive():
            app.kill()
        proxy.close()
    assert stats.transactions > 20, stats

    with mirror_refresh(config) as hook:  # available-now: catch up to the end of the binlog, then stop
        run_stream(spark, config, on_batch_committed=hook)

    # the uninterrupted reference: the engine reads the same binlog range in one go
    pipe = Pipeline(settings, ChunkStore(store), DB)
    pipe.schemas = {p.table: load_schema_of(settings, p.table) for p in plans}
    pipe.open_stream([p.table for p in plans])
    pipe.catch_up()
    got = [r for schema in pipe.schemas.values() for r in changelog_records(config.output, schema)]
    positions = [(r.table, r.key) for r in got]
    assert len(positions) == len(set(positions)), "a change was written twice"
    assert len(pipe.changelog) > 300
    assert _comparable(got) == _comparable(pipe.changelog), (
        f"after the faults: {len(got)} records, uninterrupted: {len(pipe.changelog)}"
    )
    report = pipe.audit([p.table for p in plans], changelog=got)
    assert_clean(report, min_checked_after_max_hw=300)
    assert_mirror_equals_source(settings, config.output, [p.table for p in plans], min_rows=100)


def load_schema_of(settings: MySQLSettings, table: TableId):
    with connect(settings) as conn:
        return load_schema(conn, table)


def _comparable(records) -> list[tuple]:
    return sorted(((r.table, r.key, r.op, r.values) for r in records), key=lambda t: t[:2])
