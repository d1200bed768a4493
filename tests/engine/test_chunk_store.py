"""The chunk store: plans, chunk commits, reruns, versioning and concurrency, on every reachable backend.

SQLite always runs. PostgreSQL (``MYSQLCDC_TEST_STORE_POSTGRES_URL``, default the local server) and
MySQL/MariaDB (``MYSQLCDC_TEST_STORE_MYSQL_URL``, default the local server) run when reachable, each in a
database of its own that the tests create and drop; otherwise they are skipped with the reason.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import threading

import pytest
import sqlalchemy as sa

from airflow_provider_mysqlcdc.engine import chunk_store as cs
from airflow_provider_mysqlcdc.engine.chunk_store import (
    ChunkResult,
    ChunkSpec,
    ChunkStore,
    ChunkStoreError,
    ChunkStoreVersionError,
    StaleAttempt,
    StaleGeneration,
    UnknownChunk,
)
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

TABLE = "shop.orders"
TEST_DB = f"mysqlcdc_chunk_store_test_{os.getpid()}"
PG_ADMIN_URL = os.environ.get(
    "MYSQLCDC_TEST_STORE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN_URL = os.environ.get("MYSQLCDC_TEST_STORE_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/")


def pos(n: int, file: str = "mysql-bin.000001") -> BinlogPosition:
    return BinlogPosition(file, n)


# --- backends -----------------------------------------------------------------------------------------------


def _server_database(admin_url: str, backend: str, name: str = TEST_DB):
    """Create a throwaway database on the server, yield its URL, drop it. Skip without server or driver."""
    url = sa.engine.make_url(admin_url)
    if url.drivername in ("mysql", "mariadb"):
        url = url.set(drivername="mysql+pymysql")
    connect_args = {"connect_timeout": 3}
    try:
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", connect_args=connect_args)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        pytest.skip(f"{backend}: driver not installed ({exc})")
    except sa.exc.DBAPIError as exc:
        pytest.skip(f"{backend} not reachable at {url.render_as_string(hide_password=True)}: {exc.orig}")
    try:
        yield url.set(database=name)
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url():
    yield from _server_database(PG_ADMIN_URL, "postgresql")


@pytest.fixture(scope="session")
def mysql_url():
    yield from _server_database(MYSQL_ADMIN_URL, "mysql")


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def store_url(request, tmp_path) -> str:
    """A store URL with no chunk-store rows (server backends: tables emptied, faster than DDL)."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "chunks.db")  # a plain path means a SQLite file
    url = request.getfixturevalue("postgres_url" if request.param == "postgresql" else "mysql_url")
    engine = sa.create_engine(url)
    try:
        existing = set(sa.inspect(engine).get_table_names())
        with engine.begin() as conn:
            if "test_manifest" in existing:
                conn.exec_driver_sql("DROP TABLE test_manifest")
            for table in reversed(cs.metadata.sorted_tables):
                if table.name in existing and table is not cs.meta_table:
                    conn.execute(sa.delete(table))
            if cs.meta_table.name in existing:  # a test may have faked a newer version
                conn.execute(sa.update(cs.meta_table).where(cs.meta_table.c.name == "schema_version")
                             .values(value=str(cs.SCHEMA_VERSION)))
    finally:
        engine.dispose()
    return url.render_as_string(hide_password=False)


@pytest.fixture
def fresh_store_url(store_url) -> str:
    """A store URL with no chunk-store tables at all: the first ChunkStore creates them."""
    if not store_url.startswith(("postgresql", "mysql")):
        return store_url
    engine = sa.create_engine(store_url)
    try:
        cs.metadata.drop_all(engine)
    finally:
        engine.dispose()
    return store_url


@pytest.fixture
def store(store_url):
    with ChunkStore(store_url) as s:
        yield s


def three_chunks() -> list:
    # bounds are the planner's opaque key text: the store must keep them byte for byte
    odd = '["é ü\\u0000", 2]'
    return [ChunkSpec(0, None, "[10]"), (1, "[10]", odd), {"chunk_id": 2, "start_key": odd}]


def new_plan(store: ChunkStore, table: str = TABLE, n: int = 3, run_id: str = "plan_run") -> int:
    if n == 3:
        chunks = three_chunks()
    else:
        chunks = [(i, None if i == 0 else f"[{i}]", None if i == n - 1 else f"[{i + 1}]") for i in range(n)]
    plan = {"version": 1, "key_columns": ["id"], "split_kind": "even", "chunk_size": 10}
    return store.create_plan(table, plan, chunks, run_id)


def commit(store, generation, chunk_id, lw, hw, version, table=TABLE, **kw):
    return store.commit_chunk(table, generation, chunk_id, rows=hw - lw, lw=pos(lw), hw=pos(hw),
                              output_version=version, run_id="run", **kw)


# --- plans --------------------------------------------------------------------------------------------------


def test_plan_generations_and_opaque_bounds(store):
    assert store.latest_generation(TABLE) is None and store.next_generation(TABLE) == 1
    with pytest.raises(UnknownChunk):
        store.chunks(TABLE)
    assert new_plan(store) == 1
    assert store.next_generation(TABLE) == 2
    assert new_plan(store, run_id="replan") == 2
    assert new_plan(store, "shop.Orders", n=1) == 1  # table names are case-sensitive, as in MySQL on Linux
    assert store.latest_generation(TABLE) == 2
    assert store.tables() == ["shop.Orders", TABLE]

    info = store.plan(TABLE)
    assert (info.generation, info.key_columns, info.split_kind, info.chunk_size) == (2, ("id",), "even", 10)
    assert (info.chunk_count, info.run_id) == (3, "replan")
    assert info.plan == {"version": 1, "key_columns": ["id"], "split_kind": "even", "chunk_size": 10}
    assert store.plan(TABLE, 1).run_id == "plan_run"

    chunks = store.chunks(TABLE)
    assert [(c.generation, c.chunk_id, c.start_key, c.end_key, c.status, c.attempts, c.hw)
            for c in chunks] == [
        (2, 0, None, "[10]", "planned", 0, None),
        (2, 1, "[10]", '["é ü\\u0000", 2]', "planned", 0, None),
        (2, 2, '["é ü\\u0000", 2]', None, "planned", 0, None),
    ]
    assert [c.generation for c in store.chunks(TABLE, 1)] == [1, 1, 1]
    assert len(store.chunks("shop.Orders")) == 1

    with pytest.raises(ValueError):
        store.create_plan(TABLE, {}, [], "r")
    with pytest.raises(ValueError):
        store.create_plan(TABLE, {}, [(0, None, "[1]"), (0, "[1]", None)], "r")
    with pytest.raises(ConfigurationError):
        store.create_plan("orders", {}, [(0, None, None)], "r")
    assert store.latest_generation(TABLE) == 2  # refused plans allocate nothing


