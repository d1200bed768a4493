"""Chunk planning: where a table's snapshot is split into ``[start, end)`` ranges of its chunk key.

The chunk key is the primary key (as a tuple: a composite key whose first column has few distinct values
still gives bounded chunks) or a configured ``chunk_key`` column. A single integer/decimal key that is dense
enough is split by arithmetic (*even* split); anything else every ``chunk_size`` rows of the key in server
order (*uneven* split: one ``LIMIT``/``OFFSET`` query per chunk along an index that starts with the key, or
one ordered pass over the key when no index does; see ``_uneven_boundaries``). The first chunk is
``(-inf, x)`` and also holds the rows whose chunk key is NULL; the last is ``[y, +inf)``. A plan carries the
generation the chunk store allocated, so boundaries of two plans never mix.
"""
from __future__ import annotations

import decimal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pymysql
import pymysql.cursors

from airflow_provider_mysqlcdc.engine.chunks.key_codec import Key
from airflow_provider_mysqlcdc.engine.chunks.key_order import ConnFactory, KeyOrder, validate_chunk_key
from airflow_provider_mysqlcdc.engine.chunks.key_sql import key_select_sql, tuple_compare_sql
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan, chunks_from_boundaries
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema, quote_ident
from airflow_provider_mysqlcdc.engine.source.catalog import load_schemas
from airflow_provider_mysqlcdc.engine.source.identity import ServerIdentity
from airflow_provider_mysqlcdc.engine.source.limits import is_query_timeout
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

DEFAULT_CHUNK_SIZE = 32768  # rows; why this size: docs/operations.md#chunk-size
DEFAULT_DISTRIBUTION_FACTOR_BOUNDS = (0.05, 1000.0)
# Below this many estimated rows an exact COUNT(*) is cheap, and InnoDB's estimate is least reliable.
EXACT_COUNT_BELOW = 1_000_000
EVEN, UNEVEN = "even", "uneven"
_WIDE_DECIMAL = decimal.Context(prec=200)  # DECIMAL has at most 65 digits: arithmetic here never rounds



def choose_chunk_key(schema: TableSchema, chunk_key: str | None = None) -> tuple[str, ...]:
    """The configured ``chunk_key`` column, else the primary key; checked to be orderable."""
    if chunk_key is not None and chunk_key.strip():
        wanted = chunk_key.strip()
        names = schema.column_names
        # Column names are case-insensitive in MySQL: accept any spelling, keep the table's.
        match = wanted if wanted in names else next((n for n in names if n.lower() == wanted.lower()), None)
        if match is None:
            raise ConfigurationError(
                f"chunk_key {wanted!r} is not a column of table {schema.table} (columns: {names}): "
                "fix the option chunk_key"
            )
        key: tuple[str, ...] = (match,)
    elif schema.primary_key:
        key = tuple(schema.primary_key)
    else:
        raise ConfigurationError(
            f"table {schema.table} has no primary key: give it a chunk key, a column to split the snapshot "
            f"by (ideally indexed and nearly unique): the DAG param / plan operator argument chunk_keys "
            f'{{"{schema.table}": "<column>"}}, or mysqlcdc plan --chunk-key {schema.table}=<column>'
        )
    validate_chunk_key(schema, key)
    return key


def plan_table(
    conn_factory: ConnFactory,
    table: TableId,
    generation: int,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_key: str | None = None,
    distribution_factor_bounds: tuple[float, float] = DEFAULT_DISTRIBUTION_FACTOR_BOUNDS,
    zero_dates: str = "keep",
) -> ChunkPlan:
    """Split ``table`` into chunks of about ``chunk_size`` rows (generation given by the chunk store);
    ``zero_dates`` is how the lake will write its zero dates (``values.ZERO_DATE_MODES``)."""
    return plan_batch(
        conn_factory, [(table, generation)], chunk_size=chunk_size,
        chunk_keys={str(table): chunk_key} if chunk_key is not None else None,
        distribution_factor_bounds=distribution_factor_bounds, zero_dates=zero_dates,
    )[0]


