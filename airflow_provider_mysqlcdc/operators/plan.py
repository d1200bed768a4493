"""Plan task: split the tables into chunks (a new plan generation) and return the chunk groups to map over.

``only_new`` (the default) plans only the tables that are not in the pipeline yet: adding a table to
``tables`` (or creating one a pattern matches) and running the DAG again plans and snapshots just that table,
while every other table keeps its plan and snapshot and the running stream goes on (a planned table is part of
the stream from then on, everything of it emitted until its chunks commit). When the plan task itself runs
again in the same DAG run (the run was cleared), the chunks this run planned that have no committed snapshot
yet are returned again, so the snapshot finishes. ``only_new=False`` re-plans every matched table (a new
generation each, all re-snapshotted).

``remove_tables`` (names or patterns of planned tables) takes tables out of the pipeline first: the stream no
longer captures them, their output stays as it is. A wildcard in ``tables`` that still matches a removed table
does not put it back; naming it exactly does (a new generation).

With ``redo_chunks`` it plans nothing: it returns groups holding only those chunk ids of each table's current
plan generation, so a DAG run re-snapshots just them while the stream keeps running. A ``startup_mode`` that
takes no snapshot (``latest-offset``, ``earliest-offset``, ``specific-offset:...``, ``timestamp:...``) plans
nothing either: the mapped snapshot task expands to no instance, and the stream begins at that point.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, UnknownChunk
from airflow_provider_mysqlcdc.engine.chunks.groups import (
    DEFAULT_CHUNKS_PER_GROUP,
    ChunkGroup,
    TableChunks,
    format_chunk_ids,
    pack_groups,
    split_table,
)
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.chunks.planner import DEFAULT_CHUNK_SIZE
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern, matching_tables
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import (
    load_plan,
    plan_tables,
    remove_tables,
    tables_to_plan,
)
from airflow_provider_mysqlcdc.engine.source.catalog import find_tables
from airflow_provider_mysqlcdc.engine.stream.startup import INITIAL, StartupMode
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.operator_methods import ReportsLineage
from airflow_provider_mysqlcdc.operators.arguments import (
    check_literals,
    check_rendered,
    conn_id,
    not_given,
    one_of,
    optional,
    parse_redo_chunks,
    table_list,
)
from airflow_provider_mysqlcdc.operators.arguments import chunk_keys as parse_chunk_keys
from airflow_provider_mysqlcdc.operators.run_conf import check_run_conf
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY, PipelineRecord
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url, default_checkpoint

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

__all__ = ["MySqlCdcPlanOperator", "parse_chunk_keys", "parse_redo_chunks", "plan_groups", "redo_groups"]

# Each argument's check (pipeline/arguments.py): run at construction on literal values, in execute on all.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "tables": arguments.table_patterns,
    "output_path": arguments.storage_root,
    "chunk_store": optional(arguments.chunk_store_location, must_exist=False, makes_directories=True),
    "checkpoint": optional(arguments.storage_root, what="a checkpoint directory", writable=False),
    "mysql_conn_id": conn_id,
    "chunk_size": lambda v: arguments.whole_number(v, minimum=1, maximum=arguments.MAX_CHUNK_SIZE),
    "chunks_per_group": lambda v: arguments.whole_number(v, minimum=1,
                                                         maximum=arguments.MAX_CHUNKS_PER_GROUP),
    "chunk_keys": parse_chunk_keys,
    "redo_chunks": parse_redo_chunks,
    "startup_mode": arguments.startup_mode,
    "only_new": lambda v: arguments.flag(v, default=True),
    "pack_tables": lambda v: arguments.flag(v, default=True),
    "remove_tables": table_list,
    "zero_dates": lambda v: "keep" if not_given(v) else one_of("keep", "null")(v),
}
# At construction (DAG parse, maybe on another host): the form of paths only.
_LITERAL_CHECKS: dict[str, Callable[[Any], Any]] = {
    **_CHECKS,
    "output_path": lambda v: arguments.storage_root(v, look=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=None),
    "checkpoint": optional(arguments.storage_root, what="a checkpoint directory", look=False),
}


@dataclass(frozen=True)
class PlanArguments:
    """The plan task's arguments, rendered and checked."""

    tables: list[str]
    output_path: str
    chunk_store: str | None
    checkpoint: str | None
    mysql_conn_id: str
    chunk_size: int
    chunks_per_group: int
    pack_tables: bool
    chunk_keys: dict[str, str]
    redo_chunks: dict[str, tuple[int, ...]]
    startup_mode: StartupMode
    only_new: bool
    remove_tables: list[str]
    zero_dates: str


