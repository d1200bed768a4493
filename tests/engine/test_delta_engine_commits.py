"""The changelog's and the mirror's Delta commits written by the engine (issue 38, point 3): a stream
that commits a table batch after batch knows the next version from its own last commit and writes it
put-if-absent, without listing the log (``DeltaLog.append``). What must hold: the log is read only at the
first commit and at checkpoints; delta-rs reads every batch exactly once; a replayed batch commits nothing;
another writer in between is found (its version is never overwritten) and the commit lands after it; a batch
that adds a column goes through delta-rs and the engine's commits go on after it. Real Delta tables, small, no
server."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.lake.delta_changelog import APP_ID, DeltaChangelog, changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import DeltaMirror, mirror_table_uri
from airflow_provider_mysqlcdc.engine.model.tables import TableId

TABLE = TableId("shop", "orders")


def _batch(root: str, batch_id: int, ids: list[int], extra: bool = False) -> list[str]:
    """One batch's changelog file, as the stream's executors write it; its name for ``commit_batch``."""
    folder = Path(changelog_table_uri(root, TABLE), f"batch={batch_id:012d}")
    folder.mkdir(parents=True, exist_ok=True)
    columns = {"id": pa.array(ids, pa.int64())}
    if extra:
        columns["note"] = pa.array([f"n{i}" for i in ids], pa.string())
    pq.write_table(pa.table(columns), folder / "part-0.parquet")
    return ["part-0.parquet"]


def _engines(uri: str) -> dict[int, str]:
    """Which engine wrote each version still in the log."""
    out = {}
    for path in sorted(Path(uri, "_delta_log").glob("*.json")):
        info = json.loads(path.read_text().splitlines()[0])["commitInfo"]
        out[int(path.name.split(".")[0])] = info.get("engineInfo", "")
    return out


@pytest.fixture
def listings(monkeypatch) -> list[int]:
    """Counts the log listings delta-rs makes for an already loaded table (``update_incremental``)."""
    calls: list[int] = []
    original = DeltaTable.update_incremental

    def counted(self: DeltaTable) -> None:
        calls.append(1)
        original(self)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    return calls


def test_batches_are_committed_without_listing_the_log_and_read_exactly_once(tmp_path, listings):
    root = str(tmp_path / "out")
    uri = changelog_table_uri(root, TABLE)
    changelog = DeltaChangelog(root, TABLE)
    for batch_id in range(25):
        assert changelog.commit_batch(batch_id, _batch(root, batch_id, [batch_id * 10, batch_id * 10 + 1]),
                                      {"file": "binlog.000001", "pos": 100 + batch_id})
    # the first commit creates the table (delta-rs), the second loads it once; then a listing per
    # checkpoint (versions 10 and 20), not one per batch
    assert len(listings) <= 3, listings
    engines = _engines(uri)
    assert {v for v, e in engines.items() if e == "mysqlcdc"} >= set(range(2, 25)) - {10, 20}
    assert Path(uri, "_delta_log", f"{20:020d}.checkpoint.parquet").exists()

    table = DeltaTable(uri)
    assert table.version() == 24 and table.transaction_version(APP_ID) == 24
    ids = sorted(table.to_pyarrow_table().column("id").to_pylist())
    assert ids == sorted(i for b in range(25) for i in (b * 10, b * 10 + 1))
    last = table.history(limit=1)[0]
    assert last["mysqlcdc.batchId"] == "24"
    assert json.loads(last["mysqlcdc.endOffset"]) == {"file": "binlog.000001", "pos": 124}

    # a replayed batch commits nothing, from this object and from a new one (a restarted stream)
    assert not changelog.commit_batch(24, _batch(root, 24, [240, 241]))
    assert not DeltaChangelog(root, TABLE).commit_batch(24, _batch(root, 24, [240, 241]))
    assert DeltaTable(uri).version() == 24


def test_another_writer_in_between_is_found_and_never_overwritten(tmp_path):
    root = str(tmp_path / "out")
    uri = changelog_table_uri(root, TABLE)
    ours, theirs = DeltaChangelog(root, TABLE), DeltaChangelog(root, TABLE)
    for batch_id in range(3):
        assert ours.commit_batch(batch_id, _batch(root, batch_id, [batch_id]))
    assert theirs.commit_batch(3, _batch(root, 3, [3]))  # version 3, which ours would have taken next
    # ours still believes version 2 is the last: its batch 3 finds the version taken, looks again, and
    # commits nothing (the log holds batch 3 now)
    assert not ours.commit_batch(3, _batch(root, 3, [3]))
    assert theirs.commit_batch(4, _batch(root, 4, [4]))
    assert ours.commit_batch(5, _batch(root, 5, [5]))  # version 4 taken: lands at 5
    table = DeltaTable(uri)
    assert table.version() == 5 and table.transaction_version(APP_ID) == 5
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5]


def test_a_batch_that_adds_a_column_goes_through_delta_rs_and_the_engine_commits_after_it(tmp_path):
    root = str(tmp_path / "out")
    uri = changelog_table_uri(root, TABLE)
    changelog = DeltaChangelog(root, TABLE)
    for batch_id in range(3):
        assert changelog.commit_batch(batch_id, _batch(root, batch_id, [batch_id]))
    assert changelog.commit_batch(3, _batch(root, 3, [3], extra=True))
    assert changelog.commit_batch(4, _batch(root, 4, [4], extra=True))
    engines = _engines(uri)
    # 3: the ALTER TABLE ADD COLUMNS, 4: batch 3's files, both by delta-rs; 5: batch 4, by the engine again
    assert [engines[v].split(":")[0] for v in (3, 4, 5)] == ["delta-rs", "delta-rs", "mysqlcdc"]
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("id")
    assert rows.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert rows.column("note").to_pylist() == [None, None, None, "n3", "n4"]
    assert DeltaTable(uri).transaction_version(APP_ID) == 4


# --- the mirror: a batch's rewritten chunks -----------------------------------------------------------------


@dataclass
class _Manifest:
    """What ``DeltaMirror.sync`` reads of a mirror manifest: its files and position."""

    files: list[str]
    through_batch: int | None = None
    stream_position: str | None = None
    consistent: bool = False
    as_of: str | None = None
    deletion_vectors: dict = field(default_factory=dict)


def _chunk_file(root: str, name: str, ids: list[int]) -> str:
    path = Path(mirror_table_uri(root, TABLE), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    return f"mirror/{name}"


def test_mirror_syncs_are_committed_without_listing_and_another_writer_is_found(tmp_path, listings):
    root = str(tmp_path / "out")
    uri = mirror_table_uri(root, TABLE)
    schema = pa.schema([("id", pa.int64())])
    ours = DeltaMirror(root, TABLE)
    files = [_chunk_file(root, "chunk=0/v0.parquet", [0, 1]), _chunk_file(root, "chunk=1/v0.parquet", [2, 3])]
    assert ours.sync(_Manifest(list(files), through_batch=0), schema)  # creates the table (delta-rs)
    for batch in range(1, 13):  # each batch rewrites chunk 1
        files[1] = _chunk_file(root, f"chunk=1/v{batch}.parquet", [2, 3, 100 + batch])
        assert ours.sync(_Manifest(list(files), through_batch=batch), schema)
    assert not ours.sync(_Manifest(list(files), through_batch=12), schema)  # nothing new: no commit
    assert len(listings) <= 3, listings
    assert {v for v, e in _engines(uri).items() if e == "mysqlcdc"} >= set(range(2, 13)) - {10}
    table = DeltaTable(uri)
    assert table.version() == 12 and table.history(limit=1)[0]["mysqlcdc.throughBatch"] == "12"
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 112]

    # another writer (a second refresher, which the per-table lock forbids) commits version 13 meanwhile:
    # ours finds its version taken, goes through delta-rs, and the table holds exactly our manifest's files
    theirs = DeltaMirror(root, TABLE)
    assert theirs.sync(_Manifest([files[0], _chunk_file(root, "chunk=1/x.parquet", [2])]), schema)
    files[1] = _chunk_file(root, "chunk=1/v13.parquet", [2, 3, 113])
    assert ours.sync(_Manifest(list(files), through_batch=13), schema)
    table = DeltaTable(uri)
    assert table.version() == 14
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 113]

    # columns added: that commit goes through delta-rs, and the engine's commits go on after it
    wider = pa.schema([("id", pa.int64()), ("note", pa.string())])
    path = Path(mirror_table_uri(root, TABLE), "chunk=1/v14.parquet")
    pq.write_table(pa.table({"id": pa.array([2, 3], pa.int64()), "note": ["a", "b"]}), path)
    files[1] = "mirror/chunk=1/v14.parquet"
    assert ours.sync(_Manifest(list(files), through_batch=14), wider)
    path = Path(mirror_table_uri(root, TABLE), "chunk=1/v15.parquet")
    pq.write_table(pa.table({"id": pa.array([2, 3, 115], pa.int64()), "note": ["a", "b", "c"]}), path)
    files[1] = "mirror/chunk=1/v15.parquet"
    assert ours.sync(_Manifest(list(files), through_batch=15), wider)
    table = DeltaTable(uri)
    last = table.version()
    assert _engines(uri)[last] == "mysqlcdc" and _engines(uri)[last - 1].startswith("delta-rs")
    rows = table.to_pyarrow_table().sort_by("id")
    assert rows.column("id").to_pylist() == [0, 1, 2, 3, 115]
    assert rows.column("note").to_pylist() == [None, None, "a", "b", "c"]