def plan_batch(
    conn_factory: ConnFactory,
    tables: Sequence[tuple[TableId, int]],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_keys: Mapping[str, str] | None = None,
    distribution_factor_bounds: tuple[float, float] = DEFAULT_DISTRIBUTION_FACTOR_BOUNDS,
    zero_dates: str = "keep",
) -> list[ChunkPlan]:
    """:func:`plan_table` for each ``(table, generation)``, on one session: the server's identity and binlog
    position are read once, before every schema (so each plan's ``planned_at`` precedes what it was planned
    from), and the schemas come in a few ``information_schema`` queries. A table of a few thousand rows then
    costs its own ``COUNT(*)`` and ``MIN``/``MAX`` only. ``chunk_keys``: a chunk key column by table name."""
    values.check_zero_date_mode(zero_dates)
    if chunk_size < 1:
        raise ConfigurationError(f"chunk_size must be at least 1, got {chunk_size}")
    low_bound, high_bound = distribution_factor_bounds
    if not 0 < low_bound <= high_bound:
        raise ConfigurationError(
            "distribution_factor_bounds must be (low, high) with 0 < low <= high, "
            f"got {distribution_factor_bounds}"
        )
    if not tables:
        return []
    conn = conn_factory()
    try:
        info = server_info(conn)
        status = current_binlog_status(conn, info)
        planned_at = BinlogPosition(status.file, status.position)
        planned_on = ServerIdentity.of(info).token  # whose binlog planned_at names
        schemas = load_schemas(conn, [table for table, _ in tables])
        plans = []
        for table, generation in tables:
            schema = schemas[table]
            key_columns = choose_chunk_key(schema, (chunk_keys or {}).get(str(table)))
            rows, split, boundaries = _split(conn, conn_factory, schema, key_columns, chunk_size,
                                             distribution_factor_bounds)
            plans.append(ChunkPlan(
                table=table,
                generation=generation,
                key_columns=key_columns,
                chunks=chunks_from_boundaries(boundaries),
                split=split,
                chunk_size=chunk_size,
                row_estimate=rows,
                planned_at=planned_at,
                zero_dates=zero_dates,
                planned_on=planned_on,
            ))
    finally:
        conn.close()
    return plans


def _split(
    conn: pymysql.connections.Connection,
    conn_factory: ConnFactory,
    schema: TableSchema,
    key_columns: tuple[str, ...],
    chunk_size: int,
    bounds: tuple[float, float],
) -> tuple[int, str, list[Key]]:
    """The table's row count (exact below ``EXACT_COUNT_BELOW``), how it was split, and the boundaries."""
    columns = [schema.column(c) for c in key_columns]
    rows = _row_count(conn, schema)
    with KeyOrder(conn_factory, schema, key_columns) as order:
        if len(columns) == 1 and (columns[0].is_integer or columns[0].is_decimal):
            boundaries = _even_boundaries(conn, schema, columns[0], rows, chunk_size, bounds)
            if boundaries is not None:
                return rows, EVEN, boundaries
        return rows, UNEVEN, _uneven_boundaries(conn, schema, columns, order, chunk_size)


def _row_count(conn: pymysql.connections.Connection, schema: TableSchema) -> int:
    if schema.approximate_rows >= EXACT_COUNT_BELOW:
        return schema.approximate_rows
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {schema.table.quoted}")
        (count,) = cur.fetchone()
    return int(count)


