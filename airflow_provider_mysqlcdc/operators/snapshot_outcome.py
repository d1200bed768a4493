"""What one snapshot task's try did, as the chunk store records it, and the one message its failure gives.

An on-call engineer reads the task's error in the Airflow UI: it must say in one place what failed (the
Spark application before any chunk started, or which chunks with which error, each error once), and the one
action that finishes the run, naming this mapped task (its map index and group name) and a ready-to-paste
``redo_chunks`` value. A driver that dies hard (killed, out of memory, its node lost) runs no ``abort``:
its chunks are recorded here, so the MySQL CDC tab shows them failed with the real cause instead of
"planned" or "running" with nothing running them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, TableChunks, format_chunk_ids
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.operators.spark_exit import exit_reason


def group_result(store_url: str, group: ChunkGroup) -> dict[str, Any]:
    """The group's chunks as the chunk store has them (the source of truth), JSON-safe for XCom: every
    chunk (with its table), the totals, and one entry per table of the group (``parts``)."""
    parts, chunks = [], []
    with ChunkStore(store_url) as store:
        for part in group.parts:
            entry = _part_result(store.chunks(part.table, part.generation), part)
            parts.append(entry)
            chunks.extend(entry["chunks"])
    hws = [BinlogPosition.parse(c["hw"]) for c in chunks if c["hw"] is not None]
    result: dict[str, Any] = {
        "name": group.name, "parts": [{k: v for k, v in p.items() if k != "chunks"} for p in parts],
        "chunks": chunks, "rows": sum(p["rows"] for p in parts),
        "min_hw": str(min(hws)) if hws else None, "max_hw": str(max(hws)) if hws else None,
    }
    if len(parts) == 1:  # the one-table form: table, generation, chunk_ids, table_complete
        result.update({k: parts[0][k] for k in ("table", "generation", "chunk_ids", "table_complete")})
    return result


def _part_result(states: Sequence[Any], part: TableChunks) -> dict[str, Any]:
    wanted = set(part.chunk_ids)
    chunks = [
        {
            "table": part.table, "chunk_id": c.chunk_id, "status": c.status, "rows": c.rows,
            "attempts": c.attempts, "lw": None if c.lw is None else str(c.lw),
            "hw": None if c.hw is None else str(c.hw),
            "run_id": c.committed_run_id if c.status == COMMITTED else c.run_id,
            "error": (c.error or "").splitlines()[0][:300] if c.error else None,
        }
        for c in states
        if c.chunk_id in wanted
    ]
    hws = [c.hw for c in states if c.chunk_id in wanted and c.hw is not None]
    return {
        "table": part.table, "generation": part.generation, "chunk_ids": list(part.chunk_ids),
        "chunks": chunks,
        "rows": sum(c["rows"] or 0 for c in chunks if c["status"] == COMMITTED),
        "min_hw": str(min(hws)) if hws else None, "max_hw": str(max(hws)) if hws else None,
        "table_complete": bool(states) and all(c.status == COMMITTED for c in states),
    }


ChunkKey = tuple[str, int]  # (table, chunk id)


def record_dead_attempts(store_url: str, group: ChunkGroup, before: Mapping[ChunkKey, int], run_id: str,
                         failure: BaseException) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Record as failed what this try left behind once spark-submit has exited with an error.

    ``before``: each chunk's attempt count when the try began. Returns (chunks that were running, chunks that
    never started), by table. Running: the attempts this try started that are still 'running' (provably this
    try's: this run, exactly one attempt since the try began; ``fail_chunk`` with the attempt number leaves a
    newer attempt alone). Never started: the try ended before the driver started any chunk (no new attempt);
    each gets a failure saying so, with the same attempt count, so the tab and ``mysqlcdc status`` show the
    cause. A committed result stays in force either way.
    """
    reason = exit_reason(failure)
    running: dict[str, list[int]] = {}
    unstarted: dict[str, list[int]] = {}
    with ChunkStore(store_url) as store:
        for part in group.parts:
            table, generation = part.table, part.generation
            for state in store.chunks(table, generation):
                attempts = before.get((table, state.chunk_id))
                if attempts is None:
                    continue
                if state.status == RUNNING and state.run_id == run_id and state.attempts == attempts + 1:
                    store.fail_chunk(table, generation, state.chunk_id,
                                     f"the Spark application ended before this chunk committed ({reason})",
                                     run_id=run_id, attempt=state.attempts)
                    running.setdefault(table, []).append(state.chunk_id)
                elif (state.attempts == attempts
                      and not (state.status == COMMITTED and state.run_id == run_id)):
                    store.fail_chunk(table, generation, state.chunk_id,
                                     f"the Spark application ended before this chunk started ({reason})",
                                     run_id=run_id, attempt=state.attempts)
                    unstarted.setdefault(table, []).append(state.chunk_id)
    return running, unstarted


def attempts_before(result: Mapping[str, Any]) -> dict[ChunkKey, int]:
    """Each chunk's attempt count in a ``group_result``: what ``record_dead_attempts`` compares with."""
    return {(c["table"], c["chunk_id"]): c["attempts"] for c in result["chunks"]}


def describe_chunks(chunks: Mapping[str, Sequence[int]]) -> str:
    """``shop.a chunks 1-3, shop.b chunks 0`` (or ``none``)."""
    return ", ".join(f"{t} chunks {format_chunk_ids(ids)}" for t, ids in chunks.items() if ids) or "none"


@dataclass(frozen=True)
class TaskRef:
    """The mapped task instance an engineer clears: how the Airflow UI names it."""

    task_id: str
    map_index: int

    def describe(self, group: ChunkGroup) -> str:
        return f"{self.task_id} [map index {self.map_index}: {group.name}]"


def failure_message(group: ChunkGroup, chunks: Sequence[Mapping[str, Any]], failure: BaseException | None,
                    unstarted: Mapping[str, Sequence[int]], task: TaskRef) -> str:
    """One message: the cause first (each distinct error once, with the chunks it hit), then the way out."""
    if sum(len(ids) for ids in unstarted.values()) == group.chunk_count:
        cause = (f"the Spark application ended before any chunk started: {exit_reason(failure)}. "
                 "Nothing of this group was read")
    else:
        by_error: dict[str, dict[str, list[int]]] = {}
        for c in chunks:
            error = c.get("error") or f"status {c['status']}"
            by_error.setdefault(error, {}).setdefault(c.get("table", ""), []).append(int(c["chunk_id"]))
        several = len(group.parts) > 1
        cause = "; ".join(f"{_chunks_text(hit, several)}: {error}"
                          for error, hit in by_error.items()) or exit_reason(failure)
    # a line a sentence: the log view cuts one long line off at the width of the screen
    return (
        f"snapshot of {group.name} failed: {cause}.\n"
        "The previous snapshot of these chunks (if any) stays in force.\n"
        f"To finish the run: clear task instance {task.describe(group)} with Downstream on (the Clear "
        "dialog's default), so the stream runs after it;\n"
        f"or trigger the DAG with redo_chunks \"{group.redo_value}\""
    )


def _chunks_text(hit: Mapping[str, Sequence[int]], name_tables: bool) -> str:
    parts = []
    for table, ids in hit.items():
        text = f"chunk{'s' if len(ids) > 1 else ''} {format_chunk_ids(ids)}"
        parts.append(f"{table} {text}" if name_tables else text)
    return ", ".join(parts)
