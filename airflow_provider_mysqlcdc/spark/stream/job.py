"""The stream phase as one Spark Structured Streaming query: binlog source -> changelog sink.

``start_stream`` resolves the tables, takes the checkpoint's lock, and starts the query; ``run_stream``
also waits for it (``available-now``: until the binlog end seen at the start is committed; a processing-time
trigger: until the query is stopped or fails). ``spark_apps/binlog_stream.py`` and ``mysqlcdc stream`` are
thin wrappers around these.

Files the stream keeps besides Spark's own checkpoint (``offsets/``, ``commits/``, ...):

* ``<checkpoint>/mysqlcdc/stream.lock``: one stream per checkpoint (``stream_lock``);
* ``<checkpoint>/mysqlcdc/stream_id.json`` and ``<output>/_mysqlcdc_stream.json``: the output root belongs to
  one stream (batch ids restart at 0 in a new checkpoint, so two streams must never share an output);
* ``<checkpoint>/mysqlcdc/batches/batch=<id>.json``: the batch ledger (``engine.lake.batch_ledger``: replay
  detection, rows);
* ``<checkpoint>/mysqlcdc/resnapshots.json``: re-snapshots after DDL not committed yet (``resnapshots``);
* ``<checkpoint>/mysqlcdc/startup.json``: the startup mode and the start it resolved to (``checkpoint``);
* ``<output>/_mysqlcdc_stream_progress.json`` and the changelog markers: what the sink committed, where
  ``status`` reads the stream's position. (Earlier releases kept
  ``<checkpoint>/mysqlcdc/stream_position.json``, a batch behind the sink; a start removes it.)

``config`` holds ``StreamConfig``; ``checkpoint`` the stream's identity, output claim and recorded start.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.binlog.pending_ddl import column_changes_since
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog_commit import BatchCommit
from airflow_provider_mysqlcdc.engine.lake.layout import ensure_writable, read_json
from airflow_provider_mysqlcdc.engine.lake.schema_history import (
    columns_after,
    excluded_after,
    read_schema_history,
)
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import list_tables, load_schema, load_schemas
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.readiness import require_ready
from airflow_provider_mysqlcdc.engine.stream.server_id_claims import claim_server_id_range
from airflow_provider_mysqlcdc.engine.stream.startup import StartupMode
from airflow_provider_mysqlcdc.spark.errors import stream_failure_message
from airflow_provider_mysqlcdc.spark.session import register_data_source
from airflow_provider_mysqlcdc.spark.stream.binlog_source import BinlogSource, BinlogSourceOptions
from airflow_provider_mysqlcdc.spark.stream.changelog_sink import BatchHook, ChangelogSink
from airflow_provider_mysqlcdc.spark.stream.checkpoint import STARTUP_FILE, claim_output, startup_offset
from airflow_provider_mysqlcdc.spark.stream.config import (
    AVAILABLE_NOW,
    StreamConfig,
    renamed_or_dropped,
    written_schemas,
)
from airflow_provider_mysqlcdc.spark.stream.resnapshots import BackgroundResnapshots, ResnapshotPlanFailed
from airflow_provider_mysqlcdc.spark.stream.warmup import warm_executors
from airflow_provider_mysqlcdc.spark.stream.zero_date_layouts import ZeroDateLayouts

log = logging.getLogger(__name__)


class StreamFailed(CdcError):
    """The streaming query stopped with an error (the message carries Spark's)."""


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
        except Exception as exc:  # StreamingQueryException: re-raised with its cause
            self.release()
            raise StreamFailed(
                f"the stream on {self.config.checkpoint} failed: {stream_failure_message(exc)}"
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


def resolve_tables(settings: MySQLSettings, patterns: tuple[str, ...]) -> dict[TableId, TableSchema]:
    """The captured tables' schemas: a few ``information_schema`` queries for all of them (``load_schemas``),
    not three per table (a stream over 1,000 tables starts without 3,000 round trips)."""
    with connect(settings) as conn:
        tables = list_tables(conn, patterns)
        return load_schemas(conn, tables)


def start_stream(
    spark: Any,
    config: StreamConfig,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[BatchCommit], None] | None = None,
) -> StreamRun:
    """Take the checkpoint's lock and start the query (returns at once)."""
    if config.warm_executors:
        warm_executors(spark)  # in the background, while the query starts (spark/stream/warmup.py)
    ensure_writable(config.output)
    ensure_writable(config.checkpoint, "checkpoint")
    settings = config.settings()
    mode, schemas = _stream_tables(config, settings)
    tables = sorted(schemas)
    watch = _LockWatch()
    lock = StreamLock(
        config.checkpoint,
        lease_seconds=config.lock_lease_seconds,
        description=config.query_name or "mysqlcdc stream",
        on_lost=watch,
    )
    lock.acquire(break_lock=config.break_lock)
    try:
        claim = claim_server_id_range(settings, config.checkpoint, config.chunk_store, on_lost=watch)
        lock.release_with(claim.release)  # the server_id range is the stream's for as long as its lock
        starting = startup_offset(config.checkpoint, settings, mode, config.chunk_store, tables)
        claim_output(config.checkpoint, config.output,
                     read_json(posixpath.join(config.checkpoint, STARTUP_FILE)))
        source = _source_options(spark, config, tables, starting)
        sink = ChangelogSink(
            root=config.output,
            schemas=written_schemas(schemas, config.exclude_columns,
                                    lambda table: read_schema_history(config.output, table),
                                    _PendingDdl(config, settings, starting)),
            checkpoint=config.checkpoint,
            changelog_json=config.changelog_json,
            on_batch_committed=on_batch_committed,
            on_progress=on_progress,
            exclude=dict(config.exclude_columns),
            zero_dates=ZeroDateLayouts(config.chunk_store),
        )
        query = _start_query(spark, config, source, sink)
    except BaseException:
        lock.release()
        raise
    watch.query = query
    log.info(
        "stream started on %s for %d table(s), trigger %s", config.checkpoint, len(tables), config.trigger
    )
    return StreamRun(query=query, lock=lock, config=config, tables=tables, lost_lock=watch.lost)


def _stream_tables(
    config: StreamConfig, settings: MySQLSettings
) -> tuple[StartupMode, dict[TableId, TableSchema]]:
    """The startup mode and the tables the stream captures, with their schemas: every table the patterns
    match, and (unless the mode starts from an offset) planned in the chunk store."""
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
    return mode, schemas


class _PendingDdl:
    """The column changes of DDL between where the stream resumes (the end of the last batch the sink
    committed; a new stream's start) and the binlog's end, per table: the DDL a restart has not read yet.
    Read once, from event headers, and only when today's schema lacks an excluded column (``written_schemas``,
    ``_excluded_now``)."""

    def __init__(self, config: StreamConfig, settings: MySQLSettings, starting: BinlogOffset | None) -> None:
        self.config, self.settings, self.starting = config, settings, starting
        self._found: dict[TableId, list[ColumnChanges]] | None = None

    def resume_position(self) -> BinlogOffset | None:
        progress = read_stream_progress(self.config.output)
        return progress.end_offset if progress is not None else self.starting

    def __call__(self, table: TableId) -> list[ColumnChanges]:
        if self._found is None:
            since = self.resume_position()
            found = None
            if since is not None:
                tables = [TableId.parse(t) for t in self.config.exclude_columns]
                with connect(self.settings.with_database(None)) as conn:
                    found = column_changes_since(conn, since.position, tables)
            if found is None:
                log.warning("cannot read the DDL after %s (no such binlog file on the server): excluded "
                            "columns are checked against today's schema and the schema history only", since)
            self._found = found or {}
        return list(self._found.get(table, []))


class _LockWatch:
    """The lock's ``on_lost``: keeps why the lock was lost, and stops the query once there is one."""

    def __init__(self) -> None:
        self.lost: list[str] = []
        self.query: Any = None

    def __call__(self, message: str) -> None:
        self.lost.append(message)
        query = self.query
        if query is not None:
            threading.Thread(target=query.stop, daemon=True).start()


def _source_options(
    spark: Any, config: StreamConfig, tables: list[TableId], starting: BinlogOffset | None
) -> BinlogSourceOptions:
    return BinlogSourceOptions(
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
        starting_offset=starting,
    )


def _start_query(spark: Any, config: StreamConfig, source: BinlogSourceOptions, sink: ChangelogSink) -> Any:
    """The binlog source into the changelog sink, as one streaming query (started)."""
    register_data_source(spark, BinlogSource)
    stream = spark.readStream.format(BinlogSource.name()).options(**source.to_options()).load()
    writer = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", config.checkpoint)
        .trigger(**config.trigger_kwargs())
    )
    if config.query_name:
        writer = writer.queryName(config.query_name)
    with _checkpoint_file_manager(spark, config.checkpoint):
        return writer.start()


CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
_FILE_SYSTEM_MANAGERS = (  # Spark 4 moved it into a package of its own
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


@contextlib.contextmanager
def _checkpoint_file_manager(spark: Any, checkpoint: str) -> Iterator[None]:
    """Start the query with Hadoop's FileSystem API for a local checkpoint (what the query keeps from its
    start). Spark's default goes through FileContext, whose rename runs the ``readlink`` program several
    times per file without Hadoop's native library (which pip's PySpark lacks): Spark's two checkpoint
    writes of every micro-batch (``offsets/``, ``commits/``) cost 16 process starts, ~90 ms of a 250 ms
    batch here. A local file system renames atomically either way, and one stream per checkpoint is ours to
    enforce (``stream_lock``). Any other file system, and a manager the user chose, keep Spark's choice."""
    scheme = checkpoint.split("://", 1)[0].lower() if "://" in checkpoint else "file"
    if scheme != "file" or spark.conf.get(CHECKPOINT_FILE_MANAGER, None):
        yield
        return
    manager = next((m for m in _FILE_SYSTEM_MANAGERS if _jvm_class_exists(spark, m)), None)
    if manager is None:
        yield
        return
    spark.conf.set(CHECKPOINT_FILE_MANAGER, manager)
    try:
        yield  # the query reads it while it starts (StreamExecution creates its offset and commit logs)
    finally:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER)


