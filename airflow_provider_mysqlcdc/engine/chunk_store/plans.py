"""Plans and pipeline membership: which tables are in the pipeline, and each table's chunk plan generations.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, write_stamp
from airflow_provider_mysqlcdc.engine.chunk_store.errors import UnknownChunk
from airflow_provider_mysqlcdc.engine.chunk_store.records import (
    ChunkSpec,
    PlanInfo,
    TableEntry,
    aware_utc,
    chunk_spec_of,
    table_entry_of,
    table_name_of,
)
from airflow_provider_mysqlcdc.engine.chunk_store.schema import (
    MAX_ERROR_CHARS,
    PLANNED,
    chunks_table,
    latest_generation,
    latest_query,
    plans_table,
    resolve_generation,
    tables_table,
)

log = logging.getLogger(__name__)
_IN_BATCH = 500  # names per IN list: a bounded statement on every backend


@dataclass(frozen=True)
class _NewPlan:
    """A plan to store: the table, its JSON, its chunks and the columns the store indexes it by."""
    name: str
    plan: Mapping[str, Any]
    specs: list[ChunkSpec]
    key_columns: list[str]
    split_kind: Any
    chunk_size: Any


class PlanStore(StoreDatabase):
    """Creating and reading plan generations; adding and removing tables."""

    # --- plans ----------------------------------------------------------------------------------------------

    def tables(self) -> list[str]:
        """Every table that was ever planned, removed ones included (see :meth:`active_tables`), by name."""
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(tables_table.c.table_name).order_by(tables_table.c.table_name)).scalars()))

    # --- pipeline membership --------------------------------------------------------------------------------

    def active_tables(self) -> list[str]:
        """The tables in the pipeline: planned and not removed since, by name. One indexed read of the small
        ``mysqlcdc_tables`` table (cheap enough for every stream micro-batch)."""
        t = tables_table.c
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(t.table_name).where(t.removed_at.is_(None)).order_by(t.table_name)).scalars()))

    def removed_tables(self) -> list[str]:
        """The tables removed from the pipeline (and not planned again since), by name."""
        t = tables_table.c
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(t.table_name).where(t.removed_at.is_not(None)).order_by(t.table_name)).scalars()))

    def table_entries(self) -> list[TableEntry]:
        """Every planned table's membership (active or removed, since when, by which run, why), by name."""
        return [table_entry_of(r) for r in self._read_tx(lambda conn: conn.execute(
            sa.select(tables_table).order_by(tables_table.c.table_name)).mappings().all())]

    def table_entry(self, table: Any) -> TableEntry | None:
        """One table's membership; None if it was never planned."""
        name = table_name_of(table)
        row = self._read_tx(lambda conn: conn.execute(
            sa.select(tables_table).where(tables_table.c.table_name == name)).mappings().first())
        return None if row is None else table_entry_of(row)

    def remove_table(self, table: Any, run_id: str | None = None, *, reason: str | None = None) -> bool:
        """Take a planned table out of the pipeline; True if this call removed it, False if it already was.

        Only the membership changes (``removed_at``, ``removed_run_id``, ``removed_reason``): the table's
        plans, chunk rows and output stay as they are, so its snapshot and mirror remain readable as of where
        the stream left them. Planning the table again (:meth:`create_plan`) puts it back with a new
        generation.
        :class:`UnknownChunk` if it was never planned. Idempotent, also across a retry after a lost COMMIT
        (the write's identity is its ``removed_at`` stamp, see ``_retrying``).
        """
        name = table_name_of(table)
        text = None if reason is None else str(reason)[:MAX_ERROR_CHARS]
        now = write_stamp()
        t = tables_table.c

        def work(conn: Connection, retry: bool) -> tuple[bool, RowMapping]:
            row = conn.execute(self._lock(sa.select(tables_table).where(t.table_name == name))
                               ).mappings().first()
            if row is None:
                raise UnknownChunk(f"chunk store has no plan for {name}: it is not part of the pipeline")
            if row["removed_at"] is not None:
                ours = retry and row["removed_at"] == now and row["removed_run_id"] == run_id
                return ours, row
            conn.execute(sa.update(tables_table).where(t.table_name == name).values(
                removed_at=now, removed_run_id=run_id, removed_reason=text, updated_at=now))
            return True, conn.execute(sa.select(tables_table).where(t.table_name == name)).mappings().one()

        removed, row = self._write(work)
        if removed:
            log.warning("chunk store: %s removed from the pipeline (run %s%s); its plan generation %d and "
                        "its output stay as they are, the stream no longer captures it", name, run_id or "-",
                        f", reason: {text}" if text else "", row["latest_generation"])
        else:
            log.info("chunk store: %s was already removed from the pipeline at %s (run %s): nothing to do",
                     name, aware_utc(row["removed_at"]), row["removed_run_id"] or "-")
        return removed

    def run_plans(self, run_id: str) -> dict[str, int]:
        """The plan generations a run created, by table (the latest one if it planned a table twice): e.g. to
        resume that run's snapshot after its plan task is run again."""
        p = plans_table.c
        return dict(self._read_tx(lambda conn: conn.execute(
            sa.select(p.table_name, p.generation).where(p.run_id == run_id)
            .order_by(p.table_name, p.generation)
        ).all()))

    def latest_generation(self, table: Any) -> int | None:
        name = table_name_of(table)
        return self._read_tx(lambda conn: latest_generation(conn, name))

    def next_generation(self, table: Any) -> int:
        """The generation the next :meth:`create_plan` will get (unless another plan is created first)."""
        return (self.latest_generation(table) or 0) + 1

    def next_generations(self, tables: Sequence[Any]) -> dict[str, int]:
        """:meth:`next_generation` of many tables in one read, by table name."""
        names = list(dict.fromkeys(table_name_of(t) for t in tables))
        t = tables_table.c

        def read(conn: Connection) -> dict[str, int]:
            latest: dict[str, int] = {}
            for i in range(0, len(names), _IN_BATCH):
                latest.update(conn.execute(sa.select(t.table_name, t.latest_generation)
                                           .where(t.table_name.in_(names[i:i + _IN_BATCH]))).tuples().all())
            return latest

        latest = self._read_tx(read)
        return {name: (latest.get(name) or 0) + 1 for name in names}

    def create_plan(
        self,
        table: Any,
        plan: Mapping[str, Any],
        chunks: Iterable[Any] | None = None,
        run_id: str | None = None,
        *,
        key_columns: Sequence[str] | None = None,
        split_kind: str | None = None,
        chunk_size: int | None = None,
    ) -> int:
        """Store a new plan generation and one 'planned' row per chunk, atomically; return the generation.

        ``plan`` is stored as opaque JSON (the planner's ``ChunkPlan.to_dict()``); if it has a top-level
        ``generation``, the stored copy carries the allocated one. ``chunks`` defaults to ``plan["chunks"]``;
        see :func:`chunk_spec_of` for the accepted forms. ``key_columns``, ``split_kind`` and ``chunk_size``
        default to the plan's ``key_columns``, ``split`` (or ``split_kind``) and ``chunk_size``.
        """
        name = table_name_of(table)
        columns = list(key_columns if key_columns is not None else plan.get("key_columns") or [])
        kind = split_kind if split_kind is not None else plan.get("split", plan.get("split_kind"))
        size = chunk_size if chunk_size is not None else plan.get("chunk_size")
        return self._create([_NewPlan(name, plan, _plan_specs(name, plan, chunks), columns, kind, size)],
                            run_id)[0]

    def create_plans(self, plans: Sequence[tuple[Any, Mapping[str, Any]]],
                     run_id: str | None = None) -> list[int]:
        """:meth:`create_plan` of many tables (``(table, plan)`` pairs) in one transaction: all are stored or
        none is. Their generations, in order. What planning thousands of small tables saves: a commit each."""
        new = []
        for table, plan in plans:
            name = table_name_of(table)
            new.append(_NewPlan(name, plan, _plan_specs(name, plan, None),
                                list(plan.get("key_columns") or []),
                                plan.get("split", plan.get("split_kind")), plan.get("chunk_size")))
        if len({p.name for p in new}) != len(new):
            raise ValueError("create_plans: a table appears twice")
        return self._create(new, run_id) if new else []

    def _create(self, plans: Sequence[_NewPlan], run_id: str | None) -> list[int]:
        now = write_stamp()  # these plans' identity: a retry after a lost COMMIT finds them (see _retrying)
        readded: dict[str, datetime] = {}  # when a table had been removed, if its plan puts it back

        def work(conn: Connection, retry: bool) -> list[int]:
            readded.clear()
            if retry:
                # Each table's row locked first, so that an earlier try still in flight has finished.
                latest = [conn.execute(self._lock(latest_query(p.name))).scalar() for p in plans]
                earlier = [None if g is None else self._earlier_try(conn, p.name, now, run_id)
                           for p, g in zip(plans, latest)]
                if all(g is not None for g in earlier):  # all or none: an earlier try committed them
                    return [int(g) for g in earlier if g is not None]
            return [self._create_one(conn, p, now, run_id, readded) for p in plans]

        generations = self._write(work)
        for p, generation in zip(plans, generations):
            log.info("chunk store: %s plan generation %d with %d chunks", p.name, generation, len(p.specs))
            if p.name in readded:
                log.warning("chunk store: %s had been removed from the pipeline at %s; this plan puts it "
                            "back (generation %d; older generations no longer count)", p.name,
                            aware_utc(readded[p.name]), generation)
        return generations

    @staticmethod
    def _earlier_try(conn: Connection, name: str, now: datetime, run_id: str | None) -> int | None:
        earlier = conn.execute(sa.select(plans_table.c.generation).where(
            plans_table.c.table_name == name, plans_table.c.created_at == now,
            plans_table.c.run_id == run_id)).scalar()
        if earlier is not None:
            log.info("chunk store: %s plan generation %d was committed by an earlier try", name, earlier)
        return None if earlier is None else int(earlier)

    def _create_one(self, conn: Connection, p: _NewPlan, now: datetime, run_id: str | None,
                    readded: dict[str, datetime]) -> int:
        name = p.name
        latest = conn.execute(self._lock(latest_query(name))).scalar()
        generation = (latest or 0) + 1
        if latest is None:
            conn.execute(sa.insert(tables_table).values(
                table_name=name, latest_generation=generation, created_at=now, updated_at=now,
                added_generation=generation))
        else:
            removed = conn.execute(sa.select(tables_table.c.removed_at)
                                   .where(tables_table.c.table_name == name)).scalar()
            back = {} if removed is None else {
                "removed_at": None, "removed_run_id": None, "removed_reason": None,
                "added_generation": generation}  # back in the pipeline: older generations no longer count
            if removed is not None:
                readded[name] = removed
            conn.execute(sa.update(tables_table).where(tables_table.c.table_name == name).values(
                latest_generation=generation, updated_at=now, **back))
        stored = {**p.plan, "generation": generation} if "generation" in p.plan else dict(p.plan)
        plan_text = json.dumps(stored, sort_keys=True, allow_nan=False)
        conn.execute(sa.insert(plans_table).values(
            table_name=name, generation=generation, key_columns=json.dumps(p.key_columns),
            split_kind=None if p.split_kind is None else str(p.split_kind),
            chunk_size=None if p.chunk_size is None else int(p.chunk_size),
            chunk_count=len(p.specs), created_at=now, run_id=run_id, plan_json=plan_text))
        conn.execute(sa.insert(chunks_table), [
            {"table_name": name, "generation": generation, "chunk_id": s.chunk_id,
             "start_key": s.start_key, "end_key": s.end_key, "status": PLANNED, "attempts": 0,
             "rerun_pending": False}
            for s in p.specs
        ])
        return generation

    def plan(self, table: Any, generation: int | None = None) -> PlanInfo:
        name = table_name_of(table)

        def read(conn: Connection) -> tuple[int, RowMapping | None]:
            wanted = resolve_generation(conn, name, generation)
            return wanted, conn.execute(sa.select(plans_table).where(
                plans_table.c.table_name == name, plans_table.c.generation == wanted)).mappings().first()

        generation, row = self._read_tx(read)
        return _plan_info(name, generation, row)

    def plans(self, wanted: Sequence[tuple[Any, int | None]]) -> list[PlanInfo]:
        """:meth:`plan` of many ``(table, generation or None for the latest)`` in one read transaction."""

        def read(conn: Connection) -> list[tuple[str, int, RowMapping | None]]:
            found = []
            for table, generation in wanted:
                name = table_name_of(table)
                number = resolve_generation(conn, name, generation)
                found.append((name, number, conn.execute(sa.select(plans_table).where(
                    plans_table.c.table_name == name, plans_table.c.generation == number
                )).mappings().first()))
            return found

        return [_plan_info(name, generation, row) for name, generation, row in self._read_tx(read)]


def _plan_info(name: str, generation: int, row: RowMapping | None) -> PlanInfo:
    if row is None:
        raise UnknownChunk(f"chunk store has no plan generation {generation} for {name}")
    return PlanInfo(
        table=name, generation=row["generation"], key_columns=tuple(json.loads(row["key_columns"])),
        split_kind=row["split_kind"], chunk_size=row["chunk_size"], chunk_count=row["chunk_count"],
        created_at=aware_utc(row["created_at"]), run_id=row["run_id"], plan=json.loads(row["plan_json"]),
    )


def _plan_specs(name: str, plan: Mapping[str, Any], chunks: Iterable[Any] | None) -> list[ChunkSpec]:
    """The chunks of a new plan (``chunks``, else ``plan["chunks"]``), checked: at least one, ids unique."""
    if chunks is None:
        if "chunks" not in plan:
            raise ValueError(f"plan for {name}: pass chunks, or a plan with a 'chunks' list")
        chunks = plan["chunks"]
    specs = [chunk_spec_of(c) for c in chunks]
    if not specs:
        raise ValueError(f"plan for {name} has no chunks (a table is at least one chunk (-inf, +inf))")
    ids = [s.chunk_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"plan for {name} repeats chunk ids")
    return specs
