"""The MySQL CDC tab's "To finish this run" (pure logic) and the snapshot progress it shows
(a real SQLite store).

The browser test shows the same on a real api-server and scheduler; here every state of the run is covered
quickly: a failed group (clear it with Downstream on, or paste ``redo_chunks``), a group cleared without
Downstream (the stream task stayed ``upstream_failed``: clear it), a retry pending (nothing to do yet).
"""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.status.progress import snapshot_progress
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.status.text import progress_text
from airflow_provider_mysqlcdc.pipeline.record import PipelineRecord
from airflow_provider_mysqlcdc.plugins.run_tasks import TaskRow, on_call_actions, task_href
from airflow_provider_mysqlcdc.plugins.status_page import RunRef, render_status

DAG, RUN, GROUP = ("mysqlcdc_replication", "manual__2026-11-24T10:00:00+00:00",
                   "snapshot_phase.snapshot_chunk_group")


def _task(task_id: str, state: str | None, map_index: int = -1, label: str = "") -> TaskRow:
    return TaskRow(task_id, map_index, label or task_id, state, 2, 1, task_href(DAG, RUN, task_id, map_index))


def _store(tmp_path) -> tuple[ChunkStore, str]:
    store = ChunkStore(str(tmp_path / "chunks.db"))
    spec = {"version": 1, "key_columns": ["id"], "split_kind": "even", "chunk_size": 10, "row_estimate": 400}
    bounds = [(i, None if i == 0 else f"[{i}]", None if i == 3 else f"[{i + 1}]") for i in range(4)]
    table = "shop.orders"
    generation = store.create_plan(table, spec, bounds, "plan_run")
    for chunk_id in range(3):
        attempt = store.start_chunk(table, generation, chunk_id, run_id=RUN).attempts
        if chunk_id < 2:
            store.commit_chunk(table, generation, chunk_id, rows=100, lw=BinlogPosition("b.000001", 4),
                               hw=BinlogPosition("b.000001", 9 + chunk_id), output_version=f"v{chunk_id}",
                               run_id=RUN, attempt=attempt)
        else:
            store.fail_chunk(table, generation, chunk_id, "executor lost", run_id=RUN, attempt=attempt)
    return store, table


def test_a_failed_group_gives_the_task_to_clear_and_a_redo_value(tmp_path):
    store, table = _store(tmp_path)
    report = collect_status(store, None, [table])
    label = f"{table} chunks 2-3 (plan generation 1)"
    tasks = [_task("plan", "success"), _task(GROUP, "success", 0, f"{table} chunks 0-1 (plan generation 1)"),
             _task(GROUP, "failed", 1, label), _task("stream", "upstream_failed")]
    actions = on_call_actions(tasks, report)
    assert [a.kind for a in actions] == ["clear-group", "redo"]
    assert actions[0].task.name == f"{GROUP} [map index 1: {label}]"
    assert "Downstream on" in actions[0].text
    assert actions[0].task.href == (
        f"/dags/{DAG}/runs/manual__2026-11-24T10%3A00%3A00%2B00%3A00/tasks/{GROUP}/mapped/1")
    assert actions[1].value == f"{table}=2"

    record = PipelineRecord(mysql_conn_id="src", chunk_store=str(tmp_path / "chunks.db"), output="/lake",
                            checkpoint="/lake/_cp", tables=(table,), stream_tables=(table,), redo={})
    page = render_status(RunRef(DAG, RUN), record, report, tasks=tasks, actions=actions)
    assert 'data-action="clear-group"' in page and f'data-field="redo_chunks">{table}=2<' in page
    assert 'data-map-index="1"' in page and "auto-refresh" in page

    # the group was cleared without Downstream and succeeded: the stream task is the one left to clear
    tasks[2] = _task(GROUP, "success", 1, label)
    store.commit_chunk(table, 1, 2, rows=100, lw=BinlogPosition("b.000001", 4),
                       hw=BinlogPosition("b.000001", 20), output_version="v2", run_id=RUN)
    actions = on_call_actions(tasks, collect_status(store, None, [table]))
    assert [a.kind for a in actions] == ["clear-stream"] and actions[0].task.task_id == "stream"
    # while anything is still running or waiting to retry, nothing waits for a person
    assert on_call_actions([*tasks[:2], _task(GROUP, "up_for_retry", 1, label), tasks[3]], report)[:1] == []


