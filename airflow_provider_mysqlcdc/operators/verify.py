"""Verify task: the lake compared with the source, chunk by chunk, without reading rows
(``engine/verify``, the engine of ``mysqlcdc verify``).

Per chunk, a digest of the source rows (row count and a sum of row hashes the server computes) in a read view
whose binlog position is known, compared with the same digest of the lake's rows of that chunk as of that
position (snapshot plus changelog), and the mirror's files with what they were built from. The digests are
taken in the task, under the source limits the snapshot keeps; the lake can be judged only once the stream has
committed past their positions: the task waits for that in place for up to ``defer_after`` seconds, then
(``deferrable``) in the triggerer (``triggers/stream_position.py``, no worker slot held), and resumes to
compare. Every verdict is recorded in the chunk store (``mysqlcdc status``, the MySQL CDC tab).

A chunk that differs fails the task with each such chunk named (table, chunk id, key range, both row counts)
and how to repair it; chunks the stream did not pass within ``wait_timeout`` fail it with what to do. The
verify run's id is the DAG run's and task's own: clearing the task (after a repair) verifies again, in the
same verify run, every chunk that did not match (a chunk that differed and matches now is *repaired*).
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.sdk import BaseOperator

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, Verification
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, REPAIRED, UNVERIFIED
from airflow_provider_mysqlcdc.engine.chunks.groups import format_chunk_ids
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern, matching_tables
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.limits import SourceLimits
from airflow_provider_mysqlcdc.engine.verify.taken_digests import (
    TakenDigests,
    judge_digests,
    stream_passed,
    take_digests,
)
from airflow_provider_mysqlcdc.engine.verify.verify_run import ChunkVerdict, VerifyOptions, VerifyRun
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.operator_methods import ReportsLineage
from airflow_provider_mysqlcdc.operators.arguments import (
    SOURCE_LIMIT_CHECKS,
    check_literals,
    check_rendered,
    conn_id,
    not_given,
    optional,
)
from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url
from airflow_provider_mysqlcdc.triggers.stream_position import PASSED, STALLED, StreamPositionTrigger

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

RESULTS = (MATCH, REPAIRED, MISMATCH, UNVERIFIED)
_WAIT_POLL_S = 1.0  # a look at the stream's progress while the task waits in place
_MAX_STALL_S = 600.0
_RULE_DIFFERS = "the lake's rows of this chunk differ from the source's"


def _chunk_ids(value: Any) -> tuple[int, ...] | None:
    return None if not_given(value) or value == [] else arguments.chunk_ids(value)


# Each argument's check (pipeline/arguments.py): run at construction on literal values, in execute on all.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "tables": arguments.table_patterns,
    "output_path": lambda v: arguments.storage_root(v, writable=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=True),
    "mysql_conn_id": conn_id,
    "chunks": _chunk_ids,
    "sample": optional(arguments.sample_share),
    "seed": lambda v: 0 if not_given(v) else arguments.whole_number(v, minimum=0, maximum=2**31),
    "explain": lambda v: arguments.flag(v, default=False),
    "wait_timeout": lambda v: arguments.number(v, minimum=0, maximum=arguments.MAX_WAIT_S, unit="seconds"),
    "verify_id": optional(arguments.verify_id),
    **SOURCE_LIMIT_CHECKS,
}
_LITERAL_CHECKS: dict[str, Callable[[Any], Any]] = {
    **_CHECKS,
    "output_path": lambda v: arguments.storage_root(v, look=False),
    "chunk_store": optional(arguments.chunk_store_location, must_exist=None),
}


class MySqlCdcVerifyOperator(ReportsLineage, BaseOperator):
    """Verifies ``tables`` (names or patterns of tables in the pipeline) chunk by chunk against the source and
    returns a summary: ``{"verify_id", "chunks": {"match", "repaired", "mismatch", "unverified"}, "tables":
    {table: {result: count}}}`` (no row data, no key values).

    :param tables: ``db.table`` names or patterns of planned tables: a comma-separated string or a list.
    :param output_path: the output root the snapshot and the stream write.
    :param chunk_store: chunk store URL or SQLite path (default as for the plan operator).
    :param mysql_conn_id: the source connection (type ``mysql`` or ``mysqlcdc``).
    :param chunks: only these chunk ids of each table (``"3,7"``, ``"0-15"`` or a list); default all.
    :param sample: a seeded random share of each table's chunks (``"5%"`` or ``0.05``); default all.
    :param seed: the sample's seed (default 0; ``"{{ ds_nodash }}"`` samples other chunks each day).
    :param explain: for a chunk that differs, name its first differing keys (reads that chunk's keys and row
        hashes from the source; they appear in the task log and the failure message).
    :param max_concurrent_reads: digest reads the source serves at once, shared with the snapshot's chunk
        reads (default 4; 0: no cap). The task reads one chunk at a time.
    :param rows_per_second: rows/s the digests may scan on the source (default: no limit).
    :param query_timeout: server-side time limit of each chunk's digest in seconds (default 600; 0: none).
    :param wait_timeout: seconds to wait for the stream to pass the digests' positions (default 3600); the
        chunks it has not passed then are *unverified* and fail the task.
    :param deferrable: wait for the stream in the triggerer (no worker slot held) instead of in the task
        (default: Airflow's ``[operators] default_deferrable``).
    :param defer_after: with ``deferrable``, seconds the task waits in place before it defers (default 20;
        0: at once): a stream that is only a batch behind costs one task start instead of two.
    :param poll_interval: seconds between the trigger's looks at the stream's progress (default 2).
    :param stall_after: seconds the stream may rest before the digests' positions before the task looks
        whether only events that change no data lie between (an idle stream; default 30).
    :param verify_id: the verify run to record into and resume (default: one per DAG run and task, so a
        cleared task verifies again the chunks that did not match).
    """

    template_fields: Sequence[str] = (
        "tables", "output_path", "chunk_store", "mysql_conn_id", "chunks", "sample", "seed", "explain",
        "max_concurrent_reads", "rows_per_second", "query_timeout", "wait_timeout", "verify_id",
    )
    ui_color = "#eaf5ea"

    def __init__(
        self,
        *,
        tables: str | Sequence[str],
        output_path: str,
        chunk_store: str | None = None,
        mysql_conn_id: str = MySqlCdcHook.default_conn_name,
        chunks: str | Sequence[int] | None = None,
        sample: str | float | None = None,
        seed: int | str = 0,
        explain: bool | str = False,
        max_concurrent_reads: int | str | None = None,
        rows_per_second: float | str | None = None,
        query_timeout: float | str | None = None,
        wait_timeout: float | str = 3600.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        defer_after: float = 20.0,
        poll_interval: float = 2.0,
        stall_after: float = 30.0,
        verify_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = tables
        self.output_path = output_path
        self.chunk_store = chunk_store
        self.mysql_conn_id = mysql_conn_id
        self.chunks = chunks
        self.sample = sample
        self.seed = seed
        self.explain = explain
        # source protection (engine/source/limits.py); None: the defaults (4 reads at once, no rate, 600 s)
        self.max_concurrent_reads = max_concurrent_reads
        self.rows_per_second = rows_per_second
        self.query_timeout = query_timeout
        self.wait_timeout = wait_timeout
        self.verify_id = verify_id
        self.deferrable, self.defer_after = deferrable, float(defer_after)
        self.poll_interval, self.stall_after = float(poll_interval), float(stall_after)
        check_literals(vars(self), _LITERAL_CHECKS)

    def checked_arguments(self) -> dict[str, Any]:
        """Every argument as rendered, checked: a bad one fails the task before the source is read."""
        return check_rendered(self, _CHECKS)

    # --- the task -------------------------------------------------------------------------------------------

    def execute(self, context: Any) -> dict[str, Any]:
        args = self.checked_arguments()
        run_id = str(context["run_id"])
        vid = args["verify_id"] or default_verify_id(context)
        deadline = time.time() + args["wait_timeout"]
        with self._verify_run(args, vid, run_id) as run:
            tables = self._resolve(run.store, args["tables"])
            self.log.info("verify %s of %s: taking the source digests", vid, ", ".join(map(str, tables)))
            taken = []
            for table in tables:
                digests = take_digests(run, table)
                if digests is None:
                    self.log.info("%s: every selected chunk matched in verify run %s already", table, vid)
                    continue
                self.log.info("%s: %d chunk(s) digested in generation %d, up to %s", table,
                              len(digests.chunk_ids), digests.generation, digests.highest)
                taken.append(digests)
            self._lineage_facts = {"tables": [str(t) for t in tables], "verify_id": vid}
            if taken and not self._wait_in_place(run, taken, deadline):
                self._defer(taken, vid, deadline, self.stall_after, tables)
            return self._finish(run, tables, taken, deadline)

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the stream passed the digests' positions, stalled before them, or the wait
        timed out; compare what was digested."""
        echo = dict(event.get("echo") or {})
        args = self.checked_arguments()
        vid, deadline = str(echo["verify_id"]), float(echo["deadline"])
        taken = [TakenDigests.from_dict(t) for t in echo["taken"]]
        self.log.info("%s", event.get("detail"))
        with self._verify_run(args, vid, str(context["run_id"])) as run:
            tables = [TableId.parse(t) for t in echo["tables"]]
            self._lineage_facts = {"tables": [str(t) for t in tables], "verify_id": vid}
            if event.get("outcome") == STALLED and time.time() < deadline and not stream_passed(run, taken):
                stall = min(float(echo.get("stall_after") or self.stall_after) * 2, _MAX_STALL_S)
                self.log.info("the stream rests before the digests' positions with changes still to read: "
                              "deferred again (until %s at the latest)", _utc(deadline))
                self._defer(taken, vid, deadline, stall, tables)
            elif event.get("outcome") != PASSED:
                self.log.info("comparing what the stream has committed")
            return self._finish(run, tables, taken, deadline)

    # --- pieces ---------------------------------------------------------------------------------------------

    def _verify_run(self, args: Mapping[str, Any], vid: str, run_id: str) -> _OpenRun:
        hook = MySqlCdcHook(args["mysql_conn_id"])
        default = SourceLimits()
        limits = SourceLimits(
            max_concurrent_reads=_limit(args["max_concurrent_reads"], default.max_concurrent_reads),
            rows_per_second=_limit(args["rows_per_second"], default.rows_per_second),
            query_timeout_s=_limit(args["query_timeout"], default.query_timeout_s))
        options = VerifyOptions(chunks=args["chunks"], sample=args["sample"], seed=args["seed"],
                                explain=args["explain"], wait_s=0.0, limits=limits)
        store = ChunkStore(chunk_store_url(args["chunk_store"], args["output_path"]))
        run = VerifyRun(hook.settings(), store, args["output_path"], options, verify_id=vid, run_id=run_id,
                        on_verdict=self._log_verdict)
        return _OpenRun(run)

    def _resolve(self, store: ChunkStore, patterns: Sequence[str]) -> list[TableId]:
        """The tables in the pipeline the names and patterns select; a name of no planned table is an
        error."""
        active = store.active_tables()
        tables = matching_tables(active, patterns)
        missing = [p for p in patterns if not TablePattern.parse(p).is_pattern
                   and str(TablePattern.parse(p).exact) not in active]
        if missing:
            raise ConfigurationError(
                f"{', '.join(missing)}: not in the pipeline (no plan in the chunk store "
                f"{store.display_url}): plan and snapshot it first (the replication DAG), then verify it")
        if not tables:
            raise ConfigurationError(f"no table in the pipeline (chunk store {store.display_url}) matches "
                                     f"{', '.join(patterns)}")
        return tables

    def _wait_in_place(self, run: VerifyRun, taken: Sequence[TakenDigests], deadline: float) -> bool:
        """Whether the stream passed the digests' positions within ``defer_after`` (not deferrable: until the
        deadline)."""
        limit = min(deadline, time.time() + self.defer_after) if self.deferrable else deadline
        while True:
            if stream_passed(run, taken):
                return True
            if time.time() >= limit:
                return not self.deferrable or time.time() >= deadline  # past the deadline: judge now
            time.sleep(_WAIT_POLL_S)

    def _defer(self, taken: Sequence[TakenDigests], vid: str, deadline: float, stall_after: float,
               tables: Sequence[TableId]) -> None:
        position = max(t.highest for t in taken if t.highest is not None)
        names = [t.table for t in taken]
        self.log.info("the stream has not committed past %s yet: deferred until it has (at the latest %s)",
                      position, _utc(deadline))
        echo = {"verify_id": vid, "deadline": deadline, "stall_after": stall_after,
                "tables": [str(t) for t in tables],
                "taken": [t.to_dict() for t in taken]}
        self.defer(trigger=StreamPositionTrigger(
            output_path=str(self.output_path), tables=names, position=str(position), deadline=deadline,
            stall_after=stall_after, poll_interval=self.poll_interval, echo=echo),
            method_name="execute_complete")

    def _finish(self, run: VerifyRun, tables: Sequence[TableId], taken: Sequence[TakenDigests],
                deadline: float) -> dict[str, Any]:
        """Judge what was digested, then the run's verdicts of the selected chunks: the summary, or the
        failure naming the chunks that differ or could not be verified."""
        for t in taken:
            left = max(0.0, deadline - time.time())  # chunks digested again wait in place, up to the deadline
            judge = VerifyRun(run.settings, run.store, run.root, _with_wait(run.options, left), run.verify_id,
                              run.run_id, run.on_verdict)
            judge_digests(judge, t)
        verdicts = {str(t): _selected_verdicts(run, t) for t in tables}
        counts = Counter(v.result for vs in verdicts.values() for v in vs)
        chunks = {r: counts.get(r, 0) for r in RESULTS}
        summary: dict[str, Any] = {
            "verify_id": run.verify_id, "chunks": chunks,
            "tables": {t: dict(Counter(v.result for v in vs)) for t, vs in verdicts.items()}}
        self._lineage_facts = {**self._lineage_facts, "summary": summary}
        self.log.info("verify %s: %d chunk(s) match, %d repaired, %d differ, %d not verified", run.verify_id,
                      *(chunks[r] for r in RESULTS))
        bad = [v for vs in verdicts.values() for v in vs if v.result == MISMATCH]
        if bad:
            raise CdcError(mismatch_message(run, bad, self.task_id))
        waiting = [v for vs in verdicts.values() for v in vs if v.result == UNVERIFIED]
        if waiting:
            raise CdcError(unverified_message(run.verify_id, waiting))
        return summary

    def _log_verdict(self, verdict: ChunkVerdict) -> None:
        self.log.info("%s", verdict.describe())

    # --- OpenLineage (called by the OpenLineage provider's listener, when it is installed) ------------------

    def _lineage(self, detailed: bool) -> OperatorLineage:
        """Inputs: the source tables (with schemas once it ran) and the lake's snapshot, changelog and mirror
        of each; no outputs (verdicts go to the chunk store only); the run facet ``mysqlcdc_verify`` (the
        verify id and the count of chunks per result, per table)."""
        from airflow_provider_mysqlcdc.lineage.reports import verify_lineage
        from airflow_provider_mysqlcdc.lineage.run_facets import VERIFY_FACET, verify_facet

        facts: dict[str, Any] = getattr(self, "_lineage_facts", {})
        tables = facts.get("tables")
        if tables is None:  # before it ran: the tables named exactly
            patterns = arguments.table_patterns(self.tables)
            parsed = [TablePattern.parse(p) for p in patterns]
            tables = [str(p.exact) for p in parsed if not p.is_pattern]
        summary = facts.get("summary")
        output = arguments.storage_root(self.output_path, look=False)
        return verify_lineage(
            MySqlCdcHook(str(self.mysql_conn_id)).settings(), output, tables,
            detailed=detailed and summary is not None,
            run_facets={VERIFY_FACET: verify_facet(facts.get("verify_id"), summary)})


class _OpenRun:
    """A verify run with its chunk store, closed on leaving."""

    def __init__(self, run: VerifyRun) -> None:
        self.run = run

    def __enter__(self) -> VerifyRun:
        return self.run

    def __exit__(self, *exc: object) -> None:
        self.run.store.close()


def default_verify_id(context: Mapping[str, Any]) -> str:
    """One per DAG run and task (mapped: and map index): the same across tries and deferrals."""
    ti = context["ti"]
    key = f"{ti.dag_id}\0{context['run_id']}\0{ti.task_id}\0{getattr(ti, 'map_index', -1)}"
    return "airflow-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _limit(given: Any, default: Any) -> Any:
    """A source limit as given (0: none), or the default when not given."""
    return default if given is None else (given or None)


def _with_wait(options: VerifyOptions, wait_s: float) -> VerifyOptions:
    return dataclasses.replace(options, wait_s=wait_s)


def _selected_verdicts(run: VerifyRun, table: TableId) -> list[Verification]:
    """The run's verdict of each chunk it selects in the table's current generation."""
    view = run.store.mirror_view(str(table))
    if view is None:
        return []
    plan = ChunkPlan.from_dict(run.store.plan(str(table), view.generation).plan)
    wanted = {c.chunk_id for c in run.selected(plan)}
    return [v for v in run.store.verifications(str(table), run.verify_id)
            if v.generation == view.generation and v.chunk_id in wanted]


def mismatch_message(run: VerifyRun, bad: Sequence[Verification], task_id: str) -> str:
    by_table: dict[str, list[Verification]] = {}
    for v in bad:
        by_table.setdefault(v.table, []).append(v)
    lines = [f"verify {run.verify_id}: {len(bad)} chunk(s) of the lake differ from the source:"]
    for table, vs in sorted(by_table.items()):
        plan = ChunkPlan.from_dict(run.store.plan(table, vs[0].generation).plan)
        for v in sorted(vs, key=lambda v: v.chunk_id):
            why = str(v.detail.get("why") or "").split("; key range ")[0]
            if why.startswith(_RULE_DIFFERS):  # the counts and the position are on the line already
                why = "the rows differ" + why.partition("(snapshot and changelog)")[2]
            lines.append(f"  {table} chunk {v.chunk_id} (plan generation {v.generation}), key range "
                         f"{key_range(plan, v.chunk_id)}: source {_rows(v.source_rows)}, lake "
                         f"{_rows(v.lake_rows)} at {v.position}" + (f": {why}" if why else ""))
            lines += [f"      {d}" for d in v.detail.get("differences") or ()]
    redo = "; ".join(f"{t}={format_chunk_ids(v.chunk_id for v in vs)}" for t, vs in sorted(by_table.items()))
    lines.append("Repair them with the stream running (each chunk re-snapshotted, then verified again in "
                 "this verify run; the password in $MYSQLCDC_MYSQL_PASSWORD):")
    for table, vs in sorted(by_table.items()):
        ids = ",".join(str(v.chunk_id) for v in sorted(vs, key=_cid))
        lines.append(f"  mysqlcdc verify --repair --resume {run.verify_id} --table {table} --chunks {ids} "
                     f"--output {run.root} --chunk-store {run.store.display_url} --mysql-url "
                     f"{run.settings.url_without_password()}")
    lines.append(f"or trigger the replication DAG with redo_chunks \"{redo}\" and, once its snapshot is "
                 f"done, clear this task ({task_id}): it verifies those chunks again in the same verify run.")
    return "\n".join(lines)


def unverified_message(vid: str, waiting: Sequence[Verification]) -> str:
    names = "; ".join(f"{t}={format_chunk_ids(v.chunk_id for v in waiting if v.table == t)}"
                      for t in sorted({v.table for v in waiting}))
    why = str(waiting[0].detail.get("why") or "").split(": start the stream")[0]
    return (f"verify {vid}: {len(waiting)} chunk(s) could not be verified ({names}): {why}. The stream must "
            "commit past the positions their digests were taken at: start the stream (or let it catch up), "
            "then clear this task (it verifies only the chunks without a match, in the same verify run), or "
            "raise wait_timeout")


def key_range(plan: ChunkPlan, chunk_id: int) -> str:
    chunk = plan.chunk(chunk_id)
    low = "-inf" if chunk.start is None else repr(tuple(chunk.start))
    high = "+inf" if chunk.end is None else repr(tuple(chunk.end))
    return f"{', '.join(plan.key_columns)} in [{low}, {high})"


def _rows(n: int | None) -> str:
    return "? rows" if n is None else f"{n} rows"


def _cid(v: Verification) -> int:
    return v.chunk_id


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
