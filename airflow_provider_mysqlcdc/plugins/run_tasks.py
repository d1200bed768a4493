"""The DAG run's task instances as the MySQL CDC tab shows them, and the one action that finishes the run.

The chunk store says what failed inside Spark; only Airflow knows which task instance to clear. Both together
give the on-call engineer the action: clear the failed mapped snapshot task (its map index and group name,
linked to its page) with Downstream on, or paste a ``redo_chunks`` value; and, when a group was cleared
without Downstream so the stream task stayed ``upstream_failed``, clear the stream task.

The same for what ``mysqlcdc verify`` found (``repair_actions``): the chunks whose latest verdict is an open
mismatch are snapshotted again by clearing the mapped snapshot tasks of this run whose groups hold them, or
by ``mysqlcdc verify --chunks ... --repair`` from a shell (which also verifies them again). The tab only
links to the task instances and shows text to copy: Airflow's own Clear dialog decides who may clear.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import quote

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, format_chunk_ids
from airflow_provider_mysqlcdc.engine.status.report import StatusReport
from airflow_provider_mysqlcdc.engine.status.verification import verify_command
from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY

FAILED, UPSTREAM_FAILED, UP_FOR_RETRY = "failed", "upstream_failed", "up_for_retry"
SNAPSHOT_OPERATOR = "MySqlCdcSnapshotOperator"  # TaskInstance.operator of a chunk group (its class name)
RUNNING_STATES = ("running", "queued", "scheduled", "up_for_retry", "restarting", "deferred")


@dataclass(frozen=True)
class TaskRow:
    """One task instance of the run (a mapped one per chunk group)."""

    task_id: str
    map_index: int
    label: str  # the rendered map index (the group's name) or the task id
    state: str | None
    try_number: int
    max_tries: int
    href: str  # its page in the Airflow UI

    @property
    def mapped(self) -> bool:
        return self.map_index >= 0

    @property
    def name(self) -> str:
        """How the UI names it: ``task [map index 3: shop.orders chunks 8-15 (plan generation 1)]``."""
        return f"{self.task_id} [map index {self.map_index}: {self.label}]" if self.mapped else self.task_id


@dataclass(frozen=True)
class Action:
    """What to do, in one sentence, with the task instance to open (None: a value to paste instead)."""

    kind: str  # "clear-group", "clear-stream", "redo"; "repair-group", "repair", "verify-again"
    text: str
    task: TaskRow | None = None
    value: str | None = None  # a ready-to-paste value (redo_chunks)

    def as_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "text": self.text, "value": self.value,
                "task": self.task.name if self.task else None, "href": self.task.href if self.task else None}


def task_href(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The task instance's page in Airflow 3's UI (same origin as the tab)."""
    base = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return base + (f"/mapped/{map_index}" if map_index >= 0 else "")


def load_task_rows(session: Session, dag_id: str, run_id: str,
                   groups: dict[int, ChunkGroup] | None = None) -> list[TaskRow]:
    """The run's task instances, ordered by task then map index. A snapshot group is named by the plan's
    group even before Airflow has a rendered name for it (scheduled, queued; Airflow 3.3 also shows the bare
    index while a try waits for its retry). ``groups``: the run's planned groups, if already loaded."""
    from airflow.models.taskinstance import TaskInstance as TI

    # a hybrid property: Airflow's annotations type its Python getter, not the SQL expression it also is
    rendered_map_index = cast(ColumnElement[str | None], TI.rendered_map_index)
    rows = session.execute(
        select(TI.task_id, TI.map_index, rendered_map_index, TI.state, TI.try_number, TI.max_tries,
               TI.operator)
        .where(TI.dag_id == dag_id, TI.run_id == run_id)
        .order_by(TI.task_id, TI.map_index)
    ).all()
    planned = planned_groups(session, dag_id, run_id) if groups is None else groups
    names = {i: g.name for i, g in planned.items()}
    out = []
    for task_id, map_index, rendered, state, try_number, max_tries, operator in rows:
        label = str(rendered) if rendered is not None else ""
        if operator == SNAPSHOT_OPERATOR and map_index in names and label in ("", str(map_index)):
            label = names[map_index]
        out.append(TaskRow(task_id, int(map_index), label or (str(map_index) if map_index >= 0 else task_id),
                           None if state is None else str(state), int(try_number or 0), int(max_tries or 0),
                           task_href(dag_id, run_id, task_id, int(map_index))))
    return out


def planned_groups(session: Session, dag_id: str, run_id: str) -> dict[int, ChunkGroup]:
    """Map index -> chunk group, from the return value of the task that recorded the pipeline (the plan task:
    its groups, in the order the snapshot task is mapped over them)."""
    from airflow.models.xcom import XComModel

    record = session.scalars(
        select(XComModel)
        .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == XCOM_KEY)
        .order_by(XComModel.timestamp.desc()).limit(1)
    ).first()
    if record is None:
        return {}
    row = session.scalars(
        select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                XComModel.task_id == record.task_id, XComModel.key == "return_value")
        .order_by(XComModel.timestamp.desc()).limit(1)
    ).first()
    groups = XComModel.deserialize_value(row) if row is not None else None
    if not isinstance(groups, list):
        return {}
    out = {}
    for i, g in enumerate(groups):
        try:
            out[i] = ChunkGroup.from_dict(g)
        except (KeyError, TypeError, ValueError, AttributeError):  # not a group this release can read
            continue
    return out


