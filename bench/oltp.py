"""The OLTP binlog range of the catch-up section: what applications write. Single-row INSERT, UPDATE and
DELETE statements by primary key, in transactions of 1-10 statements (uniform), over a few tables of the
engine benchmark's 6-column shape; statements are 40% inserts (new ids), 40% updates (a random live row),
20% deletes (the oldest live row), so a statement is 1.4 row images on average.

In the binlog each statement is its own TABLE_MAP + one rows event of one row (+ MariaDB's ANNOTATE_ROWS),
each transaction a GTID ... XID: ``binlog_shape`` checks that with ``SHOW BINLOG EVENTS``. The writer sends
many transactions per round trip (multi-statement text ``BEGIN; ...; COMMIT; BEGIN; ...``): the server still
executes and logs every statement alone and commits every transaction alone, so the binlog is the one many
clients' round trips would write, generated in a fraction of the time. Seeded: one seed, one binlog.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from catchup import Changes

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

TXNS_PER_ROUND_TRIP = 100
MAX_STATEMENTS = 10
COLUMNS = ("id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32) NOT NULL, c DECIMAL(12,2) NOT NULL, "
           "d DATETIME(6) NOT NULL, e TIMESTAMP(6) NULL")


def table_names(n: int) -> list[str]:
    return [f"bench.oltp_{i}" for i in range(1, n + 1)]


def preload_rows(images: int, tables: int) -> int:
    """Rows per table before the range: more than the deletes that will take them (20% of the statements)."""
    statements = images / 1.4
    return max(1000, int(statements * 0.2 / tables * 1.5))


def load_tables(server: Any, tables: list[str], rows: int) -> None:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
        for table in tables:
            cur.execute(f"CREATE TABLE {table} ({COLUMNS})")
            for low in range(1, rows + 1, 200_000):
                high = min(rows, low + 199_999)
                cur.execute(
                    f"INSERT INTO {table} SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 100, "
                    "'2024-01-01' + INTERVAL seq SECOND, '2024-06-01' + INTERVAL seq SECOND "
                    f"FROM bench.seq_{low}_to_{high}"
                )


@dataclass
class _Live:
    """One table's live ids: ``low..high``, all present (deletes take the lowest, inserts append)."""

    low: int
    high: int


def transactions(tables: list[str], rows: int, images: int, seed: int,
                 out: Changes) -> Iterator[list[str]]:
    """The statements of each transaction, until ``images`` row images; counts them into ``out``."""
    rng = random.Random(seed)
    live = {t: _Live(1, rows) for t in tables}
    made = 0
    while made < images:
        statements = []
        for _ in range(rng.randint(1, MAX_STATEMENTS)):
            table = rng.choice(tables)
            ids, kind = live[table], rng.random()
            if kind < 0.4 or ids.low > ids.high:
                ids.high += 1
                i = ids.high
                statements.append(
                    f"INSERT INTO {table} VALUES ({i}, {rng.randrange(1000)}, 'name-{i}', {i}/100, "
                    f"'2024-01-01' + INTERVAL {i} SECOND, '2024-06-01' + INTERVAL {i} SECOND)")
                out.inserts += 1
                made += 1
            elif kind < 0.8:
                i = rng.randint(ids.low, ids.high)
                statements.append(f"UPDATE {table} SET a = a + 1, b = 'upd-{out.updates}' WHERE id = {i}")
                out.updates += 1
                made += 2
            else:
                statements.append(f"DELETE FROM {table} WHERE id = {ids.low}")
                ids.low += 1
                out.deletes += 1
                made += 1
        out.transactions += 1
        out.statements += len(statements)
        yield statements


