"""Storage after N minutes of streaming: what the output holds after continuous 5 s batches under a steady
write load, with garbage collection as a user gets it, against the size of the source tables.

As a new user would run it (issue 38: 25 minutes over three small tables left 77 MB in 3,535 files): a
throwaway MariaDB with the binlog on; three small tables in ``bench`` (``orders``, ``customers``, ``items``,
about 5 MB together); ``mysqlcdc plan`` and ``mysqlcdc snapshot`` (the CLI, default chunk size, the chunk
store at its default place ``<output>/_mysqlcdc_chunks.db``); then the stream as ``mysqlcdc stream --interval
"5 seconds"`` runs it (``start_stream`` with the ``mirror_refresh`` hook, in its own driver process,
``local[2]``), its GC settings left at their defaults: the stream runs GC itself after a batch, at most every
``gc_interval_minutes`` (60), deleting what stopped being needed more than ``gc_retention`` ago (the package
default). One stream per mirror mode (``--storage-modes``: ``rewrite``, ``deletion_vectors``), each with its
own output, chunk store and checkpoint, side by side on the same server and the same load. An experiment:
``deletion_vectors@R`` runs that mode with the compaction ratio ``R`` instead of the package's (0.25).

The load: a writer of ``--storage-rate`` single-row autocommit transactions/s (default 200) on a fixed
schedule: 60% updates of random live orders, 15% inserts of new orders, 15% deletes of the oldest order (so
the table keeps its size), 7% customer updates, 3% item updates.

Every ``--storage-sample`` seconds (60) each output is walked and its bytes and files counted by area
(``areas``): changelog data, changelog markers, changelog ``_delta_log``, mirror data (chunk files), mirror
overlays (deletion-vector mode), deletion vector files, mirror ``_delta_log``, the snapshot, and the root's
files (chunk store, progress, GC report); the Spark checkpoint apart (it is not under the output). At the
end, after the writer stopped and the streams showed every change: the total against the source tables'
``data_length + index_length`` (``information_schema``, after ``ANALYZE TABLE``) and against a plain Parquet
export of them (pyarrow, default compression), and the mirror of each table checked row by row against the
source (``tests.support.engine_harness.assert_mirror_equals_source``: the mirror read as consumers do, the
Delta changelog against the markers, the Delta mirror against the manifest).

Through the suite (``python bench/suite.py --only storage [--quick] [--storage-minutes M]``), or by hand:
``python bench/storage.py [--minutes M] [--modes rewrite,deletion_vectors] [--rate R]`` prints the section's
table and writes the samples as JSON (``--json PATH``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from catchup import password_file
from latency import spawn, stop, wait_for
from report import Figure
from spark_runs import SparkSetup, child_session, say

DATABASE = "bench"
TABLES = ("orders", "customers", "items")
SEED = {"orders": 40_000, "customers": 15_000, "items": 10_000}
TRIGGER = "processing-time=5 seconds"
MODES = ("rewrite", "deletion_vectors")
MAX_BATCH = 50  # transactions per writer round trip when behind schedule
SCRIPT = Path(__file__)
MAX_RESTARTS = 5  # a stream that dies (a Python worker timing out on a loaded machine) is restarted


# --- children -----------------------------------------------------------------------------------------------


def stream_child(cfg: dict[str, Any]) -> int:
    """``mysqlcdc stream --interval "5 seconds"`` with the mirror on and GC at its defaults, until the stop
    file appears (``cli/stream.py``'s ``cmd_stream``, with a stop file instead of Ctrl-C)."""
    from airflow_provider_mysqlcdc.spark.stream.job import StreamConfig, mirror_refresh, start_stream

    mode, _, ratio = cfg["mode"].partition("@")
    if ratio:  # an experiment: the deletion-vector mode's compaction threshold (no setting of the package)
        from airflow_provider_mysqlcdc.engine.lake.mirror_dv_refresh import Compaction
        from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher

        init = MirrorRefresher.__init__

        def with_ratio(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("compaction", Compaction(ratio=float(ratio)))
            init(self, *args, **kwargs)

        MirrorRefresher.__init__ = with_ratio  # type: ignore[method-assign]
    spark = child_session(cfg, f"mysqlcdc storage bench {cfg['mode']}")
    config = StreamConfig(
        mysql_url=cfg["mysql_url"], tables=tuple(f"{DATABASE}.{t}" for t in TABLES), chunk_store=cfg["store"],
        output=cfg["output"], checkpoint=cfg["checkpoint"], password_file=cfg["password_file"],
        trigger=TRIGGER, server_id_slot=cfg["slot"], mirror_updates=mode,
    )
    batches: list[dict[str, Any]] = []
    stop_file = Path(cfg["stop"])
    try:
        with mirror_refresh(config) as hook:
            run = start_stream(spark, config, on_batch_committed=hook, on_progress=lambda b: batches.append(
                {"batch_id": b.batch_id, "rows": b.total_rows, "seconds": b.seconds, "at": time.time()}))
            Path(cfg["ready"]).write_text("ready")
            try:
                while not stop_file.exists():
                    if run.await_termination(0.5):
                        raise RuntimeError("the stream ended before it was stopped")
                    Path(cfg["progress"]).write_text(json.dumps({"batches": len(batches)}))
            finally:
                run.stop()
    finally:
        spark.stop()
    Path(cfg["result"]).write_text(json.dumps({"batches": batches}))
    return 0


def writer_child(cfg: dict[str, Any]) -> int:
    """``rate`` single-row transactions/s until the stop file appears (the module's docstring: the mix)."""
    import numpy as np
    import pymysql
    from pymysql.constants import CLIENT

    conn = pymysql.connect(host="127.0.0.1", port=cfg["port"], user="root", password="", autocommit=True,
                           database=DATABASE, client_flag=CLIENT.MULTI_STATEMENTS,
                           init_command="SET time_zone = '+00:00'")
    rng = np.random.default_rng(cfg["seed"])
    lo, hi = 1, SEED["orders"] + 1  # live orders: [lo, hi)
    interval = 1.0 / cfg["rate"]
    stop_file = Path(cfg["stop"])
    Path(cfg["ready"]).write_text("ready")
    start = time.monotonic()
    done = 0
    with conn.cursor() as cur:
        while not stop_file.exists():
            now = time.monotonic()
            due = min(int((now - start) / interval) + 1 - done, MAX_BATCH)
            if due <= 0:
                time.sleep(min(start + done * interval - now, 0.2))
                continue
            statements = []
            for _ in range(due):
                x = rng.random()
                if x < 0.60:
                    statements.append(
                        f"UPDATE orders SET status = {int(rng.integers(0, 6))}, amount = "
                        f"{rng.integers(100, 1_000_000) / 100:.2f}, updated = NOW(6) "
                        f"WHERE id = {int(rng.integers(lo, hi))}")
                elif x < 0.75:
                    statements.append(
                        "INSERT INTO orders (id, customer_id, status, amount, note, created, updated) "
                        "VALUES "
                        f"({hi}, {int(rng.integers(1, SEED['customers'] + 1))}, 0, "
                        f"{rng.integers(100, 1_000_000) / 100:.2f}, 'order {hi} new', NOW(6), NOW(6))")
                    hi += 1
                elif x < 0.90:
                    statements.append(f"DELETE FROM orders WHERE id = {lo}")
                    lo += 1
                elif x < 0.97:
                    statements.append(
                        f"UPDATE customers SET points = points + {int(rng.integers(1, 50))}, "
                        "updated = NOW(6) "
                        f"WHERE id = {int(rng.integers(1, SEED['customers'] + 1))}")
                else:
                    statements.append(
                        f"UPDATE items SET stock = {int(rng.integers(0, 1000))}, updated = NOW(6) "
                        f"WHERE id = {int(rng.integers(1, SEED['items'] + 1))}")
            cur.execute(";".join(statements))
            while cur.nextset():
                pass
            done += due
    conn.close()
    seconds = time.monotonic() - start
    Path(cfg["result"]).write_text(json.dumps({"transactions": done, "seconds": seconds}))
    return 0


# --- measuring ----------------------------------------------------------------------------------------------

AREAS = ("changelog data", "changelog markers", "changelog _delta_log", "mirror data", "mirror overlays",
         "deletion vectors", "mirror _delta_log", "mirror manifest", "snapshot",
         "root (chunk store, progress)",
         "other")


def area_of(relative: str) -> str:
    """The area a file under the output root belongs to (``<db>/<table>/<area>/...`` or a root file)."""
    parts = relative.split("/")
    if len(parts) < 3:
        return "root (chunk store, progress)"
    kind, rest = parts[2], parts[3:]
    if kind == "changelog":
        if rest and rest[0] == "_delta_log":
            return "changelog _delta_log"
        if rest and rest[0] == "_committed":
            return "changelog markers"
        return "changelog data"
    if kind == "mirror":
        if rest and rest[0] == "_delta_log":
            return "mirror _delta_log"
        if rest and rest[0].startswith("deletion_vector_"):
            return "deletion vectors"
        if rest and rest[0].startswith("overlay"):
            return "mirror overlays"
        if rest and rest[0].startswith("_"):
            return "mirror manifest"
        return "mirror data"
    if kind == "snapshot" or kind.startswith("_snapshot"):
        return "snapshot"
    return "other"


@dataclass
class Sample:
    at: float  # seconds since the load began
    areas: dict[str, tuple[int, int]]  # area -> (bytes, files)
    checkpoint: tuple[int, int] = (0, 0)

    @property
    def total(self) -> tuple[int, int]:
        return (sum(b for b, _ in self.areas.values()), sum(n for _, n in self.areas.values()))


def walk(root: str) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:  # deleted meanwhile (GC, log cleanup)
                continue
            area = area_of(os.path.relpath(path, root).replace(os.sep, "/"))
            got = out.setdefault(area, [0, 0])
            got[0] += size
            got[1] += 1
    return {a: (v[0], v[1]) for a, v in out.items()}


def dir_size(root: str) -> tuple[int, int]:
    total = walk(root)
    return sum(b for b, _ in total.values()), sum(n for _, n in total.values())


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


# --- the source ---------------------------------------------------------------------------------------------


def load_tables(server: Any) -> None:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DATABASE}")
        cur.execute(f"USE {DATABASE}")
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id INT NOT NULL, "
                    "status TINYINT NOT "
                    "NULL, amount DECIMAL(12,2) NOT NULL, note VARCHAR(64) NOT NULL, created DATETIME(6) NOT "
                    "NULL, updated DATETIME(6) NOT NULL, KEY (customer_id))")
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
                    "email VARCHAR(96) "
                    "NOT NULL, city VARCHAR(32) NOT NULL, points INT NOT NULL, updated DATETIME(6) NOT NULL)")
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, sku CHAR(12) NOT NULL, "
                    "title VARCHAR(96) NOT NULL, "
                    "price DECIMAL(10,2) NOT NULL, stock INT NOT NULL, updated DATETIME(6) NOT NULL)")
        cur.execute(f"INSERT INTO orders SELECT seq, 1 + seq % {SEED['customers']}, seq % 6, "
                    "(seq * 37 % 100000) "
                    f"/ 100, CONCAT('order ', seq, ' ', MD5(seq)), NOW(6), NOW(6) "
                    f"FROM seq_1_to_{SEED['orders']}")
        cur.execute(f"INSERT INTO customers SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, "
                    "'@example.com'), ELT(1 + seq % 5, 'Berlin', 'Paris', 'Lisbon', 'Oslo', 'Rome'), "
                    "seq % 1000, "
                    f"NOW(6) FROM seq_1_to_{SEED['customers']}")
        cur.execute(f"INSERT INTO items SELECT seq, LPAD(seq, 12, '0'), CONCAT('item ', seq, ' ', MD5(seq), "
                    "MD5(seq * 7)), (seq * 13 % 100000) / 100, seq % 1000, NOW(6) "
                    f"FROM seq_1_to_{SEED['items']}")


