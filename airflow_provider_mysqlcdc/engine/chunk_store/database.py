"""The chunk store's database: the engine per URL, transactions retried as a whole through lock conflicts and
outages, SQLite's settings."""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError

from airflow_provider_mysqlcdc.engine.chunk_store.errors import ChunkStoreError, ChunkStoreUnavailable
from airflow_provider_mysqlcdc.engine.chunk_store.read_timeouts import bound_sessions, read_timeout_budget
from airflow_provider_mysqlcdc.engine.chunk_store.schema import VERSION_QUERY, ensure_schema
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_OUTAGE_ENV as OUTAGE_ENV
from airflow_provider_mysqlcdc.engine.common.environment import seconds_from_env
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.retry import Backoff

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 60.0
_WRITE_RETRIES = 5  # lock conflicts (deadlock, lock wait timeout, racing insert): whole-transaction retries

DEFAULT_OUTAGE_S = 300.0
_FIRST_DELAY_S = 0.1  # backoff between retries in an outage: doubles up to _MAX_DELAY_S, with jitter
_MAX_DELAY_S = 5.0
_CONNECT_TIMEOUT_S = 10  # PostgreSQL's libpq waits forever by default (pymysql: 10 s)
# MySQL client/server codes of a server that is down, restarting or unreachable. Disconnects (2006, 2013,
# 2055, ...) are also known to the dialect (``is_disconnect``); these are the ones it leaves out.
_MYSQL_UNREACHABLE = {1040, 1053, 2002, 2003}  # too many connections, shutdown in progress, can't connect
# PostgreSQL: connection exceptions (class 08), admin/crash shutdown, starting up, too many connections.
_PG_UNREACHABLE_STATES = {"57P01", "57P02", "57P03", "53300"}
# libpq reports failures *while connecting* as text only (psycopg gives no SQLSTATE there): a known list of
# network-level failures and server states; anything else (authentication, unknown database, a host name that
# does not resolve) is a configuration error and fails at once.
_PG_UNREACHABLE_TEXT = (
    "connection refused", "timeout expired", "timed out", "server closed the connection unexpectedly",
    "could not receive data", "could not send data", "connection reset", "no route to host",
    "network is unreachable", "ssl syscall error", "eof detected", "broken pipe", "consuming input failed",
    "the database system is starting up", "the database system is shutting down",
    "the database system is in recovery mode", "the database system is not yet accepting connections",
    "too many clients", "terminating connection",
)

T = TypeVar("T")

def utc_now() -> datetime:
    """Naive UTC, microseconds: what every backend stores the same way."""
    return datetime.now(UTC).replace(tzinfo=None)


_stamp_lock = threading.Lock()
_last_stamp = datetime.min


def write_stamp() -> datetime:
    """:func:`utc_now`, but strictly increasing within the process: the identity of one write (its history
    row's ``happened_at``), which a retry looks for to tell whether an earlier try of the write committed."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(utc_now(), _last_stamp + timedelta(microseconds=1))
        return _last_stamp

def normalize_url(url: str | os.PathLike[str] | URL) -> URL:
    """A store URL: a plain path means a SQLite file; ``mysql://``/``mariadb://`` get the pymysql driver."""
    if isinstance(url, URL):
        parsed = url
    else:
        text = os.fspath(url)
        if "://" not in text:
            path = Path(text).expanduser().resolve()
            return URL.create("sqlite", database=str(path))
        try:
            parsed = make_url(text)
        except ArgumentError as exc:
            raise ConfigurationError(f"invalid chunk store URL: {exc}") from None
    if parsed.drivername in ("mysql", "mariadb"):
        parsed = parsed.set(drivername=f"{parsed.drivername}+pymysql")
    if parsed.get_backend_name() not in ("sqlite", "mysql", "mariadb", "postgresql"):
        raise ConfigurationError(
            f"chunk store URL {parsed.render_as_string(hide_password=True)!r}: use sqlite:///path/chunks.db, "
            "mysql+pymysql://user@host/db or postgresql://user@host/db"
        )
    return parsed