def test_plan_in_the_planners_own_form(store):
    """``ChunkPlan.to_dict()``: chunks with ``start``/``end`` as encode_key's JSON-safe lists, ``split``."""
    plan = {
        "version": 1, "table": {"database": "shop", "table": "orders"}, "generation": 0,
        "key_columns": ["region", "id"], "split": "uneven", "chunk_size": 1000, "row_estimate": 2500,
        "chunks": [
            {"chunk_id": 0, "start": None, "end": [["s", "EU"], ["i", "18446744073709551615"]]},
            {"chunk_id": 1, "start": [["s", "EU"], ["i", "18446744073709551615"]], "end": [["s", "Zürich"]]},
            {"chunk_id": 2, "start": [["s", "Zürich"]], "end": None},
        ],
    }
    store.create_plan(TABLE, plan, run_id="r")
    generation = store.create_plan(TABLE, plan, run_id="r")
    info = store.plan(TABLE)
    assert (info.generation, info.split_kind, info.chunk_size, info.key_columns) == (
        2, "uneven", 1000, ("region", "id"))
    assert info.plan == {**plan, "generation": 2}  # the stored plan carries the allocated generation
    chunks = store.chunks(TABLE, generation)
    assert [c.start_key for c in chunks] == [None, '[["s","EU"],["i","18446744073709551615"]]',
                                             '[["s","Z\\u00fcrich"]]']
    assert [json.loads(c.end_key) if c.end_key else None for c in chunks] == [
        c["end"] for c in plan["chunks"]]
    with pytest.raises(TypeError):
        store.create_plan(TABLE, {}, [(0, None, {b"bytes"})])
    with pytest.raises(ValueError):
        store.create_plan(TABLE, {"no": "chunks"})

def test_many_tables_plans_are_stored_in_one_transaction_all_or_none(store):
    """Planning thousands of tables stores a batch of plans at once: each table gets its next generation, a
    removed table is put back, and a plan that cannot be stored (here: NaN in its JSON, found only inside the
    transaction) stores none of the batch."""
    def plan(n: int) -> dict:
        return {"key_columns": ["id"], "split": "even", "chunk_size": 10, "generation": 0,
                "chunks": [{"chunk_id": i, "start": None if i == 0 else [["i", str(i)]],
                            "end": None if i == n - 1 else [["i", str(i + 1)]]} for i in range(n)]}

    new_plan(store)  # TABLE at generation 1, then removed: the batch puts it back
    store.remove_table(TABLE, "remove_run")
    names = [TABLE, "shop.a", "shop.b"]
    assert store.next_generations(names) == {TABLE: 2, "shop.a": 1, "shop.b": 1}
    assert store.create_plans([(t, plan(i + 1)) for i, t in enumerate(names)], run_id="batch") == [2, 1, 1]
    assert store.active_tables() == ["shop.a", "shop.b", TABLE]
    infos = store.plans([(TABLE, None), ("shop.b", 1), (TABLE, 1)])
    assert [(i.table, i.generation, i.chunk_count, i.run_id) for i in infos] == [
        (TABLE, 2, 1, "batch"), ("shop.b", 1, 3, "batch"), (TABLE, 1, 3, "plan_run")]
    assert infos[1].plan == {**plan(3), "generation": 1}
    assert [c.status for c in store.chunks("shop.b")] == ["planned"] * 3

    broken = {**plan(1), "row_estimate": float("nan")}
    with pytest.raises(ValueError):
        store.create_plans([("shop.a", plan(2)), ("shop.c", plan(1)), ("shop.d", broken)], run_id="broken")
    assert store.next_generations(["shop.a", "shop.c", "shop.d"]) == {"shop.a": 2, "shop.c": 1, "shop.d": 1}
    assert store.run_plans("broken") == {}
    with pytest.raises(ValueError, match="twice"):
        store.create_plans([("shop.a", plan(1)), ("shop.a", plan(1))])
    with pytest.raises(UnknownChunk):
        store.plans([("shop.a", None), ("shop.nope", None)])
    assert store.create_plans([]) == []


# --- commits and reruns -------------------------------------------------------------------------------------


def test_commit_then_rerun_keeps_old_hw_until_the_rerun_commits(store):
    gen = new_plan(store)
    first = store.start_chunk(TABLE, gen, 1, "run1")
    assert (first.status, first.attempts, first.rerun_pending, first.hw) == ("running", 1, False, None)
    done = store.commit_chunk(TABLE, gen, 1, rows=7, lw=pos(100), hw=pos(150), output_version="v-run1",
                              run_id="run1", timings={"read_s": 1.25, "backfill_s": 0.5}, attempt=1,
                              extra={"watermark_mode": "consistent_snapshot"})
    assert (done.status, done.rows, done.lw, done.hw, done.output_version, done.committed_run_id) == (
        "committed", 7, pos(100), pos(150), "v-run1", "run1")
    assert done.timings == {"read_s": 1.25, "backfill_s": 0.5}
    assert done.extra == {"watermark_mode": "consistent_snapshot"}
    assert done.effective_hw == pos(150)

    rerun = store.start_chunk(TABLE, gen, 1, "run2")
    assert (rerun.status, rerun.attempts, rerun.rerun_pending, rerun.run_id) == ("running", 2, True, "run2")
    # the committed result stays in force ...
    assert (rerun.rows, rerun.lw, rerun.hw, rerun.output_version, rerun.committed_run_id) == (
        7, pos(100), pos(150), "v-run1", "run1")
    # ... for the mirror, while the stream filter treats the chunk as HW = -inf
    chunk = {c.chunk_id: c for c in store.stream_view([TABLE])[TABLE].generations[0].chunks}[1]
    assert (chunk.hw, chunk.committed_hw, chunk.status) == (None, pos(150), "running")
    assert rerun.effective_hw is None

    again = commit(store, gen, 1, 300, 420, "v-run2", attempt=2)
    assert (again.rerun_pending, again.hw, again.lw, again.rows, again.output_version, again.attempts) == (
        False, pos(420), pos(300), 120, "v-run2", 2)
    assert again.timings == {}  # replaced, not merged
    assert [(e.event, e.attempt) for e in store.history(TABLE, 1)] == [
        ("started", 1), ("committed", 1), ("started", 2), ("committed", 2)]
    assert store.history(TABLE, 1)[1].hw == pos(150)


