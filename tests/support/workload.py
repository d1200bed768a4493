"""Random concurrent writers over tables of different key types, with fixed seeds so failures reproduce.

Operations: inserts, updates (also of the key), deletes, multi-row statements, large transactions,
rollbacks and binlog rotations (FLUSH BINARY LOGS).
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pymysql

KEY_SPACE = 2400


def _ci_key(rng: random.Random, k: int) -> str:
    word = "".join(c.upper() if rng.random() < 0.5 else c for c in "row")
    accent = rng.choice(["", "é", "E", "è"])
    return f"{word}{accent}-{k:05d}"


@dataclass(frozen=True)
class TableSpec:
    name: str
    ddl: str
    key_columns: tuple[str, ...]
    make_key: Callable[[random.Random, int], tuple]
    chunk_key: str | None = None  # for the table without a primary key


TABLE_SPECS = [
    TableSpec("t_int", "id INT NOT NULL PRIMARY KEY", ("id",), lambda r, k: (k - 300,)),
    TableSpec(
        "t_ubig", "id BIGINT UNSIGNED NOT NULL PRIMARY KEY", ("id",), lambda r, k: (2**63 + k * 7919,)
    ),
    TableSpec("t_dec", "id DECIMAL(12,2) NOT NULL PRIMARY KEY", ("id",),
              lambda r, k: (Decimal(k * 13) / 100 - 50,)),
    TableSpec("t_dt", "id DATETIME(6) NOT NULL PRIMARY KEY", ("id",),
              lambda r, k: (datetime(2021, 3, 28, 0, 59, 0) + timedelta(seconds=k * 97, microseconds=k),)),
    TableSpec("t_comp", "a TINYINT NOT NULL, b INT NOT NULL, PRIMARY KEY (a, b)", ("a", "b"),
              lambda r, k: (k % 3, k)),
    TableSpec("t_ci", "id VARCHAR(32) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY", ("id",),
              lambda r, k: (_ci_key(r, k),)),
    TableSpec("t_bin", "id VARBINARY(16) NOT NULL PRIMARY KEY", ("id",),
              lambda r, k: (b"\x00" + k.to_bytes(3, "big") + (b"\xff" if k % 2 else b""),)),
    TableSpec("t_nopk", "ck INT NULL", ("ck",), lambda r, k: (None if k % 17 == 0 else k % 400,),
              chunk_key="ck"),
]

VALUE_COLUMNS = (
    "v INT NOT NULL, amount DECIMAL(14,4), note VARCHAR(40) COLLATE utf8mb4_bin, "
    "ts TIMESTAMP(6) NULL, wall DATETIME(3) NULL"
)


def create_tables(conn: pymysql.connections.Connection, database: str, specs=TABLE_SPECS) -> None:
    with conn.cursor() as cur:
        for spec in specs:
            cur.execute(f"CREATE TABLE `{database}`.`{spec.name}` ({spec.ddl}, {VALUE_COLUMNS}) "
                        "ENGINE=InnoDB")


def _values(rng: random.Random) -> tuple:
    ts = datetime(2024, 3, 31, 1, 30, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**7))
    return (
        rng.randint(-1000, 1000),
        Decimal(rng.randint(-10**8, 10**8)) / 10000,
        rng.choice(["", "x", "Ünïcødé", "😀 emoji", "trailing  ", None]),
        ts.replace(tzinfo=None),  # written in the session's UTC zone
        datetime(2023, 10, 29, 2, 30) + timedelta(milliseconds=rng.randint(0, 10**6)),
    )


def insert_sql(database: str, spec: TableSpec) -> str:
    cols = ", ".join(f"`{c}`" for c in (*spec.key_columns, "v", "amount", "note", "ts", "wall"))
    marks = ", ".join(["%s"] * (len(spec.key_columns) + 5))
    return f"INSERT INTO `{database}`.`{spec.name}` ({cols}) VALUES ({marks})"


def seed_rows(conn: pymysql.connections.Connection, database: str, rows_per_table: int, seed: int,
              specs=TABLE_SPECS) -> None:
    rng = random.Random(seed)
    with conn.cursor() as cur:
        for spec in specs:
            keys = rng.sample(range(KEY_SPACE), rows_per_table)
            rows = [(*spec.make_key(rng, k), *_values(rng)) for k in keys]
            sql = insert_sql(database, spec).replace("INSERT", "INSERT IGNORE", 1)
            for start in range(0, len(rows), 500):
                cur.executemany(sql, rows[start:start + 500])
    conn.commit()


@dataclass
class WorkloadStats:
    transactions: int = 0
    rollbacks: int = 0
    conflicts: int = 0
    rotations: int = 0
    statements: int = 0
    errors: list[str] = field(default_factory=list)


class Workload:
    """Writer threads that run until stopped; call ``pause()`` for a quiet point, ``stop()`` at the end.

    ``max_transactions`` bounds the writers by volume (they end by themselves once that many transactions
    committed, so a slow machine does not write more); ``wait_for_transactions`` waits for a volume instead
    of letting the writers run for a time. With ``idle_at_bound`` the writers idle at the bound instead of
    ending, until ``allow_transactions`` moves it (a test that writes a volume before each of its steps)."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], database: str, seed: int,
                 writers: int = 2, specs=TABLE_SPECS, rotate_every: int = 60, pace: float = 0.002,
                 max_transactions: int | None = None, idle_at_bound: bool = False) -> None:
        self.connect, self.database, self.seed = connect, database, seed
        self.specs, self.rotate_every, self.pace = specs, rotate_every, pace
        self.max_transactions = max_transactions
        self.idle_at_bound = idle_at_bound
        self.stats = WorkloadStats()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(writers)]

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> WorkloadStats:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        if self.stats.errors:
            raise AssertionError(f"workload errors: {self.stats.errors[:3]}")
        return self.stats

    def run_for(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait_for_transactions(self, more: int, timeout: float = 120.0) -> None:
        """Wait until ``more`` further transactions committed (or the writers ended, by their bound or an
        error): the writers run for a volume, not a time."""
        deadline = time.monotonic() + timeout
        with self._progress:
            target = self.stats.transactions + more
            while self.stats.transactions < target and not self._done():
                left = deadline - time.monotonic()
                assert left > 0, f"the writers wrote {self.stats.transactions} of {target} transactions"
                self._progress.wait(min(left, 0.5))

    def allow_transactions(self, more: int | None) -> None:
        """Move the bound to ``more`` transactions beyond those committed so far (None: no bound); writers
        idling at the bound (``idle_at_bound``) go on."""
        with self._progress:
            self.max_transactions = None if more is None else self.stats.transactions + more
            self._progress.notify_all()

    def _done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def _bound_reached(self) -> bool:
        return self.max_transactions is not None and self.stats.transactions >= self.max_transactions

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        conn = self.connect()
        conn.autocommit(False)
        n = 0
        try:
            while not self._stop.is_set():
                if self._bound_reached():
                    if not self.idle_at_bound:
                        break
                    with self._progress:  # until allow_transactions moves the bound, or stop
                        self._progress.wait(0.1)
                    continue
                n += 1
                try:
                    self._transaction(conn, rng, index, n)
                except pymysql.err.IntegrityError:
                    conn.rollback()
                    with self._lock:
                        self.stats.conflicts += 1
                except pymysql.err.OperationalError as exc:
                    conn.rollback()
                    if exc.args and exc.args[0] in (1213, 1205):  # deadlock, lock wait timeout
                        with self._lock:
                            self.stats.conflicts += 1
                    else:
                        raise
                time.sleep(self.pace)
        except Exception as exc:  # noqa: BLE001 - surfaced by stop()
            self.stats.errors.append(repr(exc))
        finally:
            conn.close()
            with self._lock:
                self._progress.notify_all()

    def _transaction(self, conn: pymysql.connections.Connection, rng: random.Random, index: int,
                     n: int) -> None:
        db = self.database
        if self.rotate_every and index == 0 and n % self.rotate_every == 0:
            with conn.cursor() as cur:
                cur.execute("FLUSH BINARY LOGS")
            with self._lock:
                self.stats.rotations += 1
        statements = 0
        with conn.cursor() as cur:
            for _ in range(rng.choice([1, 1, 1, 2, 3, 5])):
                spec = rng.choice(self.specs)
                table = f"`{db}`.`{spec.name}`"
                where = " AND ".join(f"`{c}` <=> %s" for c in spec.key_columns)
                limit = " LIMIT 1" if spec.chunk_key else ""
                op = rng.random()
                key = spec.make_key(rng, rng.randrange(KEY_SPACE))
                if op < 0.30:
                    cur.execute(insert_sql(db, spec), (*key, *_values(rng)))
                elif op < 0.50:
                    cur.execute(
                        f"UPDATE {table} SET v = v + 1, note = %s, ts = %s WHERE {where}{limit}",
                        (rng.choice(["u", "upd", None]), _values(rng)[3], *key),
                    )
                elif op < 0.62:
                    new_key = spec.make_key(rng, rng.randrange(KEY_SPACE))
                    sets = ", ".join(f"`{c}` = %s" for c in spec.key_columns)
                    cur.execute(f"UPDATE {table} SET {sets} WHERE {where}{limit}", (*new_key, *key))
                elif op < 0.77:
                    cur.execute(f"DELETE FROM {table} WHERE {where}{limit}", key)
                elif op < 0.87:
                    # multi-row statement: one rows event with many rows
                    low = rng.randint(-1000, 1000)
                    cur.execute(f"UPDATE {table} SET v = v - 1 WHERE v BETWEEN %s AND %s",
                                (low, low + rng.randint(0, 30)))
                elif op < 0.90:
                    # large transaction: many rows in one statement
                    rows = [(*spec.make_key(rng, rng.randrange(KEY_SPACE)), *_values(rng))
                            for _ in range(120)]
                    cur.executemany(insert_sql(db, spec).replace("INSERT", "INSERT IGNORE", 1), rows)
                else:
                    low = rng.randint(-1000, 1000)
                    cur.execute(f"DELETE FROM {table} WHERE v BETWEEN %s AND %s",
                                (low, low + rng.randint(0, 8)))
                statements += 1
        if rng.random() < 0.08:
            conn.rollback()
            with self._lock:
                self.stats.rollbacks += 1
        else:
            conn.commit()
            with self._lock:
                self.stats.transactions += 1
                self._progress.notify_all()
        with self._lock:
            self.stats.statements += statements


def fetch_table(conn: pymysql.connections.Connection, database: str, table: str, select_list: str,
                normalize: Callable[[tuple], tuple]) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT {select_list} FROM `{database}`.`{table}`")
        return [normalize(r) for r in cur.fetchall()]


def as_rows(records: list[dict[str, Any]], names: list[str]) -> list[tuple]:
    return [tuple(r[c] for c in names) for r in records]


class SingleRowWriters:
    """One seeded writer of single-row inserts, updates and deletes over ``tables`` (each with an integer
    ``id`` and an integer ``column``) while DDL reshapes them: a statement the DDL blocks or refuses is
    skipped."""

    def __init__(self, open_conn: Callable[[], Any], tables: tuple[str, ...], column: str, seed: int,
                 weights: tuple[float, ...] | None = None, limit: int | None = None) -> None:
        self.open_conn, self.tables, self.column, self.weights = open_conn, tables, column, weights
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {t: 0 for t in tables}
        # a volume bound: the writer idles once ``limit`` statements took effect (None: no bound) until it is
        # allowed more (``allow``) or stopped
        self.limit = limit
        self._stop = threading.Event()
        self._written = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SingleRowWriters:
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(30)
        return self.counts

    @property
    def written(self) -> int:
        return sum(self.counts.values())

    def allow(self, more: int) -> None:
        """Let a bounded writer write ``more`` statements beyond what it wrote so far."""
        with self._written:
            self.limit = self.written + more
            self._written.notify_all()

    def wait_for(self, total: int, timeout: float = 120.0) -> None:
        """Wait until ``total`` statements took effect (or the writer ended): a volume, not a time."""
        deadline = time.monotonic() + timeout
        with self._written:
            while self.written < total and self._thread.is_alive():
                left = deadline - time.monotonic()
                assert left > 0, f"the writer wrote {self.written} of {total} statements"
                self._written.wait(min(left, 0.5))

    def _bound_reached(self) -> bool:
        return self.limit is not None and self.written >= self.limit

    def _run(self) -> None:
        next_id, col = 10_000, self.column
        with self.open_conn() as conn:
            while not self._stop.is_set():
                if self._bound_reached():
                    with self._written:  # idle until allowed more (allow) or stopped
                        self._written.wait(0.1)
                    continue
                table = self.rng.choices(self.tables, self.weights)[0]
                kind, key = self.rng.random(), self.rng.randrange(1, 200)
                if kind < 0.4:
                    next_id += 1
                    sql, args = f"INSERT INTO {table} (id, {col}) VALUES (%s, %s)", (next_id, key)
                elif kind < 0.85:
                    sql, args = f"UPDATE {table} SET {col} = {col} + 1 WHERE id = %s", (key,)
                else:
                    sql, args = f"DELETE FROM {table} WHERE id = %s", (key,)
                try:
                    with conn.cursor() as cur:
                        cur.execute(sql, args)
                    with self._written:
                        self.counts[table] += 1
                        self._written.notify_all()
                except pymysql.err.MySQLError:
                    pass  # e.g. a lock wait cut short by the DDL: the next statement goes on
                time.sleep(0.004)
