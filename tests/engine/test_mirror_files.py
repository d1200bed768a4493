"""The materialized mirror over Parquet files: incremental refresh, reruns, readers (pyarrow, DuckDB).

The engine's own pipeline produces the snapshot and changelog files in the documented layout
(``tests/support/layout_pipeline.py``); the file mirror must equal the engine's mirror rule after every
refresh and the source table at the end, row by row, while concurrent writers run. Seeds are fixed.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
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
from airflow_provider_mysqlcdc.engine.lake.chunk_assigner import ChunkAssigner
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.layout import (
    changelog_dir,
    changelog_marker,
    snapshot_dir,
    table_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorNotFound, mirror_files, read_manifest
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.arrow_batches import records_batch, snapshot_batch
from airflow_provider_mysqlcdc.engine.model.positions import AFTER, BEFORE, BinlogPosition, row_key
from airflow_provider_mysqlcdc.engine.model.records import Record
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.delta_reads import assert_delta_mirror_matches_manifest, delta_mirror
from tests.support.engine_harness import assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline
from tests.support.reference_mirror import materialize
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows


def _pipeline(mysql_server, mysql_db, tmp_path, **kw) -> LayoutPipeline:
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    root = str(tmp_path / "out")
    return LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db, root=root, **kw)


def _rows(table: pa.Table, names: list[str]) -> list[tuple]:
    """The table's rows over ``names`` (each temporal column followed by its zero-date companion)."""
    assert [n for n in table.schema.names if not n.endswith(values.ZERO_DATE_SUFFIX)] == names, (
        table.schema.names)
    return [tuple(r[c] for c in names) for r in values.canonical_pylist(table)]


def _versions(root: str, table: TableId) -> dict[int, str]:
    manifest = read_manifest(root, table)
    assert manifest is not None
    return {c.chunk_id: c.version for c in manifest.chunks}


def _version_dirs(root: str, table: TableId, chunk_id: int) -> set[str]:
    path = os.path.join(table_dir(root, table), "mirror", f"chunk={chunk_id}")
    return {d.split("=", 1)[1] for d in os.listdir(path)} if os.path.isdir(path) else set()


def _duckdb_rows(files: list[str]) -> tuple[list[str], list[tuple]]:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        table = con.sql(
            f"SELECT * FROM read_parquet({files!r}, hive_partitioning = false)"
        ).fetch_arrow_table()
    finally:
        con.close()
    names = [n for n in table.schema.names if not n.endswith(values.ZERO_DATE_SUFFIX)]
    return names, [tuple(r[n] for n in names) for r in values.canonical_pylist(table)]


# --- the rule over files, without a server ------------------------------------------------------------------

T = TableId("shop", "items")
F = "mysql-bin.000007"


def _schema(with_pk: bool) -> TableSchema:
    return TableSchema(
        T,
        (
            Column("id", "int", "int(11)", not with_pk),
            Column("v", "int", "int(11)", True),
            Column("amount", "decimal", "decimal(12,2)", True, numeric_precision=12, numeric_scale=2),
            Column("ts", "timestamp", "timestamp(6)", True, datetime_precision=6),
        ),
        ("id",) if with_pk else (),
    )


def _rec(op: str, pos: int, index: int, row: tuple, half: int = AFTER) -> Record:
    values = dict(zip(("id", "v", "amount", "ts"), row))
    return Record(
        str(T),
        op,
        "stream",
        row_key(BinlogPosition(F, pos), index, half),
        values,
        datetime(2026, 1, 1, tzinfo=UTC),
    )


def _row(i: int, v: int) -> tuple:
    return (
        i,
        v,
        (Decimal(v) / 4).quantize(Decimal("0.01")),
        datetime(2026, 1, 1, 0, 0, v % 60, tzinfo=UTC),
    )


