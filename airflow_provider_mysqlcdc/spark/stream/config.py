"""What one stream is configured with: the source, its tables and column exclusions, the output, the
checkpoint, the trigger, and its limits."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.secrets import read_password_file, url_has_password
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.lake.gc.retention import DEFAULT_INTERVAL_MINUTES, DEFAULT_RETENTION
from airflow_provider_mysqlcdc.engine.lake.schema_history import SchemaEvent, excluded_after
from airflow_provider_mysqlcdc.engine.lake.stream_lock import DEFAULT_LEASE_SECONDS
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.source.limits import SourceLimits
from airflow_provider_mysqlcdc.engine.source.outages import DEFAULT_RECONNECT_TIMEOUT_S
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL
from airflow_provider_mysqlcdc.spark.stream.binlog_source import (
    DEFAULT_CATCHUP_PARTITION_BYTES,
    DEFAULT_MAX_BYTES_PER_BATCH,
    ROWS_PER_READ,
)

AVAILABLE_NOW = "available-now"
_PROCESSING_TIME = re.compile(r"^processing-time=(.+)$")


@dataclass(frozen=True)
class StreamConfig:
    mysql_url: str  # without the password
    tables: tuple[str, ...]  # database.table names or patterns (db.orders_*)
    chunk_store: str
    output: str  # root of the output layout
    checkpoint: str  # Spark checkpoint of this stream (one stream per checkpoint)
    trigger: str = AVAILABLE_NOW  # or "processing-time=10 seconds"
    password_file: str | None = None  # else $MYSQLCDC_MYSQL_PASSWORD
    max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH
    changelog_json: bool = False
    server_id_slot: int = 0
    # parallel catch-up: a batch spanning at least 2 x catchup_partition_bytes of binlog is decoded by up to
    # catchup_partitions tasks at once (0: as many as Spark's default parallelism; 1: off)
    catchup_partitions: int = 0
    catchup_partition_bytes: int = DEFAULT_CATCHUP_PARTITION_BYTES
    rows_per_read: int = ROWS_PER_READ  # row images a read task holds at once (its memory bound)
    read_timeout: float = 600.0
    reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S  # a MySQL outage is waited out this long
    startup_mode: str = INITIAL  # engine.stream.startup: where a new checkpoint's stream begins
    # DDL that changes rows without row events (TRUNCATE, RENAME TABLE, partition DROP/EXCHANGE, ...): the
    # stream plans and snapshots the table again by itself and goes on; False stops with an error instead
    resnapshot: bool = True
    # the limits a re-snapshot's chunk reads keep on the source
    # (the snapshot phase's: concurrent reads, rows/s)
    source_limits: SourceLimits = field(default_factory=SourceLimits)
    query_name: str | None = None
    lock_lease_seconds: float = DEFAULT_LEASE_SECONDS
    break_lock: bool = False
    # columns never written, per table ("db.table" -> names): the same exclusions as the snapshot's
    exclude_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # garbage collection (engine.lake.gc) in the driver after a batch's mirror refresh, at most every
    # gc_interval_minutes (0: off), deleting what stopped being needed more than gc_retention ago
    gc_retention: str = DEFAULT_RETENTION
    # superseded mirror files (None: 1h while gc_retention is the default, else gc_retention; gc/retention.py)
    gc_mirror_retention: str | None = None
    gc_interval_minutes: float = DEFAULT_INTERVAL_MINUTES
    # how a batch updates the mirror (engine.lake.mirror_refresh): "rewrite" each touched chunk, or
    # "deletion_vectors" (a batch writes its changes; the readers that read it: docs/output.md)
    mirror_updates: str = "rewrite"
    # start the executors' Python workers, and their imports, while the driver starts the query
    # (spark/stream/warmup.py): the first batch does not wait for them
    warm_executors: bool = True

    @property
    def available_now(self) -> bool:
        return self.trigger == AVAILABLE_NOW

    def trigger_kwargs(self) -> dict[str, Any]:
        if self.available_now:
            return {"availableNow": True}
        match = _PROCESSING_TIME.match(self.trigger.strip())
        if not match:
            raise ConfigurationError(
                f"trigger {self.trigger!r}: use {AVAILABLE_NOW!r} or 'processing-time=<interval>' "
                "(e.g. processing-time=10 seconds)"
            )
        return {"processingTime": match.group(1).strip()}

    def settings(self) -> MySQLSettings:
        if url_has_password(self.mysql_url):
            raise ConfigurationError(
                "the MySQL URL of a stream must not contain the password (it would reach Spark options and "
                f"process lists): use --password-file or ${MYSQL_PASSWORD_ENV}"
            )
        password = read_password_file(self.password_file) if self.password_file else None
        return MySQLSettings.from_url(self.mysql_url, password=password)


def parse_exclude_columns(items: list[str]) -> dict[str, tuple[str, ...]]:
    """``["db.t=secret,blob", ...]`` (the snapshot's ``--exclude-columns`` format) as a dict."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        table, sep, columns = item.partition("=")
        if not sep or not table.strip() or not columns.strip():
            raise ConfigurationError(f"--exclude-columns {item!r} must look like db.table=col1,col2")
        out[table.strip()] = tuple(split_commas(columns))
    return out


def written_schemas(
    schemas: dict[TableId, TableSchema], exclude: dict[str, tuple[str, ...]],
    history: Callable[[TableId], list[SchemaEvent]] | None = None,
    pending: Callable[[TableId], list[ColumnChanges]] | None = None,
) -> dict[TableId, TableSchema]:
    """The schemas the changelog is written with: excluded columns (secrets, blobs) never reach a file, under
    any name DDL gave them (``history``: the table's schema history, the DDL the stream followed).

    ``schemas`` are today's, and the stream may resume behind DDL it has not read yet (a column renamed or
    dropped after its last batch): when today's schema lacks an excluded column under the name the history
    gives it, ``pending`` (the table's column changes between where the stream resumes and now, read from the
    binlog) decides. A name that none of them knows is refused, naming the table, the column and the fix."""
    out = dict(schemas)
    for name, configured in exclude.items():
        table = TableId.parse(name)
        if table not in schemas:
            raise ConfigurationError(f"--exclude-columns names {name}, which this stream does not capture")
        schema = schemas[table]
        events: list[SchemaEvent | ColumnChanges] = list(history(table) if history is not None else [])
        live = schema.column_by_name
        if pending is not None and (
            any(c not in live and c not in renamed_or_dropped(events) for c in configured)
            or any(n not in live for n in _names_now(configured, events))
        ):
            events += pending(table)
        gone = renamed_or_dropped(events)
        unknown = [c for c in configured if c not in live and c not in gone]
        keys = [c for c in configured if c in schema.primary_key]
        if unknown:
            raise ConfigurationError(
                f"{table}: cannot exclude column(s) {unknown}: the table has no such column, and no DDL "
                "since the stream's last batch renamed or dropped one of that name (its columns: "
                f"{', '.join(schema.column_names)}). Fix the name in --exclude-columns (exclude_columns) "
                "or remove it"
            )
        if keys:
            raise ConfigurationError(
                f"{table}: cannot exclude {keys}: primary key columns identify rows in the mirror"
            )
        columns = excluded_after(configured, events)
        out[table] = dataclasses.replace(
            schema, columns=tuple(c for c in schema.columns if c.name not in columns), column_by_name={}
        )
    return out


def _changes(event: SchemaEvent | ColumnChanges) -> ColumnChanges:
    return event.changes if isinstance(event, SchemaEvent) else event


def renamed_or_dropped(events: list[SchemaEvent | ColumnChanges]) -> set[str]:
    """Names that DDL renamed away or dropped: they were columns once."""
    return {n for e in events for n in (*_changes(e).renamed, *_changes(e).dropped)}


def _names_now(configured: tuple[str, ...], events: list[SchemaEvent | ColumnChanges]) -> set[str]:
    """The names the configured columns have after ``events`` (renames followed, drops removed)."""
    names = set(configured)
    for event in events:
        c = _changes(event)
        names = {c.renamed.get(n, n) for n in names if n not in c.dropped}
    return names