def _jvm_class_exists(spark: Any, name: str) -> bool:
    try:
        spark._jvm.java.lang.Class.forName(name)
        return True
    except Exception:  # noqa: BLE001 - py4j's error for a missing class
        return False


def run_stream(
    spark: Any,
    config: StreamConfig,
    *,
    on_batch_committed: BatchHook | None = None,
    on_progress: Callable[[BatchCommit], None] | None = None,
) -> StreamRun:
    """Start the stream and wait until it ends (available-now) or is stopped; raise if it failed.

    DDL that needs a table snapshotted again (TRUNCATE, RENAME, partition DDL) stops the query: the table is
    planned anew, the query restarts at once, and the new plan is read in the background
    (``resnapshots.BackgroundResnapshots``). An available-now run returns once those re-snapshots committed;
    a stopped stream leaves them to its next start."""
    hook = _SerialHook(on_batch_committed, config.output)
    background = BackgroundResnapshots(spark, config, snapshot_table, on_committed=hook.snapshot_committed)
    resnapshots: list[str] = []
    background.resume()
    try:
        while True:
            run = start_stream(spark, config, on_batch_committed=hook, on_progress=on_progress)
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
                try:
                    background.request(TableId.parse(table), position)
                except ResnapshotPlanFailed as failed:
                    raise StreamFailed(str(failed)) from None
                continue
            except BaseException:  # Ctrl-C, or the query failed: stop it before giving up the lock
                try:
                    run.query.stop()
                except Exception:  # noqa: BLE001, S110 - already stopped
                    pass
                run.release()
                raise
            if config.trigger == AVAILABLE_NOW:
                _finish_resnapshots(background)
            return run
    finally:
        background.cancel()


def _finish_resnapshots(background: BackgroundResnapshots) -> None:
    """An available-now run ends consistent: wait for its re-snapshots; one that gave up fails the run."""
    if background.running():
        log.info("the stream caught up; waiting for the re-snapshot of %s", ", ".join(background.running()))
    background.wait()
    if background.failures:
        raise StreamFailed("the re-snapshot of " + "; of ".join(
            f"{table} failed: {error}" for table, error in sorted(background.failures.items())
        ) + ". The stream emitted all their changes, nothing is lost; the mirror keeps the previous snapshot "
            "until a new one commits. Fix the cause and run the stream again: it takes the re-snapshot up")


