"""The chunk store: the durable, transactional record of chunk plans and of every chunk's committed snapshot.

One row per plan ``(table, generation)`` and one row per chunk ``(table, generation, chunk id)``, in a
SQLite file (the default), MySQL/MariaDB or PostgreSQL, chosen by URL (SQLAlchemy Core; no ORM).

Pipeline membership: a table joins the pipeline when it is first planned. :meth:`ChunkStore.remove_table`
takes it out (``removed_at`` on its ``mysqlcdc_tables`` row; its plans, chunks and output stay as they are);
planning it again puts it back with a new generation, and only generations from that one on count
(``added_generation``): a snapshot from before the removal is never combined with the changes after it, which
nobody captured. :meth:`ChunkStore.active_tables` lists the tables in the pipeline (planned, not removed).

What each chunk row carries, and who reads it:

* the *committed result* -- ``rows``, LW, HW, ``output_version`` (the versioned output directory holding the
  snapshot), ``committed_at``, ``committed_run_id``. Only :meth:`ChunkStore.commit_chunk` replaces it, in one
  transaction. The **mirror** reads it (:meth:`ChunkStore.mirror_view`): a rerun leaves it in force until the
  rerun commits.
* ``rerun_pending`` -- set when a chunk that already has a committed result is started again (or
  invalidated), cleared by the next commit. The **stream filter** (:meth:`ChunkStore.stream_view`) treats such
  a chunk, like a never-committed one, as HW = -inf: it emits every event of the chunk until a committed
  snapshot covers it.
* the *latest attempt* -- ``status`` ('planned' | 'running' | 'committed' | 'failed'), ``attempts``,
  ``started_at``, ``finished_at``, ``run_id``, ``error``: what on-call engineers look at.

Chunk bounds (``start_key``/``end_key``) and the plan (``plan_json``) are opaque JSON text produced by the
planner and its key codec, which version their own formats; the store never interprets them. The store's own
JSON columns (``timings_json``, ``extra_json``) carry ``"v": 1``. The schema carries a version in
``mysqlcdc_meta``: a store written by a newer release is refused with a clear error, and an older store is
migrated in place when it is opened (version 1 -> 2: the membership columns of ``mysqlcdc_tables``, NULL for
existing rows, which means "in the pipeline, every generation counts").

Concurrency: every write is one short transaction (SQLite: WAL, ``BEGIN IMMEDIATE`` and a busy timeout;
MySQL/PostgreSQL: row locks), so Spark and Airflow tasks in several processes may commit different chunks at
once.
A SQLite store must live on a local file system (WAL needs shared memory), not on NFS or an object store.

Outages: a store that is unreachable for a while (a server restarting, a network cut, a SQLite file locked
longer than the busy timeout) does not fail the caller at once: every read and write transaction is retried as
a whole, with exponential backoff, for up to the *outage budget* (``outage_s``, default
``$MYSQLCDC_CHUNK_STORE_OUTAGE_S`` or 300 s), then :class:`ChunkStoreUnavailable` is raised. A retried write
is never applied twice (see the comment on the store's transactions). Other errors (credentials, a
missing database or table) fail at once.
"""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import mysql as mysql_types
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError

from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 1: the first release; 2: table membership (removed_*, added_generation)
JSON_VERSION = 1  # "v" of the store's own JSON columns (timings_json, extra_json)

PLANNED, RUNNING, COMMITTED, FAILED = "planned", "running", "committed", "failed"
STATUSES = (PLANNED, RUNNING, COMMITTED, FAILED)
MAX_ERROR_CHARS = 2000
SQLITE_BUSY_TIMEOUT_S = 60.0
_WRITE_RETRIES = 5  # lock conflicts (deadlock, lock wait timeout, racing insert): whole-transaction retries

OUTAGE_ENV = "MYSQLCDC_CHUNK_STORE_OUTAGE_S"
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


# --- errors -------------------------------------------------------------------------------------------------


class ChunkStoreError(CdcError):
    """The chunk store refused an operation (unknown table/chunk, stale generation or attempt)."""


class ChunkStoreVersionError(ChunkStoreError):
    """The store was written by a newer release (or is not a chunk store at all)."""


class UnknownChunk(ChunkStoreError):
    """No plan, or no chunk with that id, for the table."""


class StaleGeneration(ChunkStoreError):
    """The chunk belongs to a plan generation that is no longer the table's current plan."""


class StaleAttempt(ChunkStoreError):
    """A newer attempt of the chunk has started since this one (a zombie task must not commit)."""


class ChunkStoreUnavailable(ChunkStoreError):
    """The store stayed unreachable for the whole outage budget."""


# --- schema -------------------------------------------------------------------------------------------------

_NAME = sa.String(255).with_variant(
    mysql_types.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)  # "db.table": case-sensitive everywhere, as MySQL table names are on Linux
_SHORT = sa.String(255)
_RUN_ID = sa.String(250)  # Airflow's run_id limit
_KEY_TEXT = sa.Text().with_variant(mysql_types.MEDIUMTEXT(), "mysql", "mariadb")
_LONG_TEXT = sa.Text().with_variant(mysql_types.LONGTEXT(), "mysql", "mariadb")
_TS = sa.DateTime().with_variant(mysql_types.DATETIME(fsp=6), "mysql", "mariadb")  # naive UTC
_MYSQL_OPTS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

metadata = sa.MetaData()

meta_table = sa.Table(
    "mysqlcdc_meta", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", _SHORT, nullable=False),
    **_MYSQL_OPTS,
)

tables_table = sa.Table(
    "mysqlcdc_tables", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("latest_generation", sa.Integer, nullable=False),
    sa.Column("created_at", _TS, nullable=False),
    sa.Column("updated_at", _TS, nullable=False),
    # schema version 2: pipeline membership (all NULL: in the pipeline since its first generation)
    sa.Column("removed_at", _TS, nullable=True),  # set: removed from the pipeline (remove_table)
    sa.Column("removed_run_id", _RUN_ID, nullable=True),
    sa.Column("removed_reason", sa.Text, nullable=True),
    sa.Column("added_generation", sa.Integer, nullable=True),  # first generation of the current membership
    **_MYSQL_OPTS,
)
# Columns later schema versions added to existing tables: (version, table, column), applied in order.
_ADDED_COLUMNS = (
    (2, tables_table, tables_table.c.removed_at),
    (2, tables_table, tables_table.c.removed_run_id),
    (2, tables_table, tables_table.c.removed_reason),
    (2, tables_table, tables_table.c.added_generation),
)

