"""Snapshot task: one chunk group as one Spark application (``spark_apps/snapshot_chunks.py``).

Mapped over the plan task's groups with ``.partial(...).expand(chunk_group=...)``; the map index shows the
group (``shop.orders g3 chunks 8-15``). Clearing one mapped task instance reruns exactly that group: the
chunks are read again and replace their output atomically, and the stream treats them as HW = -inf until the
rerun commits. Returns the group's chunk results (rows, LW, HW) as recorded in the chunk store. A Spark
driver that dies hard (no ``abort`` runs) has its chunks marked failed here once spark-submit has exited, so
they never stay 'running' with nothing running them.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS
from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, format_chunk_ids
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.operators.spark_apps import SNAPSHOT_APP, app_path
from airflow_provider_mysqlcdc.operators.spark_submit import SparkAppMixin
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url

MAP_INDEX_TEMPLATE = "{{ mysqlcdc_chunk_group }}"


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
        exclude_columns: Mapping[str, Sequence[str] | str] | None = None,
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

    def execute(self, context: Any) -> dict[str, Any]:
        group = ChunkGroup.from_dict(dict(self.chunk_group))
        context["mysqlcdc_chunk_group"] = group.name
        hook = MySqlCdcHook(self.mysql_conn_id)
        store_url = chunk_store_url(self.chunk_store, self.output_path)
        excluded = _columns_for(self.exclude_columns, group.table)
        settings = hook.settings()
        map_index = int(context["ti"].map_index or 0)
        if map_index < 0:
            map_index = 0
        self.application_args = [
            "--mysql-url", hook.redacted_url(),
            "--table", group.table,
            "--generation", str(group.generation),
            "--chunks", format_chunk_ids(group.chunk_ids),
            "--output", self.output_path,
            "--run-id", str(context["run_id"]),
            "--read-view-mode", self.read_view_mode,
            "--reader-slot-base", str(reader_slot_base(map_index, len(group.chunk_ids))),
        ]
        if self.watermark_table:
            self.application_args += ["--watermark-table", self.watermark_table]
        for flag, value in (("--max-concurrent-reads", self.max_concurrent_reads),
                            ("--rows-per-second", self.rows_per_second), ("--query-timeout", self.query_timeout)):
            if value not in (None, ""):
                self.application_args += [flag, str(value)]
        if excluded:
            self.application_args += ["--exclude-columns", ",".join(excluded)]
        self.name = self.name if self.name and self.name != "arrow-spark" else f"mysqlcdc snapshot {group.name}"
        self.prepare_spark(hook, store_url, CHUNK_STORE_URL_ENV)
        self.log.info("snapshotting %s (%d chunk(s)) on Spark", group.name, len(group.chunk_ids))
        before = {c["chunk_id"]: c["attempts"] for c in group_result(store_url, group)["chunks"]}
        failure: BaseException | None = None
        try:
            super().execute(context)
        except Exception as exc:  # noqa: BLE001 - the chunk store says what failed; report that
            failure = exc
            if fail_dead_attempts(store_url, group, before, str(context["run_id"]), exc):
                self.log.warning("%s: the Spark application ended mid-snapshot; its chunks are marked failed",
                                 group.name)
        result = group_result(store_url, group)
        failed = [c for c in result["chunks"] if c["status"] != COMMITTED or c["run_id"] != context["run_id"]]
        if failure is not None or failed:
            details = "; ".join(
                f"chunk {c['chunk_id']}: {c['status']}" + (f" ({c['error']})" if c.get("error") else "")
                for c in failed
            ) or str(failure)
            raise CdcError(
                f"snapshot of {group.name} failed: {details}. The previous snapshot of these chunks (if any) "
                "stays in force; clear this task to rerun exactly this chunk group"
            ) from failure
        self.log.info("%s: %d rows, HW %s .. %s", group.name, result["rows"], result["min_hw"], result["max_hw"])
        if result["table_complete"]:
            self.emit_table_asset(context, settings, group.table, {"generation": group.generation,
                                                                   "phase": "snapshot"})
        return result


def group_result(store_url: str, group: ChunkGroup) -> dict[str, Any]:
    """The group's chunks as the chunk store has them (the source of truth), JSON-safe for XCom."""
    with ChunkStore(store_url) as store:
        states = store.chunks(group.table, group.generation)
    wanted = set(group.chunk_ids)
    chunks = [
        {
            "chunk_id": c.chunk_id, "status": c.status, "rows": c.rows, "attempts": c.attempts,
            "lw": None if c.lw is None else str(c.lw), "hw": None if c.hw is None else str(c.hw),
            "run_id": c.committed_run_id if c.status == COMMITTED else c.run_id,
            "error": (c.error or "").splitlines()[0][:300] if c.error else None,
        }
        for c in states
        if c.chunk_id in wanted
    ]
    hws = [c.hw for c in states if c.chunk_id in wanted and c.hw is not None]
    return {
        "table": group.table, "generation": group.generation, "name": group.name,
        "chunk_ids": list(group.chunk_ids), "chunks": chunks,
        "rows": sum(c["rows"] or 0 for c in chunks if c["status"] == COMMITTED),
        "min_hw": str(min(hws)) if hws else None, "max_hw": str(max(hws)) if hws else None,
        "table_complete": bool(states) and all(c.status == COMMITTED for c in states),
    }


def fail_dead_attempts(store_url: str, group: ChunkGroup, before: Mapping[int, int], run_id: str,
                       failure: BaseException) -> list[int]:
    """Record as failed the attempts this try started that are still 'running' after spark-submit exited.

    A driver that dies hard (killed, out of memory, its node lost) runs no ``abort``: without this its chunks
    would show 'running' until a retry supersedes them, and forever if no retry is left. Only attempts that
    are provably this try's are touched (this run, exactly one attempt since the try began); ``fail_chunk``
    with the attempt number leaves a newer attempt alone. The committed result stays in force.
    """
    code = re.search(r"Error code is: (-?\d+)", str(failure))
    reason = f"spark-submit exit code {code.group(1)}" if code else type(failure).__name__
    dead: list[int] = []
    with ChunkStore(store_url) as store:
        for state in store.chunks(group.table, group.generation):
            if (state.chunk_id in before and state.status == RUNNING and state.run_id == run_id
                    and state.attempts == before[state.chunk_id] + 1):
                store.fail_chunk(group.table, group.generation, state.chunk_id,
                                 f"the Spark application ended before this chunk committed ({reason})",
                                 run_id=run_id, attempt=state.attempts)
                dead.append(state.chunk_id)
    return dead


def reader_slot_base(map_index: int, group_size: int) -> int:
    """First reader slot of this group: where its chunk reads start looking for a free binlog reader id (each
    read claims one with GET_LOCK), and their watermark rows; spreading the groups makes the first try hit."""
    return 1 + map_index * group_size


def _columns_for(exclude: Mapping[str, Sequence[str] | str] | None, table: str) -> list[str]:
    if not exclude:
        return []
    return split_commas(exclude.get(table))

