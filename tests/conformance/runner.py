"""Runs conformance tables through both read paths and through the whole pipeline under concurrent writes.

For a group of tables (``TableSpec``):

1. create them; write the initial rows (SQL literals, in the spec's sql_mode) between two recorded binlog
   positions;
2. *value identity*: read those rows by the snapshot's SELECT (``values.select_list`` +
   ``snapshot_normalizer``, as the CDC user) and from the binlog (``BinlogReader``), in insertion order;
3. *pipeline*: plan with a small chunk size, read the chunks while a background writer (seeded) and
   interleaved writes (same seed) insert, update, move keys and delete; open the stream, write more, pump,
   stop the writer, write more, catch up; keep ``mirror(table)`` and ``source(table)``.

Nothing is asserted here: the results are returned (errors as text), and the tests judge them per case, so one
broken column does not hide the verdict on the others.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import struct
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql

from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import (
    COMPARE,
    compared_images,
    decoder_mode,
    fallback_reasons,
)
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema, quote_ident
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkReadOptions
from airflow_provider_mysqlcdc.engine.snapshot.native_read import columns as native_columns
from airflow_provider_mysqlcdc.engine.snapshot.native_read import date_guard
from airflow_provider_mysqlcdc.engine.snapshot.native_read import session as native_session
from airflow_provider_mysqlcdc.engine.snapshot.native_read.select import NativeReadFailed, NativeSelect
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest, lake_digest
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import digest_select
from tests.conformance.catalogue import NULL, Gen, Literal
from tests.support.engine_harness import Pipeline

RETRYABLE = {1213, 1205}  # deadlock, lock wait timeout: the statement had no effect
IDENTITY_READER_SLOT = 1  # the Pipeline's stream uses slot 0


@dataclass
class ValueColumn:
    name: str
    ddl: str
    gen: Gen
    edges: tuple[Literal, ...] = ()


@dataclass
class TableSpec:
    """One table of a conformance group.

    ``key_columns`` with ``key_pool`` (tuples of literals) are the chunk key; they are the primary key unless
    ``id_column`` is given (then that column, from ``id_pool``, is the primary key and the key columns are a
    plain nullable chunk key) or ``primary_key`` is False (no primary key: a multiset of rows).
    """

    name: str
    key_columns: list[tuple[str, str]]
    key_pool: list[tuple[Literal, ...]]
    value_columns: list[ValueColumn]
    computed_columns: list[tuple[str, str]] = field(default_factory=list)
    primary_key: bool = True
    id_column: tuple[str, str] | None = None
    id_pool: list[Literal] = field(default_factory=list)
    sql_mode: str | None = None
    chunk_key: str | None = None
    initial_rows: int = 30
    table_options: str = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    edge_rows: bool = True  # the first rows take each column's edge values in turn
    pipeline: bool = True  # False: only the value identity of the initial rows is checked
    key_rewrites: tuple[str, ...] = ()  # SQL expressions of ``{col}`` a key may be rewritten to in place

    def create_sql(self, database: str) -> str:
        cols = [f"{quote_ident(n)} {ddl}" for n, ddl in self.key_columns]
        if self.id_column:
            cols.append(f"{quote_ident(self.id_column[0])} {self.id_column[1]}")
        cols.append("`seq` INT NOT NULL DEFAULT 0")
        cols += [f"{quote_ident(c.name)} {c.ddl}" for c in self.value_columns]
        cols += [f"{quote_ident(n)} {ddl}" for n, ddl in self.computed_columns]
        keys = ", ".join(quote_ident(n) for n, _ in self.key_columns)
        if self.primary_key and not self.id_column:
            cols.append(f"PRIMARY KEY ({keys})")
        else:
            cols.append(f"KEY `ck` ({keys})")
        return f"CREATE TABLE {TableId(database, self.name).quoted} ({', '.join(cols)}) {self.table_options}"

    @property
    def table_key(self) -> list[str]:
        """Columns a writer addresses one row by."""
        if self.id_column:
            return [self.id_column[0]]
        return [n for n, _ in self.key_columns]


class Ops:
    """Seeded statements for one table: inserts, updates, key moves, deletes, multi-row statements."""

    def __init__(self, spec: TableSpec, database: str) -> None:
        self.spec = spec
        self.table = TableId(database, spec.name).quoted
        self.seq = 1000

    def _row_values(self, rng: random.Random, edges: int | None = None) -> list[Literal]:
        out = []
        for c in self.spec.value_columns:
            if edges is not None and edges < len(c.edges):  # the first rows hold the edge values
                out.append(c.edges[edges])
            elif c.edges and rng.random() < 0.15:
                out.append(rng.choice(c.edges))
            else:
                out.append(c.gen(rng))
        return out

    def insert(self, rng: random.Random, key: tuple[Literal, ...], ident: Literal | None, seq: int,
               edges: int | None = None) -> str:
        names = [n for n, _ in self.spec.key_columns]
        lits = list(key)
        if self.spec.id_column:
            names.append(self.spec.id_column[0])
            lits.append(ident or NULL)
        names.append("seq")
        lits.append(str(seq))
        names += [c.name for c in self.spec.value_columns]
        lits += self._row_values(rng, edges)
        verb = "INSERT IGNORE" if self.spec.primary_key or self.spec.id_column else "INSERT"
        return (f"{verb} INTO {self.table} ({', '.join(quote_ident(n) for n in names)}) "
                f"VALUES ({', '.join(lits)})")

    def initial(self, rng: random.Random) -> list[str]:
        spec = self.spec
        n = spec.initial_rows
        if spec.primary_key and not spec.id_column:  # distinct keys (the server still decides equality)
            keys = rng.sample(spec.key_pool, min(n, len(spec.key_pool)))
        else:  # a plain chunk key repeats
            keys = [rng.choice(spec.key_pool) for _ in range(n)]
        idents = spec.id_pool[:n] if spec.id_column else [None] * len(keys)
        return [self.insert(rng, k, i, seq + 1, edges=seq if spec.edge_rows else None)
                for seq, (k, i) in enumerate(zip(keys, idents))]

    def _where(self, rng: random.Random) -> str:
        spec = self.spec
        if spec.id_column:
            return f"{quote_ident(spec.id_column[0])} = {rng.choice(spec.id_pool)}"
        names = [n for n, _ in spec.key_columns]
        key = rng.choice(spec.key_pool)
        if not spec.primary_key:
            return " AND ".join(f"{quote_ident(n)} <=> {v}" for n, v in zip(names, key))
        if len(names) == 1:
            return f"{quote_ident(names[0])} = {key[0]}"
        return f"({', '.join(quote_ident(n) for n in names)}) = ({', '.join(key)})"

    def _limit(self) -> str:
        return "" if self.spec.primary_key or self.spec.id_column else " LIMIT 1"

    def statement(self, rng: random.Random) -> str:
        spec = self.spec
        kind = rng.random()
        if kind < 0.35:
            self.seq += 1
            ident = rng.choice(spec.id_pool) if spec.id_column else None
            return self.insert(rng, rng.choice(spec.key_pool), ident, self.seq)
        if kind < 0.55:
            cols = rng.sample(spec.value_columns, min(len(spec.value_columns), rng.randint(1, 4)))
            row = dict(zip([c.name for c in spec.value_columns], self._row_values(rng)))
            sets = ", ".join(f"{quote_ident(c.name)} = {row[c.name]}" for c in cols)
            return f"UPDATE IGNORE {self.table} SET {sets} WHERE {self._where(rng)}{self._limit()}"
        if kind < 0.75:  # key move (or chunk-key move): a delete and an insert for the mirror
            names = [n for n, _ in spec.key_columns]
            new = rng.choice(spec.key_pool)
            pick = range(len(names)) if rng.random() < 0.5 else [rng.randrange(len(names))]
            sets = ", ".join(f"{quote_ident(names[i])} = {new[i]}" for i in pick)
            return f"UPDATE IGNORE {self.table} SET {sets} WHERE {self._where(rng)}{self._limit()}"
        if kind < 0.82:
            return f"DELETE FROM {self.table} WHERE {self._where(rng)}{self._limit()}"
        if kind < 0.9 and spec.key_rewrites:  # a key rewritten in place: often collation-equal to itself
            name, _ = rng.choice(spec.key_columns)
            expr = rng.choice(spec.key_rewrites).format(col=quote_ident(name))
            return (f"UPDATE IGNORE {self.table} SET {quote_ident(name)} = {expr} "
                    f"WHERE {self._where(rng)}{self._limit()}")
        order = ", ".join(quote_ident(n) for n in spec.table_key)
        if rng.random() < 0.5:
            return (f"UPDATE IGNORE {self.table} SET `seq` = `seq` + 1 "
                    f"ORDER BY {order} LIMIT {rng.randint(2, 5)}")
        return f"DELETE FROM {self.table} ORDER BY {order} DESC LIMIT 1"

    def transaction(self, rng: random.Random) -> list[str]:
        return [self.statement(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]


# Oracle MySQL refuses an invalid date literal in a comparison ('9999-11-31', error 1525) even under a legacy
# sql_mode that stores it as a zero date: a writer's statement that does so fails, as the application's would
REFUSED_STATEMENTS = {1525}


class Sessions:
    """Admin sessions by sql_mode (None: the server's default)."""

    def __init__(self, server: Any, database: str) -> None:
        self.server = server
        self.database = database
        self._conns: dict[str | None, pymysql.connections.Connection] = {}

    def get(self, sql_mode: str | None) -> pymysql.connections.Connection:
        conn = self._conns.get(sql_mode)
        if conn is None:
            conn = self.server.admin(self.database)
            if sql_mode is not None:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
            self._conns[sql_mode] = conn
        return conn

    def run(self, sql_mode: str | None, statements: list[str]) -> None:
        conn = self.get(sql_mode)
        with conn.cursor() as cur:
            for attempt in range(5):
                try:
                    if len(statements) > 1:
                        cur.execute("BEGIN")
                    for s in statements:
                        cur.execute(s)
                    if len(statements) > 1:
                        cur.execute("COMMIT")
                    return
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] in REFUSED_STATEMENTS:  # the application sees an error; nothing written
                        cur.execute("ROLLBACK")
                        return
                    if exc.args[0] not in RETRYABLE:
                        raise
                    cur.execute("ROLLBACK")
                    time.sleep(0.01 * (attempt + 1))

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