def write_oltp(server: Any, tables: list[str], rows: int, images: int, seed: int) -> Changes:
    """Write the range: at least ``images`` row images, ``TXNS_PER_ROUND_TRIP`` transactions a round trip."""
    import pymysql
    from pymysql.constants import CLIENT

    out = Changes(0, 0, 0)
    conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", password="", autocommit=True,
                           client_flag=CLIENT.MULTI_STATEMENTS, init_command="SET time_zone = '+00:00'")
    try:
        with conn.cursor() as cur:
            pending: list[str] = []
            for n, statements in enumerate(transactions(tables, rows, images, seed, out), 1):
                pending.append("BEGIN;" + ";".join(statements) + ";COMMIT")
                if n % TXNS_PER_ROUND_TRIP == 0:
                    _send(cur, pending)
            _send(cur, pending)
    finally:
        conn.close()
    return out


def _send(cur: Any, pending: list[str]) -> None:
    if pending:
        cur.execute(";".join(pending))
        while cur.nextset():  # every statement's result; an error in any of them raises here
            pass
        pending.clear()


# --- the binlog's shape -------------------------------------------------------------------------------------

ROWS_EVENTS = ("Write_rows", "Update_rows", "Delete_rows")


@dataclass
class Shape:
    """What ``SHOW BINLOG EVENTS`` lists between two positions."""

    events: int = 0
    table_maps: int = 0
    rows_events: int = 0
    transactions: int = 0  # XID events
    per_transaction: dict[int, int] = field(default_factory=dict)  # rows events per transaction -> count
    types: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        sizes = sorted(self.per_transaction)
        mean = self.rows_events / self.transactions if self.transactions else 0.0
        low, high = (sizes[0], sizes[-1]) if sizes else (0, 0)
        return (f"SHOW BINLOG EVENTS over the range: {self.events:,} events, {self.transactions:,} "
                f"transactions (XID) of {low}-{high} rows events (mean {mean:.1f}), "
                f"{self.rows_events:,} rows events, {self.table_maps:,} TABLE_MAPs")


def binlog_shape(server: Any, start: BinlogPosition, end: BinlogPosition) -> Shape:
    """Count the events of ``(start, end]`` by type, and rows events per transaction."""
    import pymysql.cursors

    shape, in_txn = Shape(), 0
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(r[0]) for r in cur.fetchall()]
    files = files[files.index(start.file):files.index(end.file) + 1]
    with server.admin() as conn, conn.cursor(pymysql.cursors.SSCursor) as cur:
        for name in files:
            since = f" FROM {start.pos}" if name == start.file else ""
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}'{since}")
            for _log, _pos, kind, _sid, end_pos, _info in cur:
                if name == end.file and int(end_pos) > end.pos:
                    continue  # read on to the end of the result: an unbuffered cursor must drain
                shape.events += 1
                shape.types[kind] = shape.types.get(kind, 0) + 1
                if kind == "Table_map":
                    shape.table_maps += 1
                elif kind.startswith(ROWS_EVENTS):
                    shape.rows_events += 1
                    in_txn += 1
                elif kind == "Xid":
                    shape.transactions += 1
                    shape.per_transaction[in_txn] = shape.per_transaction.get(in_txn, 0) + 1
                    in_txn = 0
    return shape


def check_shape(shape: Shape, made: Changes) -> None:
    """One TABLE_MAP and one rows event per statement, one XID per transaction, 1-10 statements each. (That
    each rows event holds one row follows with the raw reader's count of row images.)"""
    sizes = sorted(shape.per_transaction)
    problems = []
    if shape.rows_events != made.statements:
        problems.append(f"{shape.rows_events:,} rows events for {made.statements:,} statements")
    if shape.table_maps != made.statements:
        problems.append(f"{shape.table_maps:,} TABLE_MAPs for {made.statements:,} statements")
    if shape.transactions != made.transactions:
        problems.append(f"{shape.transactions:,} XIDs for {made.transactions:,} transactions")
    if sizes and (sizes[0] < 1 or sizes[-1] > MAX_STATEMENTS):
        problems.append(f"transactions of {sizes[0]}-{sizes[-1]} rows events")
    if problems:
        raise AssertionError("the OLTP range's binlog is not single-row statements in small transactions: "
                             + "; ".join(problems) + f" ({shape.types})")
