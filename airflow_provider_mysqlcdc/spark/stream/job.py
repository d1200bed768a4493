"""The stream phase as one Spark Structured Streaming query: binlog source -> changelog sink.

``start_stream`` resolves the tables, takes the checkpoint's lock, and starts the query; ``run_stream``
also waits for it (``available-now``: until the binlog end seen at the start is committed; a processing-time
trigger: until the query is stopped or fails). ``spark_apps/binlog_stream.py`` and ``mysqlcdc stream`` are
thin wrappers around these.

Files the stream keeps besides Spark's own checkpoint (``offsets/``, ``commits/``, ...):

* ``<checkpoint>/mysqlcdc/stream.lock``: one stream per checkpoint (``stream_lock``);
* ``<checkpoint>/mysqlcdc/stream_id.json`` and ``<output>/_mysqlcdc_stream.json``: the output root belongs to
  one stream (batch ids restart at 0 in a new checkpoint, so two streams must never share an output);
* ``<checkpoint>/mysqlcdc/batches/batch=<id>.json``: the sink's batch ledger (replay detection, rows);
* ``<checkpoint>/mysqlcdc/stream_position.json``: the offset of the last batch Spark committed, for status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from airflow_provider_mysqlcdc.engine.source.readiness import require_ready
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.source.connection import PASSWORD_ENV, MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.source.outages import DEFAULT_RECONNECT_TIMEOUT_S
from airflow_provider_mysqlcdc.engine.lake.layout import ensure_writable, read_json, stream_owner_path, write_json_atomic
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL, StartupMode, resolve_start
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import list_tables, load_schema
from airflow_provider_mysqlcdc.spark.stream.binlog_source import (
    DEFAULT_CATCHUP_PARTITION_BYTES,
    DEFAULT_MAX_BYTES_PER_BATCH,
    POSITION_FILE,
    ROWS_PER_READ,
    BinlogSource,
    BinlogSourceOptions,
    read_password_file,
    url_has_password,
)
from airflow_provider_mysqlcdc.spark.session import register_data_source
from airflow_provider_mysqlcdc.spark.stream.changelog_sink import BatchHook, ChangelogSink, CommittedBatch
from airflow_provider_mysqlcdc.engine.lake.stream_lock import DEFAULT_LEASE_SECONDS, StreamLock

log = logging.getLogger(__name__)

AVAILABLE_NOW = "available-now"
STREAM_ID_FILE = "mysqlcdc/stream_id.json"  # in the checkpoint: this stream's identity
STARTUP_FILE = "mysqlcdc/startup.json"  # in the checkpoint: its startup mode and resolved start
_PROCESSING_TIME = re.compile(r"^processing-time=(.+)$")


class StreamFailed(CdcError):
    """The streaming query stopped with an error (the message carries Spark's)."""


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
    query_name: str | None = None
    lock_lease_seconds: float = DEFAULT_LEASE_SECONDS
    break_lock: bool = False
    # columns never written, per table ("db.table" -> names): the same exclusions as the snapshot's
    exclude_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)

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
                f"process lists): use --password-file or ${PASSWORD_ENV}"
            )
        password = read_password_file(self.password_file) if self.password_file else None
        return MySQLSettings.from_url(self.mysql_url, password=password)


