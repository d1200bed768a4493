"""Snapshot task: one chunk group, run by the DAG run's group runner when one serves, else as a Spark
application of its own (``spark_apps/snapshot_chunks.py``).

Mapped over the plan task's groups with ``.partial(...).expand(chunk_group=...)``; the map index names the
group (``shop.orders chunks 8-15 (plan generation 3)``) from the moment a try starts. Clearing one mapped task
instance reruns exactly that group: the chunks are read again and replace their output atomically, and the
stream treats them as HW = -inf until the rerun commits. Returns the group's chunk results (rows, LW, HW) as
recorded in the chunk store. What a failed try left behind, and the message it gives, is
``snapshot_outcome``'s.

With a group runner (``snapshot_runner.py``: one Spark application started once for the DAG run) the task
hands it the group through the chunk store and waits: deferred (``deferrable=True``: in the triggerer, no
worker slot held) or polling. A runner that goes away before it finishes the group (stopped, dead) makes the
task record what it left behind and run the group with its own ``spark-submit``.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS
from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import DONE, GONE, request_outcome
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.snapshot.options import READ_VIEW_MODES
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.operator_methods import ReportsLineage
from airflow_provider_mysqlcdc.operators.arguments import (
    SOURCE_LIMIT_CHECKS,
    check_literals,
    check_rendered,
    conn_id,
    exclude_columns,
    not_given,
    one_of,
    optional,
)
from airflow_provider_mysqlcdc.operators.snapshot_outcome import (
    TaskRef,
    attempts_before,
    describe_chunks,
    failure_message,
    group_result,
    record_dead_attempts,
)
from airflow_provider_mysqlcdc.operators.snapshot_runner import runner_scope
from airflow_provider_mysqlcdc.operators.spark_apps import SNAPSHOT_APP, app_path
from airflow_provider_mysqlcdc.operators.spark_exit import exit_reason
from airflow_provider_mysqlcdc.operators.spark_submit import SparkAppMixin
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue, shown
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url
from airflow_provider_mysqlcdc.triggers.group_request import GroupRequestTrigger

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

# Rendered by the task runner from the mapped argument as a try starts (not from a value set in execute(),
# which showed a bare number while the group was running or waiting to retry).
MAP_INDEX_TEMPLATE = "{{ task.chunk_group.name }}"
_WAIT_POLL_S = 0.25  # a look at the request while the task waits in place (one indexed row read)


def _chunk_group(value: Any) -> ChunkGroup:
    """One element of the plan task's output: ``{"parts": [{"table", "generation", "chunk_ids"}, ...]}`` (or
    one table's ``{"table", "generation", "chunk_ids"}``)."""
    try:
        group = ChunkGroup.from_dict(dict(value))
    except (TypeError, ValueError, KeyError):
        raise BadValue("give one element of the plan task's output "
                       "({parts: [{table, generation, chunk_ids}]}; "
                       f"map over it with .expand(chunk_group=plan.output)), got {shown(value)}") from None
    if not group.parts:
        raise BadValue(f"holds no table: {shown(value)}")
    for part in group.parts:
        arguments.table_name(part.table)
        arguments.whole_number(part.generation, minimum=1, maximum=arguments.MAX_GENERATION)
        if not part.chunk_ids or min(part.chunk_ids) < 0:
            raise BadValue(f"holds no chunk ids (or a negative one) for {part.table}: {shown(value)}")
    if len(set(group.tables)) != len(group.parts):
        raise BadValue(f"names a table twice: {shown(value)}")
    return group


# Each argument's check (pipeline/arguments.py): run at construction on literal values, in execute on all.
# A number left out (None, "") keeps the Spark app's default.
_CHECKS = {
    "chunk_group": _chunk_group,
    "output_path": lambda v: arguments.storage_root(v, writable=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=None),
    "mysql_conn_id": conn_id,
    "spark_conn_id": conn_id,
    "exclude_columns": exclude_columns,
    "read_view_mode": lambda v: "auto" if not_given(v) else one_of(*READ_VIEW_MODES)(v),
    "watermark_table": optional(arguments.table_key),
    **SOURCE_LIMIT_CHECKS,
}
_LITERAL_CHECKS = {**_CHECKS, "output_path": lambda v: arguments.storage_root(v, look=False)}


