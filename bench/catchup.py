"""Catch-up throughput of the stream job (``available-now``) against raw mysql-replication iteration over the
same binlog range, at 1 and 2 partitions per micro-batch (parallel catch-up), in two cases, each on its own
throwaway server:

- **bulk**: ``--catchup-changes`` row changes (default 2M) on the 6-column table of the engine benchmark, in
  statements of ``--catchup-txn-rows`` rows (one transaction each): half inserts, a quarter updates (two row
  images each: before and after), a quarter deletes;
- **OLTP** (what applications write): ``--catchup-oltp-images`` row images (default 2M) of single-row
  INSERT/UPDATE/DELETE statements in transactions of 1-10 statements over ``--catchup-oltp-tables`` tables
  (``bench/oltp.py``; its binlog shape is checked with ``SHOW BINLOG EVENTS`` before anything is measured).

Each table is planned and every chunk committed with its HW at the start of the range, so the stream emits
every change after it (nothing is dropped by the filter).

- baseline: ``engine_bench.bench_raw_binlog``: one ``BinLogStreamReader``, every row of every rows event
  decoded (``event.rows``), nothing else;
- the stream: ``stream_job.run_stream`` with ``trigger=available-now`` (no mirror refresh: source + changelog
  sink), in a fresh driver process, with ``max_bytes_per_batch`` (64 MiB) and
  ``StreamConfig(catchup_partitions=N, catchup_partition_bytes=B)``; B defaults to a quarter of the batch size
  so every full batch splits. Spark start-up is measured apart.

Per partition: the Spark event log gives each task's executor run time, the changelog files of each batch
(``part-<partition>-...``) its row count: events/s per partition, and the projected scaling (that rate x the
executors) next to the measured rate at 2 partitions. Run in a child: ``python bench/catchup.py --child cfg``.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import Measure, Timer, settle
from engine_bench import bench_compiled_binlog, bench_raw_binlog, load_table
from report import Figure
from spark_runs import SparkSetup, child_session, run_child, say

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

TABLE = "bench.t"
MiB = 2**20
CASES = ("bulk", "oltp")


class ParallelCatchupMissing(RuntimeError):
    """``StreamConfig`` has no ``catchup_partitions``/``catchup_partition_bytes`` (not in this version)."""


def require_catchup_fields() -> None:
    from airflow_provider_mysqlcdc.spark.stream.job import StreamConfig

    names = {f.name for f in dataclasses.fields(StreamConfig)}
    missing = [n for n in ("catchup_partitions", "catchup_partition_bytes") if n not in names]
    if missing:
        raise ParallelCatchupMissing(
            f"StreamConfig has no {', '.join(missing)}: parallel catch-up (spark/stream/binlog_source.py, "
            "stream_job.py) is not in this version of the package; the catch-up benchmark needs it"
        )


# --- shared with the latency benchmark: a table whose chunks are all committed at one position --------------


def binlog_position(settings: Any) -> BinlogPosition:
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

    with connect(settings) as conn:
        status = current_binlog_status(conn, server_info(conn))
    return BinlogPosition(status.file, status.position)


def binlog_bytes(server: Any, start: BinlogPosition, end: BinlogPosition) -> int:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        logs = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    names = [n for n, _ in logs]
    if start.file == end.file:
        return end.pos - start.pos
    sizes = dict(logs)
    first, last = names.index(start.file), names.index(end.file)
    return sizes[start.file] - start.pos + sum(sizes[n] for n in names[first + 1:last]) + end.pos


def commit_plan_at(settings: Any, store_path: Path, table: str, position: BinlogPosition,
                   chunk_size: int) -> int:
    """Plan ``table`` and commit every chunk with LW = HW = ``position`` (no snapshot is written: the stream
    then starts there and emits every change after it). Returns the number of chunks."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables

    with ChunkStore(str(store_path)) as store:
        plan = plan_tables(settings, store, [table], chunk_size=chunk_size)[0]
        for chunk in plan.chunks:
            store.start_chunk(table, plan.generation, chunk.chunk_id)
            store.commit_chunk(table, plan.generation, chunk.chunk_id, rows=0, lw=position, hw=position,
                               output_version="bench")
    return len(plan.chunks)


