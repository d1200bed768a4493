"""The mirror in deletion-vector mode (``mirror_updates=deletion_vectors``): base files kept, deleted rows in
Delta deletion vectors, each batch's new rows in one overlay file, compaction past a threshold.

After every refresh the mirror equals the engine's mirror rule (``tests/support/reference_mirror.py``), row by
row, through every reader: ``read_mirror``, delta-rs's ``scan()``, Polars, DuckDB over ``scan()``; time travel
by Delta version and binlog position; and the pyarrow dataset readers refuse the table (they cannot apply the
vectors) rather than return wrong rows. Seeds are fixed; no server (the pipeline tests with servers are in
``test_mirror_dv_pipeline.py``).
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.gc.delta_garbage import mirror_garbage
from airflow_provider_mysqlcdc.engine.lake.layout import (
    changelog_dir,
    changelog_marker,
    snapshot_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_dv_refresh import Compaction
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest, read_manifest_files
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import mirror_versions, read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import records_batch, snapshot_batch
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from tests.engine.test_mirror_files import _schema  # the same shop.items table, with and without a key
from tests.support.reference_mirror import materialize

T = TableId("shop", "items")
F = "mysql-bin.000007"
NAMES = ("id", "v", "amount", "ts")


def _row(i: int, v: int) -> tuple:
    return (i, v, (Decimal(v) / 4).quantize(Decimal("0.01")), datetime(2026, 1, 1, 0, 0, v % 60, tzinfo=UTC))


def _rec(op: str, pos: int, index: int, row: tuple, half: int = AFTER) -> Record:
    return Record(str(T), op, "stream", row_key(BinlogPosition(F, pos), index, half), dict(zip(NAMES, row)),
                  datetime(2026, 1, 1, tzinfo=UTC))


def _key(row: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in row.items()))


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(map(_key, rows))


class _Lake:
    """A table's snapshot and changelog files written by hand in the documented layout, and the reference."""

    def __init__(self, tmp_path, with_pk: bool, chunks: int = 4, per_chunk: int = 50) -> None:
        self.root, self.schema = str(tmp_path / "out"), _schema(with_pk)
        self.store = ChunkStore(str(tmp_path / "chunks.db"))
        bounds = [i * per_chunk for i in range(1, chunks)]
        self.plan = ChunkPlan(T, 1, ("id",), tuple(
            Chunk(i, (bounds[i - 1],) if i else None, (bounds[i],) if i < chunks - 1 else None)
            for i in range(chunks)), "even", per_chunk, per_chunk * chunks)
        self.generation = self.store.create_plan(str(T), self.plan.to_dict())
        self.hws = {c: BinlogPosition(F, 100 + 10 * c) for c in range(chunks)}
        self.snapshot = {c: [_row(i, i) for i in range(c * per_chunk, (c + 1) * per_chunk, 2)]
                         for c in range(chunks)}
        self.changelog: list[Record] = []
        self.batch = 0
        self.pos = 1000
        for c, rows in self.snapshot.items():
            self.commit(c, rows)

    def commit(self, chunk_id: int, rows: list[tuple]) -> None:
        version = f"v{time.time_ns()}"
        directory = snapshot_dir(self.root, T, self.generation, chunk_id, version)
        os.makedirs(directory)
        batch = snapshot_batch(self.schema, rows, self.hws[chunk_id], chunk_id, self.generation)
        pq.write_table(pa.Table.from_batches([batch]), os.path.join(directory, "part-0.parquet"))
        self.store.start_chunk(str(T), self.generation, chunk_id)
        self.store.commit_chunk(str(T), self.generation, chunk_id, rows=len(rows), lw=self.hws[chunk_id],
                                hw=self.hws[chunk_id], output_version=version)

    def rerun(self, chunk_id: int) -> None:
        """A new snapshot of the chunk at the current position: the reference's state of its rows."""
        self.hws[chunk_id] = BinlogPosition(F, self.pos)
        self.pos += 10
        rows = [r for r in self.want() if self.plan.chunks[chunk_id].contains((r["id"],))] if hasattr(
            self.plan.chunks[chunk_id], "contains") else [
            r for r in self.want() if self._owner(r["id"]) == chunk_id]
        self.snapshot[chunk_id] = [tuple(r[n] for n in NAMES) for r in rows]
        self.commit(chunk_id, self.snapshot[chunk_id])

    def _owner(self, key: int) -> int:
        order = KeyOrder(lambda: None, self.schema, ("id",))
        return self.plan.chunks[ChunkLocator(self.plan, order).locate([(key,)])[0]].chunk_id

    def write(self, records: list[Record]) -> int:
        batch_id = self.batch
        self.batch += 1
        self.changelog.extend(records)
        directory = changelog_dir(self.root, T, batch_id)
        os.makedirs(directory)
        pq.write_table(pa.Table.from_batches([records_batch(self.schema, records)]),
                       os.path.join(directory, "p.parquet"))
        write_json_atomic(changelog_marker(self.root, T, batch_id),
                          {"batch_id": batch_id, "end_offset": {"version": 1, "file": F, "pos": self.pos}})
        return batch_id

    def want(self) -> list[dict]:
        order = KeyOrder(lambda: None, self.schema, ("id",))
        return materialize(self.schema, ("id",), ChunkLocator(self.plan, order), self.hws,
                           {c: [dict(zip(NAMES, r)) for r in rows] for c, rows in self.snapshot.items()},
                           self.changelog)

    def random_batch(self, rng: random.Random, changes: int, live: set[int]) -> list[Record]:
        """Inserts, updates, deletes and key-changing updates of the current rows (``live``: their ids)."""
        out: list[Record] = []
        current = {r["id"]: tuple(r[n] for n in NAMES) for r in self.want()}
        for index in range(changes):
            self.pos += 10
            kind = rng.random()
            if kind < 0.25 or not current:
                key = rng.randrange(0, 400)
                if key in current:
                    continue
                row = _row(key, rng.randrange(1000))
                out.append(_rec("+I", self.pos, index, row))
                current[key] = row
            else:
                key = rng.choice(sorted(current))
                old = current[key]
                if kind < 0.45:
                    out.append(_rec("-D", self.pos, index, old))
                    del current[key]
                elif kind < 0.6:  # a key-changing update, often into another chunk
                    new_key = rng.randrange(0, 400)
                    if new_key in current:
                        continue
                    row = _row(new_key, old[1] + 1)
                    out += [_rec("-U", self.pos, index, old, BEFORE), _rec("+U", self.pos, index, row)]
                    del current[key]
                    current[new_key] = row
                else:
                    row = _row(key, old[1] + 1)
                    out += [_rec("-U", self.pos, index, old, BEFORE), _rec("+U", self.pos, index, row)]
                    current[key] = row
        return out