def test_a_chunk_hw_records_its_server(store):
    """Whose binlog the HW names, and the GTID position there: kept with the committed result, handed to the
    stream's view, replaced by the next commit (a rerun on another server)."""
    gen = new_plan(store)
    done = commit(store, gen, 0, 10, 20, "v0", hw_server="mariadb:11", hw_gtid_position="0-11-57")
    assert (done.hw_server, done.hw_gtid_position) == ("mariadb:11", "0-11-57")
    commit(store, gen, 1, 10, 30, "v1")  # a caller that does not know the server
    chunks = store.stream_view([TABLE])[TABLE].generations[0].chunks
    assert [(c.hw_server, c.hw_gtid_position) for c in chunks] == [("mariadb:11", "0-11-57"), (None, None),
                                                                   (None, None)]
    again = commit(store, gen, 0, 40, 50, "v0b", hw_server="mysql:12:3e11fa47-71ca-11e1-9e33-c80aa9429562")
    assert (again.hw_server, again.hw_gtid_position) == (
        "mysql:12:3e11fa47-71ca-11e1-9e33-c80aa9429562", None)


def test_stream_claims_name_their_holder(store):
    claim = cs.StreamClaim("/ckpt/a", "mariadb:1", 42, 5400, 5499, "me@host pid 1", None)
    store.record_stream_claim(claim)
    store.record_stream_claim(claim)  # a retry, or a restart of the same checkpoint: one row
    long_path = "s3://bucket/" + "x" * 2000  # any length
    store.record_stream_claim(cs.StreamClaim(long_path, "mariadb:1", 43, 5400, 5409, "other", None))
    [found] = store.stream_claim_holders("mariadb:1", 42)
    assert (found.checkpoint, found.low_id, found.high_id, found.holder) == (
        "/ckpt/a", 5400, 5499, "me@host pid 1")
    assert found.claimed_at is not None
    assert store.stream_claim_holders("mariadb:2", 42) == []  # another server's session 42
    assert [c.checkpoint for c in store.stream_claim_holders("mariadb:1", 43)] == [long_path]
    store.drop_stream_claim("/ckpt/a", 99)  # not the session that holds it now: kept
    assert store.stream_claim_holders("mariadb:1", 42)
    store.drop_stream_claim("/ckpt/a", 42)
    assert store.stream_claim_holders("mariadb:1", 42) == []


def test_failing_callback_leaves_the_committed_result_intact(store):
    gen = new_plan(store)
    with store.transaction() as conn:
        conn.exec_driver_sql("CREATE TABLE test_manifest (chunk_id INTEGER, output_version VARCHAR(50))")
    commit(store, gen, 0, 10, 20, "v1")
    store.start_chunk(TABLE, gen, 0, "rerun")

    def write_manifest_then_crash(conn, state):
        conn.execute(sa.text("INSERT INTO test_manifest VALUES (:c, :v)"), {"c": state.chunk_id,
                                                                           "v": state.output_version})
        assert state.hw == pos(40)  # the callback sees the new state inside the transaction
        raise RuntimeError("manifest upload failed")

    with pytest.raises(RuntimeError, match="manifest upload failed"):
        commit(store, gen, 0, 30, 40, "v2", in_transaction=write_manifest_then_crash)
    state = store.chunk(TABLE, gen, 0)
    assert (state.hw, state.lw, state.output_version, state.rows, state.rerun_pending, state.status) == (
        pos(20), pos(10), "v1", 10, True, "running")
    assert [e.event for e in store.history(TABLE, 0)] == ["committed", "started"]
    with store.transaction() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM test_manifest").scalar() == 0

    def write_manifest(conn, state):
        conn.execute(sa.text("INSERT INTO test_manifest VALUES (:c, :v)"), {"c": state.chunk_id,
                                                                           "v": state.output_version})

    commit(store, gen, 0, 30, 40, "v2", in_transaction=write_manifest)
    assert store.chunk(TABLE, gen, 0).output_version == "v2"
    with store.transaction() as conn:
        assert conn.exec_driver_sql("SELECT chunk_id, output_version FROM test_manifest").all() == [(0, "v2")]


def test_fail_records_the_error_and_keeps_the_committed_result(store):
    gen = new_plan(store)
    store.start_chunk(TABLE, gen, 2, "a")
    failed = store.fail_chunk(TABLE, gen, 2, ValueError("boom " * 1000), "a", attempt=1)
    assert failed.status == "failed" and failed.error.startswith("ValueError: boom")
    assert len(failed.error) == cs.MAX_ERROR_CHARS and failed.hw is None and not failed.rerun_pending

    store.start_chunk(TABLE, gen, 2, "b")
    commit(store, gen, 2, 5, 9, "v-b", attempt=2)
    store.start_chunk(TABLE, gen, 2, "c")
    failed = store.fail_chunk(TABLE, gen, 2, "lost connection", "c")
    assert (failed.status, failed.error, failed.attempts) == ("failed", "lost connection", 3)
    assert (failed.hw, failed.output_version, failed.rows) == (pos(9), "v-b", 4)
    assert failed.rerun_pending  # the rerun has not committed: the stream keeps emitting this chunk
    assert store.mirror_view(TABLE) is None  # chunks 0 and 1 were never committed

    store.start_chunk(TABLE, gen, 2, "d")
    ok = commit(store, gen, 2, 20, 30, "v-d")
    assert (ok.status, ok.error, ok.rerun_pending) == ("committed", None, False)


