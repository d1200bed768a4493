"""Drives the engine end to end (plan -> chunk reads -> stream -> mirror) for the consistency tests.

Snapshot output is kept in memory per (table, chunk), replaced whole on a rerun, as a real sink would do.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import (
    ChunkRead,
    ChunkReadOptions,
    ChunkReadResult,
)
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables, snapshot_chunk
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import server_info
from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
from tests.support.binlog_audit import (
    AuditReport,
    TableExpectation,
    audit_changelog,
    entries_from_records,
    read_binlog,
)
from tests.support.reference_mirror import materialize


@dataclass
class Pipeline:
    settings: MySQLSettings
    store: ChunkStore
    database: str
    chunk_size: int = 150
    read_options: ChunkReadOptions = field(default_factory=ChunkReadOptions)
    snapshots: dict[tuple[TableId, int], list[dict]] = field(default_factory=dict)
    versions: int = 0
    changelog: list[Record] = field(default_factory=list)
    stream: ChangeStream | None = None
    offset: BinlogOffset | None = None
    started: BinlogOffset | None = None  # where the stream started (min HW)
    schemas: dict[TableId, TableSchema] = field(default_factory=dict)

    def plan(self, patterns: list[str], chunk_keys: dict[str, str] | None = None) -> list[ChunkPlan]:
        plans = plan_tables(self.settings, self.store, patterns, chunk_size=self.chunk_size,
                            chunk_keys=chunk_keys)
        with connect(self.settings) as conn:
            for p in plans:
                self.schemas[p.table] = load_schema(conn, p.table)
        return plans

    def snapshot(self, plan: ChunkPlan, chunk_id: int) -> int:
        return self.snapshot_result(plan, chunk_id).rows

    def assert_mirror_is_source(self, table: TableId) -> None:
        """The mirror equals the source, row by row (at-least-once where the read is one:
        ``read_at_least_once``)."""
        with connect(self.settings) as conn:
            loose = read_at_least_once(conn, load_schema(conn, table), self.read_options.mode)
        assert_same_rows(self.mirror(table), self.source(table), table, loose)

    def snapshot_result(self, plan: ChunkPlan, chunk_id: int) -> ChunkReadResult:
        """Read and commit one chunk; its output replaces the previous one only when the read succeeded."""
        schema = self.schemas[plan.table]

        def write(batches: Iterator[pa.RecordBatch]) -> str:
            rows: list[dict] = []
            for batch in batches:
                rows.extend(_data_rows(batch, schema))
            self.versions += 1
            self.snapshots[(plan.table, chunk_id)] = rows
            return f"v{self.versions}"

        return snapshot_chunk(self.settings, self.store, plan, chunk_id, write, options=self.read_options,
                              schema=schema)

    def read_uncommitted(self, plan: ChunkPlan, chunk_id: int) -> Callable[[], ChunkReadResult]:
        """Mark a rerun started and read the chunk now; the returned function commits it later (as a slow
        Spark job would), so a test can interleave the stream with a rerun in progress."""
        schema = self.schemas[plan.table]
        state = self.store.start_chunk(str(plan.table), plan.generation, chunk_id)
        read = ChunkRead(self.settings, schema, plan, plan.chunk(chunk_id), self.read_options)
        rows = [row for batch in read.batches() for row in _data_rows(batch, schema)]

        def commit() -> ChunkReadResult:
            self.versions += 1
            self.snapshots[(plan.table, chunk_id)] = rows
            r = read.result
            self.store.commit_chunk(str(plan.table), plan.generation, chunk_id, rows=r.rows,
                                    lw=r.low_watermark, hw=r.high_watermark,
                                    output_version=f"v{self.versions}", attempt=state.attempts,
                                    hw_server=r.hw_server,
                                    hw_gtid_position=r.hw_gtid_position)
            return r

        return commit

    def open_stream(self, tables: list[TableId]) -> None:
        self.stream = ChangeStream(self.settings, self.store, tables, allocate_server_id(self.settings, 0),
                                   schemas=dict(self.schemas))
        self.offset = self.started = self.stream.start_offset()

    def pump(self, rng: random.Random, batches: int, max_rows: tuple[int, int] = (20, 400)) -> int:
        """Read a few micro-batches of random size, resuming each from the previous batch's end offset."""
        assert self.stream is not None and self.offset is not None
        total = 0
        for _ in range(batches):
            batch = self.stream.read(self.offset, max_rows=rng.randint(*max_rows))
            self.changelog.extend(batch.records)
            self.offset = batch.end
            total += batch.rows_read
        return total

    def catch_up(self) -> None:
        assert self.stream is not None and self.offset is not None
        while True:
            batch = self.stream.read(self.offset)
            self.changelog.extend(batch.records)
            self.offset = batch.end
            if batch.rows_read == 0:
                return

    def mirror(self, table: TableId) -> list[tuple]:
        view = self.store.mirror_view(str(table))
        assert view is not None, f"{table} has no fully committed generation"
        plan = load_plan(self.store, table, view.generation)
        schema = self.schemas[table]
        hws = {c.chunk_id: c.hw for c in view.chunks}
        snapshot = {c.chunk_id: self.snapshots[(table, c.chunk_id)] for c in view.chunks}
        with KeyOrder(lambda: connect(self.settings), schema, plan.key_columns) as order:
            rows = materialize(schema, plan.key_columns, ChunkLocator(plan, order), hws, snapshot,
                               [r for r in self.changelog if r.table == str(table)])
        return [tuple(r[c] for c in schema.column_names) for r in rows]

    def expectation(self, table: TableId) -> TableExpectation:
        """What the stream filter promised for ``table`` under its committed chunks' HWs (stable: no rerun
        committed while the stream ran)."""
        view = self.store.mirror_view(str(table))
        assert view is not None, f"{table} has no fully committed generation"
        plan = load_plan(self.store, table, view.generation)
        hws = {c.chunk_id: c.hw for c in view.chunks}
        return TableExpectation.from_plan(self.schemas[table], plan.key_columns, hws,
                                          [(c.chunk_id, c.start) for c in plan.chunks])

    def audit(self, tables: list[TableId], changelog: list[Record] | None = None) -> AuditReport:
        """The changelog against the binlog as the server's own mariadb-binlog decodes it."""
        assert self.started is not None and self.offset is not None
        text = read_binlog(self.settings, self.started.file)
        return audit_changelog(text, entries_from_records(self.changelog if changelog is None else changelog),
                               [self.expectation(t) for t in tables], start=self.started.position,
                               end=self.offset.position)

    def source(self, table: TableId) -> list[tuple]:
        schema = self.schemas[table]
        normalize = values.snapshot_normalizer(schema)
        with connect(self.settings) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {values.select_list(schema)} FROM {table.quoted}")
            return [normalize(r) for r in cur.fetchall()]