def _conflict(exc: DBAPIError) -> bool:
    """Deadlocks, lock timeouts and serialization failures: the whole transaction may simply run again."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in ("40001", "40P01"):
        return True
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in (1205, 1213)  # lock wait timeout, deadlock


def _outage_budget(value: float | None) -> float:
    """``outage_s`` as given, else ``$MYSQLCDC_CHUNK_STORE_OUTAGE_S``, else 300 s (0: no retries)."""
    value = seconds_from_env(OUTAGE_ENV, value, DEFAULT_OUTAGE_S, "the outage budget")
    if not value >= 0:  # also NaN
        raise ConfigurationError(f"chunk store outage budget must be >= 0 seconds, not {value!r}")
    return float(value)


_STORES: weakref.WeakSet[StoreDatabase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked child (a Spark Python worker, multiprocessing) must not reuse the parent's pooled connections.
    for store in list(_STORES):
        store._engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)




class StoreDatabase:
    """Plans and chunk results in a SQL database. Thread-safe; one instance per process is enough.

    ``url``: ``sqlite:///path/chunks.db`` (or just a path), ``mysql+pymysql://user:pw@host/db``,
    ``postgresql://user@host/db`` (driver ``psycopg``). ``outage_s``: how long a call keeps retrying while the
    store is unreachable (default ``$MYSQLCDC_CHUNK_STORE_OUTAGE_S``, else 300 s; 0 fails at once).
    ``read_timeout_s``: how long a session waits for one reply of a MySQL/PostgreSQL store before it is
    dropped as dead and the transaction retried (default ``$MYSQLCDC_CHUNK_STORE_READ_TIMEOUT_S``, else 60 s;
    ``read_timeouts.py``).
    """

    def __init__(self, url: str | os.PathLike[str] | URL, *, engine_options: Mapping[str, Any] | None = None,
                 outage_s: float | None = None, read_timeout_s: float | None = None):
        self.url = normalize_url(url)
        self.backend = self.url.get_backend_name()
        self.outage_s = _outage_budget(outage_s)
        self.read_timeout_s = read_timeout_budget(read_timeout_s)
        self._unreachable_since: float | None = None  # when this process saw the store go away (for the logs)
        self._outage_lock = threading.Lock()
        options: dict[str, Any] = {"pool_pre_ping": self.backend != "sqlite", **(engine_options or {})}
        if self.backend == "sqlite":
            database = self.url.database
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            else:
                options.setdefault("poolclass", sa.pool.StaticPool)
            options.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})
        elif self.backend == "postgresql" and "connect_timeout" not in self.url.query:
            # without it a black-holed server hangs a connect forever, and the outage budget cannot bound it
            options["connect_args"] = {"connect_timeout": _CONNECT_TIMEOUT_S,
                                       **options.get("connect_args", {})}
        try:
            self._engine: Engine = sa.create_engine(self.url, **options)
        except (NoSuchModuleError, ImportError, ModuleNotFoundError) as exc:
            raise ConfigurationError(
                f"chunk store {self.display_url}: database driver not installed ({exc}); for PostgreSQL "
                "install psycopg[binary], for MySQL pymysql"
            ) from None
        if self.backend == "sqlite":
            _configure_sqlite(self._engine)
        else:
            bound_sessions(self._engine, self.read_timeout_s)
        try:
            self._open()
        except BaseException:
            self._engine.dispose()
            raise
        _STORES.add(self)

    @property
    def display_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChunkStore({self.display_url!r})"

    # --- transactions ---------------------------------------------------------------------------------------
    #
    # Every public call runs its transaction through _retrying: the whole transaction runs again after a lock
    # conflict (a few times) or while the store is unreachable (until the outage budget is spent). Reads are
    # plain to repeat. A write whose connection broke may have committed anyway (the COMMIT reached the
    # server, its answer did not), so each write carries an identity -- the ``happened_at`` stamp of the
    # history row it inserts (create_plan: the plan's ``created_at``), fixed before the first try -- and every
    # retry first locks the chunk row (which waits for an earlier try the server is still finishing) and looks
    # for that stamp: if it is there, the earlier try committed and the retry returns its result instead of
    # applying it again. (Attempt numbers alone cannot tell: start_chunk increments them.)

    def _begin(self, *, write: bool) -> tuple[Connection, sa.RootTransaction]:
        """A pooled connection with its transaction begun (SQLite writes: ``BEGIN IMMEDIATE``, which may wait
        for the busy timeout)."""
        conn = self._engine.connect()
        try:
            if write:
                conn.execution_options(mysqlcdc_write=True)
            elif self.backend != "sqlite":
                conn.execution_options(isolation_level="REPEATABLE READ")  # one snapshot for the whole read
            return conn, conn.begin()
        except BaseException:
            conn.close()
            raise

    def _run(self, work: Callable[[Connection, bool], T], *, write: bool,
             may_retry: Callable[[], bool] = lambda: True, conflicts: bool = True) -> T:
        """``work(conn, retry)`` in one transaction, committed on return, retried as a whole (see above)."""
        def once(retry: bool) -> T:
            conn, trans = self._begin(write=write)
            with conn, trans:
                return work(conn, retry)

        return self._retrying(once, may_retry=may_retry, conflicts=conflicts)

    def _read_tx(self, work: Callable[[Connection], T]) -> T:
        return self._run(lambda conn, _retry: work(conn), write=False)

    def _write(self, work: Callable[[Connection, bool], T], *, may_retry: Callable[[], bool] = lambda: True,
               conflicts: bool = True) -> T:
        return self._run(work, write=True, may_retry=may_retry, conflicts=conflicts)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction on the store's database (SQLite: ``BEGIN IMMEDIATE``); commits on exit.

        Getting the connection waits out an outage; errors in the block are the caller's (it cannot be rerun).
        """
        conn, trans = self._retrying(lambda _retry: self._begin(write=True), conflicts=False)
        with conn, trans:
            yield conn

    def _retrying(self, once: Callable[[bool], T], *, may_retry: Callable[[], bool] = lambda: True,
                  conflicts: bool = True) -> T:
        """``once(retry)`` until it returns; ``retry`` is True from the second try on (so a write can look for
        its own earlier commit). Lock conflicts get ``_WRITE_RETRIES`` tries, an outage the outage budget."""
        outage: Backoff | None = None  # from the first failure to reach the store on
        conflicts_left = Backoff(float("inf"), first_delay_s=0.02, max_delay_s=0.2, jitter=(1.0, 2.5),
                                 max_tries=_WRITE_RETRIES - 1)
        retry = False
        while True:
            try:
                result = once(retry)
            except DBAPIError as exc:
                if not may_retry():
                    raise
                if self._unreachable(exc):
                    if outage is None:
                        outage = Backoff(self.outage_s, first_delay_s=_FIRST_DELAY_S,
                                         max_delay_s=_MAX_DELAY_S)
                    if outage.exhausted():
                        raise self._gave_up(exc, outage.waited_s) from exc
                    self._outage_begins(exc)
                    outage.wait()
                elif conflicts and not conflicts_left.exhausted() and (
                        _conflict(exc) or isinstance(exc, IntegrityError)):
                    log.info("chunk store: retrying a transaction after %s", exc.orig)
                    conflicts_left.wait()
                else:
                    raise
                retry = True
            else:
                if outage is not None:
                    self._outage_ends()
                return result

    def _unreachable(self, exc: DBAPIError) -> bool:
        """A transient failure to reach the store: a lost connection (SQLAlchemy flags it
        ``connection_invalidated``), a server that is down, restarting or refusing connections, a network
        cut, or a SQLite file locked beyond the busy timeout."""
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        if self.backend == "sqlite":
            return "database is locked" in str(orig)
        if self.backend in ("mysql", "mariadb"):
            args = getattr(orig, "args", ())
            if args and isinstance(args[0], int) and args[0] in _MYSQL_UNREACHABLE:
                return True
            return orig is not None and self._engine.dialect.is_disconnect(orig, None, None)  # type: ignore
        state = getattr(orig, "sqlstate", None)
        if state:
            return state.startswith("08") or state in _PG_UNREACHABLE_STATES
        text = str(orig).lower()
        return any(marker in text for marker in _PG_UNREACHABLE_TEXT)

    def _error_text(self, exc: DBAPIError) -> str:
        text = " ".join(str(exc.orig if exc.orig is not None else exc).split())[:500]
        password = self.url.password
        return text.replace(str(password), "***") if password else text

    def _outage_begins(self, exc: DBAPIError) -> None:
        with self._outage_lock:
            if self._unreachable_since is not None:
                return  # another call of this process already said so
            self._unreachable_since = time.monotonic()
        log.warning("chunk store %s unreachable: retrying for up to %g s (error: %s)",
                    self.display_url, self.outage_s, self._error_text(exc))

    def _outage_ends(self) -> None:
        with self._outage_lock:
            since, self._unreachable_since = self._unreachable_since, None
        if since is not None:
            log.warning("chunk store %s reachable again after %.1f s", self.display_url,
                        time.monotonic() - since)

    def _gave_up(self, exc: DBAPIError, waited: float) -> ChunkStoreUnavailable:
        with self._outage_lock:
            self._unreachable_since = None  # the next call warns again
        return ChunkStoreUnavailable(
            f"chunk store {self.display_url} unreachable: gave up after {waited:.1f} s (outage budget "
            f"{self.outage_s:g} s, set by ${OUTAGE_ENV}); last error: {self._error_text(exc)}. Check that "
            "the database is up and reachable from this host (a SQLite file: which process holds it locked), "
            "then rerun the task: a chunk can always be rerun, and no write is applied twice"
        )

    def _lock(self, stmt: sa.Select, *, read: bool = False) -> sa.Select:
        return stmt if self.backend == "sqlite" else stmt.with_for_update(read=read)

    # --- schema ---------------------------------------------------------------------------------------------

    def _open(self) -> None:
        def connect(_retry: bool) -> None:
            with self._engine.connect():
                pass

        try:
            self._retrying(connect, conflicts=False)  # waits out an outage, like every other call
        except DBAPIError as exc:
            raise ChunkStoreError(
                f"cannot connect to chunk store {self.display_url}: {self._error_text(exc)}") from None
        # two processes creating the same fresh store: the loser's DDL fails, and it tries again
        racing = Backoff(float("inf"), first_delay_s=0.05, max_delay_s=0.4, jitter=(1.0, 1.0),
                         max_tries=_WRITE_RETRIES - 1)
        while True:
            try:
                self._write(lambda conn, _retry: ensure_schema(conn, self.display_url), conflicts=False)
                return
            except ChunkStoreError:
                raise
            except DBAPIError as exc:
                if racing.exhausted():
                    raise ChunkStoreError(
                        f"chunk store {self.display_url}: could not create its tables: {exc}") from exc
                racing.wait()

    def schema_version(self) -> int:
        return self._read_tx(lambda conn: int(conn.execute(VERSION_QUERY).scalar_one()))


def _switch_to_wal(cursor: Any) -> None:
    """Turn a (fresh) database file to WAL. SQLite answers "database is locked" at once, without its busy
    handler, while another connection switches the journal mode: several tasks opening a new store at the
    same moment must wait for each other here, not fail."""
    import sqlite3

    backoff = Backoff(SQLITE_BUSY_TIMEOUT_S, first_delay_s=0.01, max_delay_s=0.5, jitter=(0.5, 1.5))
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or backoff.exhausted():
                raise
            backoff.wait()


def _configure_sqlite(engine: Engine) -> None:
    """WAL (readers never block the writer), full fsync, a busy timeout, and ``BEGIN IMMEDIATE`` for writes so
    concurrent writers queue on the lock instead of failing on a read-to-write upgrade."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver must not BEGIN on its own; we do below
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            _switch_to_wal(cursor)
            cursor.execute("PRAGMA synchronous = FULL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("mysqlcdc_write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
