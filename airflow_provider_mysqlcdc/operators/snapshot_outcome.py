"""What one snapshot task's try did, as the chunk store records it, and the one message its failure gives.

An on-call engineer reads the task's error in the Airflow UI: it must say in one place what failed (the
Spark application before any chunk started, or which chunks with which error, each error once), and the one
action that finishes the run, naming this mapped task (its map index and group name) and a ready-to-paste
``redo_chunks`` value. A driver that dies hard (killed, out of memory, its node lost) runs no ``abort``:
its chunks are recorded here, so the MySQL CDC tab shows them failed with the real cause instead of
"planned" or "running" with nothing running them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, format_chunk_ids

# SIGKILL as Popen reports it (-9) and as a shell does (128 + 9): the kernel's OOM killer, a container limit, kill -9
_KILLED = {-9, 137}


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


def exit_reason(failure: BaseException | None) -> str:
    """``spark-submit exit code 137 (killed: ...)`` from the Spark provider's error, else the error's type."""
    if failure is None:
        return "no error from spark-submit"
    code = re.search(r"Error code is: (-?\d+)", str(failure))
    if not code:
        return f"{type(failure).__name__}: {str(failure).strip().splitlines()[0][:300] if str(failure) else ''}"
    number = int(code.group(1))
    text = f"spark-submit exit code {number}"
    if number in _KILLED:
        text += " (killed by SIGKILL: the out-of-memory killer, a container limit or kill -9)"
    cause = _cause_line(str(failure))
    return f"{text}: {cause}" if cause else text


# what the driver says last about why it stopped: our apps' one-line errors first, then a Python exception line
_CAUSES = (re.compile(r"^(snapshot_chunks|binlog_stream): error: .+"), re.compile(r"^[\w.]+(Error|Exception): .+"))


def _cause_line(message: str) -> str | None:
    """The driver's own error line from the tail of spark-submit's output the Spark provider appends."""
    _, found, tail = message.partition("Last spark-submit output:")
    lines = [line.strip() for line in tail.splitlines() if line.strip()] if found else []
    for pattern in _CAUSES:
        hits = [line for line in lines if pattern.match(line)]
        if hits:
            return hits[-1][:400]
    return None


def record_dead_attempts(store_url: str, group: ChunkGroup, before: Mapping[int, int], run_id: str,
                         failure: BaseException) -> tuple[list[int], list[int]]:
    """Record as failed what this try left behind once spark-submit has exited with an error.

    Returns (chunks that were running, chunks that never started). Running: the attempts this try started that
    are still 'running' (provably this try's: this run, exactly one attempt since the try began; ``fail_chunk``
    with the attempt number leaves a newer attempt alone). Never started: the try ended before the driver
    started any chunk (no new attempt); each gets a failure saying so, with the same attempt count, so the
    tab and ``mysqlcdc status`` show the cause. A committed result stays in force either way.
    """
    reason = exit_reason(failure)
    running: list[int] = []
    unstarted: list[int] = []
    with ChunkStore(store_url) as store:
        for state in store.chunks(group.table, group.generation):
            if state.chunk_id not in before:
                continue
            if (state.status == RUNNING and state.run_id == run_id
                    and state.attempts == before[state.chunk_id] + 1):
                store.fail_chunk(group.table, group.generation, state.chunk_id,
                                 f"the Spark application ended before this chunk committed ({reason})",
                                 run_id=run_id, attempt=state.attempts)
                running.append(state.chunk_id)
            elif state.attempts == before[state.chunk_id] and not (
                    state.status == COMMITTED and state.run_id == run_id):
                store.fail_chunk(group.table, group.generation, state.chunk_id,
                                 f"the Spark application ended before this chunk started ({reason})",
                                 run_id=run_id, attempt=state.attempts)
                unstarted.append(state.chunk_id)
    return running, unstarted


@dataclass(frozen=True)
class TaskRef:
    """The mapped task instance an engineer clears: how the Airflow UI names it."""

    task_id: str
    map_index: int

    def describe(self, group: ChunkGroup) -> str:
        return f"{self.task_id} [map index {self.map_index}: {group.name}]"


def failure_message(group: ChunkGroup, chunks: Sequence[Mapping[str, Any]], failure: BaseException | None,
                    unstarted: Sequence[int], task: TaskRef) -> str:
    """One message: the cause first (each distinct error once, with the chunks it hit), then the way out."""
    redo = f"{group.table}={format_chunk_ids(group.chunk_ids)}"
    if unstarted and len(unstarted) == len(group.chunk_ids):
        cause = (f"the Spark application ended before any chunk started: {exit_reason(failure)}. "
                 "Nothing of this group was read")
    else:
        by_error: dict[str, list[int]] = {}
        for c in chunks:
            error = c.get("error") or f"status {c['status']}"
            by_error.setdefault(error, []).append(int(c["chunk_id"]))
        cause = "; ".join(f"chunk{'s' if len(ids) > 1 else ''} {format_chunk_ids(ids)}: {error}"
                          for error, ids in by_error.items()) or exit_reason(failure)
    return (
        f"snapshot of {group.name} failed: {cause}. The previous snapshot of these chunks (if any) stays in "
        f"force. To finish the run: clear task instance {task.describe(group)} with Downstream on (the Clear "
        f"dialog's default), so the stream runs after it; or trigger the DAG with redo_chunks \"{redo}\""
    )
