"""The chunk store unavailable for a while: calls wait the outage out, nothing is lost or applied twice.

A PostgreSQL store (the local server, ``MYSQLCDC_TEST_STORE_POSTGRES_URL``; skipped if absent) and a MySQL
one (on the shared test server) are reached through a TCP proxy the test cuts: every live connection is
closed and new ones are refused until the proxy is restored. A cut right after a COMMIT went through gives the
hard case, a write that committed although its client saw the connection break. A SQLite store is locked by
another process beyond its busy timeout.
"""
from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_provider_mysqlcdc.engine import chunk_store as cs
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, ChunkStoreError, ChunkStoreUnavailable
from airflow_provider_mysqlcdc.engine.chunk_store import database as store_database
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_OUTAGE_ENV
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.engine.test_chunk_store import PG_ADMIN_URL, _server_database
from tests.support.engine_harness import Pipeline
from tests.support.tcp_proxy import CuttableProxy
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

TABLE = "shop.orders"
CUT_S = 1.0  # how long each outage lasts: several retries of the backoff (0.1 s, doubling), no longer
COMMIT = re.compile(rb"(?<![A-Za-z_])COMMIT(?![A-Za-z_])")  # the statement, not SET AUTOCOMMIT
PASSWORD = "s3cret-outage-pw"  # trust auth ignores it; it must never show up in messages or logs


def pos(n: int) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", n)