def _data_rows(batch: pa.RecordBatch, schema: TableSchema) -> list[dict]:
    """The chunk's rows as the changelog holds them: zero dates folded back, and a DECIMAL wider than
    decimal128 (text in Arrow) back to its Decimal, or one row would be keyed by two representations."""
    names = [n for n in batch.schema.names if n not in METADATA_NAMES]
    assert set(batch.column(batch.schema.get_field_index("_op")).to_pylist()) <= {"+I"}
    rows = values.canonical_pylist(batch.select(names))
    wide = [c.name for c in schema.columns if c.is_decimal and pa.types.is_string(values.arrow_type(c))]
    for row in rows:
        for name in wide:
            if isinstance(row.get(name), str):
                row[name] = Decimal(row[name])
    return rows


def read_at_least_once(conn: Any, schema: TableSchema, mode: str = "auto") -> bool:
    """Whether the chunks of this table are read at-least-once: a table without a primary key read through
    the watermark table (Oracle MySQL without GTIDs; docs/source-server.md). ``auto`` reads it exactly on
    MariaDB (consistent snapshot) and on Oracle MySQL with gtid_mode=ON (executed GTIDs)."""
    if schema.primary_key:
        return False
    if mode != "auto":
        return mode == "watermark_table"
    info = server_info(conn)
    return info.flavor != "mariadb" and info.gtid_mode.upper() != "ON"


def assert_same_rows(got: list[tuple], want: list[tuple], table: object, at_least_once: bool = False) -> None:
    """Equal as multisets of rows; ``at_least_once``: every source row, extra copies of source rows
    allowed."""
    g, w = Counter(got), Counter(want)
    if at_least_once and not (w - g) and set(g) == set(w):
        return
    if g != w:
        missing = list((w - g).elements())[:5]
        extra = list((g - w).elements())[:5]
        raise AssertionError(
            f"{table}: mirror has {len(got)} rows, source {len(want)}; missing {missing}; extra {extra}"
        )


def assert_mirror_equals_source(settings: MySQLSettings, output: str, tables: list[TableId],
                                min_rows: int = 1, delta: bool = True) -> None:
    """The materialized mirror under ``output`` (read as consumers do, through its Delta table) equals
    ``SELECT`` of each table, row by row and typed, over the mirror's columns (excluded ones are absent); the
    Delta tables, read with delta-rs, hold the same: the changelog exactly the committed batches' records, the
    mirror the manifest's files (``delta=False``: an output a release before the Delta tables wrote)."""
    from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
    from tests.support.delta_reads import (
        assert_delta_changelog_matches_markers,
        assert_delta_mirror_matches_manifest,
    )

    with connect(settings) as conn:
        for table in tables:
            schema = load_schema(conn, table)
            mirror = read_mirror(output, table)
            normalize = values.snapshot_normalizer(schema)
            with conn.cursor() as cur:
                cur.execute(f"SELECT {values.select_list(schema)} FROM {table.quoted}")
                rows = [dict(zip(schema.column_names, normalize(r))) for r in cur.fetchall()]
            got_rows = values.canonical_pylist(mirror)
            names = [n for n in mirror.column_names if n in schema.column_by_name]
            source = [tuple(r[c] for c in names) for r in rows]
            got = [tuple(r[c] for c in names) for r in got_rows]
            assert len(source) >= min_rows, f"{table}: only {len(source)} rows in the source"
            assert_same_rows(got, source, table, read_at_least_once(conn, schema))
            if delta:
                assert_delta_changelog_matches_markers(output, schema)
                assert_delta_mirror_matches_manifest(output, table)


def password_file(folder, settings: MySQLSettings) -> str:
    """The MySQL password in a private file: how Spark executors (of the shared session, or a cluster's) get
    it; URLs carry none (``settings.url_without_password()``)."""
    path = folder / "mysql.password"
    path.write_text(settings.password)
    path.chmod(0o600)
    return str(path)