def _even_boundaries(
    conn: pymysql.connections.Connection,
    schema: TableSchema,
    column: Column,
    rows: int,
    chunk_size: int,
    bounds: tuple[float, float],
) -> list[Key] | None:
    """Arithmetic boundaries ``min + i*step``, or None when the key is too sparse or too dense for them.

    Decimals are split in units of their scale (DECIMAL(10,2) counts cents), so the distribution factor means
    the same for them as for integers: possible key values per row.
    """
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({column.quoted}), MAX({column.quoted}) FROM {schema.table.quoted}")
        low, high = cur.fetchone()
    if low is None or high is None or rows <= 0:
        return []  # empty, or only NULL keys: one chunk holds everything
    scale = (column.numeric_scale or 0) if column.is_decimal else 0
    lo, hi = _scaled(low, scale), _scaled(high, scale)
    span = hi - lo + 1
    # factor = span / rows, compared exactly (no float overflow for unsigned BIGINT spans).
    low_bound, high_bound = (Fraction(str(b)) for b in bounds)
    if not (low_bound * rows <= span <= high_bound * rows):
        return None
    step = max(1, -(-chunk_size * span // rows))  # ceil(chunk_size * factor), at least 1
    return [(_unscaled(lo + i * step, column, scale),) for i in range(1, (hi - lo) // step + 1)]


def _scaled(value: Any, scale: int) -> int:
    with decimal.localcontext(_WIDE_DECIMAL):
        return int(Decimal(value).scaleb(scale))


def _unscaled(value: int, column: Column, scale: int) -> Any:
    if not column.is_decimal:
        return value
    with decimal.localcontext(_WIDE_DECIMAL):
        return Decimal(value).scaleb(-scale)


def _uneven_boundaries(
    conn: pymysql.connections.Connection,
    schema: TableSchema,
    columns: Sequence[Column],
    order: KeyOrder,
    chunk_size: int,
) -> list[Key]:
    """Boundaries every ``chunk_size`` rows of the key in server order (NULL keys go to the first chunk).

    The rule (both strategies give the same boundaries): the first chunk holds the first ``chunk_size`` rows;
    every chunk ``[start, ...)`` ends at the key of the row ``chunk_size`` rows after the first row whose key
    equals ``start`` (the row ``LIMIT 1 OFFSET chunk_size`` of ``WHERE key >= start ORDER BY key``). When that
    row's key equals ``start`` under the collation (a non-unique chunk key), the boundary is the next greater
    key instead. So keys the server calls equal never straddle a boundary, boundaries strictly increase, and a
    chunk holds at most ``chunk_size`` rows unless a single key value has more (that group is one chunk).

    Two strategies, picked by whether an index yields the key order:

    * **index walk** (an index starts with the chunk key columns): one ``LIMIT 1 OFFSET chunk_size`` query per
      chunk. The server skips ``chunk_size`` index entries per query, reads the index once in total and ships
      one row per chunk; each statement is short (no long read view or metadata lock).
    * **one ordered pass** (no such index): ``GROUP BY key ORDER BY key`` streamed through an unbuffered
      cursor, sorted once by the server (``SQL_BIG_RESULT``: sort, then group) and counted per key; client
      memory is the boundaries only. Per-chunk queries would make the server sort the table once per chunk.
    """
    index = _ordering_index(conn, schema, [c.name for c in columns])
    if index is not None:
        boundaries = _walk_index(conn, schema, columns, order, chunk_size, index)
    else:
        boundaries = _one_ordered_pass(conn, schema, columns, order, chunk_size)
    _check_increasing(schema, order, boundaries)
    return boundaries


def _ordering_index(
    conn: pymysql.connections.Connection, schema: TableSchema, key_columns: Sequence[str]
) -> str | None:
    """An index whose leading columns are the chunk key (whole columns, ascending, B-tree, usable), or None.

    A secondary index is preferred to PRIMARY (InnoDB's primary key holds whole rows, a secondary index only
    its columns), then the one with the fewest columns.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT * FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema.table.database, schema.table.table),
        )
        names = [d[0].upper() for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    indexes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        indexes.setdefault(str(row["INDEX_NAME"]), []).append(row)
    wanted = [c.lower() for c in key_columns]
    usable: list[tuple[bool, int, str]] = []
    for name, parts in indexes.items():
        parts.sort(key=lambda r: int(r["SEQ_IN_INDEX"]))
        if len(parts) < len(wanted):
            continue
        if str(parts[0].get("INDEX_TYPE") or "").upper() != "BTREE":
            continue  # HASH (MEMORY tables), FULLTEXT, SPATIAL: no order
        if str(parts[0].get("IGNORED") or "NO").upper() == "YES":
            continue  # MariaDB: ALTER TABLE ... ALTER INDEX ... IGNORED
        if str(parts[0].get("IS_VISIBLE") or "YES").upper() == "NO":
            continue  # MySQL: invisible index
        if all(
            str(part.get("COLUMN_NAME") or "").lower() == column
            and part.get("SUB_PART") is None  # a prefix index does not order whole values
            and str(part.get("COLLATION") or "").upper() == "A"  # ascending (not DESC, not unsorted)
            for part, column in zip(parts, wanted)
        ):
            usable.append((name == "PRIMARY", len(parts), name))
    return min(usable)[2] if usable else None


def _walk_index(
    conn: pymysql.connections.Connection,
    schema: TableSchema,
    columns: Sequence[Column],
    order: KeyOrder,
    chunk_size: int,
    index: str,
) -> list[Key]:
    """The boundary rule by one query per chunk on ``index``; the server decides key equality (``key > start``
    is part of the same query), so no sort keys are needed until the final check."""
    quoted = [c.quoted for c in columns]
    select = key_select_sql(columns)
    order_by = ", ".join(quoted)
    not_null = " AND ".join(f"{q} IS NOT NULL" for q, c in zip(quoted, columns) if c.nullable) or "1 = 1"
    source = f"{schema.table.quoted} FORCE INDEX ({quote_ident(index)})"
    boundaries: list[Key] = []
    with conn.cursor() as cur:
        # The smallest key: a first boundary equal to it would leave the first chunk empty (non-unique key).
        cur.execute(f"SELECT {select} FROM {source} WHERE {not_null} ORDER BY {order_by} LIMIT 1")
        row = cur.fetchone()
        if row is None:
            return boundaries
        previous = order.normalize(row)
        while True:
            after, after_params = tuple_compare_sql(quoted, previous, ">")
            if boundaries:
                where, params = tuple_compare_sql(quoted, previous, ">=")
            else:
                where, params = not_null, []
            cur.execute(
                f"SELECT {select}, {after} FROM {source} WHERE {where} ORDER BY {order_by} LIMIT 1 OFFSET %s",
                [*after_params, *params, chunk_size],
            )
            row = cur.fetchone()
            if row is None:
                break
            if not row[-1]:  # equal to the chunk's start under the collation: the next greater key instead
                cur.execute(
                    f"SELECT {select} FROM {source} WHERE {after} ORDER BY {order_by} LIMIT 1", after_params
                )
                row = cur.fetchone()
                if row is None:
                    break
            else:
                row = row[:-1]
            previous = order.normalize(row)
            boundaries.append(previous)
    return boundaries


def _one_ordered_pass(
    conn: pymysql.connections.Connection,
    schema: TableSchema,
    columns: Sequence[Column],
    order: KeyOrder,
    chunk_size: int,
) -> list[Key]:
    """The boundary rule from one streamed ``GROUP BY`` of the key: each distinct key (as the server groups
    it, under the collation) with its row count."""
    quoted = ", ".join(c.quoted for c in columns)
    not_null = " AND ".join(f"{c.quoted} IS NOT NULL" for c in columns if c.nullable) or "1 = 1"
    sql = (
        f"SELECT SQL_BIG_RESULT {key_select_sql(columns)}, COUNT(*) FROM {schema.table.quoted} "
        f"WHERE {not_null} GROUP BY {quoted} ORDER BY {quoted}"
    )
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        try:
            cur.execute(sql)
            boundaries = _boundaries_from_groups(_groups(cur), chunk_size)
        except pymysql.err.OperationalError as exc:
            if not is_query_timeout(exc):
                raise
            reason = exc.args[1] if len(exc.args) > 1 else exc
            raise CdcError(
                f"table {schema.table}: planning chunks by one ordered pass over chunk key ({quoted}) hit "
                f"the server's statement time limit ({reason}). Fix: add an index that starts with the chunk "
                "key column(s) (planning then walks the index), or raise max_statement_time (MariaDB) / "
                "max_execution_time (MySQL) for the CDC user"
            ) from exc
    return [order.normalize(key) for key in boundaries]


def _groups(cur: pymysql.cursors.SSCursor, batch: int = 10_000) -> Iterator[tuple[Key, int]]:
    while rows := cur.fetchmany(batch):
        for row in rows:
            yield tuple(row[:-1]), int(row[-1])


def _boundaries_from_groups(groups: Iterable[tuple[Key, int]], chunk_size: int) -> list[Key]:
    """The boundary rule over ``(key, rows)`` groups in key order (distinct under the collation).

    Positions count non-NULL rows from 0. A chunk starting at a group that begins at position ``p`` ends at
    the group holding position ``p + chunk_size``; if that is the start group itself, at the group after it.
    """
    boundaries: list[Key] = []
    target: int | None = None  # position of the row the current chunk ends at
    jump = False  # the target fell inside the start group: the next group is the boundary
    position = 0  # position of the first row of the current group
    for key, rows in groups:
        if target is None:  # the smallest key starts the first chunk
            target = chunk_size
        elif jump or target < position + rows:
            boundaries.append(key)
            target = position + chunk_size
        else:
            position += rows
            continue
        jump = target < position + rows
        position += rows
    return boundaries


def _check_increasing(schema: TableSchema, order: KeyOrder, boundaries: Sequence[Key]) -> None:
    """The server ordered the boundaries; Python's order (``KeyOrder``, which the stream uses to place events)
    must agree, or this chunk key cannot be planned. Sort keys are fetched in batches, not per boundary."""
    sort_keys = order.sort_keys(boundaries)
    for i in range(1, len(sort_keys)):
        if not sort_keys[i - 1] < sort_keys[i]:
            raise CdcError(
                f"table {schema.table}: the server returned key {boundaries[i]!r} as greater than "
                f"{boundaries[i - 1]!r}, but their sort keys disagree, so the stream could not place changes "
                f"in chunks by {', '.join(order.key_columns)}. Fix: set the option chunk_key to another "
                "orderable column (unique or not), or change the key column's collation"
            )