def password_file(work: Path, password: str) -> Path:
    path = work / "mysql.password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


# --- the binlog range ---------------------------------------------------------------------------------------


@dataclass
class Changes:
    inserts: int
    updates: int
    deletes: int
    transactions: int = 0
    statements: int = 0

    @property
    def rows(self) -> int:
        return self.inserts + self.updates + self.deletes

    @property
    def images(self) -> int:
        """Row images = changelog records: an update is a before (-U) and an after (+U) image."""
        return self.inserts + 2 * self.updates + self.deletes


def write_changes(server: Any, changes: int, txn_rows: int) -> Changes:
    """The bulk case: half inserts of new ids, a quarter updates and a quarter deletes of the loaded rows,
    ``txn_rows`` rows per statement (one transaction each). The table holds ``changes // 2`` rows (ids 1..)
    before."""
    n_ins, n_upd = changes // 2, changes // 4
    out = Changes(n_ins, n_upd, changes - n_ins - n_upd)
    initial = out.updates + out.deletes
    with server.admin() as conn, conn.cursor() as cur:
        for low in range(initial + 1, initial + out.inserts + 1, txn_rows):
            high = min(initial + out.inserts, low + txn_rows - 1)
            cur.execute(
                "INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 100, "
                "'2024-01-01' + INTERVAL seq SECOND, '2024-06-01' + INTERVAL seq SECOND "
                f"FROM bench.seq_{low}_to_{high}"
            )
            out.transactions += 1
        for low in range(1, out.updates + 1, txn_rows):
            cur.execute("UPDATE bench.t SET a = a + 1, b = CONCAT(b, '+') WHERE id BETWEEN %s AND %s",
                        (low, min(out.updates, low + txn_rows - 1)))
            out.transactions += 1
        for low in range(out.updates + 1, initial + 1, txn_rows):
            cur.execute("DELETE FROM bench.t WHERE id BETWEEN %s AND %s",
                        (low, min(initial, low + txn_rows - 1)))
            out.transactions += 1
    out.statements = out.transactions
    return out


# --- the stream, in a child process -------------------------------------------------------------------------