@pytest.mark.parametrize("with_pk", [True, False], ids=["primary-key", "multiset"])
def test_file_mirror_follows_the_engine_rule_batch_by_batch(tmp_path, with_pk):
    """Mixed HWs, records before/after each HW, key-changing updates across chunks, a delete of a row that
    moved, a chunk rerun, batches with and without end_offset; after every refresh: the engine's rule."""
    root, schema = str(tmp_path / "out"), _schema(with_pk)
    store = ChunkStore(str(tmp_path / "chunks.db"))
    plan = ChunkPlan(
        T, 1, ("id",), (Chunk(0, None, (10,)), Chunk(1, (10,), (20,)), Chunk(2, (20,), None)), "even", 10, 30
    )
    generation = store.create_plan(str(T), plan.to_dict())
    hws = {0: BinlogPosition(F, 100), 1: BinlogPosition(F, 300), 2: BinlogPosition(F, 200)}
    snapshot = {
        0: [_row(i, i) for i in range(0, 10, 2)] + ([_row(4, 4)] if not with_pk else []),
        1: [_row(i, i) for i in range(10, 20, 3)],
        2: [],
    }

    def commit(chunk_id: int, rows: list[tuple]) -> None:
        version = f"v{time.time_ns()}"
        directory = snapshot_dir(root, T, generation, chunk_id, version)
        os.makedirs(directory)
        batch = snapshot_batch(schema, rows, hws[chunk_id], chunk_id, generation)
        pq.write_table(pa.Table.from_batches([batch]), os.path.join(directory, "part-0.parquet"))
        store.start_chunk(str(T), generation, chunk_id)
        store.commit_chunk(
            str(T),
            generation,
            chunk_id,
            rows=len(rows),
            lw=hws[chunk_id],
            hw=hws[chunk_id],
            output_version=version,
        )

    for chunk_id, rows in snapshot.items():
        commit(chunk_id, rows)
    changelog: list[Record] = []
    refresher = MirrorRefresher(root, store, schemas={T: schema})

    def write(batch_id: int, records: list[Record], end: int | None) -> None:
        changelog.extend(records)
        directory = changelog_dir(root, T, batch_id)
        os.makedirs(directory)
        pq.write_table(
            pa.Table.from_batches([records_batch(schema, records)]), os.path.join(directory, "p.parquet")
        )
        marker = {"batch_id": batch_id} | (
            {"end_offset": {"version": 1, "file": F, "pos": end}} if end else {}
        )
        write_json_atomic(changelog_marker(root, T, batch_id), marker)

    def check(expect_rewritten: set[int] | None = None) -> None:
        result = refresher.refresh(T)
        if expect_rewritten is not None:
            assert set(result.rewritten) == expect_rewritten, result
        order = KeyOrder(lambda: None, schema, ("id",))  # integer keys: never connects
        want = materialize(
            schema,
            ("id",),
            ChunkLocator(plan, order),
            hws,
            {c: [dict(zip(schema.column_names, r)) for r in rows] for c, rows in snapshot.items()},
            changelog,
        )
        got = values.canonical_pylist(read_mirror(root, T))
        key = lambda r: tuple(sorted((k, str(v)) for k, v in r.items()))
        assert sorted(map(key, got)) == sorted(map(key, want))

    check({0, 1, 2})
    manifest = read_manifest(root, T)
    assert manifest is not None and not manifest.consistent and manifest.consistent_from == hws[1]
    assert manifest.through_batch is None and manifest.stream_position is None
    write(
        0,
        [
            _rec("+I", 90, 0, _row(3, 3)),  # chunk 0, before its HW 100: covered by the snapshot
            _rec("+I", 150, 0, _row(5, 5)),  # chunk 0 after HW
            _rec("-U", 210, 0, _row(2, 2), BEFORE),
            _rec("+U", 210, 0, _row(25, 2)),  # moves 2 to chunk 2
            _rec("-D", 250, 0, _row(13, 13)),  # chunk 1, before HW 300: ignored
            _rec("-U", 260, 1, _row(4, 4), BEFORE),
            _rec("+U", 260, 1, _row(4, 40)),  # chunk 0 update
        ],
        end=280,
    )
    check({0, 2})
    manifest = read_manifest(root, T)
    assert manifest.stream_position == BinlogPosition(F, 280) and manifest.stream_position_exact
    assert not manifest.consistent
    write(
        1,
        [
            _rec("-D", 310, 0, _row(25, 2)),  # the moved row, deleted in chunk 2
            _rec("-U", 320, 0, _row(16, 16), BEFORE),
            _rec("+U", 320, 0, _row(6, 16)),  # chunk 1 -> chunk 0
            _rec("+I", 330, 0, _row(21, 21)),
        ],
        end=None,
    )
    check({0, 1, 2})
    manifest = read_manifest(root, T)
    assert manifest.stream_position == BinlogPosition(F, 330) and not manifest.stream_position_exact
    assert manifest.consistent and manifest.as_of == BinlogPosition(F, 330)
    check(set())  # nothing new: nothing rewritten
    # rerun of chunk 1 at a later HW that covers the delete of 13 and the move of 16
    hws[1] = BinlogPosition(F, 340)
    snapshot[1] = [_row(10, 10), _row(19, 19)]
    commit(1, snapshot[1])
    check({1})
    write(2, [_rec("+I", 350, 0, _row(11, 11))], end=360)
    check({1})
    # the refresh deletes nothing: chunk 0's superseded versions stay for readers of older versions (time
    # travel) until garbage collection (tests/engine/test_gc.py)
    assert len(_version_dirs(root, T, 0)) == 3