class BackgroundWriter:
    """A thread of seeded transactions over a group's tables, paced, until stopped or ``limit`` transactions
    are written (a volume: a slow machine does not write more for the pipeline to catch up with)."""

    def __init__(self, server: Any, database: str, ops: list[Ops], seed: int, pace: float = 0.004,
                 limit: int = 50) -> None:
        self.server, self.database, self.ops, self.seed, self.pace = server, database, ops, seed, pace
        self.limit = limit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"conformance-writer-{seed}", daemon=True)
        self.transactions = 0
        self.error: BaseException | None = None

    def start(self) -> BackgroundWriter:
        self._thread.start()
        return self

    def _run(self) -> None:
        rng = random.Random(self.seed)
        sessions = Sessions(self.server, self.database)
        try:
            while not self._stop.is_set() and self.transactions < self.limit:
                op = rng.choice(self.ops)
                sessions.run(op.spec.sql_mode, op.transaction(rng))
                self.transactions += 1
                time.sleep(self.pace)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            sessions.close()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise RuntimeError(f"background writer failed: {self.error!r}") from self.error
        return self.transactions


# --- results ------------------------------------------------------------------------------------------------


@dataclass
class TableRun:
    spec: TableSpec
    table: TableId
    schema: TableSchema | None = None
    selected: list[tuple] = field(default_factory=list)
    streamed: list[tuple] = field(default_factory=list)
    identity_error: str | None = None
    select_error: str | None = None
    binlog_error: str | None = None
    natively: pa.Table | None = None  # the initial rows as the native chunk reader reads them (Arrow)
    native_error: str | None = None
    native_skipped: str | None = None  # why the native reader leaves this table to the pure-Python one
    native_guarded: bool | None = None  # the native read needed the zero-date guard (date_guard.py)
    mirror: list[tuple] | None = None
    source: list[tuple] | None = None
    writer_transactions: int = 0  # the background writer's transactions over its pipeline run (all tables)
    pipeline_error: str | None = None
    chunks: int = 0
    changes: int = 0  # changelog records of this table
    backfill_events: int = 0  # binlog events the chunk reads corrected their rows with (watermark mode)
    # ``mysqlcdc verify``'s digests of the final source and mirror, per column and of whole rows ("*")
    digests: dict[str, tuple[Digest, Digest]] = field(default_factory=dict)
    digest_error: str | None = None

    def index(self, column: str) -> int:
        assert self.schema is not None
        return self.schema.column_names.index(column)


