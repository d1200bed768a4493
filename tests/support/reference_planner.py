"""The uneven split as it was before the index walk and the one-pass strategy, frozen as a reference for the
planner tests and ``bench/planning.py``: one ``LIMIT 1 OFFSET chunk_size`` query per chunk, equality under the
collation decided by ``KeyOrder``."""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.chunks.key_sql import key_select_sql, tuple_compare_sql


def old_uneven_boundaries(conn, schema, columns, order, chunk_size):
    """Boundaries of the old uneven split (see the module docstring)."""
    quoted = [c.quoted for c in columns]
    select = key_select_sql(columns)
    order_by = ", ".join(quoted)
    not_null = " AND ".join(f"{q} IS NOT NULL" for q, c in zip(quoted, columns) if c.nullable) or "1 = 1"
    table = schema.table.quoted
    boundaries = []
    with conn.cursor() as cur:
        cur.execute(f"SELECT {select} FROM {table} WHERE {not_null} ORDER BY {order_by} LIMIT 1")
        row = cur.fetchone()
        if row is None:
            return boundaries
        floor = order.normalize(row)
        start = None
        while True:
            where, params = (not_null, []) if start is None else tuple_compare_sql(quoted, start, ">=")
            cur.execute(f"SELECT {select} FROM {table} WHERE {where} ORDER BY {order_by} LIMIT 1 OFFSET %s",
                        [*params, chunk_size])
            row = cur.fetchone()
            if row is None:
                break
            boundary = order.normalize(row)
            previous = floor if start is None else start
            if order.compare(boundary, previous) <= 0:
                where, params = tuple_compare_sql(quoted, previous, ">")
                cur.execute(f"SELECT {select} FROM {table} WHERE {where} ORDER BY {order_by} LIMIT 1", params)
                row = cur.fetchone()
                if row is None:
                    break
                boundary = order.normalize(row)
            boundaries.append(boundary)
            start = boundary
    return boundaries