def event_log_tasks(event_dir: Path, app_id: str) -> list[dict[str, Any]]:
    """Finished tasks of the streaming batches, from the Spark event log: batch id, partition, run time."""
    logs = sorted(p for p in event_dir.glob(f"*{app_id}*") if p.is_file())
    if not logs:
        raise RuntimeError(f"no Spark event log of {app_id} in {event_dir}")
    stage_batch: dict[int, int] = {}
    tasks = []
    with logs[0].open(encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                description = (event.get("Properties") or {}).get("spark.job.description") or ""
                match = re.search(r"batch = (\d+)", description)
                if match:
                    for stage in event.get("Stage IDs", []):
                        stage_batch[int(stage)] = int(match.group(1))
            elif kind == "SparkListenerTaskEnd":
                info, metrics = event.get("Task Info", {}), event.get("Task Metrics") or {}
                tasks.append({"stage": int(event.get("Stage ID", -1)), "partition": int(info.get("Index", 0)),
                              "executor": str(info.get("Executor ID")), "failed": bool(info.get("Failed")),
                              "run_s": float(metrics.get("Executor Run Time", 0)) / 1000.0,
                              "wall_s": (info.get("Finish Time", 0) - info.get("Launch Time", 0)) / 1000.0})
    return [{**t, "batch": stage_batch[t["stage"]]} for t in tasks
            if t["stage"] in stage_batch and not t["failed"]]


def partition_rows(output: str, table: str) -> dict[tuple[int, int], int]:
    """(batch id, partition) -> changelog records, from the
    committed batches' files (``part-<partition>-``)."""
    from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
    from airflow_provider_mysqlcdc.engine.model.tables import TableId

    tid = TableId.parse(table)
    out: dict[tuple[int, int], int] = {}
    for batch_id in committed_batch_ids(output, tid):
        for path in read_batch(output, tid, batch_id).files:
            match = re.match(r"part-(\d+)-", Path(path).name)
            if match is None:
                raise RuntimeError(
                    f"changelog file {path} does not name its partition (part-<partition>-...)"
                )
            part = int(match.group(1))
            out[(batch_id, part)] = out.get((batch_id, part), 0) + pq.ParquetFile(path).metadata.num_rows
    return out


def child(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    require_catchup_fields()
    from airflow_provider_mysqlcdc.spark.stream.job import StreamConfig, run_stream

    label, root, server_pid = cfg["label"], cfg["client_root"], cfg["server_pid"]
    event_dir = Path(cfg["event_dir"])
    event_dir.mkdir(parents=True, exist_ok=True)
    with Timer(server_pid, root) as t_start:
        spark = child_session(cfg, f"mysqlcdc catch-up bench {label}",
                              {"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_dir.as_uri(),
                               "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"})
        p = cfg["executors"]
        assert spark.sparkContext.parallelize(range(p), p).map(lambda x: x + 1).sum() == p * (p + 1) // 2
    say(f"[catch-up {label}] Spark started in {t_start.m.wall:.1f}s")
    config = StreamConfig(
        mysql_url=cfg["mysql_url"], tables=tuple(cfg["tables"]), chunk_store=cfg["store"],
        output=cfg["output"], checkpoint=cfg["checkpoint"], password_file=cfg["password_file"],
        max_bytes_per_batch=cfg["max_bytes_per_batch"], catchup_partitions=cfg["partitions"],
        catchup_partition_bytes=cfg["partition_bytes"], warm_executors=cfg.get("warm_executors", True),
    )
    batches: list[dict[str, Any]] = []

    def progress(batch: Any) -> None:
        batches.append({"batch_id": batch.batch_id, "rows": batch.total_rows, "seconds": batch.seconds})
        say(f"[catch-up {label}] {batch.describe()}")

    sink_phases = _time_sink_phases()
    import time
    from datetime import datetime

    from airflow_provider_mysqlcdc.spark.stream import job

    start_query, marks = job._start_query, {}

    def timed_start_query(*args: Any) -> Any:
        marks["start_query"] = time.time()
        query = start_query(*args)
        marks["started"] = time.time()
        return query

    job._start_query = timed_start_query  # type: ignore[assignment]
    try:
        with Timer(server_pid, root) as t_run:
            t0 = time.time()
            run = run_stream(spark, config, on_progress=progress)
            t_end = time.time()
        app_id = spark.sparkContext.applicationId
        durations = [dict(p.durationMs, batch_id=p.batchId, rows=p.numInputRows,
                          at=datetime.fromisoformat(p.timestamp).timestamp() - t0)
                     for p in run.query.recentProgress]
    finally:
        spark.stop()
    say(f"[catch-up {label}] timeline: run_stream {t_end - t0:.2f}s; query start called at "
        f"{marks.get('start_query', t0) - t0:.2f}s, started {marks.get('started', t0) - t0:.2f}s; batches at "
        + ", ".join(f"{d['at']:.2f}+{d.get('triggerExecution', 0) / 1000:.2f}" for d in durations))
    for d in durations:
        phases = sink_phases.get(int(d["batch_id"]), {})
        if "entered_at" in phases:  # seconds from the trigger's start to the sink's call, and after it
            start = t0 + d["at"]
            phases["to_sink"] = phases.pop("entered_at") - start
            phases["after_sink"] = start + d.get("triggerExecution", 0) / 1000 - phases.pop("left_at")
        say(f"[catch-up {label}] batch {d['batch_id']} ({d['rows']} rows): "
            + ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if k not in ("batch_id", "rows", "at"))
            + (" | sink: " + ", ".join(f"{k} {v * 1000:.0f}" for k, v in phases.items()) if phases else ""))
    rows = sum(b["rows"] for b in batches)
    tasks = event_log_tasks(event_dir, app_id)
    per_part: dict[tuple[int, int], int] = {}
    for table in cfg["tables"]:
        for key, n in partition_rows(cfg["output"], table).items():
            per_part[key] = per_part.get(key, 0) + n
    for task in tasks:
        task["rows"] = per_part.get((task["batch"], task["partition"]), 0)
    Path(cfg["result"]).write_text(json.dumps({
        "rows": rows, "batches": batches, "tasks": tasks, "startup": dataclasses.asdict(t_start.m),
        "run": dataclasses.asdict(t_run.m), "durations": durations,
        "sink_phases": {str(k): v for k, v in sink_phases.items()},
    }))
    return 0


def _time_sink_phases() -> dict[int, dict[str, float]]:
    """Seconds of the sink's driver steps per batch id (``ChangelogCommit.begin``/``commit``, the write job
    between them as ``write``): wrapped in this bench child only."""
    import time

    from airflow_provider_mysqlcdc.engine.lake.changelog_commit import ChangelogCommit

    phases: dict[int, dict[str, float]] = {}
    begin, commit = ChangelogCommit.begin, ChangelogCommit.commit

    def timed_begin(self: Any, batch_id: int) -> Any:
        t0 = time.monotonic()
        attempt = begin(self, batch_id)
        now = time.monotonic()
        phases[batch_id] = {"begin": now - t0, "_began": now}
        return attempt

    def timed_commit(self: Any, attempt: Any, *args: Any) -> Any:
        t0 = time.monotonic()
        out = commit(self, attempt, *args)
        p = phases.setdefault(attempt.batch_id, {})
        p["write"] = t0 - p.pop("_began", t0)
        p["commit"] = time.monotonic() - t0
        return out

    from airflow_provider_mysqlcdc.spark.stream.changelog_sink import ChangelogSink

    call = ChangelogSink.__call__

    def timed_call(self: Any, df: Any, batch_id: int) -> None:
        entered = time.time()
        call(self, df, batch_id)
        p = phases.setdefault(batch_id, {})
        p["entered_at"], p["left_at"] = entered, time.time()

    ChangelogSink.__call__ = timed_call  # type: ignore[method-assign]
    ChangelogCommit.begin = timed_begin  # type: ignore[method-assign]
    ChangelogCommit.commit = timed_commit  # type: ignore[method-assign]
    return phases


# --- the section --------------------------------------------------------------------------------------------


@dataclass
class CatchupResult:
    partitions: int
    label: str
    rows: int
    batches: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    startup: Measure
    run: Measure
    split_batches: int = 0
    per_partition_rate: float = 0.0  # records / executor run time, over the partitions that read rows
    task_rates: list[float] = field(default_factory=list)


@dataclass
class Case:
    """One binlog range to catch up: its tables, what was written, where it lies."""

    name: str  # "bulk" or "OLTP"
    tables: list[str]
    made: Changes
    start: BinlogPosition
    end: BinlogPosition
    size: int  # binlog bytes
    scope: str  # the range in words, for the notes
    shape: str = ""  # SHOW BINLOG EVENTS' counts (the OLTP case)


def prepare_bulk(server: Any, settings: Any, store: Path, *, changes: int, txn_rows: int) -> Case:
    initial = changes - changes // 2
    say(f"catch-up (bulk): loading {initial:,} rows, then {changes:,} row changes ...")
    load_table(server, initial)
    start = binlog_position(settings)
    commit_plan_at(settings, store, TABLE, start, chunk_size=max(initial // 8, 1000))
    made = write_changes(server, changes, txn_rows)
    end = binlog_position(settings)
    size = binlog_bytes(server, start, end)
    return Case("bulk", [TABLE], made, start, end, size,
                f"{made.rows:,} row changes = {made.images:,} row images ({made.transactions:,} txns of "
                f"{txn_rows:,} rows; {size / MiB:,.0f} MiB binlog)")


def prepare_oltp(server: Any, settings: Any, store: Path, *, images: int, tables: int, seed: int) -> Case:
    import oltp

    names = oltp.table_names(tables)
    rows = oltp.preload_rows(images, tables)
    say(f"catch-up (OLTP): loading {tables} tables x {rows:,} rows, then {images:,} row images of single-row "
        "statements ...")
    oltp.load_tables(server, names, rows)
    start = binlog_position(settings)
    for name in names:
        commit_plan_at(settings, store, name, start, chunk_size=max(rows // 8, 1000))
    with Timer(server.process.pid) as t_write:
        made = oltp.write_oltp(server, names, rows, images, seed)
    end = binlog_position(settings)
    size = binlog_bytes(server, start, end)
    say(f"catch-up (OLTP): {made.statements:,} statements in {made.transactions:,} transactions written in "
        f"{t_write.m.wall:.1f}s ({made.transactions / t_write.m.wall:,.0f} txns/s); checking the binlog ...")
    shape = oltp.binlog_shape(server, start, end)
    oltp.check_shape(shape, made)
    return Case("OLTP", names, made, start, end, size,
                f"{made.rows:,} single-row statements = {made.images:,} row images "
                f"({made.transactions:,} txns of 1-{oltp.MAX_STATEMENTS} statements over {tables} tables; "
                f"{size / MiB:,.0f} MiB binlog)",
                shape=shape.describe())


def run_section(setup: SparkSetup, work: Path, *, changes: int, txn_rows: int, max_bytes: int,
                partition_bytes: int | None, oltp_images: int = 0, oltp_tables: int = 3, seed: int = 1,
                cases: tuple[str, ...] = CASES,
                partitions: tuple[int, ...] = (1, 2)) -> tuple[list[Figure], list[str]]:
    """Both cases (``cases``), each on its own server: figures and notes, the bulk case first."""
    require_catchup_fields()
    partition_bytes = partition_bytes or max(max_bytes // 4, 1)
    all_figures: list[Figure] = []
    all_notes: list[str] = []
    for name in cases:
        if name == "oltp" and oltp_images <= 0:
            continue
        f, n = run_case(setup, work / name, name, changes=changes, txn_rows=txn_rows, max_bytes=max_bytes,
                        partition_bytes=partition_bytes, oltp_images=oltp_images, oltp_tables=oltp_tables,
                        seed=seed, partitions=partitions)
        all_figures += f
        all_notes += n
    return all_figures, all_notes


def run_case(setup: SparkSetup, work: Path, name: str, *, changes: int, txn_rows: int, max_bytes: int,
             partition_bytes: int, oltp_images: int, oltp_tables: int, seed: int,
             partitions: tuple[int, ...]) -> tuple[list[Figure], list[str]]:
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer

    work.mkdir(parents=True, exist_ok=True)
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        assert server.process is not None
        pid = server.process.pid
        settings = MySQLSettings.from_url(server.cdc_url)
        store = work / "chunks.db"
        if name == "bulk":
            case = prepare_bulk(server, settings, store, changes=changes, txn_rows=txn_rows)
        else:
            case = prepare_oltp(server, settings, store, images=oltp_images, tables=oltp_tables, seed=seed)
        made, start, end = case.made, case.start, case.end
        settle(pid)
        say(f"catch-up ({case.name}): {case.scope}; raw mysql-replication ...")
        with Timer(pid) as t_raw:
            n_raw, _ = bench_raw_binlog(settings, server, start, end)
        assert n_raw == made.images, (n_raw, made.images)
        say(f"catch-up ({case.name}): raw {n_raw / t_raw.m.wall:,.0f} row images/s; the compiled decoder ...")
        settle(pid)
        with Timer(pid) as t_compiled:
            n_compiled, _ = bench_compiled_binlog(settings, server, start, end,
                                                  [TableId.parse(t) for t in case.tables])
        assert n_compiled == made.images, (n_compiled, made.images)
        say(f"catch-up ({case.name}): compiled decoder {n_compiled / t_compiled.m.wall:,.0f} row images/s")
        pw = password_file(work, settings.password)
        results = []
        for p in partitions:
            run_dir = work / f"catchup-{p}"
            run_dir.mkdir()
            shutil.copy(store, run_dir / "chunks.db")
            cfg = {**setup.child_config(p), "executors": p, "partitions": p, "tables": case.tables,
                   "partition_bytes": partition_bytes, "max_bytes_per_batch": max_bytes,
                   "mysql_url": settings.redacted_url(), "password_file": str(pw),
                   "store": str(run_dir / "chunks.db"), "output": str(run_dir / "out"),
                   "checkpoint": str(run_dir / "checkpoint"), "event_dir": str(run_dir / "events"),
                   "server_pid": pid}
            say(f"catch-up ({case.name}): stream, {p} partition(s), {setup.label(p)} ...")
            out = run_child(Path(__file__).resolve(), cfg, run_dir)
            assert out["rows"] == made.images, (case.name, p, out["rows"], made.images)
            results.append(summarize(p, setup.label(p), out))
            shutil.rmtree(run_dir / "out", ignore_errors=True)
    decode = decode_figure(case, t_raw.m, n_raw, t_compiled.m, n_compiled)
    notes = [(f"Catch-up, OLTP range: {case.shape}; the raw reader's row images ({n_raw:,}) = inserts + "
              "2 x updates + deletes, so each rows event holds one row.")] if case.shape else []
    return ([decode, *figures(case, results, t_raw.m, n_raw, max_bytes, partition_bytes)],
            notes + task_notes(case, results))


def summarize(p: int, label: str, out: dict[str, Any]) -> CatchupResult:
    tasks = [t for t in out["tasks"] if t["rows"] > 0]
    by_batch: dict[int, int] = {}
    for t in tasks:
        by_batch[t["batch"]] = by_batch.get(t["batch"], 0) + 1
    run_s = sum(t["run_s"] for t in tasks)
    return CatchupResult(
        p, label, out["rows"], out["batches"], out["tasks"], Measure(**out["startup"]), Measure(**out["run"]),
        split_batches=sum(1 for n in by_batch.values() if n > 1),
        per_partition_rate=sum(t["rows"] for t in tasks) / run_s if run_s else 0.0,
        task_rates=[t["rows"] / t["run_s"] for t in tasks if t["run_s"] > 0],
    )


def task_notes(case: Case, results: list[CatchupResult]) -> list[str]:
    """Per batch and partition: records, task run time, rate (from the Spark event log)."""
    lines = []
    for r in results:
        parts = []
        for t in sorted(r.tasks, key=lambda t: (t["batch"], t["partition"])):
            rate = t["rows"] / t["run_s"] if t["run_s"] else 0.0
            parts.append(f"b{t['batch']}/p{t['partition']} {t['rows']:,} in {t['run_s']:.1f} s "
                         f"= {rate:,.0f}/s")
        if len(parts) > 12:  # many small batches (the OLTP range in small batches): the first and last
            parts = [*parts[:6], f"... {len(parts) - 12} more ...", *parts[-6:]]
        lines.append(f"Catch-up ({case.name}) tasks at {r.partitions} partition(s) (batch/partition: "
                     f"records in task run time): {'; '.join(parts) or 'none'}.")
    return lines


def decode_figure(case: Case, raw: Measure, n_raw: int, compiled: Measure, n_compiled: int) -> Figure:
    """Decoding alone: the compiled decoder against mysql-replication, both over the whole range on one
    connection (framing by mysql-replication in both)."""
    made = case.made
    return Figure(
        "catch-up", f"{case.name}: raw decode: the compiled rows decoder (`engine/binlog/rows_decoder`), "
        "columnar normalised values", n_compiled / compiled.wall, "events/s",
        f"{made.rows / compiled.wall:,.0f} row changes/s",
        compiled, baseline_what="raw mysql-replication `BinLogStreamReader`, every `event.rows` decoded",
        baseline=n_raw / raw.wall, baseline_detail=f"{made.rows / raw.wall:,.0f} row changes/s",
        baseline_cpu=raw, note=f"{made.images:,} row images, {case.size / MiB:,.0f} MiB binlog"
        + ("; target >= 10x" if case.name == "bulk" else ""),
        short=f"{case.name}: raw decode, compiled")


TARGETS = {"bulk": ">= 4x", "OLTP": ">= 3x"}  # issue 37, at 1 partition


def figures(case: Case, results: list[CatchupResult], raw: Measure, n_raw: int, max_bytes: int,
            partition_bytes: int) -> list[Figure]:
    made = case.made
    raw_rate = n_raw / raw.wall
    base: dict[str, Any] = {
        "baseline_what": "raw mysql-replication `BinLogStreamReader`, 1 connection, "
                         "every `event.rows` decoded",
        "baseline": raw_rate, "baseline_detail": f"{made.rows / raw.wall:,.0f} row changes/s",
        "baseline_cpu": raw}
    scope = f"{case.scope}, batches of {max_bytes / MiB:g} MiB"
    out = []
    for r in results:
        rate = r.rows / r.run.wall
        n_batches = len(r.batches)
        split = (f"; {r.split_batches} of {n_batches} batches split "
                 f"(partition >= {partition_bytes / MiB:g} MiB)"
                 if r.partitions > 1 else f"; {n_batches} batches")
        target = f"; target {TARGETS[case.name]}" if r.partitions == 1 and case.name in TARGETS else ""
        out.append(Figure(
            "catch-up", f"{case.name}: stream job, `available-now`, **{r.partitions} "
                        f"partition{'s' if r.partitions > 1 else ''}"
            f"** ({r.label})", rate, "events/s", f"{made.rows / r.run.wall:,.0f} row changes/s", r.run,
            note=f"{scope}{split}; Spark start-up {r.startup.wall:.0f} s not included{target}",
            short=f"{case.name}: stream, {r.partitions} partition(s)", **base))
    for r in results:
        rates = sorted(r.task_rates)
        spread = f"tasks {rates[0]:,.0f} .. {rates[-1]:,.0f}/s" if rates else "no task figures"
        out.append(Figure(
            "catch-up", f"{case.name}: per partition at {r.partitions} "
            f"partition{'s' if r.partitions > 1 else ''}: records / task run time (Spark event log)",
            r.per_partition_rate, "events/s",
            f"{len(r.task_rates)} tasks", cpu_text="(in the row above)", note=spread,
            short=f"{case.name}: per partition, at {r.partitions}", **base))
    one = next((r for r in results if r.partitions == 1), None)
    for r in results:
        if r.partitions < 2 or one is None:
            continue
        projected = one.per_partition_rate * r.partitions
        measured = r.rows / r.run.wall
        if not projected:
            continue
        out.append(Figure(
            "catch-up",
            f"{case.name}: projected: per-partition rate at 1 partition x {r.partitions} executors",
            projected, "events/s",
            f"measured at {r.partitions}: {measured:,.0f}/s = {measured / projected:.0%} of it",
            cpu_text="-", note="linear scaling if the server and the cores kept up",
            short=f"{case.name}: projected, {r.partitions} executors", **base))
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
