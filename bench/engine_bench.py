"""Engine throughput against baselines measured in the same run, on a throwaway MariaDB.

- chunk read (Arrow batches, consistent snapshot) vs a plain ``SELECT *`` with the same driver (pymysql,
  unbuffered cursor, tuples), on a 1M-row 6-column table;
- stream (binlog reader + stream filter) vs raw mysql-replication iteration over the same binlog range.

Prints one markdown table of figures and ratios. Usage: ``python bench/engine_bench.py [--rows 1000000]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import pymysql.cursors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.support.servers.numbers

from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
from airflow_provider_mysqlcdc.testing.server_process import ThrowawayServer


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu(server: MariaDBServer) -> float:
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timer:
    def __init__(self, server: MariaDBServer) -> None:
        self.server = server

    def __enter__(self) -> Self:
        self.wall, self.cpu, self.db = time.perf_counter(), cpu_seconds(), server_cpu(self.server)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = cpu_seconds() - self.cpu
        self.db = server_cpu(self.server) - self.db

    def shares(self) -> str:
        return f"client {self.cpu / self.wall:.0%} / server {self.db / self.wall:.0%} of a core"


def sequence(server: ThrowawayServer, low: int, high: int, database: str = "bench") -> str:
    """A table of ``seq`` = ``low``..``high`` for ``INSERT ... SELECT`` on either flavor: MariaDB's Sequence
    engine table ``seq_LOW_to_HIGH``, or on Oracle MySQL, which has no such engine, a derived table of digits
    (``tests/support/servers.numbers``, at most 10^6 rows)."""
    if server.FLAVOR != "mysql":
        return f"{database}.seq_{low}_to_{high}"
    from tests.support.servers import numbers

    return f"(SELECT seq + {low - 1} AS seq FROM {numbers(high - low + 1)}) AS seq_{low}_to_{high}"


def load_table(server: ThrowawayServer, rows: int) -> None:
    """``bench.t``: ``rows`` rows of 6 columns (BIGINT key 1..rows), on either flavor."""
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(
            "CREATE TABLE bench.t (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32) NOT NULL, "
            "c DECIMAL(12,2) NOT NULL, d DATETIME(6) NOT NULL, e TIMESTAMP(6) NULL)"
        )
        step = 200_000
        for low in range(1, rows + 1, step):
            high = min(rows, low + step - 1)
            cur.execute(
                "INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 100, "
                "'2024-01-01' + INTERVAL seq SECOND, '2024-06-01' + INTERVAL seq SECOND "
                f"FROM {sequence(server, low, high)}"
            )


def bench_select(settings: MySQLSettings, server: MariaDBServer) -> tuple[int, Timer]:
    with Timer(server) as t, connect(settings) as conn, conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute("SELECT * FROM bench.t")
        n = 0
        while rows := cur.fetchmany(4096):
            n += len(rows)
    return n, t


def bench_chunk_read(settings: MySQLSettings, server: MariaDBServer,
                     plan: ChunkPlan) -> tuple[int, Timer, float]:
    with connect(settings) as conn:
        schema = load_schema(conn, plan.table)
    n = 0
    peak = 0
    with Timer(server) as t:
        for chunk in plan.chunks:
            read = ChunkRead(settings, schema, plan, chunk)
            for batch in read.batches():
                n += batch.num_rows
            peak = max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return n, t, peak / 1024


def bench_raw_binlog(settings: MySQLSettings, server: MariaDBServer, start: BinlogPosition,
                     end: BinlogPosition) -> tuple[int, Timer]:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    n = 0
    with Timer(server) as t:
        stream = BinLogStreamReader(
            connection_settings=settings.replication_kwargs(), server_id=allocate_server_id(settings, 3),
            log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False, is_mariadb=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )
        for event in stream:
            if (int(stream.log_file.rsplit(".", 1)[1]), event.packet.log_pos) > end.key:
                break
            for row in event.rows:
                n += 2 if isinstance(event, UpdateRowsEvent) else 1
        stream.close()
    return n, t


def bench_compiled_binlog(settings: MySQLSettings, server: MariaDBServer, start: BinlogPosition,
                          end: BinlogPosition, table: TableId | list[TableId]) -> tuple[int, Timer]:
    """The same range as ``bench_raw_binlog``, every rows event of ``table`` (or of each table of a list)
    decoded by the compiled decoder (columnar, normalised values: what the stream gets), mysql-replication
    only framing the events."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

    from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import EventLayout, decode_event

    tables = table if isinstance(table, list) else [table]
    with connect(settings) as conn:
        schemas = {(t.database, t.table): load_schema(conn, t) for t in tables}
    layouts: dict[int, EventLayout] = {}
    n = 0
    with Timer(server) as t:
        stream = BinLogStreamReader(
            connection_settings=settings.replication_kwargs(), server_id=allocate_server_id(settings, 3),
            log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False, is_mariadb=False,
            only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )
        for event in stream:
            if (int(stream.log_file.rsplit(".", 1)[1]), event.packet.log_pos) > end.key:
                break
            if isinstance(event, TableMapEvent):
                if event.table_id not in layouts:
                    layout, reason = EventLayout.of(event, schemas[(event.schema, event.table)])
                    if layout is None:
                        raise RuntimeError(f"the compiled decoder cannot read {event.schema}.{event.table}: "
                                           f"{reason}")
                    layouts[event.table_id] = layout
                continue
            decoded = decode_event(event, layouts[event.table_id])
            n += decoded.row_count * len(decoded.halves)
        stream.close()
    return n, t