def source_sizes(server: Any, work: Path) -> tuple[int, int]:
    """(data_length + index_length of the tables, bytes of a plain Parquet export of them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with server.admin() as conn, conn.cursor() as cur:
        for t in TABLES:
            cur.execute(f"ANALYZE TABLE `{DATABASE}`.`{t}`")
            cur.fetchall()
        cur.execute("SELECT SUM(data_length + index_length) FROM information_schema.tables "
                    f"WHERE table_schema = '{DATABASE}' "
                    f"AND table_name IN ({', '.join(repr(t) for t in TABLES)})")
        innodb = int(cur.fetchone()[0])
        parquet = 0
        for t in TABLES:
            cur.execute(f"SELECT * FROM `{DATABASE}`.`{t}`")
            names = [d[0] for d in cur.description]
            columns = list(zip(*cur.fetchall()))
            table = pa.table({n: pa.array([str(v) if hasattr(v, "as_tuple") else v for v in c])
                              for n, c in zip(names, columns)})
            path = work / f"export-{t}.parquet"
            pq.write_table(table, path)
            parquet += path.stat().st_size
    return innodb, parquet


# --- the section --------------------------------------------------------------------------------------------


@dataclass
class ModeRun:
    mode: str
    output: str
    checkpoint: str
    proc: Any = None
    cfg: dict[str, Any] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    batches: int = 0
    gc: str = ""
    restarts: int = 0
    reclaimable: dict[str, tuple[int, int]] = field(default_factory=dict)

    def sample(self, at: float) -> Sample:
        s = Sample(at, walk(self.output), dir_size(self.checkpoint))
        self.samples.append(s)
        return s


def reclaimable(output: str) -> dict[str, tuple[int, int]]:
    """What GC would delete at the end (dry runs, nothing deleted): with a ``15m`` retention (the grace, the
    shortest a user can set), and with no retention and no grace at all (everything superseded: what is left
    is the live set, the floor no retention goes below)."""
    from datetime import timedelta

    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.gc.collector import collect_garbage
    from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention

    out = {}
    cases = {"15m": Retention(timedelta(minutes=15)),
             "0 (no grace)": Retention(timedelta(seconds=1), min_grace=timedelta(0))}
    with ChunkStore(str(Path(output) / "_mysqlcdc_chunks.db")) as store:
        for name, retention in cases.items():
            run = collect_garbage(output, store, retention, dry_run=True)
            out[name] = (run.total.bytes, run.total.files)
    return out


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "airflow_provider_mysqlcdc.cli.main", *args], check=True,
                   stdout=subprocess.DEVNULL)


def run_section(work: Path, *, minutes: float, modes: list[str], rate: int, sample_s: float = 60.0,
                seed: int = 38, master: str = "local[2]") -> tuple[list[Figure], list[str], dict[str, Any]]:
    from airflow_provider_mysqlcdc.engine.lake.gc.report import read_gc_report
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
    from tests.support.engine_harness import assert_mirror_equals_source

    run_dir = work / "storage"
    run_dir.mkdir(parents=True)
    setup = SparkSetup("local")
    with MariaDBServer(options={"innodb-buffer-pool-size": "256M"}) as server:
        settings = MySQLSettings.from_url(server.cdc_url)
        load_tables(server)
        pw = password_file(run_dir, settings.password)
        base_url = settings.redacted_url()
        tables = ",".join(f"{DATABASE}.{t}" for t in TABLES)
        runs = []
        urls = {}
        for i, mode in enumerate(modes):
            # each stream a server_id range of its own (two streams on one server must not share one)
            ids = f"server_id={5400 + 100 * i}-{5499 + 100 * i}"
            urls[mode] = url = f"{base_url}{'&' if '?' in base_url else '?'}{ids}"
            out = run_dir / f"out-{mode}"
            store = out / "_mysqlcdc_chunks.db"
            out.mkdir()
            started = time.monotonic()
            cli("plan", "--mysql-url", url, "--password-file", str(pw), "--tables", tables,
                "--chunk-store", str(store))
            cli("snapshot", "--mysql-url", url, "--password-file", str(pw), "--tables", tables,
                "--output", str(out), "--master", master)
            say(f"storage: {mode}: planned and snapshotted in {time.monotonic() - started:.0f}s")
            runs.append(ModeRun(mode, str(out), str(run_dir / f"checkpoint-{mode}")))
        for i, r in enumerate(runs):
            r.proc, r.cfg = spawn("--stream", {
                **setup.child_config(2), "master": master, "mysql_url": urls[r.mode],
                "password_file": str(pw),
                "store": str(Path(r.output) / "_mysqlcdc_chunks.db"), "output": r.output,
                "checkpoint": r.checkpoint, "mode": r.mode, "slot": 0, "stop": str(run_dir / "stop"),
                "progress": str(run_dir / f"progress-{r.mode}.json")}, run_dir, f"stream-{r.mode}",
                script=SCRIPT)
        writer = None
        try:
            for r in runs:
                wait_for(r.cfg["ready"], r.proc, 300, f"the {r.mode} stream")
            writer, writer_cfg = spawn("--write", {"port": server.port, "rate": rate, "seed": seed,
                                                   "stop": str(run_dir / "stop-writer")}, run_dir, "writer",
                                   script=SCRIPT)
            wait_for(writer_cfg["ready"], writer, 60, "the writer")
            say(f"storage: {len(runs)} stream(s) ({', '.join(modes)}), {rate} transactions/s for {minutes:g} "
                f"min, a sample every {sample_s:.0f}s ...")
            begin = time.monotonic()
            for r in runs:
                r.sample(0.0)
            end = begin + minutes * 60
            next_sample = begin + sample_s
            while (now := time.monotonic()) < end:
                for r in runs:
                    if r.proc.poll() is not None:  # restarted from its checkpoint, as a supervisor would
                        r.restarts += 1
                        if r.restarts > MAX_RESTARTS:
                            raise RuntimeError(f"the {r.mode} stream exited with {r.proc.returncode} "
                                               f"{r.restarts} times")
                        say(f"storage: the {r.mode} stream exited with {r.proc.returncode}; restarting it "
                            "from its checkpoint")
                        Path(r.cfg["ready"]).unlink(missing_ok=True)
                        r.proc, r.cfg = spawn("--stream", r.cfg, run_dir, f"stream-{r.mode}", script=SCRIPT)
                if writer.poll() is not None:
                    raise RuntimeError(f"the writer exited with {writer.returncode}")
                if now >= next_sample:
                    line = []
                    for r in runs:
                        total = r.sample(now - begin).total
                        line.append(f"{r.mode} {mb(total[0])} in {total[1]:,} files")
                    say(f"storage: {(now - begin) / 60:4.1f} min: " + "; ".join(line))
                    next_sample += sample_s
                time.sleep(max(0.0, min(next_sample, end) - time.monotonic()))
            Path(writer_cfg["stop"]).write_text("stop")
            stop(writer, timeout=60)
            written = json.loads(Path(writer_cfg["result"]).read_text())
            say(f"storage: the writer made {written['transactions']:,} transactions in "
                f"{written['seconds']:.0f}s ({written['transactions'] / written['seconds']:,.0f}/s); "
                "waiting for the mirrors to show them ...")
            ids = [TableId(DATABASE, t) for t in TABLES]
            for r in runs:
                deadline = time.monotonic() + 300
                while True:
                    try:
                        assert_mirror_equals_source(settings, r.output, ids)
                        break
                    except AssertionError:
                        if time.monotonic() > deadline or r.proc.poll() is not None:
                            raise
                        time.sleep(5)
                say(f"storage: {r.mode}: the mirror equals the source, row by row")
            for r in runs:
                r.sample(time.monotonic() - begin)
        finally:
            Path(run_dir / "stop").write_text("stop")
            Path(run_dir / "stop-writer").write_text("stop")
            for r in runs:
                if r.proc is not None:
                    stop(r.proc, timeout=120)
            if writer is not None:
                stop(writer, timeout=30)
        for r in runs:
            if r.proc.returncode:
                raise RuntimeError(f"the {r.mode} stream failed ({r.proc.returncode})")
            r.batches = len(json.loads(Path(r.cfg["result"]).read_text())["batches"])
            report = read_gc_report(r.output)
            r.gc = "no GC run recorded" if report is None else report.describe().replace("\n", "; ")
            try:
                r.reclaimable = reclaimable(r.output)
            except Exception as exc:  # noqa: BLE001 - the figure stands without it
                say(f"storage: {r.mode}: the GC dry runs failed: {type(exc).__name__}: {exc}")
        innodb, parquet = source_sizes(server, run_dir)
    return figures(runs, innodb, parquet, minutes, rate, written)


def figures(runs: list[ModeRun], innodb: int, parquet: int, minutes: float, rate: int,
            written: dict[str, Any]) -> tuple[list[Figure], list[str], dict[str, Any]]:
    out: list[Figure] = []
    notes: list[str] = []
    achieved = written["transactions"] / max(written["seconds"], 1e-9)
    for r in runs:
        last = r.samples[-1]
        size, files = last.total
        by_area = "; ".join(f"{a} {mb(last.areas[a][0])} / {last.areas[a][1]:,} files" for a in AREAS
                            if a in last.areas)
        out.append(Figure(
            "storage", f"output after {minutes:g} min of 5 s batches, `mirror_updates={r.mode}`, default GC "
            f"({achieved:,.0f} single-row tx/s)", size / 1e6, "MB",
            detail=f"{files:,} files; x{size / innodb:.2f} the tables' InnoDB size, "
                   f"x{size / parquet:.2f} their Parquet export",
            baseline_what="the source tables: data_length + index_length (information_schema)",
            baseline=innodb / 1e6, baseline_detail=f"plain Parquet export {mb(parquet)}",
            higher_is_better=False, short=f"storage {r.mode}",
            note=f"target: within 3x the source (issue 38); {r.batches} batches (the last stream run's), "
                 f"{r.restarts} stream restart(s); by area: "
                 f"{by_area}; Spark checkpoint (not under the output) {mb(last.checkpoint[0])} / "
                 f"{last.checkpoint[1]:,} files; {r.gc}; GC would delete at the end (dry runs): "
                 + ", ".join(f"retention {k}: {mb(b)} / {n:,} files" for k, (b, n) in r.reclaimable.items())))
        notes.append(f"storage {r.mode}: per minute (MB / files): " + ", ".join(
            f"{s.at / 60:.0f}: {s.total[0] / 1e6:.1f}/{s.total[1]}" for s in r.samples))
    data = {"innodb": innodb, "parquet": parquet, "minutes": minutes, "rate": rate, "written": written,
            "runs": [{"mode": r.mode, "batches": r.batches, "gc": r.gc, "restarts": r.restarts,
                      "reclaimable": r.reclaimable,
                      "samples": [{"at": s.at, "areas": s.areas, "checkpoint": s.checkpoint}
                                  for s in r.samples]}
                     for r in runs]}
    return out, notes, data


def table_text(runs_data: dict[str, Any]) -> str:
    """A Markdown table of the last sample of each mode, by area, with the source's size."""
    lines = [f"source: InnoDB {mb(runs_data['innodb'])}, Parquet export {mb(runs_data['parquet'])}", "",
             "| area | " + " | ".join(r["mode"] for r in runs_data["runs"]) + " |",
             "|---|" + "---|" * len(runs_data["runs"])]
    lasts = [r["samples"][-1] for r in runs_data["runs"]]
    for area in AREAS:
        if not any(area in s["areas"] for s in lasts):
            continue
        cells = [f"{mb(s['areas'][area][0])} / {s['areas'][area][1]:,}" if area in s["areas"] else "-"
                 for s in lasts]
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    totals = []
    for s in lasts:
        size = sum(v[0] for v in s["areas"].values())
        files = sum(v[1] for v in s["areas"].values())
        totals.append(f"**{mb(size)} / {files:,}** (x{size / runs_data['innodb']:.2f} InnoDB, "
                      f"x{size / runs_data['parquet']:.2f} Parquet)")
    lines.append("| total | " + " | ".join(totals) + " |")
    lines.extend(lasts_reclaim(runs_data))
    lines.append("| Spark checkpoint | " + " | ".join(f"{mb(s['checkpoint'][0])} / {s['checkpoint'][1]:,}"
                                                     for s in lasts) + " |")
    return "\n".join(lines)


