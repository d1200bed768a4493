"""A batch over many tables (issue 38, point 3): the tables' Delta commits are made at once, and the batch
stays exact and idempotent on replay, with one table's commit failing too; the chunk locator's integer fast
path gives the general path's answer. No server: the changelog commit is fed Arrow batches directly."""
from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.lake import delta_changelog
from airflow_provider_mysqlcdc.engine.lake.changelog_commit import ChangelogCommit
from airflow_provider_mysqlcdc.engine.lake.concurrent_commits import concurrently
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import APP_ID, changelog_table_uri
from airflow_provider_mysqlcdc.engine.model.arrow_batches import records_batch
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
from tests.support.delta_reads import assert_delta_changelog_matches_markers

TABLES = 12


def _schema(name: str) -> TableSchema:
    return TableSchema(TableId("db", name), (Column("id", "bigint", "bigint", False),
                                             Column("v", "varchar", "varchar(20)", True)), ("id",))


def _batch(lake: ChangelogCommit, batch_id: int, schemas: dict[str, TableSchema], *, fail: str | None = None):
    """One attempt of ``batch_id``: three rows per table, files written as the executors do, committed."""
    attempt = lake.begin(batch_id)
    files = lake.files(attempt).partition(0, 0)
    for n, (name, schema) in enumerate(sorted(schemas.items())):
        records = [Record(name, "+I", "stream", (1, 1000 * batch_id + 10 * n + k, 0, 0),
                          {"id": 100 * batch_id + k, "v": f"{name}-{k}"}, datetime.now(UTC),
                          binlog_file="mysql-bin.000001", schema_id=schema.schema_id) for k in range(3)]
        files.write(name, schema.schema_id, records_batch(schema, records), {}, [])
    end = {"version": 1, "file": "mysql-bin.000001", "pos": 1000 * batch_id + 999}
    ranges = [{"start": {"version": 1, "file": "mysql-bin.000001", "pos": 4}, "end": end, "rows_read": 99}]
    return lake.commit(attempt, files.close(), ranges, [])


def test_a_batch_over_many_tables_commits_them_at_once_exactly_once_and_a_replay_changes_nothing(
        tmp_path, monkeypatch):
    schemas = {f"db.t{i:02d}": _schema(f"t{i:02d}") for i in range(TABLES)}
    root, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    lake = ChangelogCommit(root, checkpoint, schemas)
    assert _batch(lake, 0, schemas).rows == {name: 3 for name in schemas}

    # batch 1: one table's Delta commit fails; the others commit (at once), and the batch raises
    broken = "db.t05"
    real_commit = delta_changelog.DeltaChangelog.commit

    def commit(self, batch_id, files, end_offset=None):
        if str(self.table) == broken and batch_id == 1:
            raise OSError("disk full")
        return real_commit(self, batch_id, files, end_offset)

    monkeypatch.setattr(delta_changelog.DeltaChangelog, "commit", commit)
    with pytest.raises(OSError, match="disk full"):
        _batch(lake, 1, schemas)
    versions = {name: DeltaTable(changelog_table_uri(root, s.table)).transaction_version(APP_ID)
                for name, s in schemas.items()}
    assert versions == {name: 0 if name == broken else 1 for name in schemas}

    # the stream restarts and replays batch 1 (a new attempt, new files): every table ends with batch 1
    # exactly once; the tables that held it keep their first attempt, the broken one takes the new one
    monkeypatch.setattr(delta_changelog.DeltaChangelog, "commit", real_commit)
    replay = ChangelogCommit(root, checkpoint, schemas)
    batch = _batch(replay, 1, schemas)
    assert batch.replay
    for schema in schemas.values():
        assert_delta_changelog_matches_markers(root, schema)  # each batch once, as the markers say
        delta = DeltaTable(changelog_table_uri(root, schema.table))
        assert delta.transaction_version(APP_ID) == 1
        assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 100, 101, 102]


def test_concurrently_runs_every_task_and_raises_the_first_failure_in_order():
    ran: list[int] = []

    def task(i: int):
        def run() -> int:
            ran.append(i)
            if i in (3, 6):
                raise ValueError(f"task {i}")
            return i * i
        return run

    assert concurrently([task(i) for i in (0, 1, 2)], threads=4) == [0, 1, 4]
    ran.clear()
    with pytest.raises(ValueError, match="task 3"):
        concurrently([task(i) for i in range(10)], threads=4)
    assert sorted(ran) == list(range(10))  # a failure stops nothing: every commit ran to its end


@pytest.mark.parametrize("unsigned", [False, True])
def test_the_locators_integer_path_agrees_with_the_general_one(unsigned):
    column_type = "bigint unsigned" if unsigned else "bigint"
    table = TableId("db", "big")
    schema = TableSchema(table, (Column("id", "bigint", column_type, True),), ("id",))
    rng = random.Random(7)
    low = 0 if unsigned else -(2**63)
    high = 2**64 - 1 if unsigned else 2**63 - 1
    starts = sorted({rng.randrange(low, high) for _ in range(200)})
    bounds = [None, *((s,) for s in starts)]
    plan = ChunkPlan(table, 1, ("id",), tuple(
        Chunk(i, bounds[i], bounds[i + 1] if i + 1 < len(bounds) else None) for i in range(len(bounds))),
        "uneven", 1, 1)
    locator = ChunkLocator(plan, KeyOrder(lambda: None, schema, ("id",)))  # type: ignore[arg-type,return-value]
    assert locator._int_bounds is not None  # the fast path is taken
    keys = [(rng.randrange(low, high),) for _ in range(2000)]
    keys += [(s,) for s in starts] + [(s - 1,) for s in starts] + [(low,), (high,), (None,)]
    general = ChunkLocator(plan, KeyOrder(lambda: None, schema, ("id",)))  # type: ignore[arg-type,return-value]
    general._int_bounds = None
    assert locator.locate(keys) == general.locate(keys)
    assert locator.locate([(True,)]) == general.locate([(True,)])  # not an int: the general path