@dataclass
class StreamRun:
    """A started stream: its Spark query and the lock it holds."""

    query: Any  # pyspark.sql.streaming.StreamingQuery
    lock: StreamLock
    config: StreamConfig
    tables: list[TableId]
    lost_lock: list[str] = field(default_factory=list)
    _released: bool = False

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query to end (True) or ``timeout`` seconds (False); raise StreamFailed on failure."""
        try:
            done = (
                self.query.awaitTermination(timeout) if timeout is not None else self.query.awaitTermination()
            )
        except Exception as exc:  # noqa: BLE001 - StreamingQueryException: re-raised with its cause
            self.release()
            raise StreamFailed(
                f"the stream on {self.config.checkpoint} failed: {_spark_message(exc)}"
            ) from exc
        done = True if done is None else bool(done)
        if done:
            self.release()
            if self.lost_lock:
                raise StreamFailed(self.lost_lock[0])
        return done

    def stop(self) -> None:
        try:
            self.query.stop()
        finally:
            self.release()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.lock.release()


def claim_output(checkpoint: str, output: str, startup: dict[str, Any] | None = None) -> str:
    """Tie the output root to this stream: batch ids restart at 0 in a new checkpoint, so a second stream
    writing into the same output would overwrite the first one's changelog batches. Records the stream's
    ``startup`` (mode and start, for ``status``). Returns the stream id."""
    identity_path = posixpath.join(checkpoint.rstrip("/"), STREAM_ID_FILE)
    identity = read_json(identity_path)
    if identity is None:
        identity = {"stream_id": uuid.uuid4().hex, "created_at": datetime.now(timezone.utc).isoformat()}
        write_json_atomic(identity_path, identity)
    owner_path = stream_owner_path(output)
    owner = read_json(owner_path)
    if owner is None or (owner.get("stream_id") == identity["stream_id"] and startup and "startup" not in owner):
        write_json_atomic(owner_path, {"stream_id": identity["stream_id"], "checkpoint": checkpoint,
                                       **({"startup": startup} if startup else {})})
    elif owner.get("stream_id") != identity["stream_id"]:
        raise ConfigurationError(
            f"the output {output} already holds the changelog of another stream (checkpoint "
            f"{owner.get('checkpoint')}, stream id {owner.get('stream_id')}); this checkpoint ({checkpoint}) "
            "would restart its batch ids at 0 and overwrite that changelog. Resume the stream with its own "
            f"checkpoint, or write to a new output path (or delete {owner_path} after removing the old "
            "changelog)"
        )
    return str(identity["stream_id"])




def resolve_tables(settings: MySQLSettings, patterns: tuple[str, ...]) -> dict[TableId, TableSchema]:
    with connect(settings) as conn:
        tables = list_tables(conn, patterns)
        return {t: load_schema(conn, t) for t in tables}


def start_stream(
    spark: Any,
    config: StreamConfig,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[CommittedBatch], None] | None = None,
) -> StreamRun:
    """Take the checkpoint's lock and start the query (returns at once)."""
    ensure_writable(config.output)
    ensure_writable(config.checkpoint, "checkpoint")
    settings = config.settings()
    schemas = resolve_tables(settings, config.tables)
    tables = sorted(schemas)
    require_ready(settings, f"the stream of {', '.join(map(str, tables))}")
    mode = StartupMode.parse(config.startup_mode)
    if not mode.streams:
        raise ConfigurationError(
            f"startup mode {mode} snapshots the tables and takes no stream: run the snapshot only, or choose "
            "another mode"
        )
    with ChunkStore(config.chunk_store) as store:
        planned = set(store.tables())
    missing = [str(t) for t in tables if str(t) not in planned]
    resumed = read_json(posixpath.join(config.checkpoint.rstrip("/"), STARTUP_FILE)) is not None
    if missing and not mode.from_offset and resumed:
        # A table that appeared since the stream began (a pattern now matches it, e.g. the old table an
        # online schema change renamed away) joins only once it is planned: until then it is not captured.
        log.warning("table(s) %s match the stream's tables but have no plan: not captured; plan them to add "
                    "them to the pipeline (mysqlcdc plan --only-new, or rerun the DAG)", missing)
        tables = [t for t in tables if str(t) in planned]
        schemas = {t: schemas[t] for t in tables}
    elif missing and not mode.from_offset:
        raise ConfigurationError(
            f"table(s) {missing} have no plan in the chunk store {config.chunk_store}: plan and snapshot "
            "them "
            "before streaming (mysqlcdc plan / snapshot), or stream without a snapshot (startup mode "
            "latest-offset, earliest-offset, specific-offset or timestamp)"
        )
    lost: list[str] = []
    holder: dict[str, Any] = {}

    def on_lost(message: str) -> None:
        lost.append(message)
        query = holder.get("query")
        if query is not None:
            threading.Thread(target=query.stop, daemon=True).start()

    lock = StreamLock(
        config.checkpoint,
        lease_seconds=config.lock_lease_seconds,
        description=config.query_name or "mysqlcdc stream",
        on_lost=on_lost,
    )
    lock.acquire(break_lock=config.break_lock)
    try:
        starting = startup_offset(config.checkpoint, settings, mode, config.chunk_store, tables)
        claim_output(config.checkpoint, config.output, read_json(posixpath.join(config.checkpoint, STARTUP_FILE)))
        source = BinlogSourceOptions(
            mysql_url=config.mysql_url,
            tables=tuple(tables),
            chunk_store=config.chunk_store,
            password_file=config.password_file,
            max_bytes_per_batch=config.max_bytes_per_batch,
            server_id_slot=config.server_id_slot,
            catchup_partitions=config.catchup_partitions or max(1, spark.sparkContext.defaultParallelism),
            catchup_partition_bytes=config.catchup_partition_bytes,
            rows_per_read=config.rows_per_read,
            read_timeout=config.read_timeout,
            reconnect_timeout=config.reconnect_timeout,
            checkpoint=config.checkpoint,
            starting_offset=starting,
        )
        sink = ChangelogSink(
            root=config.output,
            schemas=written_schemas(schemas, config.exclude_columns),
            checkpoint=config.checkpoint,
            changelog_json=config.changelog_json,
            on_batch_committed=on_batch_committed,
            on_progress=on_progress,
            exclude=dict(config.exclude_columns),
        )
        register_data_source(spark, BinlogSource)
        stream = spark.readStream.format(BinlogSource.name()).options(**source.to_options()).load()
        writer = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", config.checkpoint)
            .trigger(**config.trigger_kwargs())
        )
        if config.query_name:
            writer = writer.queryName(config.query_name)
        query = writer.start()
    except BaseException:
        lock.release()
        raise
    holder["query"] = query
    log.info(
        "stream started on %s for %d table(s), trigger %s", config.checkpoint, len(tables), config.trigger
    )
    return StreamRun(query=query, lock=lock, config=config, tables=tables, lost_lock=lost)