class _SerialHook:
    """The batch hook, called by the sink after each batch and by a re-snapshot that committed (the mirror
    switches to the new generation at once); one call at a time, as the mirror refresher needs."""

    def __init__(self, hook: BatchHook | None, output: str) -> None:
        self.hook, self.output = hook, output
        self.last_batch: int | None = None
        self._lock = threading.Lock()

    def __call__(self, batch_id: int, tables: list[TableId]) -> None:
        with self._lock:
            self.last_batch = batch_id
            if self.hook is not None:
                self.hook(batch_id, tables)

    def snapshot_committed(self, table: TableId) -> None:
        with self._lock:
            if self.hook is None:
                return
            if self.last_batch is None:  # no batch in this run yet: the sink's last one (an earlier run's)
                progress = read_stream_progress(self.output)
                self.last_batch = progress.batch_id if progress is not None else None
            if self.last_batch is not None:
                self.hook(self.last_batch, [table])


def snapshot_table(
    spark: Any, config: StreamConfig, table: TableId, chunk_ids: tuple[int, ...] | None = None,
    job_group: str | None = None,
) -> Any:
    """Snapshot ``table``'s latest plan (or the chunks ``chunk_ids`` of it) in this Spark session, into the
    stream's output and chunk store, with the stream's column exclusions (a ``ChunkGroupResult``). A task per
    chunk: a re-snapshot shares the stream's cores (the FAIR pool), and short tasks let its batches in."""
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group

    return run_chunk_group(
        spark,
        SnapshotOptions(
            mysql_url=config.mysql_url, table=str(table), output=config.output,
            chunk_store=config.chunk_store, password_file=config.password_file, chunk_ids=chunk_ids,
            exclude_columns=_excluded_now(config, table), limits=config.source_limits,
        ),
        job_group=job_group, chunks_per_task=1,
    )


def _excluded_now(config: StreamConfig, table: TableId) -> tuple[str, ...]:
    """The table's excluded columns under the names they have now: after the DDL the stream followed (an
    excluded column renamed is excluded under its new name; one dropped is gone) and, when today's table
    lacks one of those names, the DDL the stream has not read yet. What a re-snapshot (which reads today's
    table) leaves out; a configured name that no DDL explains stays, for the snapshot to refuse by name."""
    configured = config.exclude_columns.get(str(table), ())
    if not configured:
        return configured
    settings = config.settings()
    with connect(settings) as conn:
        live = set(load_schema(conn, table).column_names)
    history: list = list(read_schema_history(config.output, table))
    names = excluded_after(configured, history)
    if not set(columns_after(list(configured), history)) & names <= live:
        history += _PendingDdl(config, settings, None)(table)
        names = excluded_after(configured, history)
    unknown = {c for c in configured if c not in live and c not in renamed_or_dropped(history)}
    return tuple(sorted((names & live) | unknown))


_RESNAPSHOT = re.compile(r"\[resnapshot table=(\S+) position=(\S+)\]")


@contextlib.contextmanager
def mirror_refresh(config: StreamConfig) -> Iterator[BatchHook]:
    """The default batch hook: refresh each changed table's mirror right after its batch commits, then
    collect garbage (``engine.lake.gc``) at most every ``gc_interval_minutes``.

    Incremental: only chunks that received changes (or a new snapshot) are rewritten. A GC failure is logged
    and never fails the stream.
    """
    from airflow_provider_mysqlcdc.engine.lake.gc.collector import PeriodicGc
    from airflow_provider_mysqlcdc.engine.lake.gc.retention import Retention
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher

    store = ChunkStore(config.chunk_store)
    refresher = MirrorRefresher(config.output, store, settings=config.settings(),
                                outage_budget_s=config.reconnect_timeout, updates=config.mirror_updates)
    gc = PeriodicGc(config.output, store, Retention.settings(config.gc_retention, config.gc_mirror_retention),
                    config.gc_interval_minutes)

    def hook(batch_id: int, tables: list[TableId]) -> None:
        refresher.on_batch_committed(batch_id, tables)
        gc.maybe_run()

    try:
        yield hook
    finally:
        refresher.close()
        store.close()
