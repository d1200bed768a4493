"""Stream task: the binlog Spark job (``spark_apps/binlog_stream.py``) from the smallest chunk HW on.

``trigger="available-now"`` catches up to the binlog end seen at the start and finishes (scheduled incremental
runs, tests, the demo); ``"continuous"`` (or ``"processing-time=10 seconds"``) runs until the task is stopped:
killing the task kills ``spark-submit``, and the next start resumes from the Spark checkpoint, exactly once.
A DAG run that only redoes chunks finds the stream already running (its checkpoint's lock is held) and skips:
the running stream picks up the rerun chunks' new HWs by itself.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock
from airflow_provider_mysqlcdc.engine.model.table_names import matching_tables
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL, StartupMode
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.operator_methods import ReportsLineage
from airflow_provider_mysqlcdc.lineage.switch import openlineage_on
from airflow_provider_mysqlcdc.operators.arguments import (
    SOURCE_LIMIT_CHECKS,
    check_literals,
    check_rendered,
    conn_id,
    exclude_columns,
    optional,
)
from airflow_provider_mysqlcdc.operators.spark_apps import STREAM_APP, app_path
from airflow_provider_mysqlcdc.operators.spark_exit import exit_reason
from airflow_provider_mysqlcdc.operators.spark_submit import SparkAppMixin
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url, default_checkpoint

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

AVAILABLE_NOW, CONTINUOUS = "available-now", "continuous"
CONTINUOUS_TRIGGER = "processing-time=5 seconds"


def spark_trigger(trigger: Any) -> str:
    """The app's ``--trigger``: ``available-now``, ``continuous`` (a 5 s processing-time trigger) or
    ``processing-time=<interval>`` (an interval Spark takes: ``10 seconds``, ``1 minute``)."""
    text = AVAILABLE_NOW if trigger is None or trigger == "" else arguments.text(trigger, what="a trigger")
    lowered = text.lower()
    if lowered in (AVAILABLE_NOW, "available_now", "availablenow"):
        return AVAILABLE_NOW
    if lowered == CONTINUOUS:
        return CONTINUOUS_TRIGGER
    if lowered.startswith("processing-time="):
        try:
            return f"processing-time={arguments.interval(text.split('=', 1)[1])}"
        except BadValue as exc:
            raise BadValue(f"processing-time: {exc.problem}") from None
    raise BadValue(f"{arguments.shown(trigger)}: use 'available-now', 'continuous' or "
                   "'processing-time=10 seconds'")


# Each argument's check (pipeline/arguments.py): run at construction on literal values, in execute on all.
# A number left out (None, "") keeps the Spark app's default.
_CHECKS = {
    "tables": arguments.table_patterns,
    "output_path": lambda v: arguments.storage_root(v, writable=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=None),
    "checkpoint": optional(arguments.storage_root, what="a checkpoint directory", writable=False),
    "mysql_conn_id": conn_id,
    "spark_conn_id": conn_id,
    "trigger": spark_trigger,
    "exclude_columns": exclude_columns,
    "changelog_json": lambda v: arguments.flag(v, default=False),
    "max_bytes_per_batch": optional(arguments.whole_number, minimum=0, maximum=arguments.MAX_BATCH_BYTES),
    "skip_if_running": lambda v: arguments.flag(v, default=True),
    "reconnect_timeout": optional(arguments.number, minimum=0, maximum=arguments.MAX_WAIT_S, unit="seconds"),
    "startup_mode": arguments.startup_mode,
    "resnapshot": lambda v: arguments.flag(v, default=True),
    "catchup_partitions": optional(arguments.whole_number, minimum=0,
                                   maximum=arguments.MAX_CATCHUP_PARTITIONS),
    "catchup_partition_bytes": optional(arguments.whole_number, minimum=1, maximum=arguments.MAX_BATCH_BYTES),
    "rows_per_read": optional(arguments.whole_number, minimum=1, maximum=arguments.MAX_ROWS_PER_READ),
    "gc_retention": optional(arguments.retention),
    "gc_mirror_retention": optional(arguments.retention),
    "gc_interval_minutes": optional(arguments.gc_interval_minutes),
    "mirror_updates": optional(arguments.mirror_updates),
    **SOURCE_LIMIT_CHECKS,
}
_LITERAL_CHECKS = {
    **_CHECKS,
    "output_path": lambda v: arguments.storage_root(v, look=False),
    "checkpoint": optional(arguments.storage_root, what="a checkpoint directory", look=False),
}


class MySqlCdcStreamOperator(ReportsLineage, SparkAppMixin, SparkSubmitOperator):
    """Runs the stream phase on Spark for ``tables`` (names or patterns) into ``output``.

    :param tables: ``db.table`` names or patterns: a comma-separated string or a list.
    :param output_path: the output root.
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param checkpoint: the Spark checkpoint; default ``<output_path>/_mysqlcdc_checkpoint``.
    :param mysql_conn_id: the source connection.
    :param trigger: ``available-now`` (catch up to the binlog end seen at the start, then finish),
        ``continuous`` (a 5-second processing-time trigger until the task is stopped) or
        ``processing-time=<interval>``.
    :param exclude_columns: columns never written, as for the snapshot (use the same exclusions).
    :param changelog_json: also write the Flink changelog-json form.
    :param max_bytes_per_batch: binlog bytes per micro-batch (default 64 MiB).
    :param skip_if_running: when a live stream holds the checkpoint's lock: skip the task (False: fail).
    :param reconnect_timeout: seconds a MySQL outage is waited out (default 300).
    :param startup_mode: where a new checkpoint's stream begins; ``snapshot-only`` skips the task.
    :param resnapshot: at TRUNCATE, RENAME and the like, snapshot the table again (False: stop with an error).
    :param catchup_partitions: Spark tasks that decode one batch at once while far behind (default 0:
        Spark's default parallelism; 1: off).
    :param catchup_partition_bytes: binlog bytes each parallel partition gets at least (default 4 MiB).
    :param rows_per_read: row images a read task holds at once, its memory bound (default 100,000).
    :param max_concurrent_reads: as for the snapshot operator: the limits a re-snapshot's chunk reads keep
        on the source (default 4).
    :param rows_per_second: as for the snapshot operator (default: no limit).
    :param query_timeout: as for the snapshot operator (default 600 s; 0: none).
    :param gc_retention: garbage collection deletes superseded snapshot versions, killed attempts' files and
        old mirror files (Delta VACUUM) this long after they stopped being needed: ``72h``, ``3d``, ``30m``
        (default ``3d``; never below a 15 minute grace).
    :param gc_mirror_retention: mirror files a batch superseded are deleted this long after (default
        ``1h`` while ``gc_retention`` is left at its default, else ``gc_retention``; never below the mirror's
        Delta log retention, 10 minutes, plus the grace): Delta time travel and queries that opened an older
        mirror version have that long.
    :param gc_interval_minutes: the stream runs garbage collection after a batch at most every this many
        minutes (default 60; 0: never, e.g. when ``mysqlcdc gc`` runs on a schedule instead).
    :param mirror_updates: how a batch updates the mirror: ``rewrite`` (default: each chunk it touches is
        rewritten; every documented reader reads it) or ``deletion_vectors`` (the batch's changed rows in one
        file plus Delta deletion vectors; readers and versions in docs/output.md).
    :param application: the Spark app (default ``spark_apps/binlog_stream.py``).
    :param conn_id: the Spark connection. Other ``SparkSubmitOperator`` arguments pass through;
        ``outlets=[ASSET_ALIAS]`` is set by default.

    With Airflow's metrics on, the task sends the stream's lag, binlog headroom and batch figures while it
    waits on Spark, every ``metrics_interval`` seconds (an attribute, default 15; docs/monitoring.md).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields, "spark_conn_id", "tables", "mysql_conn_id", "chunk_store",
        "output_path", "checkpoint",
        "trigger", "exclude_columns", "max_bytes_per_batch", "skip_if_running", "reconnect_timeout",
        "startup_mode", "resnapshot", "catchup_partitions", "catchup_partition_bytes", "rows_per_read",
        "max_concurrent_reads", "rows_per_second", "query_timeout", "gc_retention", "gc_interval_minutes",
        "mirror_updates", "gc_mirror_retention",
    )
    ui_color = "#e6f5ea"
    # seconds between two looks of the task's metrics watcher (Airflow metrics on; ``metrics/stream_watcher``)
    metrics_interval: float = 15.0

    def __init__(
        self,
        *,
        tables: str | Sequence[str],
        output_path: str,
        chunk_store: str | None = None,
        checkpoint: str | None = None,
        mysql_conn_id: str = MySqlCdcHook.default_conn_name,
        trigger: str = AVAILABLE_NOW,
        exclude_columns: Mapping[str, Sequence[str] | str] | str | None = None,
        changelog_json: bool = False,
        max_bytes_per_batch: int | str | None = None,
        skip_if_running: bool | str = True,
        reconnect_timeout: float | str | None = None,
        startup_mode: str = INITIAL,
        resnapshot: bool | str = True,
        catchup_partitions: int | str | None = None,
        catchup_partition_bytes: int | str | None = None,
        rows_per_read: int | str | None = None,
        max_concurrent_reads: int | str | None = None,
        rows_per_second: float | str | None = None,
        query_timeout: float | str | None = None,
        gc_retention: str | None = None,
        gc_mirror_retention: str | None = None,
        gc_interval_minutes: float | str | None = None,
        mirror_updates: str | None = None,
        application: str | None = None,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [ASSET_ALIAS])
        super().__init__(application=application or app_path(STREAM_APP), conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id
        self.tables = tables
        self.output_path = output_path
        self.chunk_store = chunk_store
        self.checkpoint = checkpoint
        self.mysql_conn_id = mysql_conn_id
        self.trigger = trigger
        self.exclude_columns = exclude_columns
        self.changelog_json = changelog_json
        self.max_bytes_per_batch = max_bytes_per_batch
        self.skip_if_running = skip_if_running
        self.reconnect_timeout = reconnect_timeout  # seconds a MySQL outage is waited out (default 300)
        self.startup_mode = startup_mode  # engine.stream.startup: where a new checkpoint's stream begins
        self.resnapshot = resnapshot  # TRUNCATE & co.: snapshot the table again (else stop with an error)
        # parallel catch-up: tasks per batch when far behind (default: Spark's parallelism; 1: off)
        self.catchup_partitions = catchup_partitions
        self.catchup_partition_bytes = catchup_partition_bytes  # least binlog bytes per parallel partition
        self.rows_per_read = rows_per_read  # row images a read task holds at once (its memory bound)
        # the source limits of the re-snapshots DDL needs (as the snapshot operator's)
        self.max_concurrent_reads = max_concurrent_reads
        self.rows_per_second = rows_per_second
        self.query_timeout = query_timeout
        # garbage is deleted this long after no reader needs it (default 3d)
        self.gc_retention = gc_retention
        # superseded mirror files (default 1h while gc_retention is left at its default)
        self.gc_mirror_retention = gc_mirror_retention
        # GC after a batch at most this often (default 60; 0 off)
        self.gc_interval_minutes = gc_interval_minutes
        # rewrite (default) or deletion_vectors
        self.mirror_updates = mirror_updates
        check_literals(vars(self), _LITERAL_CHECKS)

    def checked_arguments(self) -> dict[str, Any]:
        """Every argument as rendered, checked: a bad one fails the task before spark-submit starts."""
        return check_rendered(self, _CHECKS)

    # SparkSubmitOperator annotates its execute ``-> None``, narrower than BaseOperator's: what execute
    # returns is the task's XCom value, here the outcome the downstream tasks read
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        args = self.checked_arguments()
        hook = MySqlCdcHook(args["mysql_conn_id"])
        output = args["output_path"]
        store_url = chunk_store_url(args["chunk_store"], output)
        checkpoint = args["checkpoint"] or default_checkpoint(output)
        trigger = args["trigger"]
        mode: StartupMode = args["startup_mode"]
        if not mode.streams:
            raise AirflowSkipException(
                f"startup mode {mode}: the tables are snapshotted, nothing is streamed"
            )
        patterns = args["tables"]
        owner = StreamLock(checkpoint).read()
        if owner is not None and owner.stale_reason() is None:
            message = (f"the stream of checkpoint {checkpoint} is already running ({owner.describe()}); it "
                       "picks up rerun chunks by itself")
            if args["skip_if_running"]:
                raise AirflowSkipException(message)
            raise ConfigurationError(message + ": stop it first, or set skip_if_running")
        with ChunkStore(store_url) as store:
            tables = [str(t) for t in matching_tables(store.tables(), patterns)]
            view = store.stream_view(tables)
        hws = [v.min_hw for v in view.values() if v.min_hw is not None]
        self.log.info("stream of %s: a new checkpoint starts at the smallest chunk HW %s; an existing one "
                      "resumes from %s", ", ".join(tables) or "no planned table", min(hws) if hws else "none",
                      checkpoint)
        if openlineage_on():  # where this run starts, for its lineage (a read of the progress file)
            from airflow_provider_mysqlcdc.lineage.stream_points import start_point

            self._lineage_facts = {"tables": tables, "start": start_point(output, hws)}
        self.application_args = [
            "--mysql-url", hook.redacted_url(), "--tables", ",".join(patterns), "--output", output,
            "--checkpoint", checkpoint, "--trigger", trigger,
            "--query-name", f"mysqlcdc-{context['dag'].dag_id}", "--startup-mode", str(mode),
        ]
        if args["max_bytes_per_batch"]:
            self.application_args += ["--max-bytes-per-batch", str(args["max_bytes_per_batch"])]
        for flag, name in (("--catchup-partitions", "catchup_partitions"),
                           ("--catchup-partition-bytes", "catchup_partition_bytes"),
                           ("--rows-per-read", "rows_per_read"),
                           ("--reconnect-timeout", "reconnect_timeout"),
                           ("--max-concurrent-reads", "max_concurrent_reads"),
                           ("--rows-per-second", "rows_per_second"),
                           ("--query-timeout", "query_timeout"),
                           ("--gc-retention", "gc_retention"),
                           ("--gc-mirror-retention", "gc_mirror_retention"),
                           ("--gc-interval-minutes", "gc_interval_minutes"),
                           ("--mirror-updates", "mirror_updates")):
            if args[name] is not None:
                self.application_args += [flag, str(args[name])]
        if args["changelog_json"]:
            self.application_args += ["--changelog-json"]
        if not args["resnapshot"]:
            self.application_args += ["--no-resnapshot"]
        for table, columns in args["exclude_columns"].items():
            self.application_args += ["--exclude-columns", f"{table}={','.join(columns)}"]
        if not self.name or self.name == "arrow-spark":
            self.name = f"mysqlcdc stream {context['dag'].dag_id}"
        self.prepare_spark(hook, store_url, CHUNK_STORE_URL_ENV, context)
        from airflow_provider_mysqlcdc.metrics.tasks import start_stream_watcher

        watcher = start_stream_watcher(output, hook.settings(), store_url, tables, context,
                                       self.metrics_interval)
        try:
            super().execute(context)
        except Exception as exc:
            if "Error code is:" not in str(exc):  # not spark-submit's exit (a kill of the task, ...)
                raise
            # the provider's error leads with the command line; the cause is the driver's last word
            raise CdcError(f"the stream's Spark application stopped: {exit_reason(exc)}. Its checkpoint "
                           f"{checkpoint} keeps every batch it committed: remove the cause, then clear this "
                           "task to resume from there (the driver's whole output is above in this log)"
                           ) from exc
        finally:
            if watcher is not None:
                watcher.stop()
        settings = hook.settings()
        # here, not at the top: it loads pyarrow.dataset and pandas (~0.3 s), which every parse of a DAG
        # that uses this operator and every other task would pay
        from airflow_provider_mysqlcdc.engine.status.report import collect_status

        with ChunkStore(store_url) as store:
            report = collect_status(store, output, tables)
        result = {
            "trigger": trigger,
            "tables": {t.table: {"batch": t.stream_batch,
                                 "position": None if t.stream_position is None else str(t.stream_position),
                                 "consistent": t.consistent} for t in report.tables},
        }
        for t in report.tables:
            if t.stream_batch is not None:
                self.emit_table_asset(context, settings, t.table, {
                    "phase": "stream", "position": result["tables"][t.table]["position"],
                    "consistent": t.consistent})
        facts = getattr(self, "_lineage_facts", None)
        if facts is not None:
            self._lineage_facts = {**facts, "result": result}
        return result

    # --- OpenLineage (called by the OpenLineage provider's listener, when it is installed) ------------------

    def _lineage(self, detailed: bool) -> OperatorLineage:
        """Inputs: the tables (and the snapshot files of those snapshotted, which their mirrors start from);
        outputs: each table's changelog and mirror Delta tables, with schemas and column lineage once the
        task ran; the run facet ``mysqlcdc_stream`` (where the run started and ended)."""
        from airflow_provider_mysqlcdc.lineage.reports import chunk_store_or_none, stream_lineage
        from airflow_provider_mysqlcdc.lineage.run_facets import STREAM_FACET, stream_facet
        from airflow_provider_mysqlcdc.lineage.stream_points import committed_point

        output = arguments.storage_root(self.output_path, look=False)
        store_url = chunk_store_or_none(self.chunk_store, output)
        facts: dict[str, Any] = getattr(self, "_lineage_facts", None) or {}
        tables = facts.get("tables")
        if tables is None:  # before execute: the planned tables the patterns match, as execute finds them
            tables = []
            if store_url is not None:
                with ChunkStore(store_url) as store:
                    tables = [str(t) for t in matching_tables(store.tables(),
                                                              arguments.table_patterns(self.tables))]
        result = facts.get("result")
        facet = stream_facet(
            spark_trigger(self.trigger), str(arguments.startup_mode(self.startup_mode)), facts.get("start"),
            committed_point(output) if result is not None else None,
            result["tables"] if result is not None else None)
        return stream_lineage(
            MySqlCdcHook(str(self.mysql_conn_id)).settings(), output, store_url, tables,
            exclude_columns(self.exclude_columns), detailed=detailed and result is not None,
            run_facets={STREAM_FACET: facet})