def test_a_tables_chunks_start_together_and_commit_all_or_none(store):
    """A snapshot run starts and commits a table's chunks in one transaction each; one stale attempt among
    them (the last, so the others were already written in the transaction) refuses the whole commit and the
    callback never runs; the others then commit on their own."""
    gen = new_plan(store)
    states = store.start_chunks(TABLE, gen, [0, 1, 2], "run")
    assert [(s.chunk_id, s.status, s.attempts) for s in states] == [(0, "running", 1), (1, "running", 1),
                                                                    (2, "running", 1)]
    store.start_chunk(TABLE, gen, 2, "newer")  # attempt 2 of chunk 2
    results = [ChunkResult(c, 10 * c, pos(1), pos(2 + c), f"v{c}", attempt=1) for c in (0, 1, 2)]
    seen: list = []
    with pytest.raises(StaleAttempt, match="chunk 2"):
        store.commit_chunks(TABLE, gen, results, run_id="run", in_transaction=lambda _c, st: seen.append(st))
    assert seen == [] and [(s.status, s.hw) for s in store.chunks(TABLE, gen)] == [("running", None)] * 3
    assert [e.event for e in store.history(TABLE, 0, gen)] == ["started"]
    done = store.commit_chunks(TABLE, gen, results[:2], run_id="run",
                               in_transaction=lambda _c, st: seen.append([s.chunk_id for s in st]))
    assert seen == [[0, 1]] and [(s.status, s.rows, s.hw, s.output_version) for s in done] == [
        ("committed", 0, pos(2), "v0"), ("committed", 10, pos(3), "v1")]
    assert store.chunk(TABLE, gen, 2).status == "running" and store.chunk(TABLE, gen, 2).attempts == 2
    assert [e.event for e in store.history(TABLE, 1, gen)] == ["started", "committed"]
    with pytest.raises(StaleGeneration):
        store.start_chunks(TABLE, gen + 7, [0], "x")


def test_many_tables_chunks_start_in_one_transaction_all_or_none(store):
    """A snapshot run of many tables starts every table's chunks in one transaction: a table whose plan was
    replaced since (the last one, after the others were written) refuses the start of all of them."""
    first, second = new_plan(store), new_plan(store, "shop.b", n=2)
    stale = new_plan(store, "shop.c", n=1)
    new_plan(store, "shop.c", n=1)  # shop.c re-planned: generation 1 is stale
    with pytest.raises(StaleGeneration, match="shop.c"):
        store.start_tables([(TABLE, first, [0, 2]), ("shop.b", second, [1]), ("shop.c", stale, [0])], "run")
    assert {s.status for t in (TABLE, "shop.b") for s in store.chunks(t)} == {"planned"}
    assert store.history(TABLE, 0) == [] and store.history("shop.b", 1) == []
    started = store.start_tables([(TABLE, first, [0, 2]), ("shop.b", second, [1])], "run")
    assert [[(s.table, s.chunk_id, s.status, s.attempts) for s in states] for states in started] == [
        [(TABLE, 0, "running", 1), (TABLE, 2, "running", 1)], [("shop.b", 1, "running", 1)]]
    assert store.chunk(TABLE, first, 1).status == "planned"
    assert [e.event for e in store.history("shop.b", 1, second)] == ["started"]


def test_stale_generation_and_stale_attempt_are_refused(store):
    old = new_plan(store)
    store.start_chunk(TABLE, old, 0, "old")
    new = new_plan(store)
    with pytest.raises(StaleGeneration, match="current plan is generation 2"):
        commit(store, old, 0, 1, 2, "v")
    with pytest.raises(StaleGeneration):
        store.start_chunk(TABLE, old, 1, "old")
    assert store.chunk(TABLE, old, 0).hw is None
    with pytest.raises(UnknownChunk):
        store.start_chunk(TABLE, new, 99, "x")
    with pytest.raises(UnknownChunk):
        store.start_chunk("shop.nothing", 1, 0, "x")
    with pytest.raises(UnknownChunk):
        store.chunk(TABLE, new, 99)

    store.start_chunk(TABLE, new, 0, "zombie")  # attempt 1
    store.start_chunk(TABLE, new, 0, "retry")  # attempt 2
    with pytest.raises(StaleAttempt):
        commit(store, new, 0, 1, 2, "v-zombie", attempt=1)
    store.fail_chunk(TABLE, new, 0, "zombie died", "zombie", attempt=1)  # history only
    state = store.chunk(TABLE, new, 0)
    assert (state.status, state.error, state.hw, state.run_id) == ("running", None, None, "retry")
    assert commit(store, new, 0, 1, 2, "v-retry", attempt=2).output_version == "v-retry"
    assert [e.event for e in store.history(TABLE, 0, new)] == ["started", "started", "failed", "committed"]
    assert isinstance(StaleAttempt("x"), ChunkStoreError) and isinstance(StaleAttempt("x"), CdcError)

    with pytest.raises(ValueError):
        commit(store, new, 1, 50, 40, "v")  # HW before LW
    with pytest.raises(TypeError):
        store.commit_chunk(TABLE, new, 1, rows=1, lw="a:1", hw=pos(3), output_version="v")


