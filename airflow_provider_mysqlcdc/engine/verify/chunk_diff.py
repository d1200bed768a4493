"""``verify --explain``: the first keys at which a chunk's source and lake rows differ.

Only that chunk's keys and row hashes cross the wire (each key column as its canonical text, the row as its
64-bit hash), read in a fresh read view; the lake side is the rule's state at the verdict's position. Under
concurrent writes the list can also name rows changed after that position: it says where to look, the
digests say whether the chunk differs.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from airflow_provider_mysqlcdc.engine.chunks.key_sql import plan_predicate
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableSchema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import column_text, row_hashes
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import column_text as column_sql
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import row_hash
from airflow_provider_mysqlcdc.engine.verify.lake_chunks import LakeTable

MAX_DIFFERENCES = 10

Row = tuple[tuple[str | None, ...], int]  # (key texts, row hash)


def first_differences(settings: MySQLSettings, plan: ChunkPlan, schema: TableSchema, lake: LakeTable,
                      chunk_id: int, columns: Sequence[Column], kept: Sequence[bool], flavor: str,
                      at: BinlogPosition | None, limit: int = MAX_DIFFERENCES) -> list[str]:
    keys = [c for c in columns if c.name in schema.primary_key]
    source = _source_rows(settings, plan, schema, chunk_id, columns, kept, keys)
    state = lake.rule_state(chunk_id, at=at)
    hashes = row_hashes(state, columns, flavor, kept)
    texts = [column_text(state, c, flavor).to_pylist() for c in keys]
    lake_rows = [(tuple(str(t) if t is not None else None for t in key), h)
                 for key, h in zip(zip(*texts) if keys else [()] * len(hashes), hashes)]
    return _differences(source, lake_rows, [c.name for c in keys], limit)


def _source_rows(settings: MySQLSettings, plan: ChunkPlan, schema: TableSchema, chunk_id: int,
                 columns: Sequence[Column], kept: Sequence[bool], keys: Sequence[Column]) -> list[Row]:
    where, params = plan_predicate(plan, schema, plan.chunk(chunk_id))
    key_sql = "".join(f"{column_sql(c)}, " for c in keys)
    sql = f"SELECT {key_sql}{row_hash(columns, kept)} FROM {schema.table.quoted} WHERE {where}"
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute(sql, params)
        rows = cur.fetchall()
        conn.rollback()
    n = len(keys)
    return [(tuple(_text(v) for v in r[:n]), int(r[n])) for r in rows]


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _differences(source: list[Row], lake: list[Row], key_names: list[str], limit: int) -> list[str]:
    if not key_names:  # no primary key: the rows are a multiset, told apart by their hashes
        want, got = Counter(h for _, h in source), Counter(h for _, h in lake)
        missing, extra = list((want - got).elements()), list((got - want).elements())
        out = [f"a source row (hash {h:016x}) is not in the lake" for h in missing[:limit]]
        return out + [f"a lake row (hash {h:016x}) is not in the source" for h in extra[:limit - len(out)]]
    src, lk = dict(source), dict(lake)
    out = []
    for key in sorted(set(src) | set(lk), key=lambda k: tuple("" if v is None else v for v in k)):
        name = ", ".join(f"{n}={v!r}" for n, v in zip(key_names, key))
        if key not in lk:
            out.append(f"{name}: in the source, not in the lake")
        elif key not in src:
            out.append(f"{name}: in the lake, not in the source")
        elif src[key] != lk[key]:
            out.append(f"{name}: the row's values differ")
        else:
            continue
        if len(out) >= limit:
            break
    return out