@dataclass
class GroupRun:
    tables: dict[str, TableRun]
    writer_transactions: int = 0
    seconds: float = 0.0


def _status(conn: pymysql.connections.Connection) -> BinlogPosition:
    status = current_binlog_status(conn, server_info(conn))
    return BinlogPosition(status.file, status.position)


def _error_text(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}"
                  for f in reversed(tb) if "airflow_provider" in f.filename), "")
    return f"{type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")


def read_both_ways(settings: MySQLSettings, run: TableRun, start: BinlogPosition,
                   end: BinlogPosition) -> None:
    """The rows written between ``start`` and ``end`` by SELECT and from the binlog, in insertion order
    (each path's error, if any, in ``select_error``/``binlog_error``, both in ``identity_error``)."""
    try:
        with connect(settings) as conn:
            run.schema = load_schema(conn, run.table)
            with conn.cursor() as cur:
                cur.execute(f"SELECT {values.select_list(run.schema)} FROM {run.table.quoted} ORDER BY `seq`")
                normalize = values.snapshot_normalizer(run.schema)
                run.selected = [normalize(r) for r in cur.fetchall()]
    except Exception as exc:  # noqa: BLE001 - judged per case by the tests
        run.select_error = _error_text(exc)
    if run.schema is not None:
        try:
            reader = BinlogReader(settings, allocate_server_id(settings, IDENTITY_READER_SLOT), {run.table},
                                  {run.table: run.schema})
            changes = list(reader.read(BinlogOffset.at(start), end, timeout=120))
            ops = Counter(c.op for c in changes)
            if set(ops) - {"+I"}:
                raise AssertionError(f"the initial writes should be inserts only, the binlog has {dict(ops)}")
            names = run.schema.column_names
            run.streamed = [tuple(c.values[n] for n in names) for c in changes]
        except Exception as exc:  # noqa: BLE001 - judged per case by the tests
            run.binlog_error = _error_text(exc)
    errors = [f"{path}: {e}" for path, e in (("SELECT", run.select_error), ("binlog", run.binlog_error)) if e]
    run.identity_error = "; ".join(errors) or None
    if run.schema is not None:
        read_natively(settings, run)


