"""The mirror follows the DDL the stream followed with Delta's own schema evolution (issue 19, part 3).

An ADD COLUMN whose value for existing rows is NULL rewrites no chunk: the mirror's Delta table gets the
column by ``ALTER TABLE ADD COLUMNS``, files written before lack it and read NULL. A default existing rows
hold, a rename, a drop or a new Arrow type rewrites every chunk and replaces the Delta table in one commit.

The engine's pipeline writes the documented layout (``tests/support/layout_pipeline.py``, the schema history
included); a seeded writer keeps changing rows while the DDL lands; every check compares the mirror, read by
delta-rs, pandas, Polars and our readers, with the source row by row.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresh, MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.engine_harness import assert_mirror_equals_source, assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline

SEED = 19


class Writer:
    """One session changing rows of ids >= ``low`` (the chunks at and after it) until stopped: updates of
    ``v`` and of every column in ``extra`` (added by DDL meanwhile; set once they exist), inserts, deletes."""

    def __init__(self, server, db: str, low: int, high: int, seed: int) -> None:
        self.server, self.db, self.low, self.high = server, db, low, high
        self.rng = random.Random(seed)
        self.columns: dict[str, object] = {}  # added column -> a function of rng giving a value
        self.changes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.RLock()
        self.error: BaseException | None = None

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.changes

    def set_column(self, name: str, make) -> None:
        with self._lock:
            self.columns[name] = make

    def rename_column(self, old: str, new: str) -> None:
        with self._lock:
            self.columns[new] = self.columns.pop(old)

    def drop_column(self, name: str) -> None:
        with self._lock:
            self.columns.pop(name, None)

    def _run(self) -> None:
        try:
            with self.server.admin(self.db) as conn, conn.cursor() as cur:
                while not self._stop.is_set():
                    with self._lock:  # a DDL waits for this statement, so the column set is the server's
                        self._change(cur)
                        conn.commit()
                    self.changes += 1
                    time.sleep(self.rng.uniform(0.001, 0.01))
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def _change(self, cur) -> None:
        rng = self.rng
        key = rng.randrange(self.low, self.high)
        kind = rng.random()
        if kind < 0.6:
            sets = ["v = v + 1"] + [f"`{c}` = %s" for c in self.columns]
            args = [make(rng) for make in self.columns.values()]
            cur.execute(f"UPDATE acct SET {', '.join(sets)} WHERE id = %s", [*args, key])
        elif kind < 0.8:
            cur.execute("DELETE FROM acct WHERE id = %s", (key,))
        else:
            cur.execute("INSERT IGNORE INTO acct (id, v) VALUES (%s, %s)", (key, rng.randrange(99)))


def _setup(mysql_server, mysql_db, tmp_path, rows: int = 500,
           updates: str = "rewrite") -> tuple[LayoutPipeline, TableId, MirrorRefresher]:
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20), f FLOAT)")
        rng = random.Random(SEED)
        cur.executemany("INSERT INTO acct VALUES (%s, %s, %s, %s)",
                        [(i, rng.randrange(1000), f"n{i}", rng.randrange(100) / 4)
                         for i in range(1, rows + 1)])
        conn.commit()
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    pipe = LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db,
                          root=str(tmp_path / "out"), chunk_size=100, empty_batches=False)
    plan = pipe.plan([f"{mysql_db}.acct"])[0]
    pipe.tables = [plan.table]
    assert len(plan.chunks) >= 4
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=settings, updates=updates)
    first = refresher.refresh(plan.table)
    assert set(first.rebuilt) == {c.chunk_id for c in plan.chunks}
    pipe.open_stream([plan.table])
    return pipe, plan.table, refresher


def _sql(mysql_server, mysql_db, statement: str) -> None:
    """A statement in its own session (DDL: under the writer's lock, so no statement of its is open)."""
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(statement)
        conn.commit()


def _stream(pipe: LayoutPipeline, refresher: MirrorRefresher, table: TableId, rng: random.Random,
            batches: int) -> list[MirrorRefresh]:
    out = []
    for _ in range(batches):
        batch_id, _ = pipe.stream_batch(max_rows=rng.randint(20, 120))
        out.append(refresher.refresh(table, [batch_id]))
        time.sleep(0.05)
    return out


def _drain(pipe: LayoutPipeline, refresher: MirrorRefresher, table: TableId) -> list[MirrorRefresh]:
    return [refresher.refresh(table, [batch_id]) for batch_id, _ in pipe.drain()]


def _source(pipe: LayoutPipeline, table: TableId) -> tuple[list[str], list[tuple]]:
    with connect(pipe.settings) as conn:
        schema = load_schema(conn, table)
        normalize = values.snapshot_normalizer(schema)
        with conn.cursor() as cur:
            cur.execute(f"SELECT {values.select_list(schema)} FROM {table.quoted}")
            rows = [normalize(r) for r in cur.fetchall()]
    return schema.column_names, rows


def _assert_readers_equal_source(pipe: LayoutPipeline, table: TableId, min_rows: int = 300) -> None:
    """delta-rs (Arrow and pandas), Polars, and our readers each read the mirror as the source holds it, every
    column the source has now (the added ones included), row by row."""
    import duckdb
    import polars as pl

    names, source = _source(pipe, table)
    assert len(source) >= min_rows
    uri = mirror_table_uri(pipe.root, table)
    delta = DeltaTable(uri)
    assert set(pa.schema(delta.schema().to_arrow()).names) == set(names)
    got = _delta_read(uri)
    assert_same_rows([tuple(r[c] for c in names) for r in values.canonical_pylist(got)], source, "delta-rs")
    frame = got.to_pandas() if _vectors(delta) else delta.to_pandas()
    assert_same_rows([tuple(None if pd_isna(r[c]) else _plain(r[c]) for c in names)
                      for r in frame.to_dict("records")],
                     [tuple(_plain(v) for v in r) for r in source], "pandas")
    polars = pl.read_delta(uri).to_arrow()
    assert_same_rows([tuple(r[c] for c in names) for r in values.canonical_pylist(polars)], source, "polars")
    # DuckDB over delta-rs's pyarrow dataset (with deletion vectors: over its scan()), scanned by name
    dataset = delta.scan() if _vectors(delta) else delta.to_pyarrow_dataset()  # noqa: F841
    ducked = duckdb.connect().sql("SELECT * FROM dataset").fetch_arrow_table()
    assert_same_rows([tuple(r[c] for c in names) for r in values.canonical_pylist(ducked)], source, "duckdb")
    from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror as read_through_delta

    ours = read_through_delta(pipe.root, table)
    assert_same_rows([tuple(r[c] for c in names) for r in values.canonical_pylist(ours)], source,
                     "read_mirror")
    # the manifest records the columns, in order
    assert list(read_manifest(pipe.root, table).columns) == names
    assert_mirror_equals_source(pipe.settings, pipe.root, [table], min_rows=min_rows)  # manifest files, Delta


def _vectors(delta: DeltaTable) -> bool:
    return "deletionVectors" in (delta.protocol().reader_features or [])


def _delta_read(uri: str, version: int | None = None) -> pa.Table:
    """A Delta version as delta-rs reads it: ``to_pyarrow_table``, or ``scan()`` with deletion vectors (the
    former refuses them)."""
    delta = DeltaTable(uri, version=version)
    return pa.table(delta.scan()) if _vectors(delta) else delta.to_pyarrow_table()


def pd_isna(value) -> bool:
    try:
        return bool(value != value) or value is None  # noqa: PLR0124 - only a NaN (of any type) is not itself
    except (TypeError, ValueError):
        return False


def _plain(value):
    """pandas gives numpy scalars and floats for nullable ints: compare as Python numbers."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _operations(table_uri: str) -> list[tuple[str, str | None]]:
    """The Delta log's commits, oldest first: (operation, mode)."""
    return [(h["operation"], (h.get("operationParameters") or {}).get("mode"))
            for h in reversed(DeltaTable(table_uri).history())]


def _file_columns(pipe: LayoutPipeline, table: TableId, chunk_id: int) -> list[str]:
    entry = next(c for c in read_manifest(pipe.root, table).chunks if c.chunk_id == chunk_id)
    return pq.read_schema(os.path.join(table_dir(pipe.root, table), entry.files[0])).names


def test_add_nullable_column_while_streaming_rewrites_no_chunk(mysql_server, mysql_db, tmp_path):
    pipe, table, refresher = _setup(mysql_server, mysql_db, tmp_path)
    chunks = [c.chunk_id for c in load_plan(pipe.store, table).chunks]
    untouched = chunks[0]  # the writer changes ids >= 101 only: the first chunk never gets a change
    before = {c.chunk_id: c.version for c in read_manifest(pipe.root, table).chunks}
    rng = random.Random(SEED)
    writer = Writer(mysql_server, mysql_db, 101, 560, SEED).start()
    try:
        results = _stream(pipe, refresher, table, rng, 3)
        with writer._lock:
            _sql(mysql_server, mysql_db, "ALTER TABLE acct ADD COLUMN extra INT, "
                                         "ADD COLUMN tag VARCHAR(10) DEFAULT NULL AFTER id")
            writer.set_column("extra", lambda r: r.randrange(-50, 50))
            writer.set_column("tag", lambda r: r.choice(["a", "b", None]))
        results += _stream(pipe, refresher, table, rng, 6)
        delta_version_added = DeltaTable(mirror_table_uri(pipe.root, table)).version()
    finally:
        changes = writer.stop()
    results += _drain(pipe, refresher, table)
    assert changes > 100, changes

    # no chunk was rebuilt for it, only the chunks with changes got new files; the first kept its files,
    # written before the DDL, which lack the columns
    assert all(r.rebuilt == () for r in results), [r.rebuilt for r in results]
    after = {c.chunk_id: c.version for c in read_manifest(pipe.root, table).chunks}
    assert after[untouched] == before[untouched]
    assert "extra" not in _file_columns(pipe, table, untouched)
    assert any("extra" in _file_columns(pipe, table, c) for c in chunks[1:])
    assert read_manifest(pipe.root, table).extra["schema_version"] == 2
    _assert_readers_equal_source(pipe, table)

    # the Delta log: an ADD COLUMN commit, never an overwrite
    uri = mirror_table_uri(pipe.root, table)
    operations = _operations(uri)
    assert ("ADD COLUMN", None) in operations, operations
    assert all(mode != "Overwrite" for _, mode in operations[1:]), operations
    # time travel: a version before the ADD COLUMN reads the old columns
    added_at = len(operations) - 1 - operations[::-1].index(("ADD COLUMN", None))
    old = DeltaTable(uri, version=added_at - 1).to_pyarrow_table()
    assert "extra" not in old.column_names and "tag" not in old.column_names and old.num_rows >= 300
    assert delta_version_added >= added_at


@pytest.mark.parametrize("updates", ["rewrite", "deletion_vectors"])
def test_added_column_with_a_default_rewrites_the_mirror(mysql_server, mysql_db, tmp_path, updates):
    pipe, table, refresher = _setup(mysql_server, mysql_db, tmp_path, updates=updates)
    rng = random.Random(SEED + 1)
    writer = Writer(mysql_server, mysql_db, 1, 560, SEED + 1).start()
    try:
        _stream(pipe, refresher, table, rng, 2)
        with writer._lock:
            _sql(mysql_server, mysql_db, "ALTER TABLE acct ADD COLUMN seven INT DEFAULT 7")
        results = _stream(pipe, refresher, table, rng, 4)
    finally:
        writer.stop()
    results += _drain(pipe, refresher, table)
    chunk_ids = {c.chunk_id for c in read_manifest(pipe.root, table).chunks}
    assert any(set(r.rebuilt) == chunk_ids for r in results), [r.rebuilt for r in results]
    _assert_readers_equal_source(pipe, table)
    names, source = _source(pipe, table)
    assert Counter(r[names.index("seven")] for r in source)[7] >= 300  # the old rows hold the default
    uri = mirror_table_uri(pipe.root, table)
    operations = _operations(uri)
    assert ("WRITE", "Overwrite") in operations and ("ADD COLUMN", None) not in operations, operations
    replaced = operations.index(("WRITE", "Overwrite"))
    old = _delta_read(uri, replaced - 1)
    assert "seven" not in old.column_names and old.num_rows >= 300


@pytest.mark.parametrize("updates", ["rewrite", "deletion_vectors"])
def test_rename_drop_and_type_change_after_an_added_column(mysql_server, mysql_db, tmp_path, updates):
    """ADD COLUMN x (no rewrite), x set on some rows, then RENAME x TO y: a rewrite, y holds x's values;
    MODIFY v BIGINT (the same Arrow type): no rewrite; DROP COLUMN note: a rewrite. Each equals the source;
    time travel to the version before each reads the columns before it. (A new Arrow type, FLOAT to DOUBLE,
    stops the stream at the Delta changelog's commit before any mirror refresh: ``delta_changelog``.)"""
    pipe, table, refresher = _setup(mysql_server, mysql_db, tmp_path, updates=updates)
    uri = mirror_table_uri(pipe.root, table)
    rng = random.Random(SEED + 2)
    writer = Writer(mysql_server, mysql_db, 101, 560, SEED + 2).start()

    def ddl(statement: str, follow=None) -> tuple[list[MirrorRefresh], int]:
        version = DeltaTable(uri).version()
        with writer._lock:
            _sql(mysql_server, mysql_db, statement)
            if follow is not None:
                follow()
        return _stream(pipe, refresher, table, rng, 4), version

    all_chunks = {c.chunk_id for c in read_manifest(pipe.root, table).chunks}
    try:
        _stream(pipe, refresher, table, rng, 2)
        results, _ = ddl("ALTER TABLE acct ADD COLUMN x INT",
                         lambda: writer.set_column("x", lambda r: r.randrange(9)))
        assert all(r.rebuilt == () for r in results)
        results, before_rename = ddl("ALTER TABLE acct RENAME COLUMN x TO y",
                                     lambda: writer.rename_column("x", "y"))
        assert any(set(r.rebuilt) == all_chunks for r in results)
        results, _ = ddl("ALTER TABLE acct MODIFY v BIGINT NOT NULL")
        assert all(r.rebuilt == () for r in results)
        results, before_drop = ddl("ALTER TABLE acct DROP COLUMN note")
        assert any(set(r.rebuilt) == all_chunks for r in results)
    finally:
        writer.stop()
    _drain(pipe, refresher, table)
    _assert_readers_equal_source(pipe, table)
    names, source = _source(pipe, table)
    assert sum(1 for r in source if r[names.index("y")] is not None) >= 20  # x's values, under y
    old = _delta_read(uri, before_rename)
    assert "x" in old.column_names and "y" not in old.column_names
    assert old.column("x").null_count < old.num_rows
    assert "note" in _delta_read(uri, before_drop).column_names


def test_rerun_and_killed_sync_after_an_added_column(mysql_server, mysql_db, tmp_path):
    """After an ADD COLUMN no chunk was rewritten for: a chunk rerun replaces exactly that chunk (the new
    snapshot holds the column); a refresh killed between its manifest and its ADD COLUMN commit is made good
    by the next (the Delta table gets the column, no file rewritten)."""
    pipe, table, refresher = _setup(mysql_server, mysql_db, tmp_path)
    plan = load_plan(pipe.store, table)
    uri = mirror_table_uri(pipe.root, table)
    _sql(mysql_server, mysql_db, "UPDATE acct SET v = v + 1 WHERE id IN (150, 250)")
    _sql(mysql_server, mysql_db, "ALTER TABLE acct ADD COLUMN extra INT")
    # the refresh after the DDL's batch writes its manifest, then dies before its Delta commits
    batch_id, _ = pipe.stream_batch()
    from airflow_provider_mysqlcdc.engine.lake import delta_mirror

    real_sync = delta_mirror.DeltaMirror.sync
    delta_mirror.DeltaMirror.sync = lambda self, *a, **k: (_ for _ in ()).throw(RuntimeError("killed"))
    try:
        with pytest.raises(RuntimeError, match="killed"):
            refresher.refresh(table, [batch_id])
    finally:
        delta_mirror.DeltaMirror.sync = real_sync
    assert "extra" in read_manifest(pipe.root, table).columns
    assert "extra" not in pa.schema(DeltaTable(uri).schema().to_arrow()).names
    fresh = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings)  # a new process
    again = fresh.refresh(table)
    assert again.rewritten == () and again.rebuilt == ()
    assert "extra" in pa.schema(DeltaTable(uri).schema().to_arrow()).names
    # the column added to the kept files, then the files the killed refresh wrote; nothing replaced
    assert _operations(uri)[-2:] == [("ADD COLUMN", None), ("WRITE", "Append")], _operations(uri)
    assert all(mode != "Overwrite" for _, mode in _operations(uri)[1:])
    _assert_readers_equal_source(pipe, table)

    # a chunk rerun after the ADD COLUMN: exactly that chunk is replaced, in the new columns
    _sql(mysql_server, mysql_db, "UPDATE acct SET extra = id WHERE id BETWEEN 1 AND 40")
    pipe.stream_batch()
    assert fresh.refresh(table).rebuilt == ()
    target = plan.chunks[2].chunk_id
    before = {c.chunk_id: c.version for c in read_manifest(pipe.root, table).chunks}
    with connect(pipe.settings) as conn:
        pipe.schemas[table] = load_schema(conn, table)  # the rerun reads the new columns
    pipe.snapshot(plan, target)
    pipe.stream.refresh()
    pipe.stream_batch()
    rerun = fresh.refresh(table)
    assert rerun.rebuilt == (target,) and rerun.rewritten == (target,)
    after = {c.chunk_id: c.version for c in read_manifest(pipe.root, table).chunks}
    assert {c for c in after if after[c] != before[c]} == {target}
    assert "extra" in _file_columns(pipe, table, target)
    _assert_readers_equal_source(pipe, table)
