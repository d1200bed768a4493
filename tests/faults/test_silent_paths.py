"""Silent network paths: a session whose packets vanish (a NAT or firewall forgot it, a proxy whose upstream
died: nothing arrives, nothing closes) fails or recovers within its read timeout, with an error that names the
server and the setting to raise; nothing is committed half or twice.

Every kind of session goes through a TCP proxy that black-holes the live connections in the middle of an
operation (new connections still work), with a small budget set by the test. Each operation runs in a thread
joined with a timeout, so a session that hangs fails the test instead of stalling the suite.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_provider_mysqlcdc.engine import chunk_store as cs
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, ChunkStoreUnavailable
from airflow_provider_mysqlcdc.engine.chunks import planner
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.common.environment import (
    CHUNK_READER_ENV,
    CHUNK_STORE_OUTAGE_ENV,
    CHUNK_STORE_READ_TIMEOUT_ENV,
)
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ServerUnavailable
from airflow_provider_mysqlcdc.engine.common.keepalive import (
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    KEEPALIVE_PROBES,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot import read_view
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables, snapshot_chunk
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status import report
from tests.faults.test_chunk_store_outage import (
    TABLE,
    empty_store,
    history_kinds,
    mysql_store_url,  # noqa: F401 - fixture
    new_plan,
    pg_url,  # noqa: F401 - fixture
    pos,
    proxied,
)
from tests.support.tcp_proxy import CuttableProxy

BUDGET_S = 1.0  # the read timeout every test sets (what each test waits out: the smallest that still tells a
# silent path from a slow reply on a loaded machine)
MARGIN_S = 6.0  # a loaded machine; still far below "forever"


@pytest.fixture
def proxy(mysql_server):
    p = CuttableProxy(("127.0.0.1", mysql_server.port))
    yield p
    p.close()


@pytest.fixture
def direct(mysql_server) -> MySQLSettings:
    return MySQLSettings.from_url(mysql_server.cdc_url)


def through(settings: MySQLSettings, proxy: CuttableProxy) -> MySQLSettings:
    """The same settings through the proxy, with the test's read timeout (``?read_timeout=2`` in the URL)."""
    url = settings.url_without_password().replace(f"@{settings.host}:{settings.port}/",
                                                  f"@127.0.0.1:{proxy.port}/")
    sep = "&" if "?" in url else "?"
    return MySQLSettings.from_url(f"{url}{sep}read_timeout={BUDGET_S:g}", password=settings.password)