class MySqlCdcPlanOperator(ReportsLineage, BaseOperator):
    """Plans chunks, records the plan in the chunk store, returns ``[ChunkGroup.to_dict(), ...]``.

    Tables smaller than ``chunks_per_group`` chunks share groups (``pack_tables``), so many small tables are
    one Spark application; a bigger table has groups of its own. The groups are bounded by
    ``[core] max_map_length``: when there would be more, the group size grows to fit rather than failing the
    mapped snapshot task at expansion time.

    :param tables: ``db.table`` names or patterns (``shop.orders_*``): a comma-separated string or a list.
    :param output_path: the output root (local path or a pyarrow URI: hdfs://, s3://, ...).
    :param chunk_store: chunk store URL or SQLite path; default ``$MYSQLCDC_CHUNK_STORE_URL``, else
        ``<output_path>/_mysqlcdc_chunks.db`` for a local output.
    :param checkpoint: the stream's checkpoint, recorded for the UI page; default
        ``<output_path>/_mysqlcdc_checkpoint`` (give the stream operator's value if you set one there).
    :param mysql_conn_id: the source connection (type ``mysql`` or ``mysqlcdc``).
    :param chunk_size: rows per chunk.
    :param chunks_per_group: chunks per group, one Spark application (one mapped task) each.
    :param pack_tables: tables with fewer chunks than ``chunks_per_group`` share groups (each whole in one),
        so many small tables are one Spark application (a rendered ``"true"``/``"false"`` works too); False:
        every group holds one table's chunks.
    :param chunk_keys: ``{"db.table": "column"}``: chunk by this column instead of the primary key; required
        for a table without a primary key.
    :param redo_chunks: ``"shop.orders=3,7; shop.items=0-2"`` (or a mapping): plan nothing, return groups of
        only these chunk ids of each table's current generation (a rerun of some chunks).
    :param startup_mode: where the stream begins (``initial``, ``snapshot-only``, ``latest-offset``, ...); a
        mode without a snapshot plans nothing, so the mapped snapshot task expands to no instance.
    :param only_new: plan only tables not in the pipeline yet (a rendered ``"true"``/``"false"`` works too);
        False re-plans every table (a new generation each).
    :param remove_tables: names or patterns of planned tables to take out of the pipeline first.
    :param zero_dates: how zero dates (``0000-00-00``, ``2020-00-15``) are written, stored in each new plan so
        the snapshot and the stream agree: ``keep`` (default: exactly, in a ``<column>__zero_date`` companion
        column next to the NULL date) or ``null`` (NULL only, no companion, except for key columns, whose
        zero dates keep rows apart). See docs/output.md.
    :param allow_unknown_conf: False (default): a run whose conf has a key the DAG declares no param for (a
        misspelling: ``{"tabels": ...}``) fails here, naming it, before anything is read or written; True for
        a DAG whose other tasks read conf keys that are not params.
    """

    template_fields: Sequence[str] = (
        "tables", "chunk_store", "output_path", "checkpoint", "chunk_size", "chunks_per_group", "pack_tables",
        "chunk_keys",
        "redo_chunks", "mysql_conn_id", "startup_mode", "only_new", "remove_tables", "zero_dates",
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
        pack_tables: bool | str = True,
        chunk_keys: Mapping[str, str] | str | None = None,
        redo_chunks: str | Mapping[str, Any] | None = None,
        startup_mode: str = INITIAL,
        only_new: bool | str = True,
        remove_tables: str | Sequence[str] | None = None,
        zero_dates: str = "keep",
        allow_unknown_conf: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.allow_unknown_conf = allow_unknown_conf
        self.tables = tables
        self.output_path = output_path
        self.chunk_store = chunk_store
        self.checkpoint = checkpoint
        self.mysql_conn_id = mysql_conn_id
        self.chunk_size = chunk_size
        self.chunks_per_group = chunks_per_group
        self.pack_tables = pack_tables
        self.chunk_keys = chunk_keys
        self.redo_chunks = redo_chunks
        self.startup_mode = startup_mode
        self.only_new = only_new  # plan only tables not in the pipeline yet (see the module doc)
        self.remove_tables = remove_tables  # names or patterns of planned tables to take out of the pipeline
        self.zero_dates = zero_dates
        check_literals(vars(self), _LITERAL_CHECKS)

    def checked_arguments(self) -> PlanArguments:
        """Every argument as rendered, checked: a bad one fails the task before anything is written."""
        return PlanArguments(**check_rendered(self, _CHECKS))

    def execute(self, context: Any) -> list[dict[str, Any]]:
        if not self.allow_unknown_conf:
            check_run_conf(context)
        args = self.checked_arguments()
        hook = MySqlCdcHook(args.mysql_conn_id)
        patterns = args.tables
        store_url = chunk_store_url(args.chunk_store, args.output_path)
        size = args.chunks_per_group
        redo = args.redo_chunks
        mode = args.startup_mode
        only_new = args.only_new
        removing = args.remove_tables
        run_id = context["run_id"]
        check_removals(patterns, removing)
        planned: list[ChunkPlan] = []
        with ChunkStore(store_url) as store:
            if removing:
                for table, removed_now in remove_tables(store, removing, run_id,
                                                        reason=f"remove_tables of DAG run {run_id}"):
                    self.log.info("%s: %s", table, "removed from the pipeline (its output stays as it is)"
                                  if removed_now else "was removed from the pipeline already")
            if not mode.snapshots and not redo:
                groups = []
                found = find_tables(hook.settings(), patterns)
                tables = [str(t) for t in tables_to_plan(store, found, patterns)]
                self.log.info("startup mode %s: no snapshot; the stream task begins at that point", mode)
            elif redo:
                groups = redo_groups(store, redo, size, args.pack_tables)
                tables = sorted(redo)
            else:
                plans = plan_tables(hook.settings(), store, patterns, chunk_size=args.chunk_size,
                                    chunk_keys=args.chunk_keys, run_id=run_id, only_new=only_new,
                                    zero_dates=args.zero_dates)
                resumed: list[ChunkPlan] = []
                if only_new:
                    resumed = resume_plans(store, run_id, {str(p.table) for p in plans})
                    for p in resumed:
                        self.log.info("%s generation %s was planned by this run: its %s chunk(s) without a "
                                      "committed snapshot are snapshotted again", p.table, p.generation,
                                      len(p.chunks))
                tables = [str(t) for t in matching_tables(store.active_tables(), patterns)]
                if only_new:
                    ours = {str(p.table) for p in [*plans, *resumed]} | set(store.run_plans(run_id))
                    warn_incomplete(store, [t for t in tables if t not in ours], self.log)
                planned = [*plans, *resumed]
                groups = plan_groups(planned, size, _max_map_length(), args.pack_tables) if planned else []
                if not groups:
                    self.log.info("nothing to snapshot: the tables matching %s are in the pipeline already; "
                                  "the stream captures them", ", ".join(patterns))
            display = store.display_url
        record = PipelineRecord(
            mysql_conn_id=args.mysql_conn_id, chunk_store=display, output=args.output_path,
            checkpoint=args.checkpoint or default_checkpoint(args.output_path), tables=tuple(tables),
            stream_tables=tuple(patterns), redo={t: list(ids) for t, ids in redo.items()},
        )
        context["ti"].xcom_push(key=XCOM_KEY, value=record.to_dict())
        for g in groups:
            self.log.info("chunk group: %s", g.name)
        # what the lineage methods report (references to what is here anyway)
        self._lineage_facts = {"tables": tables, "plans": planned, "redo": redo, "groups": len(groups),
                               "mode": str(mode)}
        return [g.to_dict() for g in groups]

    # --- OpenLineage (called by the OpenLineage provider's listener, when it is installed) ------------------

    def _lineage(self, detailed: bool) -> OperatorLineage:
        """Inputs: the tables (before the task ran: those named exactly), with their schemas once it ran;
        no outputs (the plan is written to the chunk store only); the run facet ``mysqlcdc_plan``."""
        from airflow_provider_mysqlcdc.lineage.reports import plan_lineage
        from airflow_provider_mysqlcdc.lineage.run_facets import PLAN_FACET, plan_facet

        settings = MySqlCdcHook(str(self.mysql_conn_id)).settings()
        facts: dict[str, Any] | None = getattr(self, "_lineage_facts", None)
        if facts is None:
            named = [str(p.exact) for p in map(TablePattern.parse, arguments.table_patterns(self.tables))
                     if not p.is_pattern]
            return plan_lineage(settings, named, detailed=False, run_facets={})
        facet = plan_facet(facts["plans"], facts["redo"], facts["groups"], facts["mode"])
        return plan_lineage(settings, facts["tables"], detailed=detailed, run_facets={PLAN_FACET: facet})


def check_removals(patterns: Sequence[str], removing: Sequence[str]) -> None:
    """A table named exactly in ``tables`` (which would put it back) cannot also be removed."""
    named = [pattern.exact for pattern in map(TablePattern.parse, patterns) if not pattern.is_pattern]
    clash = [str(t) for t in matching_tables(named, removing)] if named and removing else []
    if clash:
        raise ConfigurationError(
            f"{', '.join(clash)} is both named in tables and matched by remove_tables: take it out of tables "
            "to remove it (naming a removed table in tables plans it again)"
        )


def resume_plans(store: ChunkStore, run_id: str, skip: Iterable[str] = ()) -> list[ChunkPlan]:
    """The current plans this DAG run made earlier (its plan task ran before), cut down to their chunks
    without a committed snapshot: running the plan task of a run again finishes that run's snapshot instead
    of planning nothing. Removed tables and tables re-planned since are left out."""
    out: list[ChunkPlan] = []
    skipped = set(skip)
    for table, generation in sorted(store.run_plans(run_id).items()):
        if table in skipped:
            continue
        entry = store.table_entry(table)
        if entry is None or not entry.active or entry.latest_generation != generation:
            continue
        open_ids = {c.chunk_id for c in store.chunks(table, generation) if not c.committed}
        if open_ids:
            plan = load_plan(store, TableId.parse(table), generation)
            out.append(replace(plan, chunks=tuple(c for c in plan.chunks if c.chunk_id in open_ids)))
    return out


def warn_incomplete(store: ChunkStore, tables: Sequence[str], log: Any) -> None:
    """Tables left alone by ``only_new`` whose latest plan has chunks without a committed snapshot (another
    run's snapshot failed or still runs): say how to finish them; this run does not read them."""
    if not tables:
        return
    for name, view in store.stream_view(tables).items():
        latest = next((g for g in view.generations if g.generation == view.latest_generation), None)
        if latest is None or latest.fully_committed:
            continue
        open_ids = [c.chunk_id for c in latest.chunks if c.committed_hw is None]
        if not open_ids:
            continue
        log.warning(
            "%s generation %s has %d chunk(s) without a committed snapshot (%s), planned by another run: "
            "this run leaves them alone (only_new). If that run's snapshot failed, clear its failed snapshot "
            "tasks, or trigger a run with redo_chunks=\"%s=%s\"", name, view.latest_generation, len(open_ids),
            format_chunk_ids(open_ids), name, format_chunk_ids(open_ids))


def plan_groups(plans: Sequence[ChunkPlan], chunks_per_group: int, max_groups: int,
                pack_tables: bool = True) -> list[ChunkGroup]:
    """The groups of every plan, at most ``chunks_per_group`` chunks each, small tables sharing groups unless
    ``pack_tables`` is False; the group size grows until the groups fit ``max_groups`` (Airflow's map
    limit)."""
    parts = [TableChunks(str(p.table), p.generation, tuple(c.chunk_id for c in p.chunks)) for p in plans]
    return fit_groups(parts, chunks_per_group, max_groups, pack_tables)


def fit_groups(parts: Sequence[TableChunks], chunks_per_group: int, max_groups: int,
               pack_tables: bool = True) -> list[ChunkGroup]:
    size = chunks_per_group
    total = sum(len(p.chunk_ids) for p in parts)
    while True:
        groups = pack_groups(parts, size) if pack_tables else [g for p in parts for g in split_table(p, size)]
        if len(groups) <= max_groups:
            return groups
        if not pack_tables and len(groups) <= len(parts):  # one group per table already
            raise ConfigurationError(
                f"{len(parts)} tables need at least {len(parts)} snapshot tasks with pack_tables off, more "
                f"than [core] max_map_length = {max_groups}: let tables share groups (pack_tables on), raise "
                "max_map_length or split the tables over several DAGs"
            )
        size = max(size + 1, -(-total // max(1, max_groups - (0 if pack_tables else len(parts)))))


def redo_groups(store: ChunkStore, redo: Mapping[str, tuple[int, ...]], chunks_per_group: int,
                pack_tables: bool = True) -> list[ChunkGroup]:
    """Groups of the chunk ids to redo, in each table's latest plan generation; unknown ids are an error."""
    parts: list[TableChunks] = []
    for table, ids in sorted(redo.items()):
        entry = store.table_entry(table) if "." in table else None
        if entry is not None and not entry.active:
            raise ConfigurationError(
                f"redo_chunks names {table}, which was removed from the pipeline at {entry.removed_at}: plan "
                "it again (name it in tables) to put it back, instead of redoing chunks of its old plan"
            )
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
        parts.append(TableChunks(table, states[0].generation, tuple(ids)))
    if not pack_tables:
        return [g for p in parts for g in split_table(p, chunks_per_group)]
    return pack_groups(parts, chunks_per_group)


def _max_map_length() -> int:
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length", fallback=1024)