def bench_stream(settings: MySQLSettings, server: MariaDBServer, store: ChunkStore, table: TableId,
                 start: BinlogPosition, end: BinlogPosition) -> tuple[int, int, Timer]:
    stream = ChangeStream(settings, store, [table], allocate_server_id(settings, 4))
    offset, rows, emitted = BinlogOffset.at(start), 0, 0
    with Timer(server) as t:
        while True:
            batch = stream.read(offset, end, max_rows=50_000)
            rows += batch.rows_read
            emitted += len(batch.records)
            offset = batch.end
            if batch.rows_read == 0 or offset.position.key >= end.key:
                break
    stream.close()
    return rows, emitted, t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=200_000, help="row changes in the binlog range")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        settings = MySQLSettings.from_url(server.cdc_url)
        print(f"loading {args.rows:,} rows ...", file=sys.stderr)
        load_table(server, args.rows)
        table = TableId("bench", "t")

        n_sel, t_sel = bench_select(settings, server)
        store = ChunkStore(str(Path(tempfile.mkdtemp()) / "chunks.db"))
        plan = plan_tables(settings, store, ["bench.t"], chunk_size=8096)[0]
        whole = ChunkPlan(table, 0, plan.key_columns, (Chunk(0, None, None),), "even", args.rows, args.rows)
        n_one, t_one, mem_one = bench_chunk_read(settings, server, whole)
        n_chunks, t_chunks, _ = bench_chunk_read(settings, server, plan)
        assert n_sel == n_one == n_chunks == args.rows, (n_sel, n_one, n_chunks)

        # A binlog range of row changes: updates (2 images each) of the table in 10k-row statements.
        with connect(settings) as conn:
            info = server_info(conn)
            status = current_binlog_status(conn, info)
        start = BinlogPosition(status.file, status.position)
        with server.admin() as conn, conn.cursor() as cur:
            for low in range(1, args.changes // 2 + 1, 10_000):
                cur.execute("UPDATE bench.t SET a = a + 1 WHERE id BETWEEN %s AND %s", (low, low + 9_999))
        with connect(settings) as conn:
            status = current_binlog_status(conn, info)
        end = BinlogPosition(status.file, status.position)

        n_raw, t_raw = bench_raw_binlog(settings, server, start, end)
        # Every chunk committed at the end of the range: each row is located in its chunk and dropped.
        for chunk in plan.chunks:
            store.start_chunk("bench.t", plan.generation, chunk.chunk_id)
            store.commit_chunk("bench.t", plan.generation, chunk.chunk_id, rows=0, lw=end, hw=end,
                               output_version="bench")
        n_drop, emitted_drop, t_drop = bench_stream(settings, server, store, table, start, end)
        # A new plan generation committed at the start of the range: every row is emitted.
        gen2 = store.create_plan("bench.t", {**plan.to_dict(), "generation": plan.generation + 1})
        for chunk in plan.chunks:
            store.start_chunk("bench.t", gen2, chunk.chunk_id)
            store.commit_chunk("bench.t", gen2, chunk.chunk_id, rows=0, lw=start, hw=start,
                               output_version="b")
        n_emit, emitted_emit, t_emit = bench_stream(settings, server, store, table, start, end)
        assert n_raw == n_drop == n_emit, (n_raw, n_drop, n_emit)
        assert emitted_emit == n_emit and emitted_drop == 0, (emitted_emit, emitted_drop)

    sel_rate, one_rate, chunk_rate = n_sel / t_sel.wall, n_one / t_one.wall, n_chunks / t_chunks.wall
    raw_rate, drop_rate, emit_rate = n_raw / t_raw.wall, n_drop / t_drop.wall, n_emit / t_emit.wall
    figures.update(select_rows_s=sel_rate, chunk_read_rows_s=one_rate, chunked_rows_s=chunk_rate,
                   raw_binlog_rows_s=raw_rate, stream_drop_rows_s=drop_rate, stream_emit_rows_s=emit_rate,
                   chunk_read_peak_rss_mb=mem_one)
    print(f"\n### Engine throughput ({args.rows:,}-row table, {n_raw:,} binlog row images; "
          f"{os.cpu_count()} cores)\n")
    print("| measurement | figure | baseline (same run) | ratio | CPU share |")
    print("|---|---|---|---|---|")
    print(f"| plain `SELECT *`, pymysql unbuffered, tuples | {sel_rate:,.0f} rows/s | - | 1.00 "
          f"| {t_sel.shares()} |")
    print(f"| chunk read, whole table as one chunk, Arrow batches | {one_rate:,.0f} rows/s | {sel_rate:,.0f} "
          f"rows/s | {one_rate / sel_rate:.2f} | {t_one.shares()} |")
    print(f"| chunk reads, {len(plan.chunks)} chunks of 8096 rows, one after another | {chunk_rate:,.0f} "
          f"rows/s | {sel_rate:,.0f} rows/s | {chunk_rate / sel_rate:.2f} | {t_chunks.shares()} |")
    print(f"| raw mysql-replication iteration | {raw_rate:,.0f} rows/s | - | 1.00 | {t_raw.shares()} |")
    print(f"| stream: reader + filter, every row located and dropped | {drop_rate:,.0f} rows/s | "
          f"{raw_rate:,.0f} rows/s | {drop_rate / raw_rate:.2f} | {t_drop.shares()} |")
    print(f"| stream: reader + filter, every row emitted | {emit_rate:,.0f} rows/s | {raw_rate:,.0f} rows/s "
          f"| {emit_rate / raw_rate:.2f} | {t_emit.shares()} |")
    print(f"\npeak RSS of the benchmark process after the whole-table chunk read: {mem_one:,.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