plans_table = sa.Table(
    "mysqlcdc_plans", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("key_columns", sa.Text, nullable=False),  # JSON list of column names
    sa.Column("split_kind", sa.String(32), nullable=True),
    sa.Column("chunk_size", sa.BigInteger, nullable=True),
    sa.Column("chunk_count", sa.Integer, nullable=False),
    sa.Column("created_at", _TS, nullable=False),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("plan_json", _LONG_TEXT, nullable=False),  # opaque: the planner's ChunkPlan.to_dict()
    **_MYSQL_OPTS,
)

chunks_table = sa.Table(
    "mysqlcdc_chunks", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("chunk_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("start_key", _KEY_TEXT, nullable=True),  # opaque key-codec JSON; NULL = -inf
    sa.Column("end_key", _KEY_TEXT, nullable=True),  # opaque key-codec JSON; NULL = +inf
    # latest attempt
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("started_at", _TS, nullable=True),
    sa.Column("finished_at", _TS, nullable=True),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("rerun_pending", sa.Boolean, nullable=False),
    # committed result (replaced only by commit_chunk)
    sa.Column("row_count", sa.BigInteger, nullable=True),
    sa.Column("lw_file", _SHORT, nullable=True),
    sa.Column("lw_pos", sa.BigInteger, nullable=True),
    sa.Column("hw_file", _SHORT, nullable=True),
    sa.Column("hw_pos", sa.BigInteger, nullable=True),
    sa.Column("output_version", _SHORT, nullable=True),
    sa.Column("committed_at", _TS, nullable=True),
    sa.Column("committed_run_id", _RUN_ID, nullable=True),
    sa.Column("timings_json", sa.Text, nullable=True),  # {"v": 1, "read_s": ..., ...}
    sa.Column("extra_json", sa.Text, nullable=True),  # {"v": 1, ...}: watermark mode, GTID, ...
    **_MYSQL_OPTS,
)

history_table = sa.Table(
    "mysqlcdc_chunk_history", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("table_name", _NAME, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("chunk_id", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # started | committed | failed | invalidated
    sa.Column("happened_at", _TS, nullable=False),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("row_count", sa.BigInteger, nullable=True),
    sa.Column("hw_file", _SHORT, nullable=True),
    sa.Column("hw_pos", sa.BigInteger, nullable=True),
    sa.Column("output_version", _SHORT, nullable=True),
    sa.Column("detail", sa.Text, nullable=True),  # error text, or a reason
    sa.Index("ix_mysqlcdc_chunk_history_chunk", "table_name", "chunk_id", "generation"),
    **_MYSQL_OPTS,
)


_VERSION_QUERY = sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")


def _latest_query(table: str) -> sa.Select:
    return sa.select(tables_table.c.latest_generation).where(tables_table.c.table_name == table)


# --- records ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk of a new plan: ``[start_key, end_key)``, the planner's opaque key text (None = unbounded)."""

    chunk_id: int
    start_key: str | None
    end_key: str | None


@dataclass(frozen=True)
class PlanInfo:
    table: str
    generation: int
    key_columns: tuple[str, ...]
    split_kind: str | None
    chunk_size: int | None
    chunk_count: int
    created_at: datetime
    run_id: str | None
    plan: dict[str, Any]  # the planner's plan, as given to create_plan


@dataclass(frozen=True)
class TableEntry:
    """A table's membership in the pipeline (its ``mysqlcdc_tables`` row)."""

    table: str
    latest_generation: int
    added_generation: int | None  # the first generation that counts (None: all; a removed table planned
    # again starts over at the generation that re-added it)
    created_at: datetime
    updated_at: datetime
    removed_at: datetime | None
    removed_run_id: str | None
    removed_reason: str | None

    @property
    def active(self) -> bool:
        """In the pipeline: planned and not removed since."""
        return self.removed_at is None


@dataclass(frozen=True)
class ChunkState:
    table: str
    generation: int
    chunk_id: int
    start_key: str | None
    end_key: str | None
    status: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    run_id: str | None
    error: str | None
    rerun_pending: bool
    # committed result (None until the first commit)
    rows: int | None
    lw: BinlogPosition | None
    hw: BinlogPosition | None
    output_version: str | None
    committed_at: datetime | None
    committed_run_id: str | None
    timings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        """A committed snapshot exists (the mirror uses it), whatever the latest attempt is doing."""
        return self.hw is not None

    @property
    def effective_hw(self) -> BinlogPosition | None:
        """The HW the stream filter may use: None (-inf: emit all) until committed, and while rerunning."""
        return None if self.rerun_pending else self.hw


@dataclass(frozen=True)
class StreamChunk:
    chunk_id: int
    start_key: str | None
    end_key: str | None
    hw: BinlogPosition | None  # effective HW: None = -inf (not committed, or a rerun in progress)
    committed_hw: BinlogPosition | None  # the HW of the committed snapshot, even while a rerun runs
    status: str


@dataclass(frozen=True)
class GenerationView:
    generation: int
    fully_committed: bool  # every chunk has a committed snapshot
    chunks: tuple[StreamChunk, ...]


@dataclass(frozen=True)
class TableView:
    """What the stream filter must respect for one table.

    ``generations`` holds the latest plan generation and, if it is not fully committed yet, also the latest
    fully committed older one (the mirror still uses it), newest first. Drop an event only if *every* listed
    generation
    has an effective HW at or after it for the chunk holding the event's key.
    """

    table: str
    latest_generation: int | None
    committed_generation: int | None  # latest fully committed generation (may equal latest_generation)
    generations: tuple[GenerationView, ...]
    min_hw: BinlogPosition | None  # min committed HW over all listed chunks: where the stream must start
    max_hw: BinlogPosition | None  # max committed HW: every event after it is emitted

    @property
    def complete(self) -> bool:
        """The latest generation is committed and no rerun is pending: the filter has an HW for every key."""
        return bool(self.generations) and self.generations[0].generation == self.latest_generation and all(
            c.hw is not None for c in self.generations[0].chunks
        )


@dataclass(frozen=True)
class MirrorChunk:
    chunk_id: int
    start_key: str | None
    end_key: str | None
    rows: int
    lw: BinlogPosition
    hw: BinlogPosition
    output_version: str | None
    committed_at: datetime | None


@dataclass(frozen=True)
class MirrorView:
    table: str
    generation: int
    chunks: tuple[MirrorChunk, ...]


@dataclass(frozen=True)
class ChunkEvent:
    table: str
    generation: int
    chunk_id: int
    attempt: int
    event: str
    at: datetime
    run_id: str | None
    rows: int | None
    hw: BinlogPosition | None
    output_version: str | None
    detail: str | None


# --- helpers ------------------------------------------------------------------------------------------------


def _now() -> datetime:
    """Naive UTC, microseconds: what every backend stores the same way."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


_stamp_lock = threading.Lock()
_last_stamp = datetime.min


def _stamp() -> datetime:
    """:func:`_now`, but strictly increasing within the process: the identity of one write (its history row's
    ``happened_at``), which a retry looks for to tell whether an earlier try of the write committed."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(_now(), _last_stamp + timedelta(microseconds=1))
        return _last_stamp


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=timezone.utc)


def _position(file: str | None, pos: int | None) -> BinlogPosition | None:
    return None if file is None or pos is None else BinlogPosition(file, int(pos))


def _table_name(table: Any) -> str:
    name = str(table)
    database, sep, rest = name.partition(".")
    if not sep or not database or not rest:
        raise ConfigurationError(f"table {name!r} must be written as database.table")
    return name


def _dump_versioned(data: Mapping[str, Any] | None) -> str | None:
    if not data:
        return None
    if "v" in data:
        raise ValueError("the key 'v' is reserved for the format version")
    return json.dumps({"v": JSON_VERSION, **data}, sort_keys=True, default=str)


def _load_versioned(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    data = dict(json.loads(text))
    data.pop("v", None)  # version 1 is the only format so far; later formats convert here
    return data


def _bound_text(chunk_id: int, bound: Any) -> str | None:
    """A bound as stored: the key codec's JSON text as given, or its JSON-safe value (``encode_key``)
    dumped to JSON text."""
    if bound is None or isinstance(bound, str):
        return bound
    try:
        return json.dumps(bound, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"chunk {chunk_id}: bound {bound!r} is not the key codec's JSON ({exc})") from None


def _chunk_spec(item: Any) -> ChunkSpec:
    """``ChunkSpec``, ``(chunk_id, start, end)``, a mapping (``start_key``/``end_key``, or the planner's
    ``Chunk.to_dict()`` with ``start``/``end``) or an object with ``chunk_id``, ``start_key``, ``end_key``."""
    if isinstance(item, ChunkSpec):
        chunk_id, start, end = item.chunk_id, item.start_key, item.end_key
    elif isinstance(item, Mapping):
        chunk_id = item["chunk_id"]
        start = item["start_key"] if "start_key" in item else item.get("start")
        end = item["end_key"] if "end_key" in item else item.get("end")
    elif isinstance(item, (tuple, list)):
        chunk_id, start, end = item
    else:
        chunk_id, start, end = item.chunk_id, item.start_key, item.end_key
    chunk_id = int(chunk_id)
    return ChunkSpec(chunk_id, _bound_text(chunk_id, start), _bound_text(chunk_id, end))


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
    args = getattr(orig, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in (1205, 1213)  # lock wait timeout, deadlock


def _outage_budget(value: float | None) -> float:
    """``outage_s`` as given, else ``$MYSQLCDC_CHUNK_STORE_OUTAGE_S``, else 300 s (0: no retries)."""
    if value is None:
        raw = os.environ.get(OUTAGE_ENV, "").strip()
        if not raw:
            return DEFAULT_OUTAGE_S
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"{OUTAGE_ENV}={raw!r}: give the outage budget in seconds") from None
    if not value >= 0:  # also NaN
        raise ConfigurationError(f"chunk store outage budget must be >= 0 seconds, not {value!r}")
    return float(value)


_STORES: "weakref.WeakSet[ChunkStore]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked child (a Spark Python worker, multiprocessing) must not reuse the parent's pooled connections.
    for store in list(_STORES):
        store._engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- the store ----------------------------------------------------------------------------------------------


class ChunkStore:
    """Plans and chunk results in a SQL database. Thread-safe; one instance per process is enough.

    ``url``: ``sqlite:///path/chunks.db`` (or just a path), ``mysql+pymysql://user:pw@host/db``,
    ``postgresql://user@host/db`` (driver ``psycopg``). ``outage_s``: how long a call keeps retrying while the
    store is unreachable (default ``$MYSQLCDC_CHUNK_STORE_OUTAGE_S``, else 300 s; 0 fails at once).
    """

    def __init__(self, url: str | os.PathLike[str] | URL, *, engine_options: Mapping[str, Any] | None = None,
                 outage_s: float | None = None):
        self.url = normalize_url(url)
        self.backend = self.url.get_backend_name()
        self.outage_s = _outage_budget(outage_s)
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

    def __enter__(self) -> "ChunkStore":
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
        deadline: float | None = None
        delay = _FIRST_DELAY_S
        conflict_tries = 0
        retry = False
        while True:
            try:
                result = once(retry)
            except DBAPIError as exc:
                if not may_retry():
                    raise
                if self._unreachable(exc):
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self.outage_s
                    if now >= deadline:
                        raise self._gave_up(exc, now - (deadline - self.outage_s)) from exc
                    self._outage_begins(exc)
                    time.sleep(min(deadline - now, delay * random.uniform(0.5, 1.0)))
                    delay = min(delay * 2, _MAX_DELAY_S)
                elif conflicts and conflict_tries < _WRITE_RETRIES - 1 and (
                        _conflict(exc) or isinstance(exc, IntegrityError)):
                    conflict_tries += 1
                    log.info("chunk store: retrying a transaction after %s", exc.orig)
                    time.sleep(0.02 * conflict_tries + random.random() * 0.05)
                else:
                    raise
                retry = True
            else:
                if deadline is not None:
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
        last: Exception | None = None
        for attempt in range(_WRITE_RETRIES):
            try:
                self._write(lambda conn, _retry: self._ensure_schema(conn), conflicts=False)
                return
            except ChunkStoreError:
                raise
            except DBAPIError as exc:  # two processes creating the same fresh store: the loser retries
                last = exc
                time.sleep(0.05 * (attempt + 1))
        raise ChunkStoreError(
            f"chunk store {self.display_url}: could not create its tables: {last}"
        ) from last

    def _ensure_schema(self, conn: Connection) -> None:
        inspector = sa.inspect(conn)
        version: int | None = None
        if inspector.has_table(meta_table.name):
            version = self._check_version(conn)
        elif inspector.has_table(chunks_table.name):
            raise ChunkStoreVersionError(
                f"chunk store {self.display_url} has a {chunks_table.name} table but no {meta_table.name}: "
                "it was not written by airflow-provider-mysqlcdc, or it is damaged"
            )
        metadata.create_all(conn, checkfirst=True)
        if version is not None and version < SCHEMA_VERSION:
            self._migrate(conn, version)
        found = conn.execute(_VERSION_QUERY).scalar()
        if found is None:
            from airflow_provider_mysqlcdc import __version__

            conn.execute(
                sa.insert(meta_table),
                [
                    {"name": "schema_version", "value": str(SCHEMA_VERSION)},
                    {"name": "created_by", "value": f"airflow-provider-mysqlcdc {__version__}"},
                ],
            )

    def _check_version(self, conn: Connection) -> int | None:
        raw = conn.execute(_VERSION_QUERY).scalar()
        if raw is None:
            return None  # created by a process that has not written its version row yet
        try:
            version = int(raw)
        except ValueError:
            raise ChunkStoreVersionError(
                f"chunk store {self.display_url}: schema_version {raw!r} in {meta_table.name} is not a number"
            ) from None
        if version > SCHEMA_VERSION:
            raise ChunkStoreVersionError(
                f"chunk store {self.display_url} has schema version {version}, written by a newer release of "
                f"airflow-provider-mysqlcdc; this release reads versions up to {SCHEMA_VERSION}. Upgrade "
                "airflow-provider-mysqlcdc everywhere that uses this store (Airflow workers and Spark)."
            )
        return version  # older: _migrate brings it up to date

    def _migrate(self, conn: Connection, version: int) -> None:
        """Bring a store of an older schema version up to :data:`SCHEMA_VERSION`, in place: add the columns
        later versions added (NULL in existing rows), then record the new version.

        Idempotent, so two processes opening an old store at once are fine: a column another process added
        meanwhile is skipped (if both add it, the loser's "duplicate column" error makes ``_open`` retry, and
        its retry finds the column). On MySQL each ``ALTER TABLE`` commits on its own.
        """
        quote = conn.dialect.identifier_preparer.quote
        for added_in, table, column in _ADDED_COLUMNS:
            if added_in <= version:
                continue
            present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
            if column.name in present:
                continue
            spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {spec}")
        conn.execute(sa.update(meta_table).where(meta_table.c.name == "schema_version")
                     .values(value=str(SCHEMA_VERSION)))
        log.warning("chunk store %s: schema migrated from version %d to %d (releases before this one can no "
                    "longer open it)", self.display_url, version, SCHEMA_VERSION)

    def schema_version(self) -> int:
        return self._read_tx(lambda conn: int(conn.execute(_VERSION_QUERY).scalar_one()))

    # --- plans ----------------------------------------------------------------------------------------------

    def tables(self) -> list[str]:
        """Every table that was ever planned, removed ones included (see :meth:`active_tables`), by name."""
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(tables_table.c.table_name).order_by(tables_table.c.table_name)).scalars()))

    # --- pipeline membership --------------------------------------------------------------------------------

    def active_tables(self) -> list[str]:
        """The tables in the pipeline: planned and not removed since, by name. One indexed read of the small
        ``mysqlcdc_tables`` table (cheap enough for every stream micro-batch)."""
        t = tables_table.c
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(t.table_name).where(t.removed_at.is_(None)).order_by(t.table_name)).scalars()))

    def removed_tables(self) -> list[str]:
        """The tables removed from the pipeline (and not planned again since), by name."""
        t = tables_table.c
        return self._read_tx(lambda conn: list(conn.execute(
            sa.select(t.table_name).where(t.removed_at.is_not(None)).order_by(t.table_name)).scalars()))

    def table_entries(self) -> list[TableEntry]:
        """Every planned table's membership (active or removed, since when, by which run, why), by name."""
        return [_table_entry(r) for r in self._read_tx(lambda conn: conn.execute(
            sa.select(tables_table).order_by(tables_table.c.table_name)).mappings().all())]

    def table_entry(self, table: Any) -> TableEntry | None:
        """One table's membership; None if it was never planned."""
        name = _table_name(table)
        row = self._read_tx(lambda conn: conn.execute(
            sa.select(tables_table).where(tables_table.c.table_name == name)).mappings().first())
        return None if row is None else _table_entry(row)

    def remove_table(self, table: Any, run_id: str | None = None, *, reason: str | None = None) -> bool:
        """Take a planned table out of the pipeline; True if this call removed it, False if it already was.

        Only the membership changes (``removed_at``, ``removed_run_id``, ``removed_reason``): the table's
        plans, chunk rows and output stay as they are, so its snapshot and mirror remain readable as of where the
        stream left them. Planning the table again (:meth:`create_plan`) puts it back with a new generation.
        :class:`UnknownChunk` if it was never planned. Idempotent, also across a retry after a lost COMMIT
        (the write's identity is its ``removed_at`` stamp, see ``_retrying``).
        """
        name = _table_name(table)
        text = None if reason is None else str(reason)[:MAX_ERROR_CHARS]
        now = _stamp()
        t = tables_table.c

        def work(conn: Connection, retry: bool) -> tuple[bool, Mapping[str, Any]]:
            row = conn.execute(self._lock(sa.select(tables_table).where(t.table_name == name))
                               ).mappings().first()
            if row is None:
                raise UnknownChunk(f"chunk store has no plan for {name}: it is not part of the pipeline")
            if row["removed_at"] is not None:
                ours = retry and row["removed_at"] == now and row["removed_run_id"] == run_id
                return ours, row
            conn.execute(sa.update(tables_table).where(t.table_name == name).values(
                removed_at=now, removed_run_id=run_id, removed_reason=text, updated_at=now))
            return True, conn.execute(sa.select(tables_table).where(t.table_name == name)).mappings().one()

        removed, row = self._write(work)
        if removed:
            log.warning("chunk store: %s removed from the pipeline (run %s%s); its plan generation %d and "
                        "its output stay as they are, the stream no longer captures it", name, run_id or "-",
                        f", reason: {text}" if text else "", row["latest_generation"])
        else:
            log.info("chunk store: %s was already removed from the pipeline at %s (run %s): nothing to do",
                     name, _aware(row["removed_at"]), row["removed_run_id"] or "-")
        return removed

    def run_plans(self, run_id: str) -> dict[str, int]:
        """The plan generations a run created, by table (the latest one if it planned a table twice): e.g. to
        resume that run's snapshot after its plan task is run again."""
        p = plans_table.c
        return dict(self._read_tx(lambda conn: conn.execute(
            sa.select(p.table_name, p.generation).where(p.run_id == run_id)
            .order_by(p.table_name, p.generation)
        ).all()))

    def latest_generation(self, table: Any) -> int | None:
        name = _table_name(table)
        return self._read_tx(lambda conn: self._latest(conn, name))

    def next_generation(self, table: Any) -> int:
        """The generation the next :meth:`create_plan` will get (unless another plan is created first)."""
        return (self.latest_generation(table) or 0) + 1

    @staticmethod
    def _latest(conn: Connection, table: str) -> int | None:
        return conn.execute(_latest_query(table)).scalar()

    def create_plan(
        self,
        table: Any,
        plan: Mapping[str, Any],
        chunks: Iterable[Any] | None = None,
        run_id: str | None = None,
        *,
        key_columns: Sequence[str] | None = None,
        split_kind: str | None = None,
        chunk_size: int | None = None,
    ) -> int:
        """Store a new plan generation and one 'planned' row per chunk, atomically; return the generation.

        ``plan`` is stored as opaque JSON (the planner's ``ChunkPlan.to_dict()``); if it has a top-level
        ``generation``, the stored copy carries the allocated one. ``chunks`` defaults to ``plan["chunks"]``;
        see :func:`_chunk_spec` for the accepted forms. ``key_columns``, ``split_kind`` and ``chunk_size``
        default to the plan's ``key_columns``, ``split`` (or ``split_kind``) and ``chunk_size``.
        """
        name = _table_name(table)
        if chunks is None:
            if "chunks" not in plan:
                raise ValueError(f"plan for {name}: pass chunks, or a plan with a 'chunks' list")
            chunks = plan["chunks"]
        specs = [_chunk_spec(c) for c in chunks]
        if not specs:
            raise ValueError(f"plan for {name} has no chunks (a table is at least one chunk (-inf, +inf))")
        ids = [s.chunk_id for s in specs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"plan for {name} repeats chunk ids")
        columns = list(key_columns if key_columns is not None else plan.get("key_columns") or [])
        kind = split_kind if split_kind is not None else plan.get("split", plan.get("split_kind"))
        size = chunk_size if chunk_size is not None else plan.get("chunk_size")

        now = _stamp()  # this plan's identity: a retry after a lost COMMIT finds it (see _retrying)
        readded: list[datetime] = []  # when the table had been removed, if this plan puts it back

        def work(conn: Connection, retry: bool) -> int:
            readded.clear()
            latest = conn.execute(self._lock(_latest_query(name))).scalar()
            if retry and latest is not None:
                earlier = conn.execute(sa.select(plans_table.c.generation).where(
                    plans_table.c.table_name == name, plans_table.c.created_at == now,
                    plans_table.c.run_id == run_id)).scalar()
                if earlier is not None:
                    log.info("chunk store: %s plan generation %d was committed by an earlier try",
                             name, earlier)
                    return int(earlier)
            generation = (latest or 0) + 1
            if latest is None:
                conn.execute(sa.insert(tables_table).values(
                    table_name=name, latest_generation=generation, created_at=now, updated_at=now,
                    added_generation=generation))
            else:
                removed = conn.execute(sa.select(tables_table.c.removed_at)
                                       .where(tables_table.c.table_name == name)).scalar()
                back = {} if removed is None else {
                    "removed_at": None, "removed_run_id": None, "removed_reason": None,
                    "added_generation": generation}  # back in the pipeline: older generations no longer count
                if back:
                    readded.append(removed)
                conn.execute(sa.update(tables_table).where(tables_table.c.table_name == name).values(
                    latest_generation=generation, updated_at=now, **back))
            stored = {**plan, "generation": generation} if "generation" in plan else dict(plan)
            plan_text = json.dumps(stored, sort_keys=True, allow_nan=False)
            conn.execute(sa.insert(plans_table).values(
                table_name=name, generation=generation, key_columns=json.dumps(columns),
                split_kind=None if kind is None else str(kind),
                chunk_size=None if size is None else int(size),
                chunk_count=len(specs), created_at=now, run_id=run_id, plan_json=plan_text))
            conn.execute(sa.insert(chunks_table), [
                {"table_name": name, "generation": generation, "chunk_id": s.chunk_id,
                 "start_key": s.start_key, "end_key": s.end_key, "status": PLANNED, "attempts": 0,
                 "rerun_pending": False}
                for s in specs
            ])
            return generation

        generation = self._write(work)
        log.info("chunk store: %s plan generation %d with %d chunks", name, generation, len(specs))
        if readded:
            log.warning("chunk store: %s had been removed from the pipeline at %s; this plan puts it back "
                        "(generation %d; older generations no longer count)", name, _aware(readded[0]),
                        generation)
        return generation

    def plan(self, table: Any, generation: int | None = None) -> PlanInfo:
        name = _table_name(table)

        def read(conn: Connection) -> tuple[int, Mapping[str, Any] | None]:
            wanted = self._resolve_generation(conn, name, generation)
            return wanted, conn.execute(sa.select(plans_table).where(
                plans_table.c.table_name == name, plans_table.c.generation == wanted)).mappings().first()

        generation, row = self._read_tx(read)
        if row is None:
            raise UnknownChunk(f"chunk store has no plan generation {generation} for {name}")
        return PlanInfo(
            table=name, generation=row["generation"], key_columns=tuple(json.loads(row["key_columns"])),
            split_kind=row["split_kind"], chunk_size=row["chunk_size"], chunk_count=row["chunk_count"],
            created_at=_aware(row["created_at"]), run_id=row["run_id"], plan=json.loads(row["plan_json"]),
        )

    def _resolve_generation(self, conn: Connection, table: str, generation: int | None) -> int:
        if generation is not None:
            return int(generation)
        latest = self._latest(conn, table)
        if latest is None:
            raise UnknownChunk(f"chunk store has no plan for {table}: run the plan step first")
        return latest

    # --- chunk reads ----------------------------------------------------------------------------------------

    def chunks(self, table: Any, generation: int | None = None) -> list[ChunkState]:
        """The chunks of one generation (None: the latest), by chunk id."""
        name = _table_name(table)

        def read(conn: Connection) -> Sequence[Mapping[str, Any]]:
            wanted = self._resolve_generation(conn, name, generation)
            return conn.execute(sa.select(chunks_table).where(
                chunks_table.c.table_name == name, chunks_table.c.generation == wanted,
            ).order_by(chunks_table.c.chunk_id)).mappings().all()

        return [_chunk_state(r) for r in self._read_tx(read)]

    def chunk(self, table: Any, generation: int, chunk_id: int) -> ChunkState:
        name = _table_name(table)
        row = self._read_tx(lambda conn: conn.execute(self._chunk_select(name, generation, chunk_id))
                            .mappings().first())
        if row is None:
            raise UnknownChunk(f"chunk store has no chunk {chunk_id} in generation {generation} of {name}")
        return _chunk_state(row)

    def _reread(self, conn: Connection, table: str, generation: int, chunk_id: int) -> ChunkState:
        return _chunk_state(conn.execute(self._chunk_select(table, generation, chunk_id)).mappings().one())

    @staticmethod
    def _chunk_select(table: str, generation: int, chunk_id: int) -> sa.Select:
        return sa.select(chunks_table).where(
            chunks_table.c.table_name == table, chunks_table.c.generation == int(generation),
            chunks_table.c.chunk_id == int(chunk_id))

    def history(self, table: Any, chunk_id: int, generation: int | None = None) -> list[ChunkEvent]:
        """Every start/commit/failure of one chunk (of one generation, or all), oldest first."""
        name = _table_name(table)
        stmt = sa.select(history_table).where(history_table.c.table_name == name,
                                              history_table.c.chunk_id == int(chunk_id))
        if generation is not None:
            stmt = stmt.where(history_table.c.generation == int(generation))
        rows = self._read_tx(lambda conn: conn.execute(stmt.order_by(history_table.c.id)).mappings().all())
        return [ChunkEvent(
            table=r["table_name"], generation=r["generation"], chunk_id=r["chunk_id"], attempt=r["attempt"],
            event=r["kind"], at=_aware(r["happened_at"]), run_id=r["run_id"], rows=r["row_count"],
            hw=_position(r["hw_file"], r["hw_pos"]), output_version=r["output_version"], detail=r["detail"],
        ) for r in rows]

    # --- chunk writes ---------------------------------------------------------------------------------------

    def _locked_chunk(self, conn: Connection, table: str, generation: int, chunk_id: int, *,
                      current_plan: bool) -> Mapping[str, Any]:
        """The chunk row, locked; with ``current_plan``, also check (share-lock) that its plan is current."""
        if current_plan:
            latest = conn.execute(self._lock(_latest_query(table), read=True)).scalar()
            if latest is None:
                raise UnknownChunk(f"chunk store has no plan for {table}")
            if int(generation) != latest:
                raise StaleGeneration(
                    f"{table} chunk {chunk_id} belongs to plan generation {generation}, but the table's "
                    f"current plan is generation {latest}: this task is from an old plan; run the snapshot "
                    "of the current plan instead"
                )
        row = conn.execute(self._lock(self._chunk_select(table, generation, chunk_id))).mappings().first()
        if row is None:
            raise UnknownChunk(f"chunk store has no chunk {chunk_id} in generation {generation} of {table}")
        return row

    def _history(self, conn: Connection, table: str, generation: int, chunk_id: int, attempt: int, what: str,
                 run_id: str | None, at: datetime, **values: Any) -> None:
        conn.execute(sa.insert(history_table).values(
            table_name=table, generation=int(generation), chunk_id=int(chunk_id), attempt=attempt, kind=what,
            happened_at=at, run_id=run_id, **values))

    def _applied(self, conn: Connection, table: str, generation: int, chunk_id: int, what: str,
                 run_id: str | None, at: datetime) -> int | None:
        """The attempt number of this write's own history row if an earlier try of it committed (call it with
        the chunk row locked, so an earlier try still in flight has finished). See ``_retrying``."""
        h = history_table.c
        found = conn.execute(sa.select(h.attempt).where(
            h.table_name == table, h.generation == int(generation), h.chunk_id == int(chunk_id),
            h.kind == what, h.happened_at == at, h.run_id == run_id)).scalars().first()
        if found is not None:
            log.info("chunk store: %s generation %d chunk %d: %s (attempt %d) was committed by an earlier "
                     "try", table, generation, chunk_id, what, found)
        return found

    def start_chunk(
        self, table: Any, generation: int, chunk_id: int, run_id: str | None = None
    ) -> ChunkState:
        """Mark an attempt as running (``attempts`` + 1); return the state (``attempts``: this attempt).

        A committed result stays in force for the mirror; the chunk gets ``rerun_pending`` so that the stream
        filter treats it as HW = -inf until this rerun commits.
        """
        name = _table_name(table)
        now = _stamp()

        def work(conn: Connection, retry: bool) -> ChunkState:
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=True)
            if retry:
                done = self._applied(conn, name, generation, chunk_id, "started", run_id, now)
                if done is not None:  # report the attempt number that earlier try took
                    return replace(self._reread(conn, name, generation, chunk_id), attempts=done)
            where = self._chunk_where(name, generation, chunk_id)
            conn.execute(sa.update(chunks_table).where(*where).values(
                status=RUNNING, attempts=chunks_table.c.attempts + 1, started_at=now, finished_at=None,
                run_id=run_id, error=None, rerun_pending=row["rerun_pending"] or row["hw_pos"] is not None))
            state = self._reread(conn, name, generation, chunk_id)
            self._history(conn, name, generation, chunk_id, state.attempts, "started", run_id, now)
            return state

        return self._write(work)

    @staticmethod
    def _chunk_where(table: str, generation: int, chunk_id: int) -> tuple[Any, ...]:
        return (chunks_table.c.table_name == table, chunks_table.c.generation == int(generation),
                chunks_table.c.chunk_id == int(chunk_id))

    def commit_chunk(
        self,
        table: Any,
        generation: int,
        chunk_id: int,
        *,
        rows: int,
        lw: BinlogPosition,
        hw: BinlogPosition,
        output_version: str | None,
        run_id: str | None = None,
        timings: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        attempt: int | None = None,
        in_transaction: Callable[[Connection, ChunkState], Any] | None = None,
    ) -> ChunkState:
        """Replace the chunk's committed result (rows, LW, HW, output version) in one transaction.

        Refused (:class:`StaleGeneration`) unless ``generation`` is the table's current plan, and
        (:class:`StaleAttempt`) if ``attempt`` is given and a newer attempt has started since.
        ``in_transaction`` runs inside the same transaction after the update, with the connection and the
        new state (e.g. to write a manifest row or publish a manifest file); if it raises, nothing is
        committed and the previous result stays. Deadlocks and outages are retried until the callback has
        run; from then on they are raised to the caller (who owns the callback's side effects). Committing
        the same result again (same ``attempt`` and ``output_version``: a caller's retry after a lost COMMIT)
        changes nothing and runs the callback again.
        """
        name = _table_name(table)
        if not isinstance(lw, BinlogPosition) or not isinstance(hw, BinlogPosition):
            raise TypeError("lw and hw must be BinlogPosition")
        if hw < lw:
            raise ValueError(f"{name} chunk {chunk_id}: high watermark {hw} is before low watermark {lw}")
        if int(rows) < 0:
            raise ValueError(f"{name} chunk {chunk_id}: rows must be >= 0")
        timings_text, extra_text = _dump_versioned(timings), _dump_versioned(extra)
        now = _stamp()
        callback_ran = False

        def already_committed(row: Mapping[str, Any]) -> bool:
            return (attempt is not None and output_version is not None and row["status"] == COMMITTED
                    and row["attempts"] == attempt and not row["rerun_pending"]
                    and row["output_version"] == output_version and row["row_count"] == int(rows)
                    and _position(row["lw_file"], row["lw_pos"]) == lw
                    and _position(row["hw_file"], row["hw_pos"]) == hw)

        def work(conn: Connection, retry: bool) -> ChunkState:
            nonlocal callback_ran
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=True)
            if retry and self._applied(conn, name, generation, chunk_id, "committed", run_id, now) is not None:
                state = _chunk_state(row)
            elif already_committed(row):
                state = _chunk_state(row)
            else:
                if attempt is not None and row["attempts"] != attempt:
                    raise StaleAttempt(
                        f"{name} chunk {chunk_id} (generation {generation}): attempt {attempt} tried to "
                        f"commit, but attempt {row['attempts']} has started since; this result is discarded"
                    )
                conn.execute(sa.update(chunks_table).where(*self._chunk_where(name, generation, chunk_id))
                             .values(status=COMMITTED, attempts=max(row["attempts"], 1), finished_at=now,
                                     run_id=run_id, error=None, rerun_pending=False, row_count=int(rows),
                                     lw_file=lw.file, lw_pos=lw.pos, hw_file=hw.file, hw_pos=hw.pos,
                                     output_version=output_version, committed_at=now, committed_run_id=run_id,
                                     timings_json=timings_text, extra_json=extra_text))
                state = self._reread(conn, name, generation, chunk_id)
                self._history(conn, name, generation, chunk_id, state.attempts, "committed", run_id, now,
                              row_count=int(rows), hw_file=hw.file, hw_pos=hw.pos,
                              output_version=output_version)
            if in_transaction is not None:
                callback_ran = True
                in_transaction(conn, state)
            return state

        state = self._write(work, may_retry=lambda: not callback_ran)
        log.info("chunk store: %s generation %d chunk %d committed: %d rows, LW %s, HW %s, output %s",
                 name, generation, chunk_id, rows, lw, hw, output_version)
        return state

    def fail_chunk(self, table: Any, generation: int, chunk_id: int, error: BaseException | str,
                   run_id: str | None = None, *, attempt: int | None = None) -> ChunkState:
        """Record a failed attempt (status 'failed', the error text); the committed result is untouched.

        A stale ``attempt`` (a newer one has started) only adds a history entry.
        """
        name = _table_name(table)
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        text = text[:MAX_ERROR_CHARS]
        now = _stamp()

        def work(conn: Connection, retry: bool) -> ChunkState:
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=False)
            if retry and self._applied(conn, name, generation, chunk_id, "failed", run_id, now) is not None:
                return self._reread(conn, name, generation, chunk_id)
            stale = attempt is not None and row["attempts"] != attempt
            where = self._chunk_where(name, generation, chunk_id)
            if not stale:
                conn.execute(sa.update(chunks_table).where(*where).values(
                    status=FAILED, finished_at=now, run_id=run_id, error=text))
            number = attempt if attempt is not None else row["attempts"]
            self._history(conn, name, generation, chunk_id, number, "failed", run_id, now, detail=text)
            return self._reread(conn, name, generation, chunk_id)

        return self._write(work)

    def invalidate_chunk(self, table: Any, generation: int, chunk_id: int, reason: str,
                         run_id: str | None = None) -> ChunkState:
        """Mark a committed chunk for a reread (e.g. DDL inside its [LW, HW]): the stream filter then treats
        it as HW = -inf until the rerun commits; the mirror keeps using the committed snapshot."""
        name = _table_name(table)
        now = _stamp()

        def work(conn: Connection, retry: bool) -> ChunkState:
            row = self._locked_chunk(conn, name, generation, chunk_id, current_plan=False)
            if retry and self._applied(conn, name, generation, chunk_id, "invalidated", run_id,
                                       now) is not None:
                return self._reread(conn, name, generation, chunk_id)
            conn.execute(sa.update(chunks_table).where(*self._chunk_where(name, generation, chunk_id)).values(
                rerun_pending=True))
            self._history(conn, name, generation, chunk_id, row["attempts"], "invalidated", run_id, now,
                          detail=reason[:MAX_ERROR_CHARS])
            return self._reread(conn, name, generation, chunk_id)

        return self._write(work)

    # --- views for the stream filter and the mirror ---------------------------------------------------------

    def stream_view(self, tables: Iterable[Any] | None = None) -> dict[str, TableView]:
        """Per table (None: every table in the store), the chunks and HWs the stream filter must respect."""
        requested = None if tables is None else list(dict.fromkeys(_table_name(t) for t in tables))

        def read(conn: Connection) -> tuple[list[str], dict[str, int], dict[str, int],
                                            list[Mapping[str, Any]]]:
            if requested is None:
                names = list(conn.execute(sa.select(tables_table.c.table_name)).scalars())
            else:
                names = requested
            latest: dict[str, int] = {}
            committed: dict[str, int] = {}
            rows: list[Mapping[str, Any]] = []
            for batch in _batches(names, 200):
                latest.update(conn.execute(
                    sa.select(tables_table.c.table_name, tables_table.c.latest_generation)
                    .where(tables_table.c.table_name.in_(batch))
                ).all())
                committed.update(self._committed_generations(conn, batch))
                wanted = [(t, {g for g in (latest.get(t), committed.get(t)) if g is not None}) for t in batch]
                conditions = [sa.and_(chunks_table.c.table_name == t, chunks_table.c.generation.in_(gens))
                              for t, gens in wanted if gens]
                if conditions:
                    rows.extend(conn.execute(sa.select(chunks_table).where(sa.or_(*conditions))
                                             .order_by(chunks_table.c.chunk_id)).mappings().all())
            return names, latest, committed, rows

        names, latest, committed, rows = self._read_tx(read)
        by_table: dict[str, dict[int, list[ChunkState]]] = {}
        for row in rows:
            state = _chunk_state(row)
            by_table.setdefault(state.table, {}).setdefault(state.generation, []).append(state)
        return {name: _table_view(name, latest.get(name), committed.get(name), by_table.get(name, {}))
                for name in names}

    @staticmethod
    def _committed_generations(conn: Connection, tables: Sequence[str]) -> dict[str, int]:
        """Latest generation whose every chunk has a committed snapshot, per table; only generations of the
        table's current membership count (a removed table planned again: from its re-adding generation on)."""
        c, t = chunks_table.c, tables_table.c
        floors = dict(conn.execute(sa.select(t.table_name, t.added_generation).where(
            t.table_name.in_(tables), t.added_generation.is_not(None))).all())
        result: dict[str, int] = {}
        for table, generation in conn.execute(
            sa.select(c.table_name, c.generation).where(c.table_name.in_(tables))
            .group_by(c.table_name, c.generation).having(sa.func.count() == sa.func.count(c.hw_pos))
        ):
            if generation < floors.get(table, 0):
                continue
            result[table] = max(generation, result.get(table, generation))
        return result

    def mirror_view(self, table: Any) -> MirrorView | None:
        """The latest fully committed generation's chunks with their committed HW and output version (None if
        no generation is fully committed). Reruns in progress do not change it until they commit."""
        name = _table_name(table)

        def read(conn: Connection) -> tuple[int | None, Sequence[Mapping[str, Any]]]:
            generation = self._committed_generations(conn, [name]).get(name)
            if generation is None:
                return None, []
            return generation, conn.execute(sa.select(chunks_table).where(
                chunks_table.c.table_name == name, chunks_table.c.generation == generation,
            ).order_by(chunks_table.c.chunk_id)).mappings().all()

        generation, rows = self._read_tx(read)
        if generation is None:
            return None
        states = [_chunk_state(r) for r in rows]
        return MirrorView(name, generation, tuple(
            MirrorChunk(s.chunk_id, s.start_key, s.end_key, int(s.rows or 0), s.lw, s.hw,  # type: ignore
                        s.output_version, s.committed_at)
            for s in states
        ))