def test_stream_and_mirror_views_across_generations(store):
    g1 = new_plan(store)
    old_file, new_file = "mysql-bin.999999", "mysql-bin.1000000"  # numeric order, not string order
    for chunk_id, hw in enumerate([pos(500, old_file), pos(300, new_file), pos(900, old_file)]):
        store.commit_chunk(TABLE, g1, chunk_id, rows=1, lw=pos(4, old_file), hw=hw,
                           output_version=f"g1-{chunk_id}")
    view = store.stream_view([TABLE])[TABLE]
    assert (view.latest_generation, view.committed_generation, view.complete) == (1, 1, True)
    assert [g.generation for g in view.generations] == [1]
    assert (view.min_hw, view.max_hw) == (pos(500, old_file), pos(300, new_file))

    g2 = new_plan(store, n=2)
    store.commit_chunk(TABLE, g2, 0, rows=1, lw=pos(400, new_file), hw=pos(410, new_file),
                       output_version="g2-0")
    view = store.stream_view([TABLE, "shop.unplanned"])[TABLE]
    assert (view.latest_generation, view.committed_generation, view.complete) == (2, 1, False)
    assert [(g.generation, g.fully_committed) for g in view.generations] == [(2, False), (1, True)]
    assert [c.hw for c in view.generations[0].chunks] == [pos(410, new_file), None]
    assert (view.min_hw, view.max_hw) == (pos(500, old_file), pos(410, new_file))
    mirror = store.mirror_view(TABLE)
    assert mirror.generation == 1
    assert [(c.chunk_id, c.output_version) for c in mirror.chunks] == [(0, "g1-0"), (1, "g1-1"), (2, "g1-2")]
    assert mirror.chunks[1].hw == pos(300, new_file) and mirror.chunks[0].lw == pos(4, old_file)

    unplanned = store.stream_view(["shop.unplanned"])["shop.unplanned"]
    assert (unplanned.latest_generation, unplanned.generations, unplanned.min_hw) == (None, (), None)
    assert store.mirror_view("shop.unplanned") is None

    store.commit_chunk(TABLE, g2, 1, rows=1, lw=pos(420, new_file), hw=pos(430, new_file),
                       output_version="g2-1")
    view = store.stream_view()[TABLE]  # None = every table in the store
    assert [g.generation for g in view.generations] == [2] and view.complete
    assert (view.min_hw, view.max_hw) == (pos(410, new_file), pos(430, new_file))
    assert [c.output_version for c in store.mirror_view(TABLE).chunks] == ["g2-0", "g2-1"]

    # a rerun in progress: the mirror keeps the committed version, the stream sees HW = -inf for that chunk
    store.start_chunk(TABLE, g2, 1, "rerun")
    view = store.stream_view([TABLE])[TABLE]
    assert not view.complete and [c.hw for c in view.generations[0].chunks] == [pos(410, new_file), None]
    assert view.max_hw == pos(430, new_file)
    assert [c.output_version for c in store.mirror_view(TABLE).chunks] == ["g2-0", "g2-1"]

    # DDL inside a chunk's [LW, HW]: invalidated, the stream emits it until it is reread
    invalid = store.invalidate_chunk(TABLE, g2, 0, "ALTER TABLE inside [LW, HW]")
    assert invalid.rerun_pending and invalid.status == "committed" and invalid.effective_hw is None
    assert store.history(TABLE, 0, g2)[-1].detail == "ALTER TABLE inside [LW, HW]"


# --- pipeline membership: removing tables and adding them back ----------------------------------------------


def test_remove_table_keeps_its_rows_and_is_idempotent(store):
    other = "shop.items"
    g = new_plan(store)
    new_plan(store, other, n=2)
    for chunk_id in range(3):
        commit(store, g, chunk_id, 10 * chunk_id, 10 * chunk_id + 5, f"v{chunk_id}")
    assert store.active_tables() == [other, TABLE] and store.removed_tables() == []
    assert store.table_entry(TABLE).active and store.table_entry("shop.never") is None

    assert store.remove_table(TABLE, "remove_run", reason="table dropped upstream") is True
    assert store.active_tables() == [other] and store.removed_tables() == [TABLE]
    assert store.tables() == [other, TABLE], "tables() still lists every planned table"
    entry = store.table_entry(TABLE)
    assert (entry.active, entry.removed_run_id, entry.removed_reason, entry.latest_generation) == (
        False, "remove_run", "table dropped upstream", g)
    # removing again changes nothing (not even who removed it, or when)
    assert store.remove_table(TABLE, "another_run", reason="again") is False
    assert store.table_entry(TABLE) == entry
    assert [e.table for e in store.table_entries()] == [other, TABLE]
    # its plan, chunks and committed snapshot stay readable as they were
    assert store.plan(TABLE).generation == g
    assert [c.output_version for c in store.chunks(TABLE)] == ["v0", "v1", "v2"]
    assert store.mirror_view(TABLE).generation == g
    with pytest.raises(UnknownChunk, match="shop.never"):
        store.remove_table("shop.never")
    with pytest.raises(ConfigurationError, match="database.table"):
        store.remove_table("no_dot")


def test_planning_a_removed_table_again_puts_it_back_with_a_new_generation(store):
    g1 = new_plan(store)
    for chunk_id in range(3):
        commit(store, g1, chunk_id, 10 * chunk_id, 10 * chunk_id + 5, f"g1-{chunk_id}")
    store.remove_table(TABLE, "remove_run")
    g2 = new_plan(store, n=2, run_id="readd_run")
    assert g2 == g1 + 1
    entry = store.table_entry(TABLE)
    assert entry.active and entry.added_generation == g2 and entry.removed_run_id is None
    assert store.active_tables() == [TABLE] and store.removed_tables() == []
    # the snapshot from before the removal no longer counts: the changes while it was removed were not
    # captured. Until the new generation commits there is no mirror, and the stream emits every change.
    assert store.mirror_view(TABLE) is None
    view = store.stream_view([TABLE])[TABLE]
    assert view.committed_generation is None and [g.generation for g in view.generations] == [g2]
    assert [c.hw for c in view.generations[0].chunks] == [None, None] and view.min_hw is None
    commit(store, g2, 0, 100, 110, "g2-0")
    assert store.mirror_view(TABLE) is None
    commit(store, g2, 1, 100, 120, "g2-1")
    assert store.mirror_view(TABLE).generation == g2
    assert store.stream_view([TABLE])[TABLE].committed_generation == g2
    # a re-plan of a table that was never removed keeps using its committed generation until the new one
    # commits (as before)
    g3 = new_plan(store, n=2)
    assert store.mirror_view(TABLE).generation == g2 and store.table_entry(TABLE).added_generation == g2
    assert [g.generation for g in store.stream_view([TABLE])[TABLE].generations] == [g3, g2]