def startup_offset(
    checkpoint: str, settings: MySQLSettings, mode: StartupMode, chunk_store: str | None = None,
    tables: list[TableId] | None = None,
) -> BinlogOffset | None:
    """Where a new checkpoint's stream begins, resolved once and recorded in the checkpoint
    (``mysqlcdc/startup.json``), so a restart, or a retry of a failed start, begins at the very same point; a
    checkpoint that already streamed keeps its own start (the mode applies to new checkpoints).

    ``initial``: the chunks' smallest HW when the stream first starts. Spark does not keep a stream's first
    start in its checkpoint (it asks the source again), and a chunk rerun or a new plan may raise the smallest
    HW meanwhile: changes of the other chunks in between would then be skipped. None: a checkpoint of an
    earlier release, which asks the chunk store each time."""
    path = posixpath.join(checkpoint.rstrip("/"), STARTUP_FILE)
    recorded = read_json(path)
    if recorded is not None:
        if recorded.get("mode") != str(mode):
            log.warning("checkpoint %s began with startup mode %s; it resumes from its own position (%s "
                        "applies to new checkpoints only)", checkpoint, recorded.get("mode"), mode)
        start = recorded.get("start")
        return BinlogOffset.from_dict(start) if start else None
    started = read_json(posixpath.join(checkpoint.rstrip("/"), POSITION_FILE))
    offset = resolve_start(settings, mode) if mode.from_offset and started is None else None
    if offset is None and not mode.from_offset and started is None and chunk_store is not None:
        from airflow_provider_mysqlcdc.engine.stream.filter import stream_start

        with ChunkStore(chunk_store) as store:
            views = store.stream_view([str(t) for t in tables or []])
        offset = BinlogOffset.at(stream_start(v.min_hw for v in views.values()))
    if offset is not None:
        log.info("startup mode %s: the stream begins at %s", mode, offset)
    write_json_atomic(path, {"mode": str(mode), "start": offset.to_dict() if offset else None,
                             "resolved_at": datetime.now(timezone.utc).isoformat()})
    return offset


def run_stream(
    spark: Any,
    config: StreamConfig,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[CommittedBatch], None] | None = None,
) -> StreamRun:
    """Start the stream and wait until it ends (available-now) or is stopped; raise if it failed."""
    resnapshots: list[str] = []
    while True:
        run = start_stream(spark, config, on_batch_committed=on_batch_committed, on_progress=on_progress)
        try:
            run.await_termination()
        except StreamFailed as exc:
            run.release()
            needed = _RESNAPSHOT.search(str(exc))
            if needed is None or not config.resnapshot:
                raise
            table, position = needed.group(1), needed.group(2)
            if f"{table}@{position}" in resnapshots:  # the new plan did not get the stream past it
                raise
            resnapshots.append(f"{table}@{position}")
            resnapshot_table(spark, config, TableId.parse(table), position)
            continue
        except BaseException:  # Ctrl-C, or the query failed: stop it before giving up the lock
            try:
                run.query.stop()
            except Exception:  # noqa: BLE001 - already stopped
                pass
            run.release()
            raise
        return run


def snapshot_table(
    spark: Any, config: StreamConfig, table: TableId, chunk_ids: tuple[int, ...] | None = None
) -> Any:
    """Snapshot ``table``'s latest plan (or the chunks ``chunk_ids`` of it) in this Spark session, into the
    stream's output and chunk store, with the stream's column exclusions (a ``ChunkGroupResult``)."""
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions

    return run_chunk_group(
        spark,
        SnapshotOptions(
            mysql_url=config.mysql_url, table=str(table), output=config.output,
            chunk_store=config.chunk_store, password_file=config.password_file, chunk_ids=chunk_ids,
            exclude_columns=config.exclude_columns.get(str(table), ()),
        ),
    )