def redo_value(report: StatusReport) -> str:
    """``shop.orders=8-15; shop.items=0`` for every chunk whose latest attempt failed (empty: none)."""
    return "; ".join(f"{t.table}={format_chunk_ids(f.chunk_id for f in t.failures)}"
                     for t in report.tables if t.failures)


def on_call_actions(tasks: Sequence[TaskRow], report: StatusReport | None) -> list[Action]:
    """The actions that finish the run, most direct first; empty when nothing waits for a person."""
    failed = [t for t in tasks if t.state == FAILED]
    actions = [
        Action("clear-group" if t.mapped else "clear-task",
               f"Clear {t.name} with Downstream on (the Clear dialog's default): it reruns "
               + ("exactly this chunk group" if t.mapped else "this task") + ", then the tasks after it.", t)
        for t in failed
    ]
    value = redo_value(report) if report is not None else ""
    running = any(t.state in RUNNING_STATES for t in tasks)
    if value and (failed or not running):
        lead = "Or trigger" if failed else "Chunks failed outside a failed task of this run: trigger"
        actions.append(Action("redo", f"{lead} the DAG again (same params) with this redo_chunks value; the "
                              "running stream, if any, picks the new snapshots up by itself:", value=value))
    if not failed:
        stuck = [t for t in tasks if t.state == UPSTREAM_FAILED]
        if stuck and not running:
            actions.extend(
                Action("clear-stream",
                       f"Every task before {t.name} has succeeded now, but it stayed upstream_failed (a "
                       "failed task was cleared without Downstream): clear it to finish the run.", t)
                for t in stuck
            )
    return actions


def retrying(tasks: Iterable[TaskRow]) -> list[TaskRow]:
    return [t for t in tasks if t.state == UP_FOR_RETRY]


def repair_actions(tasks: Sequence[TaskRow], report: StatusReport | None,
                   groups: dict[int, ChunkGroup] | None = None) -> list[Action]:
    """Per table with open mismatches (the latest verdict of chunks that were not snapshotted again since):
    clear the snapshot tasks of this run whose groups hold them, when they all do; and the ``mysqlcdc verify
    --repair`` command, which re-snapshots exactly those chunks and verifies them again. Chunks snapshotted
    again since they differed: verify them again."""
    if report is None:
        return []
    actions: list[Action] = []
    for t in report.tables:
        v = t.verification
        if v is None:
            continue
        open_ids = [m.chunk_id for m in v.open_mismatches]
        if open_ids:
            found = _group_tasks(tasks, groups or {}, t.table, v.generation, open_ids)
            shown = ", ".join(str(c) for c in open_ids)
            for task, ids in found:
                actions.append(Action(
                    "repair-group",
                    f"Clear {task.name} to snapshot chunks {ids} of {t.table} again (with the rest of its "
                    "group): Downstream on if this run's stream task has finished, off while it runs (it "
                    f"picks the new snapshots up by itself); then verify chunks {shown} again.", task))
            verb = _verb(open_ids, "differs", "differ")
            differ = f"{_chunks(open_ids)} of {t.table} {verb} from the source:"
            lead = "Or, from a shell," if found else differ
            actions.append(Action(
                "repair", f"{lead} snapshot exactly these chunks again and verify them again (with the "
                "connection options of your other mysqlcdc commands):",
                value=verify_command(t.table, open_ids)))
        again = [m.chunk_id for m in v.superseded_mismatches]
        if again:
            actions.append(Action(
                "verify-again", f"{_chunks(again)} of {t.table} differed and "
                f"{_verb(again, 'has', 'have')} been snapshotted again since: verify them again:",
                value=verify_command(t.table, again, repair=False)))
    return actions


def _chunks(ids: Sequence[int]) -> str:
    return f"Chunk{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def _verb(ids: Sequence[int], one: str, many: str) -> str:
    return many if len(ids) > 1 else one


def _group_tasks(tasks: Sequence[TaskRow], groups: dict[int, ChunkGroup], table: str, generation: int,
                 chunk_ids: Sequence[int]) -> list[tuple[TaskRow, str]]:
    """The mapped snapshot tasks of this run whose groups hold the chunks, each with the chunks it holds
    (``3, 7``); empty unless every chunk is in one."""
    by_index = {t.map_index: t for t in tasks if t.mapped and t.map_index in groups
                and t.label == groups[t.map_index].name}
    held: dict[int, list[int]] = {}
    for chunk_id in chunk_ids:
        index = next((i for i, g in sorted(groups.items()) if i in by_index and any(
            p.table == table and p.generation == generation and chunk_id in p.chunk_ids for p in g.parts)),
            None)
        if index is None:
            return []
        held.setdefault(index, []).append(chunk_id)
    return [(by_index[i], ", ".join(map(str, ids))) for i, ids in sorted(held.items())]