def _downgrade(url: str, version: int) -> None:
    """Turn a store into what release ``version`` wrote: schema_version 4 has no verifications table; 3 no
    group-run tables either; 2 no HW servers and no stream claims either; 1 no membership columns either."""
    engine = sa.create_engine(cs.normalize_url(url))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE mysqlcdc_verifications")
            if version == 4:
                conn.execute(sa.update(cs.meta_table).where(cs.meta_table.c.name == "schema_version")
                             .values(value="4"))
                return
            conn.exec_driver_sql("DROP TABLE mysqlcdc_group_requests")
            conn.exec_driver_sql("DROP TABLE mysqlcdc_group_runners")
            conn.exec_driver_sql("DROP TABLE mysqlcdc_snapshot_announcements")
            if version == 3:
                conn.execute(sa.update(cs.meta_table).where(cs.meta_table.c.name == "schema_version")
                             .values(value="3"))
                return
            for column in ("hw_server", "hw_gtid_position"):
                conn.exec_driver_sql(f"ALTER TABLE mysqlcdc_chunks DROP COLUMN {column}")
            conn.exec_driver_sql("DROP TABLE mysqlcdc_stream_claims")
            if version == 1:
                for column in ("removed_at", "removed_run_id", "removed_reason", "added_generation"):
                    conn.exec_driver_sql(f"ALTER TABLE mysqlcdc_tables DROP COLUMN {column}")
            conn.execute(sa.update(cs.meta_table).where(cs.meta_table.c.name == "schema_version")
                         .values(value=str(version)))
        assert "hw_server" not in {c["name"] for c in sa.inspect(engine).get_columns("mysqlcdc_chunks")}
        assert ("removed_at" in {c["name"] for c in sa.inspect(engine).get_columns("mysqlcdc_tables")}) == (
            version > 1)
    finally:
        engine.dispose()


def _downgrade_to_version_1(url: str) -> None:
    _downgrade(url, 1)


def test_a_version_1_store_is_migrated_when_opened(fresh_store_url):
    with ChunkStore(fresh_store_url) as first:
        g = new_plan(first)
        commit(first, g, 0, 10, 20, "v0")
        before = first.chunks(TABLE)
    _downgrade_to_version_1(fresh_store_url)
    workers = 3  # several tasks open the old store at once: one migrates, none fails
    barrier = threading.Barrier(workers, timeout=60)
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            barrier.wait()
            ChunkStore(fresh_store_url).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with ChunkStore(fresh_store_url) as store:
        assert store.schema_version() == cs.SCHEMA_VERSION == 5
        assert store.chunks(TABLE) == before and store.plan(TABLE).generation == g
        entry = store.table_entry(TABLE)
        assert entry.active and entry.added_generation is None and entry.removed_at is None
        assert store.active_tables() == [TABLE]
        assert store.stream_view([TABLE])[TABLE].latest_generation == g
        assert store.remove_table(TABLE, "r") is True and store.active_tables() == []
        assert new_plan(store) == g + 1 and store.active_tables() == [TABLE]


def test_a_version_2_store_is_migrated_when_opened(fresh_store_url):
    """The previous release's store: its HWs record no server (None: the stream takes them to be its own
    server's); new commits record theirs; stream claims work at once."""
    with ChunkStore(fresh_store_url) as first:
        g = new_plan(first)
        commit(first, g, 0, 10, 20, "v0", hw_server="mariadb:1", hw_gtid_position="0-1-5")
    _downgrade(fresh_store_url, 2)
    with ChunkStore(fresh_store_url) as store:
        assert store.schema_version() == cs.SCHEMA_VERSION == 5
        [old] = [c for c in store.chunks(TABLE) if c.hw is not None]
        assert (old.hw, old.hw_server, old.hw_gtid_position) == (pos(20), None, None)
        again = commit(store, g, 0, 30, 40, "v1", hw_server="mariadb:1", hw_gtid_position="0-1-9")
        assert (again.hw_server, again.hw_gtid_position) == ("mariadb:1", "0-1-9")
        store.record_stream_claim(cs.StreamClaim("/c", "mariadb:1", 7, 1, 9, "h", None))
        assert [c.checkpoint for c in store.stream_claim_holders("mariadb:1", 7)] == ["/c"]


# --- durability and versioning ------------------------------------------------------------------------------


def test_reopen_reads_the_same_state_and_open_is_idempotent(fresh_store_url):
    with ChunkStore(fresh_store_url) as first:
        gen = new_plan(first)
        commit(first, gen, 1, 10, 20, "v1")
        first.start_chunk(TABLE, gen, 1, "rerun")
        before = first.chunks(TABLE)
    with ChunkStore(fresh_store_url) as second:  # a new instance (another process would do the same)
        assert second.chunks(TABLE) == before
        assert second.schema_version() == cs.SCHEMA_VERSION
        assert second.plan(TABLE).chunk_count == 3
    with ChunkStore(fresh_store_url) as third, third.transaction() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cs.meta_table)).scalar() == 2


def test_newer_schema_version_is_refused(fresh_store_url):
    newer = cs.SCHEMA_VERSION + 1
    with ChunkStore(fresh_store_url) as store:
        assert store.schema_version() == cs.SCHEMA_VERSION
        with store.transaction() as conn:
            conn.execute(sa.update(cs.meta_table).where(cs.meta_table.c.name == "schema_version")
                         .values(value=str(newer)))
    with pytest.raises(ChunkStoreVersionError,
                       match=f"schema version {newer}.*reads versions up to {cs.SCHEMA_VERSION}.*Upgrade"):
        ChunkStore(fresh_store_url)


def test_tables_without_meta_are_refused(tmp_path):
    path = tmp_path / "foreign.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE mysqlcdc_chunks (x INTEGER)")
    engine.dispose()
    with pytest.raises(ChunkStoreVersionError, match="not written by airflow-provider-mysqlcdc"):
        ChunkStore(path)


