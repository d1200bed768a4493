"""Snapshot task: one chunk group as one Spark application (``spark_apps/snapshot_chunks.py``).

Mapped over the plan task's groups with ``.partial(...).expand(chunk_group=...)``; the map index names the
group (``shop.orders chunks 8-15 (plan generation 3)``) from the moment a try starts. Clearing one mapped task
instance reruns exactly that group: the chunks are read again and replace their output atomically, and the
stream treats them as HW = -inf until the rerun commits. Returns the group's chunk results (rows, LW, HW) as
recorded in the chunk store. What a failed try left behind, and the message it gives, is
``snapshot_outcome``'s.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS
from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.snapshot.options import READ_VIEW_MODES
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
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
from airflow_provider_mysqlcdc.operators.spark_apps import SNAPSHOT_APP, app_path
from airflow_provider_mysqlcdc.operators.spark_exit import exit_reason
from airflow_provider_mysqlcdc.operators.spark_submit import SparkAppMixin
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue, shown
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url

# Rendered by the task runner from the mapped argument as a try starts (not from a value set in execute(),
# which showed a bare number while the group was running or waiting to retry).
MAP_INDEX_TEMPLATE = "{{ task.chunk_group.name }}"


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


class MySqlCdcSnapshotOperator(SparkAppMixin, SparkSubmitOperator):
    """Snapshots the chunks of ``chunk_group`` (``ChunkGroup.to_dict()``) on Spark (``conn_id``: the Spark
    connection, master in its host) and records each chunk's result in the chunk store.

    :param chunk_group: one element of the plan task's output (map over it with ``.expand(chunk_group=...)``).
    :param output_path: the output root.
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param mysql_conn_id: the source connection.
    :param exclude_columns: ``{"db.table": ["col", ...]}`` (or ``"col,col"``): columns never written; give
        the stream the same.
    :param read_view_mode: ``auto``, ``consistent_snapshot`` (MariaDB/Percona) or ``watermark_table``.
    :param watermark_table: ``db.table`` the CDC user may write, for the ``watermark_table`` mode.
    :param max_concurrent_reads: chunk reads the source serves at once, over all groups and runs (default 4;
        0: no cap).
    :param rows_per_second: rows/s the source serves to all chunk reads together (default: no limit).
    :param query_timeout: server-side time limit of each chunk ``SELECT`` in seconds (default 600; 0: none).
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
        check_literals(vars(self), _LITERAL_CHECKS)

    def checked_arguments(self) -> dict[str, Any]:
        """Every argument as rendered, checked: a bad one fails the task before spark-submit starts."""
        return check_rendered(self, _CHECKS)

    # SparkSubmitOperator annotates its execute ``-> None``, narrower than BaseOperator's: what execute
    # returns is the task's XCom value, here the outcome the downstream tasks read
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        args = self.checked_arguments()
        group: ChunkGroup = args["chunk_group"]
        hook = MySqlCdcHook(args["mysql_conn_id"])
        store_url = chunk_store_url(args["chunk_store"], args["output_path"])
        settings = hook.settings()
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
        self.prepare_spark(hook, store_url, CHUNK_STORE_URL_ENV)
        self.log.info("snapshotting %s (%d chunk(s)) on Spark", group.name, group.chunk_count)
        before = attempts_before(group_result(store_url, group))
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
        result = group_result(store_url, group)
        failed = [c for c in result["chunks"] if c["status"] != COMMITTED or c["run_id"] != context["run_id"]]
        if failure is not None or failed:
            task = TaskRef(self.task_id, map_index)
            raise CdcError(failure_message(group, failed, failure, unstarted, task)) from failure
        self.log.info("%s: %d rows, HW %s .. %s", group.name, result["rows"], result["min_hw"],
                      result["max_hw"])
        for part in result["parts"]:
            if part["table_complete"]:
                self.emit_table_asset(context, settings, part["table"], {"generation": part["generation"],
                                                                         "phase": "snapshot"})
        return result


def reader_slot_base(map_index: int, group_size: int) -> int:
    """First reader slot of this group: where its chunk reads start looking for a free binlog reader id (each
    read claims one with GET_LOCK), and their watermark rows; spreading the groups makes the first try hit."""
    return 1 + map_index * group_size

