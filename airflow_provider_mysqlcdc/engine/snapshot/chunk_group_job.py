"""One chunk's snapshot records as Arrow batches, shared by the Spark reader and the Spark writer.

The driver resolves the plan and the table schema once (``ChunkGroupJob.load``) and ships them, with the
options, to the tasks; a task then reads its chunk with the engine's ``ChunkRead`` (one read view, one LW/HW)
and gets batches of metadata columns + table columns, minus the excluded columns.

Excluded columns are still selected (a backfill replays whole binlog row images, and the row must be whole to
apply them) but are dropped before anything leaves the task. Key columns cannot be excluded: the mirror and
the stream filter locate rows by them.

A chunk's columns are those of the table at the chunk's HW: when DDL changed the table after the driver loaded
its schema, the read reloads it (``ChunkRead.schema``), and the chunk's output follows the read's schema, not
the driver's (``output_schema``); excluded columns stay excluded.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES, record_schema
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan
from airflow_provider_mysqlcdc.engine.snapshot.read_session import ReadSessions
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema, load_schemas
from airflow_provider_mysqlcdc.engine.source.connection import connect


@dataclass(frozen=True)
class ChunkGroupJob:
    """One chunk group's job: its options plus what the
    driver resolved for them; picklable, free of secrets."""

    options: SnapshotOptions
    plan: ChunkPlan
    schema: TableSchema

    @classmethod
    def load(cls, options: SnapshotOptions, store: ChunkStore | None = None, conn: Any = None, *,
             plan: ChunkPlan | None = None, schema: TableSchema | None = None) -> ChunkGroupJob:
        """Resolve the plan (latest generation unless given) and the table schema; check ids and exclusions.
        ``conn``: a MySQL session to load the schema with (many tables share one), else one of its own;
        ``plan``, ``schema``: already resolved (:meth:`load_all`)."""
        if plan is None:
            own = store is None
            store = store or ChunkStore(options.store_url())
            try:
                plan = load_plan(store, options.table_id, options.generation)
            finally:
                if own:
                    store.close()
        if schema is None and conn is None:
            with connect(options.settings()) as own_conn:
                schema = load_schema(own_conn, options.table_id)
        elif schema is None:
            schema = load_schema(conn, options.table_id)
        known = {c.chunk_id for c in plan.chunks}
        ids = options.chunk_ids if options.chunk_ids is not None else tuple(sorted(known))
        if not ids:
            raise ConfigurationError(f"{options.table}: no chunk ids to snapshot")
        unknown = sorted(set(ids) - known)
        if unknown:
            raise ConfigurationError(
                f"{options.table} plan generation {plan.generation} has no chunk(s) {unknown} "
                f"(chunks 0-{len(known) - 1})"
            )
        _check_excluded(schema, plan, options.exclude_columns)
        return cls(options.with_(generation=plan.generation, chunk_ids=tuple(ids)), plan, schema)

    @classmethod
    def load_all(cls, options: Sequence[SnapshotOptions], store: ChunkStore,
                 conn: Any) -> list[ChunkGroupJob]:
        """:meth:`load` of many tables: their plans in one chunk store read, and the schemas of the tables
        that ``conn`` reaches (the first options' connection) in a few ``information_schema`` queries; the
        other tables' schemas on sessions of their own."""
        plans = store.plans([(o.table, o.generation) for o in options])
        first = options[0]
        shared = [o.table_id for o in options
                  if (o.mysql_url, o.password_file) == (first.mysql_url, first.password_file)]
        schemas = load_schemas(conn, shared)
        return [cls.load(o, plan=ChunkPlan.from_dict(p.plan), schema=schemas.get(o.table_id))
                for o, p in zip(options, plans)]

    @property
    def chunk_ids(self) -> tuple[int, ...]:
        assert self.options.chunk_ids is not None
        return self.options.chunk_ids

    def arrow_schema(self) -> pa.Schema:
        """The output's schema as the driver loaded the table: metadata columns, then the table's columns
        except the excluded ones. A chunk's own output follows its read: ``output_schema(read.schema)``."""
        return self.output_schema(self.schema)

    def output_schema(self, schema: TableSchema) -> pa.Schema:
        """Metadata columns, then the columns of ``schema`` except the excluded ones."""
        # with zero-date companions
        excluded = set(values.identity_names(schema, self.options.exclude_columns))
        excluded.update(values.unwritten_companions(schema, self.plan.zero_dates, self.plan.key_columns))
        return pa.schema([f for f in record_schema(schema) if f.name not in excluded])

    def read(self, chunk_id: int, slot: int, sessions: ReadSessions | None = None) -> ChunkRead:
        """One chunk's read; ``sessions``: the reading task's sessions, to share one with its other reads."""
        settings = self.options.settings()
        return ChunkRead(settings, self.schema, self.plan, self.plan.chunk(chunk_id),
                         self.options.read_options(slot),
                         session=sessions.for_settings(settings) if sessions is not None else None)

    def batches(self, read: ChunkRead) -> Iterator[pa.RecordBatch]:
        """The read's batches in its output schema (exhaust it: ``read.result`` is complete only then).

        ``read.schema`` is final once the first batch arrives (a reread after DDL yields nothing before)."""
        target: pa.Schema | None = None
        for batch in read.batches():
            if target is None:
                if read.schema is not self.schema:
                    _check_names(read.schema)  # DDL added columns: none may look like metadata columns
                target = self.output_schema(read.schema)
            if batch.schema.names != target.names:
                batch = batch.select(target.names)
            yield batch


def _check_excluded(schema: TableSchema, plan: ChunkPlan, excluded: tuple[str, ...]) -> None:
    names = set(schema.column_names)
    missing = [c for c in excluded if c not in names]
    if missing:
        raise ConfigurationError(f"{schema.table} has no column(s) {missing} to exclude")
    keys = [c for c in excluded if c in set(schema.primary_key) | set(plan.key_columns)]
    if keys:
        raise ConfigurationError(
            f"{schema.table}: key column(s) {keys} cannot be excluded (the mirror locates rows by them)"
        )
    _check_names(schema)


def _check_names(schema: TableSchema) -> None:
    clash = [c for c in schema.column_names if c in METADATA_NAMES]
    if clash:
        raise ConfigurationError(f"{schema.table} has column(s) {clash} named like our metadata columns")