def test_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cs.normalize_url("rel/chunks.db").database == str(tmp_path / "rel" / "chunks.db")
    assert cs.normalize_url("mysql://u:secret@h/db").drivername == "mysql+pymysql"
    assert cs.normalize_url("postgresql://u@h/db").drivername == "postgresql"
    with pytest.raises(ConfigurationError, match="sqlite:///"):
        cs.normalize_url("oracle://u:secret@h/db")
    with ChunkStore(f"sqlite:///{tmp_path}/a/b.db") as store:
        assert store.backend == "sqlite" and (tmp_path / "a" / "b.db").exists()
    with ChunkStore("sqlite://") as memory:  # in-memory: one shared connection
        assert new_plan(memory) == 1 and len(memory.chunks(TABLE)) == 3
    # refused: an outage, waited out for outage_s (0: not at all)
    with pytest.raises(ChunkStoreError) as info:
        ChunkStore("mysql+pymysql://u:secret@127.0.0.1:1/db", outage_s=0)
    assert "secret" not in str(info.value) and "***" in str(info.value)


# --- concurrency --------------------------------------------------------------------------------------------


def test_concurrent_commits_from_threads(store):
    workers, rounds = 4, 4
    gen = new_plan(store, n=workers + 1)
    errors: list[BaseException] = []
    barrier = threading.Barrier(workers)

    def work(own: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                state = store.start_chunk(TABLE, gen, own, f"t{own}")
                lw = 100 * own + i
                commit(store, gen, own, lw, lw + 10, f"t{own}-{i}", attempt=state.attempts)
                store.start_chunk(TABLE, gen, 0, f"t{own}")  # everyone bumps chunk 0 too
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(own,)) for own in range(1, workers + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    chunks = {c.chunk_id: c for c in store.chunks(TABLE)}
    assert chunks[0].attempts == workers * rounds
    for own in range(1, workers + 1):
        c = chunks[own]
        assert (c.attempts, c.status, c.output_version, c.hw) == (
            rounds, "committed", f"t{own}-{rounds - 1}", pos(100 * own + rounds + 9))
        assert [e.event for e in store.history(TABLE, own)] == ["started", "committed"] * rounds
    assert len(store.history(TABLE, 0)) == workers * rounds


def test_racing_opens_of_a_fresh_store_and_racing_plans(fresh_store_url):
    """Several tasks open a store nobody has created yet, then all plan the same table at once."""
    workers = 4
    barrier = threading.Barrier(workers, timeout=60)
    generations: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            with ChunkStore(fresh_store_url) as store:
                barrier.wait()
                generations.append(new_plan(store, n=2))
        except threading.BrokenBarrierError:
            pass  # another worker failed: its error is the one to report
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()  # the others must not wait for this one

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(generations) == list(range(1, workers + 1))
    with ChunkStore(fresh_store_url) as store:
        assert store.latest_generation(TABLE) == workers and store.schema_version() == cs.SCHEMA_VERSION
        assert all(len(store.chunks(TABLE, g)) == 2 for g in generations)
        with store.transaction() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(cs.meta_table)).scalar() == 2


def _process_worker(url: str, gen: int, own: int, rounds: int) -> None:
    store = ChunkStore(url)  # its own engine and connections, as a Spark task in another process has
    for i in range(rounds):
        state = store.start_chunk(TABLE, gen, own, f"p{own}")
        store.commit_chunk(TABLE, gen, own, rows=i, lw=pos(4 + i), hw=pos(10 + i),
                           output_version=f"p{own}-{i}", run_id=f"p{own}", attempt=state.attempts)
        store.start_chunk(TABLE, gen, 0, f"p{own}")
    store.close()