class MySqlCdcSnapshotOperator(ReportsLineage, SparkAppMixin, SparkSubmitOperator):
    """Snapshots the chunks of ``chunk_group`` (``ChunkGroup.to_dict()``) on Spark (``conn_id``: the Spark
    connection, master in its host) and records each chunk's result in the chunk store.

    :param chunk_group: one element of the plan task's output (map over it with ``.expand(chunk_group=...)``).
    :param output_path: the output root.
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param mysql_conn_id: the source connection.
    :param exclude_columns: ``{"db.table": ["col", ...]}`` (or ``"col,col"``): columns never written; give
        the stream the same.
    :param read_view_mode: ``auto``, ``consistent_snapshot`` (MariaDB/Percona), ``gtid_executed`` (Oracle
        MySQL with ``gtid_mode=ON``: read-only) or ``watermark_table``.
    :param watermark_table: ``db.table`` the CDC user may write, for the ``watermark_table`` mode.
    :param max_concurrent_reads: chunk reads the source serves at once, over all groups and runs (default 4;
        0: no cap).
    :param rows_per_second: rows/s the source serves to all chunk reads together (default: no limit).
    :param query_timeout: server-side time limit of each chunk ``SELECT`` in seconds (default 600; 0: none).
    :param deferrable: while the DAG run's group runner runs the group, wait in the triggerer (no worker
        slot held) instead of in the task (default: Airflow's ``[operators] default_deferrable``). Without a
        runner serving, the task runs the group with ``spark-submit`` either way.
    :param defer_after: with ``deferrable``, seconds the task waits for its group in place before it
        defers (default 20; 0: defer at once): a short group costs one task start instead of two.
    :param poll_interval: seconds between the trigger's looks at the runner's progress (default 2).
    :param application: the Spark app (default ``spark_apps/snapshot_chunks.py``, found in the checkout or
        under ``<prefix>/share/airflow-provider-mysqlcdc/spark_apps``).
    :param conn_id: the Spark connection. Other ``SparkSubmitOperator`` arguments pass through;
        ``map_index_template`` and ``outlets=[ASSET_ALIAS]`` are set by default.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields, "spark_conn_id", "chunk_group", "mysql_conn_id", "chunk_store",
        "output_path",
        "exclude_columns", "read_view_mode", "watermark_table", "max_concurrent_reads", "rows_per_second",
        "query_timeout",
    )
    ui_color = "#fdf1e3"

    def __init__(
        self,
        *,
        chunk_group: Mapping[str, Any],
        output_path: str,
        chunk_store: str | None = None,
        mysql_conn_id: str = MySqlCdcHook.default_conn_name,
        exclude_columns: Mapping[str, Sequence[str] | str] | str | None = None,
        read_view_mode: str = "auto",
        watermark_table: str | None = None,
        max_concurrent_reads: int | str | None = None,
        rows_per_second: float | str | None = None,
        query_timeout: float | str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        defer_after: float = 20.0,
        poll_interval: float = 2.0,
        application: str | None = None,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("map_index_template", MAP_INDEX_TEMPLATE)
        kwargs.setdefault("outlets", [ASSET_ALIAS])
        super().__init__(application=application or app_path(SNAPSHOT_APP), conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id
        self.chunk_group = chunk_group
        self.output_path = output_path
        self.chunk_store = chunk_store
        self.mysql_conn_id = mysql_conn_id
        self.exclude_columns = exclude_columns
        self.read_view_mode = read_view_mode
        self.watermark_table = watermark_table
        # source protection (engine/source/limits.py); None: the defaults (4 reads at once, no rate, 600 s)
        self.max_concurrent_reads = max_concurrent_reads
        self.rows_per_second = rows_per_second
        self.query_timeout = query_timeout
        self.deferrable, self.poll_interval = deferrable, float(poll_interval)
        self.defer_after = float(defer_after)
        check_literals(vars(self), _LITERAL_CHECKS)

    def checked_arguments(self) -> dict[str, Any]:
        """Every argument as rendered, checked: a bad one fails the task before spark-submit starts."""
        return check_rendered(self, _CHECKS)

    # SparkSubmitOperator annotates its execute ``-> None``, narrower than BaseOperator's: what execute
    # returns is the task's XCom value, here the outcome the downstream tasks read
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        group, hook, store_url = self._prepare(context)
        before = attempts_before(group_result(store_url, group))
        request_id = self._hand_to_runner(context, group, hook, store_url)
        if request_id is None:
            return self._run_own_application(context, group, hook, store_url, before)
        # a short group is waited for here: deferring and resuming costs two task starts (seconds of
        # Airflow's own work each) where the group itself may take one; a longer one frees the worker slot
        limit = self.defer_after if self.deferrable else None
        outcome = self._wait_here(context, store_url, request_id, limit)
        if outcome is None:
            self.log.info("%s still running after %g s: deferred until the group runner is done with it",
                          group.name, self.defer_after)
            self.defer(trigger=GroupRequestTrigger(
                chunk_store=self._given_store(), output_path=self.output_path, scope=runner_scope(context),
                request_id=request_id, poll_interval=self.poll_interval,
                echo={"before": _before_list(before)}),
                method_name="execute_complete")
        return self._after_runner(context, group, hook, store_url, before, outcome[0], outcome[1])

    def _wait_here(self, context: Any, store_url: str, request_id: str,
                   limit_s: float | None) -> tuple[str, str] | None:
        """The request's outcome, polled in the task for up to ``limit_s`` (None: until it comes)."""
        deadline = None if limit_s is None else time.monotonic() + limit_s
        with ChunkStore(store_url) as store:
            while True:
                request, runner = store.group_request(request_id), store.runner(runner_scope(context))
                outcome = request_outcome(request, runner)
                if outcome is not None or (deadline is not None and time.monotonic() >= deadline):
                    return outcome
                time.sleep(_WAIT_POLL_S)

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the runner finished the group (or went away: run it here)."""
        group, hook, store_url = self._prepare(context)
        counts = {(str(t), int(c)): int(n) for t, c, n in (event.get("echo") or {}).get("before", ())}
        return self._after_runner(context, group, hook, store_url, counts, str(event["outcome"]),
                                  str(event.get("detail") or ""))

    def _prepare(self, context: Any) -> tuple[ChunkGroup, MySqlCdcHook, str]:
        """Check every argument and build the Spark application's arguments (also what the runner gets)."""
        args = self.checked_arguments()
        group: ChunkGroup = args["chunk_group"]
        hook = MySqlCdcHook(args["mysql_conn_id"])
        store_url = chunk_store_url(args["chunk_store"], args["output_path"])
        map_index = int(context["ti"].map_index or 0)
        self.application_args = [
            "--mysql-url", hook.redacted_url(),
            "--chunk-group", json.dumps({"parts": [p.to_dict() for p in group.parts]}, separators=(",", ":")),
            "--output", args["output_path"],
            "--run-id", str(context["run_id"]),
            "--read-view-mode", args["read_view_mode"],
            "--reader-slot-base", str(reader_slot_base(max(map_index, 0), group.chunk_count)),
        ]
        for table in group.tables:
            excluded = list(args["exclude_columns"].get(table, ()))
            if excluded:
                self.application_args += ["--exclude-columns-of", f"{table}={','.join(excluded)}"]
        if args["watermark_table"]:
            self.application_args += ["--watermark-table", args["watermark_table"]]
        for flag, value in (("--max-concurrent-reads", args["max_concurrent_reads"]),
                            ("--rows-per-second", args["rows_per_second"]),
                            ("--query-timeout", args["query_timeout"])):
            if value is not None:
                self.application_args += [flag, str(value)]
        self.name = (self.name if self.name and self.name != "arrow-spark"
                     else f"mysqlcdc snapshot {group.name}")
        self._group_args = list(self.application_args)  # before prepare_spark adds the chunk store
        self.prepare_spark(hook, store_url, CHUNK_STORE_URL_ENV, context)
        return group, hook, store_url

    def _given_store(self) -> str | None:
        return None if not_given(self.chunk_store) else str(self.chunk_store)

    def _hand_to_runner(self, context: Any, group: ChunkGroup, hook: MySqlCdcHook,
                        store_url: str) -> str | None:
        """Queue the group for the DAG run's runner if one serves with this task's source; its request id,
        or None (no runner: run the group here)."""
        scope = runner_scope(context)
        with ChunkStore(store_url) as store:
            runner = store.runner(scope)
            if runner is None or not runner.takes_groups():
                if runner is not None:
                    self.log.info("the DAG run's group runner runs no more groups (%s): running %s with "
                                  "spark-submit", runner.gone_reason(), group.name)
                return None
            if runner.source != hook.redacted_url():
                self.log.warning("the DAG run's group runner reads from %s, this task from %s: running %s "
                                 "with spark-submit", runner.source, hook.redacted_url(), group.name)
                return None
            ti = context["ti"]
            task = f"{self.task_id}[{ti.map_index}]"
            request_id = hashlib.sha256(
                f"{scope}\0{task}\0{ti.try_number}\0{runner.runner_id}".encode()).hexdigest()[:40]
            store.request_group(scope, request_id, task=task, name=group.name, args=self._group_args)
        self.log.info("handed %s (%d chunk(s)) to the DAG run's group runner %s (request %s)", group.name,
                      group.chunk_count, runner.runner_id, request_id)
        return request_id

    def _after_runner(self, context: Any, group: ChunkGroup, hook: MySqlCdcHook, store_url: str,
                      before: Mapping[tuple[str, int], int], outcome: str, detail: str) -> dict[str, Any]:
        if outcome == GONE:
            gone = CdcError(f"the group runner went away before it finished the group: {detail}")
            running, _ = record_dead_attempts(store_url, group, before, str(context["run_id"]), gone)
            self.log.warning("%s: %s%s; running it with spark-submit", group.name, gone,
                             f" (chunks {describe_chunks(running)} were running)" if running else "")
            return self._run_own_application(context, group, hook, store_url,
                                             attempts_before(group_result(store_url, group)))
        failure = None if outcome == DONE else CdcError(detail or f"the group runner: {outcome}")
        unstarted: dict[str, list[int]] = {}
        if failure is not None:
            _, unstarted = record_dead_attempts(store_url, group, before, str(context["run_id"]), failure)
        return self._finish(context, group, hook, store_url, failure, unstarted)

    def _run_own_application(self, context: Any, group: ChunkGroup, hook: MySqlCdcHook, store_url: str,
                             before: Mapping[tuple[str, int], int]) -> dict[str, Any]:
        """The group as a Spark application of its own (``spark-submit``)."""
        self.log.info("snapshotting %s (%d chunk(s)) on Spark", group.name, group.chunk_count)
        failure: BaseException | None = None
        unstarted: dict[str, list[int]] = {}
        try:
            super().execute(context)
        except Exception as exc:  # noqa: BLE001 - the chunk store says what failed; report that
            failure = exc
            running, unstarted = record_dead_attempts(store_url, group, before, str(context["run_id"]), exc)
            if running or unstarted:
                self.log.warning("%s: the Spark application ended (%s) with %s running and %s not started; "
                                 "they are recorded as failed", group.name, exit_reason(exc),
                                 describe_chunks(running), describe_chunks(unstarted))
        return self._finish(context, group, hook, store_url, failure, unstarted)

    def _finish(self, context: Any, group: ChunkGroup, hook: MySqlCdcHook, store_url: str,
                failure: BaseException | None, unstarted: Mapping[str, Sequence[int]]) -> dict[str, Any]:
        """The group's result as the chunk store has it; a chunk not committed by this run fails the task."""
        result = group_result(store_url, group)
        self._lineage_result = result  # what the lineage methods report
        from airflow_provider_mysqlcdc.metrics.tasks import send_snapshot_progress

        send_snapshot_progress(store_url, group.tables, context)
        failed = [c for c in result["chunks"] if c["status"] != COMMITTED or c["run_id"] != context["run_id"]]
        if failure is not None or failed:
            task = TaskRef(self.task_id, int(context["ti"].map_index or 0))
            raise CdcError(failure_message(group, failed, failure, unstarted, task)) from failure
        self.log.info("%s: %d rows, HW %s .. %s", group.name, result["rows"], result["min_hw"],
                      result["max_hw"])
        settings = hook.settings()
        complete = [p for p in result["parts"] if p["table_complete"]]
        if complete:
            by = f"{self.task_id}[{context['ti'].map_index}]"
            with ChunkStore(store_url) as store:  # one task announces a table (two groups may end at once)
                mine = [p for p in complete
                        if store.claim_announcement(p["table"], p["generation"], str(context["run_id"]), by)]
            for part in mine:
                self.emit_table_asset(context, settings, part["table"], {"generation": part["generation"],
                                                                         "phase": "snapshot"})
        return result

    # --- OpenLineage (called by the OpenLineage provider's listener, when it is installed) ------------------

    def _lineage(self, detailed: bool) -> OperatorLineage:
        """Inputs: the group's tables; outputs: their snapshot files (``<table>/snapshot``), with schemas and
        column lineage once the group ran; the run facet ``mysqlcdc_snapshot`` (chunk ids, then each chunk's
        rows, LW and HW)."""
        from airflow_provider_mysqlcdc.lineage.reports import chunk_store_or_none, snapshot_lineage
        from airflow_provider_mysqlcdc.lineage.run_facets import SNAPSHOT_FACET, snapshot_facet

        group = _chunk_group(self.chunk_group)
        output = arguments.storage_root(self.output_path, look=False)
        result: dict[str, Any] | None = getattr(self, "_lineage_result", None)
        return snapshot_lineage(
            MySqlCdcHook(str(self.mysql_conn_id)).settings(), output,
            chunk_store_or_none(self.chunk_store, output), group, exclude_columns(self.exclude_columns),
            detailed=detailed and result is not None,
            run_facets={SNAPSHOT_FACET: snapshot_facet(group, result)})


def _before_list(before: Mapping[tuple[str, int], int]) -> list[list[Any]]:
    """``attempts_before`` as JSON (the trigger's resume arguments)."""
    return [[table, chunk_id, count] for (table, chunk_id), count in before.items()]


def reader_slot_base(map_index: int, group_size: int) -> int:
    """First reader slot of this group: where its chunk reads start looking for a free binlog reader id (each
    read claims one with GET_LOCK), and their watermark rows; spreading the groups makes the first try hit."""
    return 1 + map_index * group_size