class Background:
    """Runs a call in a thread; ``result()`` re-raises its error."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self.error = exc
        self.seconds = time.monotonic() - self.started

    def result(self, timeout: float = 30.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.value


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_url() -> Any:
    """A throwaway PostgreSQL database (direct URL, not proxied); skipped without a server or driver."""
    yield from _server_database(PG_ADMIN_URL, "postgresql", name=f"mysqlcdc_outage_test_{os.getpid()}")


@pytest.fixture(scope="module")
def mysql_store_url(mysql_server) -> Any:
    """A chunk-store database on the shared test MySQL/MariaDB server (direct URL)."""
    name = f"mysqlcdc_outage_store_{os.getpid()}"
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    yield cs.normalize_url(mysql_server.admin_url).set(database=name)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture(params=["postgresql", "mysql"])
def server_url(request) -> Any:
    return request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_store_url")


def empty_store(engine: Any) -> None:
    """Delete the rows of the store's tables (a module's earlier test may have used them); keep its
    version."""
    existing = set(sa.inspect(engine).get_table_names())
    with engine.begin() as conn:
        for table in reversed(cs.metadata.sorted_tables):
            if table.name in existing and table is not cs.meta_table:
                conn.execute(sa.delete(table))


def _direct(url: Any) -> Any:
    """An engine on the store's database that bypasses the proxy; empties the store's tables first."""
    engine = sa.create_engine(url)
    empty_store(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def direct(pg_url) -> Any:
    yield from _direct(pg_url)


@pytest.fixture
def server_direct(server_url) -> Any:
    yield from _direct(server_url)


def _proxy(url: Any) -> Any:
    p = CuttableProxy((url.host or "127.0.0.1", url.port))
    yield p
    p.close()


@pytest.fixture
def proxy(pg_url) -> Any:
    yield from _proxy(pg_url)


@pytest.fixture
def server_proxy(server_url) -> Any:
    yield from _proxy(server_url)


def proxied(url: Any, proxy: CuttableProxy) -> str:
    """The store URL through the proxy; PostgreSQL (trust auth) gets a password that must never show."""
    url = url.set(host="127.0.0.1", port=proxy.port)
    if url.get_backend_name() == "postgresql":
        url = url.set(password=PASSWORD)
    else:  # the proxy finds the COMMIT in the client's packets: TLS (pymysql takes it where offered) hides it
        url = url.update_query_dict({"ssl_disabled": "1"})
    return url.render_as_string(hide_password=False)


def new_plan(store: ChunkStore, table: str = TABLE) -> int:
    return store.create_plan(table, {"key_columns": ["id"]}, [(0, None, "[100]"), (1, "[100]", None)],
                             run_id="plan")


def history_kinds(engine: sa.Engine, chunk_id: int) -> list[tuple[str, int]]:
    h = cs.history_table.c
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            sa.select(h.kind, h.attempt).where(h.table_name == TABLE, h.chunk_id == chunk_id).order_by(h.id))]


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# --- PostgreSQL through a proxy that is cut ---------------------------------------------------------------


def test_lost_commit_replies_and_a_cut_are_waited_out_without_double_writes(server_url, server_direct,
                                                                           server_proxy, caplog):
    direct, proxy = server_direct, server_proxy
    caplog.set_level(logging.INFO, logger=cs.__name__)
    store = ChunkStore(proxied(server_url, proxy), outage_s=30)
    generation = new_plan(store)

    # start_chunk's COMMIT reaches the server, its answer does not: the retry must not start attempt 2
    proxy.cut_after(COMMIT)
    started = Background(lambda: store.start_chunk(TABLE, generation, 0, run_id="r1"))
    assert proxy.cut_done.wait(10)
    wait_for(lambda: history_kinds(direct, 0) == [("started", 1)], "the lost COMMIT to land")
    time.sleep(CUT_S)
    proxy.restore()
    assert started.result().attempts == 1
    assert history_kinds(direct, 0) == [("started", 1)]

    # the same for a commit without an attempt number (nothing but its history stamp identifies it)
    proxy.cut_after(COMMIT, hold=CUT_S)
    committed = store.commit_chunk(TABLE, generation, 0, rows=10, lw=pos(100), hw=pos(200),
                                   output_version="v1", run_id="r1")
    assert committed.hw == pos(200) and committed.attempts == 1
    assert history_kinds(direct, 0) == [("started", 1), ("committed", 1)]

    # a plain cut: a plan read and a chunk commit issued while it lasts wait, then succeed once
    attempt = store.start_chunk(TABLE, generation, 1, run_id="r2").attempts
    timer = proxy.cut_for(CUT_S)
    read = Background(lambda: store.plan(TABLE))
    commit = Background(lambda: store.commit_chunk(TABLE, generation, 1, rows=5, lw=pos(150), hw=pos(300),
                                                   output_version="v2", run_id="r2", attempt=attempt))
    assert read.result().generation == generation and commit.result().hw == pos(300)
    timer.join()
    assert read.seconds > CUT_S * 0.8 and commit.seconds > CUT_S * 0.8, (read.seconds, commit.seconds)
    assert history_kinds(direct, 1) == [("started", 1), ("committed", 1)]
    assert [c.attempts for c in store.chunks(TABLE)] == [1, 1]
    assert proxy.cuts == 3

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    unreachable = [m for m in warnings if "unreachable: retrying for up to 30 s" in m]
    assert len(unreachable) == 3, warnings  # once per outage, although two calls waited out the third
    assert len([m for m in warnings if "reachable again after" in m]) == 3, warnings
    assert f"127.0.0.1:{proxy.port}" in unreachable[0] and PASSWORD not in caplog.text
    assert sum("committed by an earlier try" in r.getMessage() for r in caplog.records) == 2
    store.close()


def test_a_removal_whose_commit_reply_is_lost_is_recognized(server_url, server_direct, server_proxy):
    """remove_table's COMMIT reaches the server, its answer does not: the retry finds its own removal (this
    call removed the table) instead of reporting that someone else had."""
    direct, proxy = server_direct, server_proxy
    store = ChunkStore(proxied(server_url, proxy), outage_s=30)
    new_plan(store)
    proxy.cut_after(COMMIT, hold=CUT_S)
    assert store.remove_table(TABLE, "r1", reason="lost reply") is True
    assert proxy.cuts == 1
    t = cs.tables_table.c
    with direct.connect() as conn:
        row = conn.execute(sa.select(t.removed_run_id, t.removed_reason).where(t.table_name == TABLE)).one()
    assert tuple(row) == ("r1", "lost reply")
    assert store.remove_table(TABLE, "r2") is False and store.active_tables() == []
    store.close()


def test_a_batch_of_plans_and_starts_whose_commit_reply_is_lost_is_applied_once(server_url, server_direct,
                                                                                server_proxy, caplog):
    """Planning many tables stores a batch of plans in one transaction, and a snapshot run starts every
    table's chunks in one: when the COMMIT reaches the server and its answer does not, the retry finds the
    whole batch committed and applies nothing twice (no second generation, no second attempt)."""
    direct, proxy = server_direct, server_proxy
    caplog.set_level(logging.INFO, logger=cs.__name__)
    store = ChunkStore(proxied(server_url, proxy), outage_s=30)
    new_plan(store)  # TABLE at generation 1; "shop.other" is new
    plan = {"key_columns": ["id"], "chunks": [{"chunk_id": 0, "start": None, "end": [["i", "100"]]},
                                              {"chunk_id": 1, "start": [["i", "100"]], "end": None}]}
    proxy.cut_after(COMMIT, hold=CUT_S)
    assert store.create_plans([(TABLE, plan), ("shop.other", plan)], run_id="batch") == [2, 1]
    assert proxy.cuts == 1
    p = cs.plans_table.c
    with direct.connect() as conn:
        assert sorted(tuple(r) for r in conn.execute(sa.select(p.table_name, p.generation))) == [
            (TABLE, 1), (TABLE, 2), ("shop.other", 1)]
    assert store.next_generations([TABLE, "shop.other"]) == {TABLE: 3, "shop.other": 2}

    proxy.cut_after(COMMIT, hold=CUT_S)
    started = store.start_tables([(TABLE, 2, [0, 1]), ("shop.other", 1, [1])], run_id="run")
    assert [[s.attempts for s in states] for states in started] == [[1, 1], [1]]
    assert proxy.cuts == 2
    assert history_kinds(direct, 0) == [("started", 1)]  # TABLE's chunk 0 of generation 2 only
    assert [c.attempts for c in store.chunks("shop.other")] == [0, 1]
    assert sum("committed by an earlier try" in r.getMessage() for r in caplog.records) >= 2
    store.close()


@pytest.mark.both_flavors
def test_engine_snapshot_and_stream_across_cuts_keep_the_mirror_exact(mysql_server, mysql_db, pg_url, direct,
                                                                      proxy):
    seed = 4242
    rng = random.Random(seed)
    specs = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=300, seed=seed, specs=specs)
    store = ChunkStore(proxied(pg_url, proxy), outage_s=60)
    pipe = Pipeline(MySQLSettings.from_url(mysql_server.cdc_url), store, mysql_db, chunk_size=100)
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=seed, writers=2, specs=specs).start()
    try:
        plans = pipe.plan([f"{mysql_db}.t_int", f"{mysql_db}.t_ci"])
        # the first chunk read starts with a lost COMMIT reply and an outage; the rest follow it
        proxy.cut_after(COMMIT, hold=CUT_S)
        for plan in plans:
            for chunk in plan.chunks:
                pipe.snapshot(plan, chunk.chunk_id)
        assert proxy.cuts == 1
        pipe.open_stream([p.table for p in plans])
        pipe.pump(rng, batches=2)
        # a rerun and the stream's view refresh during a second cut
        timer = proxy.cut_for(CUT_S)
        pipe.snapshot(plans[0], plans[0].chunks[0].chunk_id)
        pipe.stream.refresh()
        pipe.pump(rng, batches=2)
        timer.join()
    finally:
        stats = workload.stop()
    pipe.catch_up()
    assert stats.transactions > 20, stats
    for plan in plans:
        pipe.assert_mirror_is_source(plan.table)
        for chunk in store.chunks(str(plan.table)):
            events = [e.event for e in store.history(str(plan.table), chunk.chunk_id)]
            assert events.count("started") == chunk.attempts == events.count("committed"), (chunk, events)
    assert store.chunks(str(plans[0].table))[0].attempts == 2  # the rerun
    store.close()


def test_outage_budget_spent_gives_a_clear_error_without_the_password(pg_url, direct, proxy, caplog,
                                                                      monkeypatch):
    url = proxied(pg_url, proxy)
    store = ChunkStore(url, outage_s=1)  # the budgets are what the test waits out: small ones
    new_plan(store)
    proxy.cut()
    started = time.monotonic()
    with pytest.raises(ChunkStoreUnavailable) as info:
        store.chunks(TABLE)
    waited = time.monotonic() - started
    assert 1 <= waited < 5, waited
    message = str(info.value)
    assert f"127.0.0.1:{proxy.port}" in message and "***" in message and PASSWORD not in message
    gave_up = re.search(r"gave up after (\d+\.\d) s \(outage budget 1 s", message)
    assert gave_up and 1 <= float(gave_up[1]) <= waited + 0.05, message
    assert CHUNK_STORE_OUTAGE_ENV in message and "rerun" in message, message
    # the budget from the environment, for a store opened during the outage (a Spark batch, a task)
    monkeypatch.setenv(CHUNK_STORE_OUTAGE_ENV, "0.5")
    started = time.monotonic()
    with pytest.raises(ChunkStoreUnavailable,
                       match=r"gave up after \d+\.\d s \(outage budget 0\.5 s") as info:
        ChunkStore(url)
    waited = time.monotonic() - started
    assert 0.5 <= float(re.search(r"gave up after (\d+\.\d) s", str(info.value))[1]) <= waited + 0.05
    assert waited < 5
    assert PASSWORD not in caplog.text
    store.close()


# --- SQLite locked by another process ---------------------------------------------------------------------

_HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def test_sqlite_store_locked_beyond_the_busy_timeout_recovers(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger=cs.__name__)
    monkeypatch.setattr(store_database, "SQLITE_BUSY_TIMEOUT_S", 0.2)  # read when the store connects
    path = tmp_path / "chunks.db"
    store = ChunkStore(str(path), outage_s=30)
    generation = new_plan(store)
    attempt = store.start_chunk(TABLE, generation, 0).attempts
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path), str(CUT_S)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        state = store.commit_chunk(TABLE, generation, 0, rows=3, lw=pos(1), hw=pos(2), output_version="v1",
                                   attempt=attempt)
        waited = time.monotonic() - started
    finally:
        assert holder.wait(30) == 0
    assert state.hw == pos(2) and waited > CUT_S * 0.6, waited
    assert [e.event for e in store.history(TABLE, 0)] == ["started", "committed"]
    assert any("unreachable: retrying" in r.getMessage() and "database is locked" in r.getMessage()
               for r in caplog.records)
    store.close()


# --- errors that no waiting can fix -----------------------------------------------------------------------


def test_configuration_errors_fail_at_once(pg_url, mysql_server, tmp_path):
    def fails_fast(call: Callable[[], Any], match: str) -> None:
        started = time.monotonic()
        with pytest.raises((ChunkStoreError, sa.exc.DBAPIError), match=match):
            call()
        assert time.monotonic() - started < 5

    missing = pg_url.set(database="mysqlcdc_no_such_database").render_as_string(hide_password=False)
    fails_fast(lambda: ChunkStore(missing, outage_s=60), "does not exist")
    wrong = sa.engine.make_url(mysql_server.cdc_url).set(password="wrong-password", database="mysql",
                                                          query={})
    fails_fast(lambda: ChunkStore(wrong.render_as_string(hide_password=False), outage_s=60), "Access denied")

    store = ChunkStore(str(tmp_path / "chunks.db"), outage_s=60)
    new_plan(store)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE mysqlcdc_chunks")
    fails_fast(lambda: store.chunks(TABLE), "no such table")
    store.close()