def read_natively(settings: MySQLSettings, run: TableRun) -> None:
    """The initial rows through the native chunk reader's session, SELECT expressions and Arrow conversion
    (``engine/snapshot/native_read``), in insertion order: dates first as they are, and, where connectorx
    cannot read one (a failure that is no MySQL error, or a year-0 date), again behind the zero-date guard,
    as ``ChunkRead`` does (``date_guard``). ``run.native_guarded`` says which read served."""
    assert run.schema is not None
    try:
        run.natively, run.native_guarded = _read_natively(settings, run, guard_dates=False), False
    except (date_guard.UnfitDate, NativeReadFailed) as exc:
        if isinstance(exc, NativeReadFailed) and (exc.code is not None or exc.lost):
            run.native_error = _error_text(exc)
            return
        try:
            run.natively, run.native_guarded = _read_natively(settings, run, guard_dates=True), True
        except Exception as again:  # noqa: BLE001 - judged per case by the tests
            run.native_error = _error_text(again)
    except Exception as exc:  # noqa: BLE001 - judged per case by the tests
        run.native_error = _error_text(exc)


def _read_natively(settings: MySQLSettings, run: TableRun, guard_dates: bool) -> pa.Table | None:
    assert run.schema is not None
    planned, why = native_columns.plan_columns(run.schema, guard_dates=guard_dates)
    if planned is None:
        run.native_skipped = why
        return None
    with connect(settings) as conn:
        info = server_info(conn)
        if info.flavor == "mariadb":  # as consistent-snapshot reads: the view's binlog point in the result
            sql = (f"SELECT {native_session.hw_column()}, {native_columns.select_list(planned)} "
                   f"FROM {run.table.quoted} ORDER BY `seq`")
            select = NativeSelect(settings, sql,
                                  native_session.read_view_statements(info.flavor, info.server_id, None),
                                  65536, current_binlog_status(conn, info).file)
            try:
                first = select.open()
                batches = [] if first is None else [first.batch, *select.rest()]
            finally:
                select.close(conn)
        else:  # as watermark-table reads (Oracle MySQL's): the statement's own view, between markers
            hint = native_session.statement_hint(info.flavor)
            sql = f"SELECT {hint}{native_columns.select_list(planned)} FROM {run.table.quoted} ORDER BY `seq`"
            select = NativeSelect(settings, sql, native_session.session_statements(info.flavor, None),
                                  65536, "")
            try:
                batches = select.read_all()
            finally:
                select.close(conn)
    canonical = [native_columns.to_canonical(run.schema, planned, b, 0) for b in batches]
    return pa.Table.from_batches(canonical, schema=values.arrow_schema(run.schema))


