"""Chunk keys in SQL: parameters, select lists and the predicate that puts a row in its chunk.

The server evaluates these under each column's collation: this is how the snapshot side decides membership.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.engine.model.tables import Column, TableSchema

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan


def sql_param(value: Any) -> Any:
    """A key value as a query parameter: aware datetimes become naive UTC (every session runs in UTC)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def key_select_sql(columns: Sequence[Column]) -> str:
    """Select list that reads key values exactly: FLOAT is widened, since its text form has only 6 digits."""
    return ", ".join(f"CAST({c.quoted} AS DOUBLE)" if c.data_type == "float" else c.quoted for c in columns)


def tuple_compare_sql(quoted_columns: Sequence[str], values: Sequence[Any], op: str) -> tuple[str, list[Any]]:
    """``(k1, k2, ...) <op> (v1, v2, ...)`` expanded into ANDs and ORs, which index range scans understand.

    ``(k1 > a) OR (k1 = a AND k2 >= b)``, led by ``k1 >= a`` (or ``k1 <= a``) so the optimizer sees a range on
    the first column. Row constructors are avoided: older optimizers do not use indexes for them.
    """
    if op not in (">=", ">", "<", "<="):
        raise ValueError(f"unsupported comparison {op!r}")
    if len(quoted_columns) != len(values) or not values:
        raise ValueError("a key comparison needs one value per key column")
    params_in = [sql_param(v) for v in values]
    if len(quoted_columns) == 1:
        return f"{quoted_columns[0]} {op} %s", params_in
    strict = op[0]
    ors: list[str] = []
    params: list[Any] = []
    last = len(quoted_columns) - 1
    for i in range(len(quoted_columns)):
        terms = [f"{quoted_columns[j]} = %s" for j in range(i)]
        terms.append(f"{quoted_columns[i]} {op if i == last else strict} %s")
        ors.append("(" + " AND ".join(terms) + ")")
        params.extend(params_in[: i + 1])
    lead = f"{quoted_columns[0]} {strict}= %s"
    return f"({lead} AND ({' OR '.join(ors)}))", [params_in[0], *params]


def chunk_predicate(
    chunk: Chunk, quoted_columns: Sequence[str], nullable: Sequence[bool] | None = None
) -> tuple[str, list[Any]]:
    """WHERE fragment (and its parameters) for the rows of ``[chunk.start, chunk.end)``.

    The server compares under each column's collation, so this agrees with ``KeyOrder`` by construction. A
    row with NULL in a key column belongs to the first chunk only (``nullable`` flags the nullable columns).
    """
    flags = list(nullable) if nullable is not None else [False] * len(quoted_columns)
    if len(flags) != len(quoted_columns):
        raise ValueError("nullable needs one flag per key column")
    nullable_cols = [c for c, f in zip(quoted_columns, flags) if f]
    parts: list[str] = []
    params: list[Any] = []
    if chunk.start is not None:
        sql, p = tuple_compare_sql(quoted_columns, chunk.start, ">=")
        parts.append(sql)
        params.extend(p)
    if chunk.end is not None:
        sql, p = tuple_compare_sql(quoted_columns, chunk.end, "<")
        parts.append(sql)
        params.extend(p)
    if chunk.start is not None and len(quoted_columns) > 1:
        # A composite comparison can be true with NULL in a later column: such rows belong to the first chunk.
        parts.extend(f"{c} IS NOT NULL" for c in nullable_cols)
    where = " AND ".join(parts) if parts else "1 = 1"
    if chunk.start is None and nullable_cols and chunk.end is not None:
        null_sql = " OR ".join(f"{c} IS NULL" for c in nullable_cols)
        where = f"(({where}) OR {null_sql})"
    return where, params


def plan_predicate(plan: ChunkPlan, schema: TableSchema, chunk: Chunk) -> tuple[str, list[Any]]:
    """``chunk_predicate`` with the plan's key columns quoted and their nullability from ``schema``."""
    columns = [schema.column(c) for c in plan.key_columns]
    return chunk_predicate(chunk, [c.quoted for c in columns], [c.nullable for c in columns])
