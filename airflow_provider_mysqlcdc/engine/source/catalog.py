"""The source's catalog: which tables exist (names and patterns resolved), and each table's columns and keys.

Read from ``information_schema`` on the caller's session; every value is a parameter, never formatted into
SQL.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect


def find_tables(settings: MySQLSettings, patterns: Iterable[str]) -> list[TableId]:
    """``list_tables`` on a session of its own."""
    with connect(settings) as conn:
        return list_tables(conn, patterns)


def list_tables(conn: pymysql.connections.Connection, patterns: Iterable[str]) -> list[TableId]:
    """Resolve ``db.table`` names and ``db.orders_*`` patterns (``*``, ``?``, ``[...]``) to existing base
    tables (``engine/model/table_names.py``: an exact name selects its table even with glob characters in it,
    and `` `db`.`name` `` quotes any name).

    A plain name that does not exist, or a pattern that matches nothing, is an error naming it.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')"
        )
        existing = [TableId(str(db), str(name)) for db, name in cur.fetchall()]
    found: list[TableId] = []
    for pattern in patterns:
        parsed = TablePattern.parse(pattern)
        matches = parsed.select(existing)
        if not matches:
            kind = "pattern" if parsed.is_pattern else "table"
            raise ConfigurationError(
                f"{kind} {pattern!r} matches no table the CDC user can see: check the name, and that the "
                "user has SELECT on it"
            )
        found.extend(t for t in sorted(matches) if t not in found)
    return found


_COLUMNS = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME, "
    "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION{extra} "
    "FROM information_schema.COLUMNS WHERE {where} ORDER BY {order}ORDINAL_POSITION"
)
# Tables per information_schema query of load_schemas: a bounded statement, whatever the number of tables.
SCHEMA_BATCH = 500


def load_schema(conn: pymysql.connections.Connection, table: TableId) -> TableSchema:
    with conn.cursor() as cur:
        cur.execute(_COLUMNS.format(extra="", where="TABLE_SCHEMA = %s AND TABLE_NAME = %s", order=""),
                    (table.database, table.table))
        rows = cur.fetchall()
        if not rows:
            raise ConfigurationError(f"table {table} does not exist or the CDC user cannot see it")
        columns = tuple(_column(r) for r in rows)
        primary_key = primary_key_columns(cur, table)
        cur.execute(
            "SELECT ENGINE, TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table.database, table.table),
        )
        engine, approx = cur.fetchone() or (None, 0)
    return TableSchema(table, columns, primary_key, engine=engine, approximate_rows=int(approx or 0))


def load_schemas(conn: pymysql.connections.Connection,
                 tables: Sequence[TableId]) -> dict[TableId, TableSchema]:
    """The schemas of many tables in three ``information_schema`` queries per database (and per
    ``SCHEMA_BATCH`` tables), instead of three per table: what planning or starting a snapshot of thousands of
    small tables would otherwise spend most of its time on. A table is matched by its exact name; one not
    found so (a differently spelled name on a case-insensitive server, or a missing table) goes through
    :func:`load_schema`, which resolves it or raises the same error."""
    by_db: dict[str, list[str]] = {}
    for table in dict.fromkeys(tables):
        by_db.setdefault(table.database, []).append(table.table)
    columns: dict[TableId, list[Column]] = {}
    keys: dict[TableId, list[str]] = {}
    info: dict[TableId, tuple[Any, Any]] = {}
    with conn.cursor() as cur:
        for db, names in by_db.items():
            for i in range(0, len(names), SCHEMA_BATCH):
                part = names[i:i + SCHEMA_BATCH]
                where = f"TABLE_SCHEMA = %s AND TABLE_NAME IN ({', '.join(['%s'] * len(part))})"
                args = (db, *part)
                cur.execute(_COLUMNS.format(extra=", TABLE_NAME", where=where, order="TABLE_NAME, "), args)
                for row in cur.fetchall():
                    columns.setdefault(TableId(db, str(row[-1])), []).append(_column(row))
                cur.execute("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
                            f"{where} AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_NAME, ORDINAL_POSITION",
                            args)
                for name, column in cur.fetchall():
                    keys.setdefault(TableId(db, str(name)), []).append(str(column))
                cur.execute("SELECT TABLE_NAME, ENGINE, TABLE_ROWS FROM information_schema.TABLES "
                            f"WHERE {where}", args)
                for name, engine, approx in cur.fetchall():
                    info[TableId(db, str(name))] = (engine, approx)
    schemas = {}
    for table in tables:
        if table in schemas:
            continue
        if table not in columns:
            schemas[table] = load_schema(conn, table)
            continue
        engine, approx = info.get(table, (None, 0))
        schemas[table] = TableSchema(table, tuple(columns[table]), tuple(keys.get(table, ())), engine=engine,
                                     approximate_rows=int(approx or 0))
    return schemas


def _column(r: Sequence[Any]) -> Column:
    return Column(
        name=str(r[0]), data_type=str(r[1]).lower(), column_type=str(r[2]), nullable=r[3] == "YES",
        charset=r[4], collation=r[5],
        char_max_length=int(r[6]) if r[6] is not None else None,
        numeric_precision=int(r[7]) if r[7] is not None else None,
        numeric_scale=int(r[8]) if r[8] is not None else None,
        datetime_precision=int(r[9]) if r[9] is not None else None,
    )


def primary_key_columns(cur: pymysql.cursors.Cursor, table: TableId) -> tuple[str, ...]:
    """The primary key's columns in key order (an empty tuple: the table has none)."""
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
        (table.database, table.table),
    )
    return tuple(str(r[0]) for r in cur.fetchall())