def black_holing(proxy: CuttableProxy, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, then black-hole every live connection: the session's next read gets nothing, ever."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        assert proxy.blackhole_live() >= 1
        return result

    return wrapped


def assert_names_server_and_setting(message: str, proxy: CuttableProxy, setting: str) -> None:
    assert f"127.0.0.1:{proxy.port}" in message, message
    assert setting in message and f"{BUDGET_S:g} s" in message, message


def timed(call: Callable[[], Any], limit: float,
          proxy: CuttableProxy) -> tuple[Any, BaseException | None, float]:
    """``call``'s value, error and duration; the test fails if it still runs after ``limit`` seconds (a hang).
    A hung session is then ended by closing the proxy, so that the test's cleanup does not wait for it too."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        proxy.close()
        thread.join(10)
        pytest.fail(f"still waiting after {limit:g} s: the session hangs on the silent network path")
    return outcome.get("value"), outcome.get("error"), outcome["seconds"]


# --- the source server ------------------------------------------------------------------------------------


@pytest.mark.mariadb_only
def test_a_chunk_read_on_a_silent_path_fails_within_its_read_timeout_and_commits_nothing(
        mysql_server, mysql_db, direct, proxy, tmp_path, monkeypatch):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"row {i}") for i in range(50)])
    table = TableId(mysql_db, "t")
    store = ChunkStore(str(tmp_path / "chunks.db"))
    [plan] = plan_tables(direct, store, [str(table)], chunk_size=1000)
    assert len(plan.chunks) == 1
    with connect(direct) as conn:
        schema = load_schema(conn, table)
    written: list[int] = []

    def write(batches: Any) -> str:
        written.append(sum(b.num_rows for b in batches))
        return "v1"

    # the read view is open, then the path goes silent: the read's next statement never hears back. The
    # pure-Python reader's per-read timeout is what catches a proxy that forwards nothing; the native reader
    # has none (docs/operations.md: behind such a proxy, MYSQLCDC_CHUNK_READER=python)
    monkeypatch.setenv(CHUNK_READER_ENV, "python")
    opened = read_view.open_consistent_snapshot
    monkeypatch.setattr(read_view, "open_consistent_snapshot", black_holing(proxy, opened))
    settings = through(direct, proxy)
    _, error, seconds = timed(lambda: snapshot_chunk(settings, store, plan, 0, write, schema=schema),
                              BUDGET_S + MARGIN_S, proxy)
    assert isinstance(error, ServerUnavailable), error
    assert_names_server_and_setting(str(error), proxy, "read_timeout")
    assert "secret" not in str(error) and BUDGET_S * 0.9 <= seconds, seconds
    assert written == []
    [chunk] = store.chunks(str(table))
    assert chunk.status == "failed" and chunk.hw is None and "read_timeout" in (chunk.error or ""), chunk

    # the rerun (a fresh session; the path works again) commits the chunk once, read by the same reader
    monkeypatch.setattr(read_view, "open_consistent_snapshot", opened)
    result = snapshot_chunk(settings, store, plan, 0, write, schema=schema)
    assert result.rows == 50 and written == [50]
    assert [c.status for c in store.chunks(str(table))] == ["committed"]
    store.close()


def test_a_sort_key_session_on_a_silent_path_is_replaced_within_its_read_timeout(
        mysql_server, mysql_db, direct, proxy, caplog):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (name VARCHAR(40) COLLATE utf8mb4_general_ci PRIMARY KEY)")
    table = TableId(mysql_db, "t")
    with connect(direct) as conn:
        schema = load_schema(conn, table)
    settings = through(direct, proxy)
    with KeyOrder(lambda: connect(settings), schema, ["name"]) as order:
        assert order.compare(("a",), ("B",)) < 0  # the session is open, its collation checked
        assert proxy.blackhole_live() == 1
        with caplog.at_level(logging.WARNING):
            value, error, seconds = timed(lambda: order.compare(("Äb ",), ("aB",)),
                                          BUDGET_S + MARGIN_S, proxy)
    assert error is None and value == 0, error  # the server's answer, from a new session
    assert BUDGET_S * 0.9 <= seconds, seconds
    lost = [r.getMessage() for r in caplog.records if "sort-key session was lost" in r.getMessage()]
    assert len(lost) == 1, caplog.text
    assert_names_server_and_setting(lost[0], proxy, "read_timeout")


def test_a_planner_session_on_a_silent_path_fails_within_its_read_timeout(
        mysql_server, mysql_db, direct, proxy, monkeypatch):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(20)])
    monkeypatch.setattr(planner, "load_schemas", black_holing(proxy, planner.load_schemas))
    settings = through(direct, proxy)
    table = TableId(mysql_db, "t")
    _, error, seconds = timed(lambda: planner.plan_table(lambda: connect(settings), table, 1),
                              BUDGET_S + MARGIN_S, proxy)
    assert isinstance(error, CdcError), error
    assert_names_server_and_setting(str(error), proxy, "read_timeout")
    assert BUDGET_S * 0.9 <= seconds, seconds


def test_a_status_session_on_a_silent_path_gives_up_within_its_read_timeout(direct, proxy, tmp_path,
                                                                            monkeypatch):
    store = ChunkStore(str(tmp_path / "chunks.db"))
    new_plan(store)
    monkeypatch.setattr(report, "server_binlog", black_holing(proxy, report.server_binlog))
    settings = through(direct, proxy)
    factory = lambda: connect(settings)
    status, error, seconds = timed(lambda: report.collect_status(store, None, None, factory),
                                   BUDGET_S + MARGIN_S, proxy)
    assert error is None, error
    assert BUDGET_S * 0.9 <= seconds, seconds
    [note] = [n for n in status.notes if "server position unknown" in n]  # the rest of the report is there
    assert_names_server_and_setting(note, proxy, "read_timeout")
    assert [s.table for s in status.tables] == [TABLE]
    store.close()


# --- the chunk store (MySQL, PostgreSQL) ------------------------------------------------------------------


@pytest.fixture(params=["postgresql", "mysql"])
def store_url(request) -> Any:
    url = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_store_url")
    engine = sa.create_engine(url)
    empty_store(engine)
    yield url
    engine.dispose()


@pytest.fixture
def store_proxy(store_url):
    p = CuttableProxy((store_url.host or "127.0.0.1", store_url.port))
    yield p
    p.close()


class WriteBlackHole:
    """Black-holes the store's live connections just before the first write statement after ``arm()``: the
    transaction holds its chunk row lock (``SELECT ... FOR UPDATE``) and its next statement goes nowhere."""

    def __init__(self, store: ChunkStore, proxy: CuttableProxy) -> None:
        self.proxy, self.armed, self.fired = proxy, False, 0
        sa.event.listen(store.engine, "before_cursor_execute", self._before)

    def arm(self) -> None:
        self.armed = True

    def _before(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if self.armed and re.match(r"\s*(UPDATE|INSERT)\b", statement, re.IGNORECASE):
            self.armed = False
            self.fired += self.proxy.blackhole_live()


def commit(store: ChunkStore, generation: int, attempt: int) -> Any:
    return store.commit_chunk(TABLE, generation, 0, rows=10, lw=pos(100), hw=pos(200), output_version="v1",
                              run_id="r1", attempt=attempt)


def test_a_chunk_store_transaction_on_a_silent_path_is_retried_once_within_its_read_timeout(
        store_url, store_proxy, caplog):
    proxy = store_proxy
    caplog.set_level(logging.INFO, logger=cs.__name__)
    store = ChunkStore(proxied(store_url, proxy), outage_s=30, read_timeout_s=BUDGET_S)
    generation = new_plan(store)
    attempt = store.start_chunk(TABLE, generation, 0, run_id="r1").attempts
    hole = WriteBlackHole(store, proxy)
    hole.arm()
    # the abandoned transaction (the server never hears of its client's end) holds the chunk row's lock until
    # the server ends it (idle for twice the budget); then the retry gets through, and applies the write once
    state, error, seconds = timed(lambda: commit(store, generation, attempt), 2 * BUDGET_S + MARGIN_S, proxy)
    assert error is None, error
    assert hole.fired == 1 and BUDGET_S * 0.9 <= seconds, (hole.fired, seconds)
    assert state.hw == pos(200) and state.attempts == 1
    engine = sa.create_engine(store_url)
    assert history_kinds(engine, 0) == [("started", 1), ("committed", 1)]
    engine.dispose()
    retried = [r.getMessage() for r in caplog.records if "unreachable: retrying" in r.getMessage()]
    assert len(retried) == 1, caplog.text
    assert_names_server_and_setting(retried[0], proxy, CHUNK_STORE_READ_TIMEOUT_ENV)
    assert "s3cret" not in caplog.text
    store.close()


def test_a_chunk_store_read_timeout_without_outage_budget_fails_naming_store_and_settings(
        store_url, store_proxy, monkeypatch):
    proxy = store_proxy
    monkeypatch.setenv(CHUNK_STORE_READ_TIMEOUT_ENV, f"{BUDGET_S:g}")  # the budget from the environment
    store = ChunkStore(proxied(store_url, proxy), outage_s=0)
    assert store.read_timeout_s == BUDGET_S
    generation = new_plan(store)
    attempt = store.start_chunk(TABLE, generation, 0, run_id="r1").attempts
    WriteBlackHole(store, proxy).arm()
    _, error, seconds = timed(lambda: commit(store, generation, attempt), BUDGET_S + MARGIN_S, proxy)
    assert isinstance(error, ChunkStoreUnavailable), error
    message = str(error)
    assert_names_server_and_setting(message, proxy, CHUNK_STORE_READ_TIMEOUT_ENV)
    assert CHUNK_STORE_OUTAGE_ENV in message and "s3cret" not in message, message
    assert BUDGET_S * 0.9 <= seconds, seconds
    store.close()
    # nothing of the abandoned transaction was committed
    engine = sa.create_engine(store_url)
    assert history_kinds(engine, 0) == [("started", 1)]
    engine.dispose()


def _keepalive(sock: socket.socket) -> tuple[int, ...]:
    options = (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
    return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
            *(sock.getsockopt(socket.IPPROTO_TCP, o) for o in options))


def test_every_session_probes_its_network_path_with_tcp_keepalive(direct, store_url):
    """A dead path (no answer at all, not even TCP's) ends a waiting read after about two minutes, however
    long the read may legitimately wait; the kernel's default would be two hours."""
    want = (True, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES)
    with connect(direct) as conn:
        assert _keepalive(conn._sock) == want
    store = ChunkStore(store_url.render_as_string(hide_password=False))
    with store.engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        fd = dbapi.pgconn.socket if store_url.get_backend_name() == "postgresql" else dbapi._sock.fileno()
        with socket.socket(fileno=os.dup(fd)) as sock:
            assert _keepalive(sock) == want
    store.close()


def test_read_timeout_settings_are_checked():
    with pytest.raises(CdcError, match="read_timeout"):
        MySQLSettings.from_url("mysql://cdc@h/?read_timeout=0")
    with pytest.raises(CdcError, match="read_timeout"):
        MySQLSettings.from_url("mysql://cdc@h/?read_timeout=soon")
    s = MySQLSettings.from_url("mysql://cdc@h/?read_timeout=30")
    assert s.read_timeout == 30 and MySQLSettings.from_url(s.url_without_password()).read_timeout == 30
    assert s.pymysql_kwargs()["read_timeout"] == s.pymysql_kwargs()["write_timeout"] == 30
    assert dataclasses.replace(s, read_timeout=5.0).replication_kwargs()["read_timeout"] == 5.0