def _batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i:i + size])


def _table_entry(row: Mapping[str, Any]) -> TableEntry:
    added = row["added_generation"]
    return TableEntry(
        table=row["table_name"], latest_generation=int(row["latest_generation"]),
        added_generation=None if added is None else int(added), created_at=_aware(row["created_at"]),
        updated_at=_aware(row["updated_at"]), removed_at=_aware(row["removed_at"]),
        removed_run_id=row["removed_run_id"], removed_reason=row["removed_reason"],
    )


def _chunk_state(row: Mapping[str, Any]) -> ChunkState:
    return ChunkState(
        table=row["table_name"], generation=row["generation"], chunk_id=row["chunk_id"],
        start_key=row["start_key"], end_key=row["end_key"], status=row["status"], attempts=row["attempts"],
        started_at=_aware(row["started_at"]), finished_at=_aware(row["finished_at"]), run_id=row["run_id"],
        error=row["error"], rerun_pending=bool(row["rerun_pending"]), rows=row["row_count"],
        lw=_position(row["lw_file"], row["lw_pos"]), hw=_position(row["hw_file"], row["hw_pos"]),
        output_version=row["output_version"], committed_at=_aware(row["committed_at"]),
        committed_run_id=row["committed_run_id"], timings=_load_versioned(row["timings_json"]),
        extra=_load_versioned(row["extra_json"]),
    )


def _table_view(table: str, latest: int | None, committed: int | None,
                chunks: dict[int, list[ChunkState]]) -> TableView:
    generations: list[GenerationView] = []
    for generation in sorted({g for g in (latest, committed) if g is not None}, reverse=True):
        states = chunks.get(generation, [])
        generations.append(GenerationView(
            generation=generation,
            fully_committed=bool(states) and all(s.committed for s in states),
            chunks=tuple(StreamChunk(s.chunk_id, s.start_key, s.end_key, s.effective_hw, s.hw, s.status)
                         for s in states),
        ))
    committed_hws = [c.committed_hw for g in generations for c in g.chunks if c.committed_hw is not None]
    return TableView(
        table=table, latest_generation=latest, committed_generation=committed, generations=tuple(generations),
        min_hw=min(committed_hws) if committed_hws else None,
        max_hw=max(committed_hws) if committed_hws else None,
    )


def _switch_to_wal(cursor: Any) -> None:
    """Turn a (fresh) database file to WAL. SQLite answers "database is locked" at once, without its busy
    handler, while another connection switches the journal mode: several tasks opening a new store at the
    same moment must wait for each other here, not fail."""
    import sqlite3

    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    delay = 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)


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
