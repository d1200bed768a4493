"""What a failed snapshot try records and says
(a real SQLite chunk store; the Spark side is the browser test's).

An on-call engineer must read in one message what failed (before any chunk started, or which chunks with
which error, each error once) and the one action that finishes the run: the mapped task by map index and
name, and a ready-to-paste ``redo_chunks`` value. The chunk store must show the cause too (the MySQL CDC
tab reads it).
"""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, FAILED, ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, TableChunks
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.operators.snapshot_outcome import (
    TaskRef,
    attempts_before,
    failure_message,
    group_result,
    record_dead_attempts,
)

TABLE, RUN = "shop.orders", "manual__2026-11-24"
KILLED = Exception("Cannot execute: spark-submit --master local[2] ... Error code is: -9.")
TASK = TaskRef("snapshot_phase.snapshot_chunk_group", 3)


def _store(tmp_path, chunks: int = 8) -> tuple[str, ChunkGroup]:
    url = str(tmp_path / "chunks.db")
    spec = {"version": 1, "key_columns": ["id"], "split_kind": "even", "chunk_size": 10}
    bounds = [(i, None if i == 0 else f"[{i}]", None if i == chunks - 1 else f"[{i + 1}]")
              for i in range(chunks)]
    with ChunkStore(url) as store:
        generation = store.create_plan(TABLE, spec, bounds, "plan_run")
    return url, ChunkGroup.of(TABLE, generation, range(4, 8))


def test_a_try_killed_before_any_chunk_started(tmp_path):
    url, group = _store(tmp_path)
    before = attempts_before(group_result(url, group))
    running, unstarted = record_dead_attempts(url, group, before, RUN, KILLED)
    assert (running, unstarted) == ({}, {TABLE: [4, 5, 6, 7]})
    with ChunkStore(url) as store:
        states = {c.chunk_id: c for c in store.chunks(TABLE, group.parts[0].generation)}
    assert all(states[c].status == FAILED and states[c].attempts == 0 for c in group.parts[0].chunk_ids)
    assert "ended before this chunk started (spark-submit exit code -9 (killed by SIGKILL" in states[4].error
    assert states[3].status != FAILED, "a chunk of another group is untouched"
    failed = group_result(url, group)["chunks"]
    message = failure_message(group, failed, KILLED, unstarted, TASK)
    assert message.startswith(f"snapshot of {group.name} failed: the Spark application ended before any "
                              "chunk started: spark-submit exit code -9 (killed by SIGKILL")
    assert "chunk 4" not in message and "planned" not in message
    assert (f"clear task instance snapshot_phase.snapshot_chunk_group [map index 3: {group.name}] with "
            "Downstream on") in message
    assert 'redo_chunks "shop.orders=4-7"' in message


def test_a_try_killed_mid_chunk_reports_each_error_once(tmp_path):
    url, group = _store(tmp_path)
    with ChunkStore(url) as store:
        before = {(TABLE, c.chunk_id): c.attempts for c in store.chunks(TABLE, group.parts[0].generation)
                  if c.chunk_id in (4, 5, 6, 7)}
        for chunk_id in group.parts[0].chunk_ids:
            attempt = store.start_chunk(TABLE, group.parts[0].generation, chunk_id, run_id=RUN).attempts
            if chunk_id == 4:  # one committed before the kill
                store.commit_chunk(TABLE, group.parts[0].generation, 4, rows=10,
                                   lw=BinlogPosition("b.000001", 4), hw=BinlogPosition("b.000001", 9),
                                   output_version="v1", run_id=RUN, attempt=attempt)
    running, unstarted = record_dead_attempts(url, group, before, RUN, KILLED)
    assert (running, unstarted) == ({TABLE: [5, 6, 7]}, {})
    result = group_result(url, group)
    failed = [c for c in result["chunks"] if c["status"] != COMMITTED or c["run_id"] != RUN]
    assert [c["chunk_id"] for c in failed] == [5, 6, 7]
    message = failure_message(group, failed, KILLED, unstarted, TASK)
    error = "the Spark application ended before this chunk committed (spark-submit exit code -9"
    assert message.count(error) == 1 and "chunks 5-7: " + error in message, message
    assert 'redo_chunks "shop.orders=4-7"' in message


def test_the_drivers_own_error_line_is_the_cause():
    from airflow_provider_mysqlcdc.operators.spark_exit import exit_reason

    failure = Exception(
        "Cannot execute: spark-submit --master local[2] app.py. Error code is: 2.\n"
        "Last spark-submit output:\n"
        "26/11/24 08:31:46 WARN Utils: Your hostname resolves to a loopback address\n"
        "snapshot_chunks: error: table shop.orders was re-planned concurrently (generation 3 instead of 2)\n")
    assert exit_reason(failure) == ("spark-submit exit code 2: snapshot_chunks: error: table shop.orders was "
                                    "re-planned concurrently (generation 3 instead of 2)")
    failure = Exception("Cannot execute: x. Error code is: 1.\nLast spark-submit output:\n"
                        "Traceback (most recent call last):\n  File \"x.py\"\n"
                        "pyspark.errors.PySparkRuntimeError: [JAVA_GATEWAY]")
    assert exit_reason(failure).endswith(": pyspark.errors.PySparkRuntimeError: [JAVA_GATEWAY]")
    assert exit_reason(Exception("Cannot execute: x. Error code is: 137.")).startswith(
        "spark-submit exit code 137 (killed by SIGKILL")


def test_a_group_of_several_tables_names_each_tables_chunks(tmp_path):
    """A group spanning tables (many small tables in one Spark application): the dead try's chunks are
    recorded per table, the message names the table of each chunk, the redo value covers every table."""
    url, orders = _store(tmp_path)
    spec = {"version": 1, "key_columns": ["id"], "split_kind": "even", "chunk_size": 10}
    with ChunkStore(url) as store:
        items_generation = store.create_plan("shop.items", spec, [(0, None, None)], "plan_run")
    group = ChunkGroup((*orders.parts, TableChunks("shop.items", items_generation, (0,))))
    before = attempts_before(group_result(url, group))
    assert set(before) == {(TABLE, c) for c in range(4, 8)} | {("shop.items", 0)}
    with ChunkStore(url) as store:
        for chunk_id in (4, 5):
            store.start_chunk(TABLE, orders.parts[0].generation, chunk_id, run_id=RUN)
        store.start_chunk("shop.items", items_generation, 0, run_id=RUN)
    running, unstarted = record_dead_attempts(url, group, before, RUN, KILLED)
    assert running == {TABLE: [4, 5], "shop.items": [0]} and unstarted == {TABLE: [6, 7]}
    result = group_result(url, group)
    assert [p["table"] for p in result["parts"]] == [TABLE, "shop.items"] and "table" not in result
    message = failure_message(group, result["chunks"], KILLED, unstarted, TASK)
    committed = "the Spark application ended before this chunk committed (spark-submit exit code -9"
    assert f"shop.orders chunks 4-5, shop.items chunk 0: {committed}" in message, message
    assert "shop.orders chunks 6-7: the Spark application ended before this chunk started" in message
    assert 'redo_chunks "shop.orders=4-7; shop.items=0"' in message