def run_group(server: Any, database: str, specs: list[TableSpec], store_path: Path, seed: int,
              chunk_size: int, interleaved: int = 4, stream_rounds: int = 8,
              read_options: ChunkReadOptions | None = None) -> GroupRun:
    """Steps 1-3 of the module docstring for ``specs`` (one database, one pipeline)."""
    began = time.monotonic()
    settings = MySQLSettings.from_url(server.cdc_url)
    rng = random.Random(seed)
    runs = {s.name: TableRun(s, TableId(database, s.name)) for s in specs}
    ops = {s.name: Ops(s, database) for s in specs}
    sessions = Sessions(server, database)
    group = GroupRun(runs)
    try:
        for s in specs:  # in the spec's sql_mode: a legacy mode's zero-date default, refused by a strict one
            with sessions.get(s.sql_mode).cursor() as cur:
                cur.execute(s.create_sql(database))
        # 1-2: the initial rows, read both ways
        for s in specs:
            conn = sessions.get(s.sql_mode)
            start = _status(conn)
            for statement in ops[s.name].initial(rng):
                sessions.run(s.sql_mode, [statement])
            end = _status(conn)
            read_both_ways(settings, runs[s.name], start, end)
        # 3: the pipeline under concurrent writes
        piped = [s for s in specs if s.pipeline]
        try:
            if piped:
                with native_chunk_reader():
                    _pipeline(server, database, piped, runs, ops, sessions, settings, store_path, rng, seed,
                              chunk_size, interleaved, stream_rounds, group,
                              read_options or ChunkReadOptions())
        except Exception as exc:  # noqa: BLE001 - charged to each case of the group
            text = _error_text(exc)
            for run in (runs[s.name] for s in piped):
                if run.pipeline_error is None and run.mirror is None:
                    run.pipeline_error = text
    finally:
        sessions.close()
    group.seconds = time.monotonic() - began
    return group


@contextlib.contextmanager
def native_chunk_reader() -> Iterator[None]:
    """The pipeline's chunks are read by the native reader (where it serves: the consistent-snapshot mode), so
    its reads meet the writes inside and between chunk reads; the pure-Python reader's reads meet them in the
    watermark mode and in test_consistency.py."""
    saved = os.environ.get(CHUNK_READER_ENV)
    os.environ[CHUNK_READER_ENV] = "native"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CHUNK_READER_ENV, None)
        else:
            os.environ[CHUNK_READER_ENV] = saved