# --- the pipeline, on a real server -------------------------------------------------------------------------

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_dt", "t_ci", "t_comp", "t_nopk")]


@pytest.mark.parametrize("updates", ["rewrite", "deletion_vectors"])
def test_incremental_mirror_equals_source_under_concurrent_writes(mysql_server, mysql_db, tmp_path,
                                                                  updates):
    """Both mirror update modes; the tables' keys cover integers, a case-insensitive string, a composite key,
    DATETIME and no primary key (deletion vectors find integer keys by binary search, the others by join)."""
    rng = random.Random(31)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=400, seed=31, specs=SPECS)
    pipe = _pipeline(mysql_server, mysql_db, tmp_path, chunk_size=120)
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings, updates=updates)
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=31, writers=2, specs=SPECS).start()
    try:
        plans = pipe.plan([f"{mysql_db}.t_*"], chunk_keys={f"{mysql_db}.t_nopk": "ck"})
        assert all(len(p.chunks) >= 3 for p in plans), [(str(p.table), len(p.chunks)) for p in plans]
        pipe.tables = [p.table for p in plans]
        for plan in plans:
            for chunk in plan.chunks[:-1]:
                pipe.snapshot(plan, chunk.chunk_id)
        # mid-snapshot: no generation fully committed, no mirror
        early = refresher.refresh(plans[0].table)
        assert early.manifest is None and "fully committed" in (early.reason or "")
        with pytest.raises(MirrorNotFound):
            mirror_files(pipe.root, plans[0].table)
        for plan in plans:
            pipe.snapshot(plan, plan.chunks[-1].chunk_id)
        for plan in plans:
            result = refresher.refresh(plan.table)
            assert set(result.rebuilt) == {c.chunk_id for c in plan.chunks}
            assert_same_rows(
                _rows(read_mirror(pipe.root, plan.table), pipe.schemas[plan.table].column_names),
                pipe.mirror(plan.table),
                plan.table,
            )
        pipe.open_stream(pipe.tables)
        for _ in range(5):
            batch_id, changed = pipe.stream_batch(max_rows=rng.randint(30, 250))
            for result in refresher.refresh_tables(changed, batch_id):
                table = TableId.parse(result.table)
                assert batch_id in result.batches
                names = pipe.schemas[table].column_names
                assert_same_rows(_rows(read_mirror(pipe.root, table), names), pipe.mirror(table), table)
    finally:
        stats = workload.stop()
    assert stats.transactions > 20, stats
    pipe.drain()
    started = time.monotonic()
    for plan in plans:
        refresher.refresh(plan.table)
    refresh_s = time.monotonic() - started
    for plan in plans:
        names = pipe.schemas[plan.table].column_names
        source = pipe.source(plan.table)
        assert_same_rows(_rows(read_mirror(pipe.root, plan.table), names), source, plan.table)
        if updates == "rewrite":  # the manifest's files are the mirror (with vectors: minus their rows)
            duck_names, duck_rows = _duckdb_rows(mirror_files(pipe.root, plan.table))
            assert duck_names == names
            assert_same_rows(duck_rows, source, f"{plan.table} (DuckDB)")
        else:
            assert_delta_mirror_matches_manifest(pipe.root, plan.table)  # delta-rs scan() == manifest files
            written = read_manifest(pipe.root, plan.table)
            if written.primary_key:  # a multiset rewrites its touched chunks
                assert written.deletion_vectors, f"{plan.table}: no deletion vector"
        manifest = read_manifest(pipe.root, plan.table)
        assert manifest.consistent and manifest.stream_position_exact, manifest.describe()
        assert manifest.as_of >= manifest.consistent_from
        assert bool(manifest.primary_key) == (plan.table.table != "t_nopk")
    # the vectorized chunk location agrees with the server-collation locator on every changelog key
    for plan in plans:
        if plan.table.table not in ("t_int", "t_dt", "t_nopk"):
            continue
        schema = pipe.schemas[plan.table]
        keys = [
            tuple(r.values[c] for c in plan.key_columns) for r in pipe.changelog if r.table == str(plan.table)
        ]
        column = pa.table(
            {
                plan.key_columns[0]: pa.array(
                    [k[0] for k in keys],
                    read_mirror(pipe.root, plan.table).schema.field(plan.key_columns[0]).type,
                )
            }
        )
        assigner = ChunkAssigner(plan, schema, None)
        with KeyOrder(lambda: connect(pipe.settings), schema, plan.key_columns) as order:
            want = ChunkLocator(plan, order).locate(keys)
        assert [plan.chunks[i].chunk_id for i in assigner.indexes(column)] == want
    print(f"final refresh of {len(plans)} tables: {refresh_s:.2f}s")