def lasts_reclaim(runs_data: dict[str, Any]) -> list[str]:
    """Rows: the total GC would leave with each dry-run retention (``reclaimable``)."""
    runs = runs_data["runs"]
    names = list(runs[0].get("reclaimable", {})) if runs else []
    lines = []
    for name in names:
        cells = []
        for r in runs:
            s = r["samples"][-1]
            size = sum(v[0] for v in s["areas"].values()) - r["reclaimable"][name][0]
            files = sum(v[1] for v in s["areas"].values()) - r["reclaimable"][name][1]
            cells.append(f"{mb(size)} / {files:,} (x{size / runs_data['innodb']:.2f} InnoDB)")
        lines.append(f"| total after GC with retention {name} (dry run) | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="2 minutes")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="one stream each; deletion_vectors@R: with compaction ratio R (an experiment)")
    parser.add_argument("--rate", type=int, default=200, help="single-row transactions/s")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--json", help="write the samples here")
    parser.add_argument("--work", help="work directory (default: a temporary one, removed)")
    args = parser.parse_args()
    minutes = 2.0 if args.quick else args.minutes
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-storage-", dir=args.work) as tmp:
        figs, notes, data = run_section(Path(tmp), minutes=minutes, modes=modes, rate=args.rate,
                                        sample_s=args.sample, seed=args.seed)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
    print(table_text(data))
    for f in figs:
        print(f"\n{f.what}: {f.value:,.1f} {f.unit} ({f.detail}); {f.note}")
    for n in notes:
        print(n)
    return 0


if __name__ == "__main__":
    children = {"--stream": stream_child, "--write": writer_child}
    if len(sys.argv) == 3 and sys.argv[1] in children:
        sys.exit(children[sys.argv[1]](json.loads(Path(sys.argv[2]).read_text())))
    sys.exit(main())