def test_concurrent_commits_from_processes(store_url):
    processes, rounds = 3, 5
    with ChunkStore(store_url) as store:
        gen = new_plan(store, n=processes + 1)
    context = multiprocessing.get_context("fork")  # no interpreter start-up: keeps the test fast
    procs = [context.Process(target=_process_worker, args=(store_url, gen, own, rounds))
             for own in range(1, processes + 1)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    with ChunkStore(store_url) as store:
        chunks = {c.chunk_id: c for c in store.chunks(TABLE)}
    assert chunks[0].attempts == processes * rounds
    for own in range(1, processes + 1):
        assert (chunks[own].attempts, chunks[own].output_version, chunks[own].hw) == (
            rounds, f"p{own}-{rounds - 1}", pos(10 + rounds - 1))


def _forked_commit(store: ChunkStore, gen: int) -> None:
    commit(store, gen, 2, 1, 2, "from-child")


def test_forked_child_reuses_an_inherited_store(tmp_path):
    with ChunkStore(tmp_path / "chunks.db") as store:
        gen = new_plan(store)
        commit(store, gen, 1, 1, 2, "parent")  # the parent's pool now holds a connection
        child = multiprocessing.get_context("fork").Process(target=_forked_commit, args=(store, gen))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert [c.output_version for c in store.chunks(TABLE)] == [None, "parent", "from-child"]


def test_a_version_4_store_gains_the_verifications_table_when_opened(fresh_store_url):
    with ChunkStore(fresh_store_url) as first:
        g = new_plan(first)
        before = first.chunks(TABLE)
    _downgrade(fresh_store_url, 4)
    with ChunkStore(fresh_store_url) as store:
        assert store.schema_version() == cs.SCHEMA_VERSION == 5
        assert store.chunks(TABLE) == before and store.verifications(TABLE) == []
        store.record_verification(cs.Verification("v1", TABLE, g, 0, "match", "mysql-bin.000001:4", 3, 3))
        assert [(v.chunk_id, v.result) for v in store.latest_verifications(TABLE)] == [(0, "match")]


# --- group runs: chunk groups handed to a running application -----------------------------------------------


def test_a_version_3_store_gains_the_group_run_tables_when_opened(fresh_store_url):
    with ChunkStore(fresh_store_url) as first:
        g = new_plan(first)
        before = first.chunks(TABLE)
    _downgrade(fresh_store_url, 3)
    with ChunkStore(fresh_store_url) as store:
        assert store.schema_version() == cs.SCHEMA_VERSION == 5
        assert store.chunks(TABLE) == before and store.plan(TABLE).generation == g
        store.register_runner("d/r", "u1", source="mysql://cdc@h:1", host="h", pid=None)
        assert store.runner("d/r").state == "starting"
        assert store.claim_announcement(TABLE, g, "run", "snap[0]")


def test_one_task_announces_a_tables_snapshot(store):
    """Two groups of a table ending at once: the first claim wins, a repeat by the winner is still its own."""
    barrier = threading.Barrier(4, timeout=30)
    won: list[str] = []

    def claim(by: str) -> None:
        barrier.wait()
        if store.claim_announcement(TABLE, 1, "run-1", by):
            won.append(by)

    threads = [threading.Thread(target=claim, args=(f"snap[{i}]",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1, won
    assert store.claim_announcement(TABLE, 1, "run-1", won[0])  # its retry
    assert not store.claim_announcement(TABLE, 1, "run-1", "snap[9]")
    assert store.claim_announcement(TABLE, 1, "run-2", "snap[9]")  # another run announces again
    assert store.claim_announcement(TABLE, 2, "run-1", "snap[9]")  # and another generation


def test_groups_are_taken_oldest_first_by_the_scopes_runner_and_finished_once(store):
    from airflow_provider_mysqlcdc.engine.chunk_store import group_runs as gr

    assert store.runner("d/r1") is None
    store.register_runner("d/r1", "u1", source="mysql://cdc@h:1", host="h", pid=None)
    for i in range(3):
        store.request_group("d/r1", f"q{i}", task=f"snap[{i}]", name=f"g{i}", args=["--x", str(i)])
    store.request_group("d/other", "q9", task="snap[0]", name="other scope", args=[])
    assert store.take_groups("d/r1", "someone-else", 5) == []  # not the scope's runner
    taken = store.take_groups("d/r1", "u1", 2)
    assert [(t.request_id, t.state, t.runner_id, t.args) for t in taken] == [
        ("q0", gr.TAKEN, "u1", ("--x", "0")), ("q1", gr.TAKEN, "u1", ("--x", "1"))]
    assert store.runner_heartbeat("d/r1", "u1") == gr.SERVING
    store.finish_group("q0", "u1", result={"ok": True, "rows": 3})
    store.finish_group("q0", "u1", error="late duplicate")  # finished once: ignored
    store.finish_group("q1", "u1", error="ValueError: bad group")
    done, failed = store.group_request("q0"), store.group_request("q1")
    assert (done.state, done.result, done.error) == (gr.DONE, {"ok": True, "rows": 3}, None)
    assert (failed.state, failed.error, failed.runner_gone) == (
        gr.REQUEST_FAILED, "ValueError: bad group", False)
    runner = store.runner("d/r1")
    assert gr.request_outcome(done, runner) == (gr.DONE, "")
    assert gr.request_outcome(failed, runner) == (gr.REQUEST_FAILED, "ValueError: bad group")
    assert gr.request_outcome(store.group_request("q2"), runner) is None  # queued, the runner serves: wait

    # a later try of the same task withdraws its earlier request that nobody took
    store.request_group("d/r1", "q2-try2", task="snap[2]", name="g2", args=[])
    assert store.group_request("q2").state == gr.WITHDRAWN
    assert store.request_group("d/r1", "q2-try2", task="snap[2]", name="g2", args=["ignored"]).args == ()

    # asked to stop: takes nothing more; what was queued will not run, and its waiter learns it now
    assert store.stop_runner("d/r1").state == gr.STOPPING
    assert store.take_groups("d/r1", "u1", 5) == []
    assert store.runner_heartbeat("d/r1", "u1") == gr.STOPPING
    assert gr.request_outcome(store.group_request("q2-try2"), store.runner("d/r1"))[0] == gr.GONE
    store.runner_ended("d/r1", "u1", failed=False, detail="asked to stop")
    left = store.group_request("q2-try2")
    assert (left.state, left.runner_gone) == (gr.REQUEST_FAILED, True) and "stopped" in left.error
    assert gr.request_outcome(left, store.runner("d/r1"))[0] == gr.GONE
    assert store.group_request("q9").state == gr.QUEUED  # another scope's request is untouched


def test_a_silent_runner_is_gone_and_a_replaced_one_stops(store):
    from datetime import timedelta

    from airflow_provider_mysqlcdc.engine.chunk_store import group_runs as gr

    store.register_runner("d/r2", "u1", source="mysql://cdc@h:1", host="h", pid=None)
    store.note_runner_pid("d/r2", "u1", 4242)
    store.request_group("d/r2", "q0", task="snap[0]", name="g0", args=[])
    [taken] = store.take_groups("d/r2", "u1", 1)
    runner = store.runner("d/r2")
    assert runner.pid == 4242 and runner.alive()
    starting_late = runner.heartbeat_at + timedelta(seconds=gr.STALE_S + 1)
    assert runner.state == gr.STARTING and runner.alive(starting_late)  # a start may take long
    store.runner_heartbeat("d/r2", "u1")
    runner = store.runner("d/r2")
    silent = runner.heartbeat_at + timedelta(seconds=gr.STALE_S + 1)
    assert runner.state == gr.SERVING and not runner.alive(silent)
    outcome = gr.request_outcome(taken, runner, silent)
    assert outcome[0] == gr.GONE and "not been heard from" in outcome[1], outcome
    # a new runner of the scope (the setup task cleared and run again): the old one's work fails, it stops
    store.register_runner("d/r2", "u2", source="mysql://cdc@h:1", host="h", pid=None)
    assert store.runner_heartbeat("d/r2", "u1") is None
    replaced = store.group_request("q0")
    assert replaced.runner_gone and "replaced by u2" in replaced.error
    store.runner_ended("d/r2", "u1", failed=True, detail="late")  # the old one's end changes nothing
    assert store.runner("d/r2").runner_id == "u2" and store.runner("d/r2").state == gr.STARTING
