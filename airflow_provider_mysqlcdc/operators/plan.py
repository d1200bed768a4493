"""Plan task: split the tables into chunks (a new plan generation) and return the chunk groups to map over.

With ``redo_chunks`` it plans nothing: it returns groups holding only those chunk ids of each table's current
plan generation, so a DAG run re-snapshots just them while the stream keeps running. A ``startup_mode`` that
takes no snapshot (``latest-offset``, ``earliest-offset``, ``specific-offset:...``, ``timestamp:...``) plans
nothing either: the mapped snapshot task expands to no instance, and the stream begins at that point.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from airflow.sdk import BaseOperator

from ..engine.chunk_groups import DEFAULT_CHUNKS_PER_GROUP, ChunkGroup, chunk_groups, parse_chunk_ids
from ..engine.chunk_store import ChunkStore, UnknownChunk
from ..engine.errors import ConfigurationError
from ..engine.planner import DEFAULT_CHUNK_SIZE, ChunkPlan
from ..engine.snapshot import plan_tables
from ..engine.startup import INITIAL, StartupMode
from ..engine.tables import find_tables
from ..hooks.mysqlcdc import MySqlCdcHook
from .pipeline_record import XCOM_KEY, PipelineRecord
from .pipeline_settings import chunk_store_url, default_checkpoint, split_tables


class MySqlCdcPlanOperator(BaseOperator):
    """Plans chunks, records the plan in the chunk store, returns ``[ChunkGroup.to_dict(), ...]``.

    The groups are bounded by ``[core] max_map_length``: when there would be more, the group size grows to fit
    (and says so in the log) rather than failing the mapped snapshot task at expansion time.
    """

    template_fields: Sequence[str] = (
        "tables", "chunk_store", "output_path", "checkpoint", "chunk_size", "chunks_per_group", "chunk_keys",
        "redo_chunks", "mysql_conn_id", "startup_mode",
    )
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        tables: str | Sequence[str],
        output_path: str,
        chunk_store: str | None = None,
        checkpoint: str | None = None,
        mysql_conn_id: str = MySqlCdcHook.default_conn_name,
        chunk_size: int | str = DEFAULT_CHUNK_SIZE,
        chunks_per_group: int | str = DEFAULT_CHUNKS_PER_GROUP,
        chunk_keys: Mapping[str, str] | None = None,
        redo_chunks: str | Mapping[str, Any] | None = None,
        startup_mode: str = INITIAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = tables
        self.output_path = output_path
        self.chunk_store = chunk_store
        self.checkpoint = checkpoint
        self.mysql_conn_id = mysql_conn_id
        self.chunk_size = chunk_size
        self.chunks_per_group = chunks_per_group
        self.chunk_keys = chunk_keys
        self.redo_chunks = redo_chunks
        self.startup_mode = startup_mode

    def execute(self, context: Any) -> list[dict[str, Any]]:
        hook = MySqlCdcHook(self.mysql_conn_id)
        patterns = split_tables(self.tables)
        store_url = chunk_store_url(self.chunk_store, self.output_path)
        size = int(self.chunks_per_group)
        redo = parse_redo_chunks(self.redo_chunks)
        mode = StartupMode.parse(self.startup_mode)
        run_id = context["run_id"]
        with ChunkStore(store_url) as store:
            if not mode.snapshots and not redo:
                groups, tables = [], [str(t) for t in find_tables(hook.settings(), patterns)]
                self.log.info("startup mode %s: no snapshot; the stream task begins at that point", mode)
            elif redo:
                groups = redo_groups(store, redo, size)
                tables = sorted(redo)
            else:
                plans = plan_tables(hook.settings(), store, patterns, chunk_size=int(self.chunk_size),
                                    chunk_keys=dict(self.chunk_keys or {}), run_id=run_id)
                if not plans:
                    raise ConfigurationError(f"no table matches {patterns} on {hook.redacted_url()}")
                groups = plan_groups(plans, size, _max_map_length())
                tables = [str(p.table) for p in plans]
                for p in plans:
                    self.log.info("planned %s: generation %s, %s chunk(s) (%s split on %s)", p.table,
                                  p.generation, len(p.chunks), p.split, ", ".join(p.key_columns))
            display = store.display_url
        record = PipelineRecord(
            mysql_conn_id=self.mysql_conn_id, chunk_store=display, output=self.output_path,
            checkpoint=self.checkpoint or default_checkpoint(self.output_path), tables=tuple(tables),
            stream_tables=tuple(patterns), redo={t: list(ids) for t, ids in redo.items()},
        )
        context["ti"].xcom_push(key=XCOM_KEY, value=record.to_dict())
        for g in groups:
            self.log.info("chunk group: %s", g.name)
        return [g.to_dict() for g in groups]


def plan_groups(plans: Sequence[ChunkPlan], chunks_per_group: int, max_groups: int) -> list[ChunkGroup]:
    """Groups of every plan; the group size grows until they fit ``max_groups`` (Airflow's map limit)."""
    size = chunks_per_group
    while True:
        groups = [g for p in plans for g in chunk_groups(p, size)]
        if len(groups) <= max_groups:
            return groups
        if len(groups) <= len(plans):  # one group per table already
            raise ConfigurationError(
                f"{len(plans)} tables need at least {len(plans)} snapshot tasks, more than [core] "
                f"max_map_length = {max_groups}: raise max_map_length or split the tables over several DAGs"
            )
        total = sum(len(p.chunks) for p in plans)
        size = max(size + 1, -(-total // max(1, max_groups - len(plans))))


def redo_groups(store: ChunkStore, redo: Mapping[str, tuple[int, ...]], chunks_per_group: int) -> list[ChunkGroup]:
    """Groups of the chunk ids to redo, in each table's latest plan generation; unknown ids are an error."""
    groups: list[ChunkGroup] = []
    for table, ids in sorted(redo.items()):
        try:
            states = store.chunks(table)
        except UnknownChunk:
            raise ConfigurationError(
                f"redo_chunks names {table}, which has no plan in the chunk store {store.display_url}: run "
                "the DAG without redo_chunks first"
            ) from None
        known = {c.chunk_id for c in states}
        missing = sorted(set(ids) - known)
        if missing:
            raise ConfigurationError(
                f"redo_chunks: {table} generation {states[0].generation} has no chunk(s) {missing} "
                f"(its chunks are 0-{max(known)})"
            )
        generation = states[0].generation
        for start in range(0, len(ids), chunks_per_group):
            groups.append(ChunkGroup(table, generation, tuple(ids[start:start + chunks_per_group])))
    return groups


_REDO_ITEM = re.compile(r"^\s*([^=:\s]+\.[^=:\s]+)\s*[=:]\s*(.+?)\s*$")


def parse_redo_chunks(value: str | Mapping[str, Any] | None) -> dict[str, tuple[int, ...]]:
    """``{"shop.orders": "3,7"}`` or ``{"shop.orders": [3, 7]}`` or ``"shop.orders=3,7; shop.items=0-2"``."""
    if not value:
        return {}
    items: dict[str, Any]
    if isinstance(value, Mapping):
        items = dict(value)
    else:
        items = {}
        for part in str(value).split(";"):
            if not part.strip():
                continue
            match = _REDO_ITEM.match(part)
            if not match:
                raise ConfigurationError(
                    f"redo_chunks must look like 'db.table=3,7; db.other=0-2', got {part.strip()!r}"
                )
            items[match.group(1)] = match.group(2)
    out: dict[str, tuple[int, ...]] = {}
    for table, ids in items.items():
        if isinstance(ids, (list, tuple)):
            ids = ",".join(str(i) for i in ids)
        parsed = parse_chunk_ids(str(ids))
        if parsed:
            out[str(table)] = parsed
    return out


def _max_map_length() -> int:
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length", fallback=1024)