def test_refresh_rewrites_only_changed_chunks_and_reruns_rebuild_exactly(mysql_server, mysql_db, tmp_path):
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{mysql_db}`.acct (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
        cur.executemany(
            f"INSERT INTO `{mysql_db}`.acct VALUES (%s, 0, 'seed')", [(i,) for i in range(1, 401)]
        )
    pipe = _pipeline(mysql_server, mysql_db, tmp_path, chunk_size=100)
    plan = pipe.plan([f"{mysql_db}.acct"])[0]
    table = plan.table
    pipe.tables = [table]
    assert len(plan.chunks) >= 4
    locate = {c.chunk_id: c for c in plan.chunks}
    inside = {cid: (c.start[0] if c.start else 1) + 1 for cid, c in locate.items()}  # an id inside each chunk
    for chunk in plan.chunks:
        pipe.snapshot(plan, chunk.chunk_id)
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings)
    first = refresher.refresh(table)
    v0 = _versions(pipe.root, table)
    assert set(first.rewritten) == set(v0)
    again = refresher.refresh(table)
    assert again.rewritten == () and _versions(pipe.root, table) == v0
    assert again.manifest.refreshed_at == first.manifest.refreshed_at  # nothing to do: manifest untouched

    def sql(*statements: str) -> None:
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
            conn.commit()

    def exact() -> None:
        names = pipe.schemas[table].column_names
        assert_same_rows(_rows(read_mirror(pipe.root, table), names), pipe.source(table), table)
        assert_delta_mirror_matches_manifest(pipe.root, table)  # the Delta table follows each refresh

    pipe.open_stream([table])
    a, b, c = plan.chunks[1].chunk_id, plan.chunks[2].chunk_id, plan.chunks[3].chunk_id
    sql(f"UPDATE acct SET v = 1 WHERE id = {inside[a]}")
    batch_id, _ = pipe.stream_batch()
    result = refresher.refresh(table, [batch_id])
    v1 = _versions(pipe.root, table)
    assert result.rewritten == (a,) and result.rebuilt == ()
    assert {k for k in v0 if v0[k] != v1[k]} == {a}
    assert _version_dirs(pipe.root, table, a) == {v0[a], v1[a]}  # the previous manifest's files are kept
    exact()

    sql(f"UPDATE acct SET v = 2 WHERE id = {inside[b]}")
    pipe.stream_batch()
    assert refresher.refresh(table).rewritten == (b,)
    assert _version_dirs(pipe.root, table, a) == {v0[a], v1[a]}  # the refresh deletes nothing (see lake/gc)
    exact()

    # a row inserted and mirrored, then deleted and covered by a rerun: never resurrected
    ghost = inside[c] + 1
    sql(f"DELETE FROM acct WHERE id = {ghost}", f"INSERT INTO acct VALUES ({ghost}, 5, 'ghost')")
    pipe.stream_batch()
    assert refresher.refresh(table).rewritten == (c,)
    assert ghost in read_mirror(pipe.root, table).column("id").to_pylist()
    sql(f"DELETE FROM acct WHERE id = {ghost}")
    pipe.snapshot(plan, c)  # rerun: new version, HW after the delete
    pipe.stream.refresh()
    before_dropped = pipe.stream.read(pipe.offset).dropped  # the delete is covered: the filter drops it
    assert before_dropped >= 1
    batch_id, changed = pipe.stream_batch()
    assert not changed
    rerun = refresher.refresh(table)
    assert rerun.rewritten == (c,) and rerun.rebuilt == (c,)
    assert ghost not in read_mirror(pipe.root, table).column("id").to_pylist()
    exact()
    # one Delta commit per refresh that changed files, tagged with where the mirror stands; the version
    # before the rerun's refresh still reads (time travel), ghost included
    history = DeltaTable(mirror_table_uri(pipe.root, table)).history()
    assert history[0]["mysqlcdc.throughBatch"] == str(batch_id) and history[0]["mysqlcdc.streamPosition"]
    assert ghost in delta_mirror(pipe.root, table, version=history[0]["version"] - 1).column("id").to_pylist()
    assert ghost not in delta_mirror(pipe.root, table).column("id").to_pylist()

    # a rerun in progress: the mirror keeps the committed snapshot; changes stream in; then the rerun commits
    commit = pipe.read_uncommitted(plan, a)
    sql(f"UPDATE acct SET v = 9 WHERE id = {inside[a]}", f"DELETE FROM acct WHERE id = {inside[a] + 1}")
    pipe.stream_batch()
    assert refresher.refresh(table).rewritten == (a,)
    exact()
    commit()
    later = refresher.refresh(table)
    assert later.rewritten == (a,) and later.rebuilt == (a,)
    exact()
    assert _versions(pipe.root, table)[plan.chunks[0].chunk_id] == v0[plan.chunks[0].chunk_id]

    # a refresh killed between its manifest and its Delta commit: the next refresh makes the Delta table good
    rows_now = delta_mirror(pipe.root, table).num_rows
    last = DeltaTable(mirror_table_uri(pipe.root, table)).version()
    os.remove(os.path.join(mirror_table_uri(pipe.root, table), "_delta_log", f"{last:020d}.json"))
    assert DeltaTable(mirror_table_uri(pipe.root, table)).version() == last - 1
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings)  # a new process
    assert refresher.refresh(table).rewritten == ()
    assert DeltaTable(mirror_table_uri(pipe.root, table)).version() == last
    assert_delta_mirror_matches_manifest(pipe.root, table)
    assert delta_mirror(pipe.root, table).num_rows == rows_now

    # readers: one file per chunk, only table columns, pyarrow directly (no partition columns)
    files = mirror_files(pipe.root, table)
    assert len(files) == len(plan.chunks) and all(os.path.exists(f) for f in files)
    direct = pq.read_table(files, partitioning=None)
    assert direct.schema.names == pipe.schemas[table].column_names
    assert Counter(_rows(direct, direct.schema.names)) == Counter(pipe.source(table))


def test_the_stream_hook_waits_out_a_mysql_outage_during_a_refresh(tmp_path, monkeypatch):
    """The mirror refresh after a batch talks to MySQL (collation sort keys, schemas): a restart or KILLed
    sessions then must not end the stream, as they do not end its binlog reads."""
    from airflow_provider_mysqlcdc.engine.common.errors import ServerUnavailable

    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        refresher = MirrorRefresher(str(tmp_path / "out"), store, outage_budget_s=30)
        calls: list = []

        def refresh(table, batch_ids=None):
            calls.append((table, batch_ids))
            if len(calls) == 1:
                raise ServerUnavailable("cannot reach MySQL at 127.0.0.1:1 (Lost connection to MySQL server)")

        monkeypatch.setattr(refresher, "refresh", refresh)
        refresher.on_batch_committed(3, [T])
        assert calls == [(T, [3]), (T, [3])]
        refresher.outage_budget_s = 0
        calls.clear()
        with pytest.raises(ServerUnavailable):
            refresher.on_batch_committed(4, [T])


def test_the_stream_hook_builds_the_mirror_of_a_quiet_table(mysql_server, mysql_db, tmp_path):
    """A table whose snapshot committed but that gets no change has a mirror after the stream's next batch,
    and a chunk rerun of it reaches its mirror without a change either (before, only changed tables were
    refreshed: a quiet table had "mirror: none" though its snapshot was complete)."""
    with mysql_server.admin() as conn, conn.cursor() as cur:
        for name in ("busy", "quiet"):
            cur.execute(f"CREATE TABLE `{mysql_db}`.{name} (id INT PRIMARY KEY, v INT NOT NULL)")
            cur.executemany(f"INSERT INTO `{mysql_db}`.{name} VALUES (%s, 0)", [(i,) for i in range(1, 201)])
    pipe = _pipeline(mysql_server, mysql_db, tmp_path, chunk_size=100)
    plans = {p.table.table: p for p in pipe.plan([f"{mysql_db}.busy", f"{mysql_db}.quiet"])}
    busy, quiet = plans["busy"].table, plans["quiet"].table
    pipe.tables = [busy, quiet]
    for plan in plans.values():
        for chunk in plan.chunks:
            pipe.snapshot(plan, chunk.chunk_id)
    pipe.open_stream([busy, quiet])
    refresher = MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE busy SET v = 1 WHERE id = 5")
        conn.commit()
    batch_id, changed = pipe.stream_batch()
    assert changed == {busy}
    refresher.on_batch_committed(batch_id, sorted(changed, key=str))
    for table in (busy, quiet):
        assert_same_rows(_rows(read_mirror(pipe.root, table), ["id", "v"]), pipe.source(table), table)
    built = _versions(pipe.root, quiet)

    # nothing new for the quiet table: its mirror is left alone; a rerun of one of its chunks reaches it
    refresher.on_batch_committed(batch_id, [])
    assert _versions(pipe.root, quiet) == built
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE quiet SET v = 7 WHERE id = 150")  # in the rerun's snapshot, not in a batch
        conn.commit()
    rerun = plans["quiet"].chunks[-1].chunk_id
    pipe.snapshot(plans["quiet"], rerun)
    refresher.on_batch_committed(batch_id, [])
    again = _versions(pipe.root, quiet)
    assert {c for c in again if again[c] != built[c]} == {rerun}
    assert_same_rows(_rows(read_mirror(pipe.root, quiet), ["id", "v"]), pipe.source(quiet), quiet)
    # a new refresher (a restarted stream) sees the mirror is current: nothing rewritten
    MirrorRefresher(pipe.root, pipe.store, settings=pipe.settings).on_batch_committed(batch_id, [])
    assert _versions(pipe.root, quiet) == again