def _readers(lake: _Lake, version: int | None = None) -> dict[str, list[tuple]]:
    """The rows every reader path gives (canonical), by reader."""
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    uri = mirror_table_uri(lake.root, T)
    delta = DeltaTable(uri, version=version)
    scanned = pa.table(pa.RecordBatchReader.from_stream(delta.scan()))
    out = {"delta-rs scan": scanned}
    frame = polars.read_delta(uri, version=version) if version is not None else polars.read_delta(uri)
    out["polars"] = frame.to_arrow()
    reader = delta.scan()  # noqa: F841 (DuckDB finds it by name)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    out["duckdb over scan()"] = con.sql("SELECT * FROM reader").fetch_arrow_table()
    con.close()
    out["read_mirror"] = read_mirror(lake.root, T, as_of=version) if version is not None else read_mirror(
        lake.root, T)
    if version is None:
        out["manifest files"] = read_manifest_files(lake.root, T)
    return {name: _sorted(values.canonical_pylist(_plain(t))) for name, t in out.items()}


def _plain(table: pa.Table) -> pa.Table:
    """Columns in one form across readers: decimals as Decimal, timestamps in UTC, strings as strings."""
    columns = []
    for name in NAMES:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us", tz="UTC"))
        elif pa.types.is_integer(column.type):
            column = column.cast(pa.int64())
        columns.append(column)
    return pa.table(columns, names=list(NAMES))