def _pipeline(server, database, specs, runs, ops, sessions, settings, store_path, rng, seed, chunk_size,
              interleaved, stream_rounds, group, read_options) -> None:
    pipe = Pipeline(settings, ChunkStore(str(store_path)), database, chunk_size=chunk_size,
                    read_options=read_options)
    ordered = [ops[s.name] for s in specs]

    def write(n: int) -> None:
        for _ in range(n):
            op = rng.choice(ordered)
            sessions.run(op.spec.sql_mode, op.transaction(rng))

    reading: list[Ops] = []  # the table whose chunk is being read: the in-read writes go to it
    in_read_budget: list[int] = []  # how many more of a chunk read's helpers write (2 a view: before, after)

    def write_reading(n: int) -> None:
        if not in_read_budget or in_read_budget[0] <= 0:
            return  # a chunk read's first view gets the writes, not a view it opens again (DDL, a conflict)
        in_read_budget[0] -= 1
        for _ in range(n):
            op = reading[0] if reading else rng.choice(ordered)
            sessions.run(op.spec.sql_mode, op.transaction(rng))

    results: dict[TableId, list] = {}
    writer = BackgroundWriter(server, database, ordered, seed + 1).start()
    try:
        chunk_keys = {f"{database}.{s.name}": s.chunk_key for s in specs if s.chunk_key}
        plans = pipe.plan([f"{database}.{s.name}" for s in specs], chunk_keys=chunk_keys)
        with writes_inside_chunk_reads(write_reading):
            for plan in plans:
                reading[:] = [ops[plan.table.table]]
                runs[plan.table.table].chunks = len(plan.chunks)
                for chunk in plan.chunks:
                    in_read_budget[:] = [2]
                    write(rng.randint(1, interleaved))
                    results.setdefault(plan.table, []).append(pipe.snapshot_result(plan, chunk.chunk_id))
        pipe.open_stream([p.table for p in plans])
        for _ in range(stream_rounds):
            write(rng.randint(1, interleaved + 2))
            pipe.pump(rng, batches=1, max_rows=(5, 60))
    finally:
        group.writer_transactions = writer.stop()
        for run in runs.values():
            run.writer_transactions = group.writer_transactions
    write(12)  # the writer has stopped: these land after everything, incl. key moves and deletes
    pipe.catch_up()
    for plan in plans:
        run = runs[plan.table.table]
        run.changes = sum(1 for r in pipe.changelog if r.table == str(plan.table))
        run.backfill_events = sum(r.backfill_events for r in results.get(plan.table, []))
        try:
            run.mirror = pipe.mirror(plan.table)
            run.source = pipe.source(plan.table)
        except Exception as exc:  # noqa: BLE001 - judged per case by the tests
            run.pipeline_error = _error_text(exc)
            continue
        try:
            run.digests = digests(settings, run)
        except Exception as exc:  # noqa: BLE001 - judged per case by the tests
            run.digest_error = _error_text(exc)


def digests(settings: MySQLSettings, run: TableRun) -> dict[str, tuple[Digest, Digest]]:
    """The server's digest of the source and ``verify``'s digest of the mirror's rows (as the lake holds
    them in Arrow), of each column and of whole rows: the same values must give the same digest."""
    assert run.schema is not None and run.mirror is not None
    schema = run.schema
    lake = pa.Table.from_batches([values.to_arrow_batch(schema, run.mirror)])
    out: dict[str, tuple[Digest, Digest]] = {}
    with connect(settings) as conn, conn.cursor() as cur:
        flavor = server_info(conn).flavor
        for name, columns in [("*", list(schema.columns)), *((c.name, [c]) for c in schema.columns)]:
            cur.execute(digest_select(run.table.quoted, columns, "TRUE"))
            rows, total = cur.fetchone()
            out[name] = Digest(int(rows), int(total)), lake_digest(lake, columns, flavor)
    return out


def digest_mismatches(run: TableRun, column: str | None = None) -> list[str]:
    """Where ``verify``'s digest of the mirror differs from the server's digest of the source, though the
    rows are equal (``mirror_mismatches`` judges the rows themselves)."""
    if run.pipeline_error or run.mirror is None:
        return []
    if run.digest_error:
        return [f"digest failed: {run.digest_error}"]
    source, lake = run.digests[column or "*"]
    if source == lake or mirror_mismatches(run, column):
        return []
    out = [f"{column or 'whole rows'}: source digest {source}, lake digest {lake}"]
    if column is not None:
        i = run.index(column)
        out.append("values " + _short(sorted({repr(r[i]) for r in run.source or []})[:6], 400))
    return out