def test_progress_counts_chunks_and_rows_of_the_latest_generation(tmp_path):
    store, table = _store(tmp_path)
    p = snapshot_progress(collect_status(store, None, [table, "shop.never_planned"]).tables)
    assert collect_status(store, None, [table]).progress == snapshot_progress(
        collect_status(store, None, [table]).tables)
    assert (p.chunks, p.committed, p.running, p.failed, p.rows, p.rows_estimated) == (4, 2, 0, 1, 200, 400)
    assert p.rows_per_second is not None and p.rows_per_second > 0 and p.eta_s is not None
    text = progress_text(p)
    assert text.startswith("2/4 chunks (50%), 200 of ~400 rows, ") and text.endswith("; 1 failed")
    assert "rows/s" in text and "left" in text


def test_open_mismatches_give_the_groups_to_clear_and_the_repair_command(tmp_path):
    """What verify found different is repaired by clearing the snapshot tasks whose groups hold the chunks,
    or by ``mysqlcdc verify --repair`` (the only way when no group of this run holds them); a chunk
    snapshotted again since it differed is verified again."""
    from airflow_provider_mysqlcdc.engine.chunk_store import Verification
    from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
    from airflow_provider_mysqlcdc.plugins.run_tasks import repair_actions

    store, table = _store(tmp_path)
    store.record_verification(Verification("v1", table, 1, 2, "mismatch", "b.000001:30", 100, 90,
                                           {"why": "an older snapshot"}))
    for chunk_id in (2, 3):  # chunk 2 snapshotted again after its mismatch: superseded
        store.commit_chunk(table, 1, chunk_id, rows=100, lw=BinlogPosition("b.000001", 4),
                           hw=BinlogPosition("b.000001", 20), output_version=f"v{chunk_id}", run_id=RUN)
    for chunk_id, result in ((0, "match"), (1, "mismatch"), (3, "mismatch")):
        store.record_verification(Verification("v2", table, 1, chunk_id, result, "b.000001:40", 100, 99,
                                               {"why": "rows differ <b>"} if result == "mismatch" else {}))
    report = collect_status(store, None, [table])
    groups = {0: ChunkGroup.of(table, 1, [0, 1]), 1: ChunkGroup.of(table, 1, [2, 3])}
    tasks = [_task("plan", "success"), *(_task(GROUP, "success", i, g.name) for i, g in groups.items()),
             _task("stream", "success")]

    actions = repair_actions(tasks, report, groups)
    assert [(a.kind, a.task.map_index if a.task else None) for a in actions] == [
        ("repair-group", 0), ("repair-group", 1), ("repair", None), ("verify-again", None)]
    assert f"to snapshot chunks 1 of {table} again" in actions[0].text
    assert f"to snapshot chunks 3 of {table} again" in actions[1].text
    assert actions[2].value == f"mysqlcdc verify --table {table} --chunks 1,3 --repair"
    assert actions[3].value == f"mysqlcdc verify --table {table} --chunks 2"
    # no group of this run holds them (another run's tab, a re-planned table): the command only
    alone = repair_actions(tasks, report, {})
    assert [a.kind for a in alone] == ["repair", "verify-again"]
    assert alone[0].text.startswith(f"Chunks 1, 3 of {table} differ from the source")

    record = PipelineRecord(mysql_conn_id="src", chunk_store=str(tmp_path / "chunks.db"), output="/lake",
                            checkpoint="/lake/_cp", tables=(table,), stream_tables=(table,), redo={})
    page = render_status(RunRef(DAG, RUN), record, report, tasks=tasks,
                         actions=on_call_actions(tasks, report), repairs=actions)
    assert 'id="repair"' in page and 'data-action="repair-group"' in page and "Nothing to do" not in page
    assert f'data-field="command">mysqlcdc verify --table {table} --chunks 1,3 --repair<' in page
    assert 'data-mismatch="1" data-state="open"' in page
    assert 'data-mismatch="2" data-state="superseded"' in page
    assert 'data-field="differing" class="failed">2 differ<' in page
    assert "rows differ &lt;b&gt;" in page and "<b>" not in page