@pytest.mark.parametrize("with_pk", [True, False], ids=["primary-key", "multiset"])
def test_deletion_vector_mirror_follows_the_rule_through_every_reader(tmp_path, with_pk):
    rng = random.Random(38)
    lake = _Lake(tmp_path, with_pk)
    refresher = MirrorRefresher(lake.root, lake.store, schemas={T: lake.schema}, updates="deletion_vectors",
                                compaction=Compaction(ratio=0.6, min_rows=8, chunks=1, max_parts=5))
    first = refresher.refresh(T)
    assert set(first.rebuilt) == {0, 1, 2, 3}
    want = _sorted([{k: v for k, v in r.items()} for r in lake.want()])
    history: list[tuple[int, list[tuple]]] = []
    compacted: set[int] = set()
    for step in range(12):
        if step == 6:
            lake.rerun(2)  # a chunk rerun: its rows in shared overlay files are deleted by vector
        lake.write(lake.random_batch(rng, rng.randint(3, 25), set()))
        result = refresher.refresh(T)
        compacted |= set(result.compacted)
        want = _sorted(lake.want())
        got = _readers(lake)
        for reader, rows in got.items():
            assert rows == want, (step, reader)
        version = DeltaTable(mirror_table_uri(lake.root, T)).version()
        history.append((version, want))
    manifest = read_manifest(lake.root, T)
    if with_pk:
        assert manifest.deletion_vectors, "no deletion vector written"
        assert compacted, "no chunk was compacted"
        files = [f for f in manifest.files if "/overlay/" in f]
        assert files, "no overlay file"
        # one overlay file per batch for the whole table, not one per chunk
        assert len(os.listdir(os.path.join(mirror_table_uri(lake.root, T), "overlay"))) <= 12
    # time travel by Delta version and by binlog position: each version reads as the rule did then
    for version, rows in history[-4:]:
        got = _readers(lake, version)
        for reader, found in got.items():
            assert found == rows, (version, reader)
    positions = [v for v in mirror_versions(lake.root, T) if v.as_of is not None]
    last = positions[-1]
    assert _sorted(values.canonical_pylist(_plain(read_mirror(lake.root, T, as_of=last.as_of)))) == want
    # the pyarrow dataset readers cannot apply the vectors: they refuse, never return the wrong rows
    delta = DeltaTable(mirror_table_uri(lake.root, T))
    if with_pk:
        with pytest.raises(Exception, match="deletionVectors"):
            delta.to_pyarrow_table()

    # a refresh killed between its manifest and its Delta commit: the next one (a new process) commits the
    # manifest's files and vectors, and every reader agrees again
    uri = mirror_table_uri(lake.root, T)
    last = DeltaTable(uri).version()
    os.remove(os.path.join(uri, "_delta_log", f"{last:020d}.json"))
    again = MirrorRefresher(lake.root, lake.store, schemas={T: lake.schema}, updates="deletion_vectors")
    assert again.refresh(T).rewritten == ()
    assert DeltaTable(uri).version() == last
    for reader, rows in _readers(lake).items():
        assert rows == want, ("after a killed sync", reader)

    # GC: with every superseded file past the retention, what no live version names goes (old base files,
    # overlay files and vector files); the current version's vector files stay and every reader still agrees
    garbage = mirror_garbage(lake.root, T, time.time() + 7200)
    names = [os.path.basename(g.path) for g in garbage]
    if with_pk:
        assert any(n.startswith("deletion_vector_") for n in names), names
        assert any("/overlay/" in g.path for g in garbage)
    for g in garbage:
        os.remove(g.path)
    assert mirror_garbage(lake.root, T, time.time() + 7200) == []
    for reader, rows in _readers(lake).items():
        assert rows == want, ("after GC", reader)


def test_two_refreshers_taking_turns_read_each_others_manifest_and_vectors(tmp_path):
    """A refresher keeps the manifest it wrote and the vectors it committed, to skip parsing them back; when
    another refresher (another process: the stream and ``mysqlcdc mirror``) refreshed the table meanwhile,
    it must read what that one wrote, or its next batch deletes rows by stale vectors."""
    rng = random.Random(7)
    lake = _Lake(tmp_path, True)
    one, other = (MirrorRefresher(lake.root, lake.store, schemas={T: lake.schema}, updates="deletion_vectors",
                                  compaction=Compaction(chunks=0)) for _ in range(2))
    one.refresh(T)
    for step in range(8):
        batch_id = lake.write(lake.random_batch(rng, rng.randint(5, 20), set()))
        done = (one if step % 3 else other).refresh(T)  # runs of the same refresher, then the other's turn
        assert done.batches == (batch_id,), (step, done.batches)  # from the other's manifest on
        want = _sorted(lake.want())
        for reader, rows in _readers(lake).items():
            assert rows == want, (step, reader)
    assert read_manifest(lake.root, T).deletion_vectors


def test_the_setting_is_checked(tmp_path):
    with pytest.raises(ConfigurationError, match="mirror_updates"):
        MirrorRefresher(str(tmp_path), ChunkStore(str(tmp_path / "c.db")), updates="merge_on_read")