@contextlib.contextmanager
def writes_inside_chunk_reads(write: Callable[[int], None]) -> Iterator[None]:
    """Seeded writes at the most delicate moments of every chunk read, deterministically: in the watermark
    mode after the LW marker and before the read view opens (the view sees them, the backfill replays them),
    and after the view opened (only the backfill brings them); in Oracle MySQL's executed-GTID window after
    its executed set was read and before the view opens (the view holds them, the window cannot tell: a
    chunk with a key is corrected by them, one without is read again in a fresh view, which gets no writes of
    its own), and after the view opened (after HW: only the stream brings them); in the consistent-snapshot
    mode right after the view opened (after HW; the native reader's view: once its first rows arrived). Wraps
    the read-view helpers (``read_view``'s, and the native reader's named step); if those names are gone, the
    reads just run without the extra writes."""
    from airflow_provider_mysqlcdc.engine.snapshot import read_view
    from airflow_provider_mysqlcdc.engine.snapshot.read_modes import consistent_snapshot_native

    saved: list[tuple[Any, str, Any]] = []
    plain = getattr(read_view, "open_plain_snapshot", None)
    consistent = getattr(read_view, "open_consistent_snapshot", None)
    if plain is not None:
        def open_plain(conn: Any, _original: Callable = plain) -> Any:
            write(2)
            result = _original(conn)
            write(3)
            return result

        saved.append((read_view, "open_plain_snapshot", plain))
        read_view.open_plain_snapshot = open_plain
    if consistent is not None:
        def open_consistent(conn: Any, _original: Callable = consistent) -> Any:
            result = _original(conn)
            write(3)
            return result

        saved.append((read_view, "open_consistent_snapshot", consistent))
        read_view.open_consistent_snapshot = open_consistent
    native = getattr(consistent_snapshot_native, "native_view_opened", None)
    if native is not None:
        def native_opened(position: Any, _original: Callable = native) -> Any:
            result = _original(position)
            # the native reader's view is open and its SELECT runs: after HW, only the stream brings them
            write(3)
            return result

        saved.append((consistent_snapshot_native, "native_view_opened", native))
        consistent_snapshot_native.native_view_opened = native_opened
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# --- per-column verdicts ------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 90) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


def same_value(a: Any, b: Any) -> bool:
    """Equal and of one type, and no difference that ``==`` hides: a float's sign and bits, a Decimal's
    scale, an aware datetime's offset."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


def identity_mismatches(run: TableRun, column: str, limit: int = 4) -> list[str]:
    """Cells of ``column`` whose SELECT value and binlog value differ in type or value."""
    if run.identity_error:
        return [f"table read failed: {run.identity_error}"]
    if len(run.selected) != len(run.streamed):
        return [f"SELECT has {len(run.selected)} rows, the binlog {len(run.streamed)}"]
    i = run.index(column)
    seq = run.index("seq")
    out = []
    for sel, bin_ in zip(run.selected, run.streamed):
        a, b = sel[i], bin_[i]
        if not same_value(a, b):
            out.append(f"row seq={sel[seq]}: SELECT {_short(a)} ({type(a).__name__}) != binlog {_short(b)} "
                       f"({type(b).__name__})")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def native_mismatches(run: TableRun, column: str, limit: int = 4) -> list[str]:
    """The native reader's Arrow of ``column`` (and its zero-date companion) equals the Arrow of the
    pure-Python reader's values, cell by cell; nothing when the table is left to the pure-Python reader."""
    if run.identity_error or run.schema is None:
        return [f"table read failed: {run.identity_error}"]
    if run.native_skipped:
        return []
    if run.native_error or run.natively is None:
        return [f"native read failed: {run.native_error}"]
    one = TableSchema(run.table, (run.schema.column(column),), ())
    i = run.index(column)
    want = values.to_arrow_batch(one, [(r[i],) for r in run.selected])
    out = []
    for name in values.identity_names(one, [column]):
        a, b = want.column(name), run.natively.column(name).combine_chunks()
        if a.type != b.type:
            out.append(f"{name}: Arrow type {b.type} != {a.type}")
        elif not a.equals(b):
            diff = [(x, y) for x, y in zip(a.to_pylist(), b.to_pylist()) if x != y or type(x) is not type(y)]
            out.append(f"{name}: {len(diff)} cells differ, e.g. pymysql, native: {_short(diff[:2], 200)}")
    return out[:limit]