_RESNAPSHOT = re.compile(r"\[resnapshot table=(\S+) position=(\S+)\]")


def resnapshot_table(spark: Any, config: StreamConfig, table: TableId, position: str) -> None:
    """Plan ``table`` anew (at or after the DDL at ``position``) and snapshot it in this Spark session: the
    stream then passes the DDL, and the mirror switches to the new snapshot once it is committed."""
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables

    settings = config.settings()
    log.warning("%s changed without row events at %s: planning and snapshotting it again", table, position)
    with ChunkStore(config.chunk_store) as store:
        try:
            plan_tables(settings, store, [str(table)])
        except ConfigurationError as exc:
            raise StreamFailed(
                f"{table} needs a new snapshot after the DDL at {position}, but it cannot be planned "
                f"({exc}). If it was dropped or renamed away for good, take it out of the pipeline "
                f"(mysqlcdc remove-table {table}) and restart the stream"
            ) from None
    result = snapshot_table(spark, config, table)
    if not result.ok:
        raise StreamFailed(
            f"{table} needed a new snapshot after the DDL at {position}, and it failed: {result}. Rerun its "
            "snapshot (mysqlcdc snapshot --table, or the DAG's snapshot task), then restart the stream"
        )
    log.info("%s snapshotted again (%s rows); the stream goes on", table, result.rows)


_OUR_ERROR = re.compile(r"^airflow_provider_mysqlcdc\.[\w.]*?(\w+): (.+)$")
_PYTHON_ERROR = re.compile(r"^([\w.]*(?:Error|Exception)): (.+)$")


def _spark_message(exc: BaseException) -> str:
    """The engine's own error out of Spark's wrapping (Java stack, Python traceback), else the first line."""
    text = "\n".join(str(e) for e in (exc, exc.__cause__) if e is not None)
    lines = [line.strip() for line in text.splitlines()]
    for pattern in (_OUR_ERROR, _PYTHON_ERROR):
        found = [m for m in map(pattern.match, lines) if m]
        if found:
            name, message = found[-1].group(1), found[-1].group(2)
            return f"{name.rsplit('.', 1)[-1]}: {message}"[:4000]
    return lines[0][:2000] if lines else repr(exc)


@contextlib.contextmanager
def mirror_refresh(config: StreamConfig) -> Iterator[BatchHook]:
    """The default batch hook: refresh each changed table's mirror right after its batch commits.

    Incremental: only chunks that received changes (or a new snapshot) are rewritten.
    """
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher

    store = ChunkStore(config.chunk_store)
    refresher = MirrorRefresher(config.output, store, settings=config.settings(),
                                outage_budget_s=config.reconnect_timeout)
    try:
        yield refresher.on_batch_committed
    finally:
        refresher.close()
        store.close()


def parse_exclude_columns(items: list[str]) -> dict[str, tuple[str, ...]]:
    """``["db.t=secret,blob", ...]`` (the snapshot's ``--exclude-columns`` format) as a dict."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        table, sep, columns = item.partition("=")
        if not sep or not table.strip() or not columns.strip():
            raise ConfigurationError(f"--exclude-columns {item!r} must look like db.table=col1,col2")
        out[table.strip()] = tuple(c.strip() for c in columns.split(",") if c.strip())
    return out


def written_schemas(
    schemas: dict[TableId, TableSchema], exclude: dict[str, tuple[str, ...]]
) -> dict[TableId, TableSchema]:
    """The schemas the changelog is written with: excluded columns (secrets, blobs) never reach a file."""
    out = dict(schemas)
    for name, columns in exclude.items():
        table = TableId.parse(name)
        if table not in schemas:
            raise ConfigurationError(f"--exclude-columns names {name}, which this stream does not capture")
        schema = schemas[table]
        unknown = [c for c in columns if c not in schema.column_by_name]
        keys = [c for c in columns if c in schema.primary_key]
        if unknown or keys:
            raise ConfigurationError(
                f"{table}: cannot exclude {unknown or keys}: "
                + ("no such column" if unknown else "primary key columns identify rows in the mirror")
            )
        out[table] = dataclasses.replace(
            schema, columns=tuple(c for c in schema.columns if c.name not in columns), column_by_name={}
        )
    return out