def compiled_decoder_problems(run: TableRun) -> list[str]:
    """The table's rows events went through the compiled decoder, each image compared with mysql-replication's
    (the suite runs with MYSQLCDC_ROWS_DECODER=compare: a difference stops the read, failing the run)."""
    if decoder_mode() != COMPARE:
        return []
    reasons = fallback_reasons(run.table)
    if reasons:
        return [f"decoded by mysql-replication, not the compiled decoder: {r}" for r in reasons]
    if not compared_images(run.table):
        return ["no row image of the table went through the compiled decoder"]
    return []


def arrow_mismatches(run: TableRun, column: str, limit: int = 4) -> list[str]:
    """Both paths' values of ``column`` convert to ``arrow_schema``'s type, to equal arrays, and back."""
    if run.identity_error or run.schema is None:
        return [f"table read failed: {run.identity_error}"]
    col = run.schema.column(column)
    one = TableSchema(run.table, (col,), ())
    i = run.index(column)
    target = values.arrow_schema(one)
    batches = {}
    out = []
    for path, rows in (("SELECT", run.selected), ("binlog", run.streamed)):
        cells = [(r[i],) for r in rows]
        try:
            batch = values.to_arrow_batch(one, cells)
        except Exception as exc:  # noqa: BLE001 - reported as a finding of the case
            out.append(f"{path} values do not convert to {target.field(column).type}: {_error_text(exc)}")
            continue
        if batch.schema != target:
            out.append(f"{path} batch schema {batch.schema} != arrow_schema {target}")
        batches[path] = batch
        back = values.python_rows(batch, one, [column])
        for (want,), (got,) in zip(cells, back):
            if not _same_after_arrow(want, got, target.field(column).type):
                out.append(f"{path} {_short(want)} -> Arrow {target.field(column).type} -> {_short(got)}")
    if len(batches) == 2 and not batches["SELECT"].equals(batches["binlog"]):
        a, b = batches["SELECT"].column(0).to_pylist(), batches["binlog"].column(0).to_pylist()
        diff = [(x, y) for x, y in zip(a, b) if x != y][:2]
        out.append(f"the Arrow arrays of SELECT and binlog differ: {_short(diff, 200)}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def _same_after_arrow(want: Any, got: Any, arrow_type: pa.DataType) -> bool:
    """The documented Arrow forms (``values`` module docstring): BIGINT UNSIGNED and BIT(64) are
    decimal128(20, 0), so an int comes back as an integral Decimal; DECIMAL wider than decimal128 is its
    exact text. Anything else must come back as the very value."""
    if isinstance(want, int) and not isinstance(want, bool) and pa.types.is_decimal(arrow_type):
        return isinstance(got, Decimal) and got == want and got.as_tuple().exponent == 0
    if isinstance(want, Decimal) and pa.types.is_string(arrow_type):
        return isinstance(got, str) and got == str(want)
    return same_value(want, got)


def mirror_mismatches(run: TableRun, column: str | None = None, limit: int = 5,
                      at_least_once: bool = False) -> list[str]:
    """Rows (projected on the row key and ``column``, or whole) in which mirror and source differ;
    ``at_least_once``: only source rows missing from the mirror count (duplicates are allowed)."""
    if run.pipeline_error:
        return [f"pipeline failed: {run.pipeline_error}"]
    if run.mirror is None or run.source is None:
        return ["pipeline did not run"]
    if column is None:
        idx = list(range(len(run.schema.columns)))
    else:
        idx = [run.index(n) for n in run.spec.table_key] + [run.index(column)]
    got = Counter(tuple(r[i] for i in idx) for r in run.mirror)
    want = Counter(tuple(r[i] for i in idx) for r in run.source)
    if got == want:
        return []
    missing = list((want - got).elements())
    extra = [] if at_least_once else list((got - want).elements())
    if not missing and not extra:
        return []
    out = [(f"mirror has {len(run.mirror)} rows, source {len(run.source)}; "
            f"{len(missing)} source rows missing, {len(extra)} extra")]
    out += [f"missing {_short(m, 240)}" for m in missing[:limit]]
    out += [f"extra   {_short(e, 240)}" for e in extra[:limit]]
    return out
