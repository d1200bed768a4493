"""Chunk planning on a real server: every row in exactly one chunk, and the Python chunk lookup (KeyOrder +
ChunkLocator) puts every key, read back or given as an event would give it, in the chunk the SQL predicate
does."""
from __future__ import annotations

import json
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from airflow_provider_mysqlcdc.engine.chunks import planner
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.key_sql import key_select_sql, plan_predicate
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.chunks.planner import choose_chunk_key, plan_table
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.reference_planner import old_uneven_boundaries
from tests.support.servers import numbers

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


@pytest.fixture
def factory(mysql_server):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    return lambda: connect(settings)


def create(mysql_server, db: str, ddl: str, rows: Sequence[Sequence[Any]] = (), table: str = "t") -> TableId:
    with mysql_server.admin(db) as conn, conn.cursor() as cur:
        cur.execute(ddl)
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            for i in range(0, len(rows), 5000):
                cur.executemany(f"INSERT INTO `{table}` VALUES ({marks})", list(rows[i:i + 5000]))
    return TableId(db, table)


def check_plan(
    mysql_server, factory, plan: ChunkPlan, events: Sequence[tuple] = (), max_rows: int | None = None
) -> list[int]:
    """Assert the plan partitions the table and that Python and SQL agree on every key; rows per chunk."""
    ids = [c.chunk_id for c in plan.chunks]
    assert ids == list(range(len(ids)))
    assert plan.chunks[0].start is None and plan.chunks[-1].end is None
    assert all(a.end == b.start for a, b in zip(plan.chunks, plan.chunks[1:]))
    assert ChunkPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan

    table = plan.table
    with mysql_server.admin(table.database) as conn, conn.cursor() as cur:
        schema = load_schema(conn, table)
        columns = [schema.column(c) for c in plan.key_columns]
        cur.execute(f"SELECT COUNT(*) FROM {table.quoted}")
        (total,) = cur.fetchone()
        with KeyOrder(factory, schema, plan.key_columns) as order:
            locator = ChunkLocator(plan, order)
            counts = []
            for chunk in plan.chunks:
                where, params = plan_predicate(plan, schema, chunk)
                cur.execute(f"SELECT {key_select_sql(columns)} FROM {table.quoted} WHERE {where}", params)
                keys = [tuple(r) for r in cur.fetchall()]
                counts.append(len(keys))
                located = locator.locate(keys)
                wrong = [k for k, c in zip(keys, located) if c != chunk.chunk_id]
                assert not wrong, f"chunk {chunk.chunk_id}: Python places {wrong[:3]} elsewhere"
            if events:
                check_events(cur, schema, plan, order, locator, events)
    assert sum(counts) == total, f"chunks hold {sum(counts)} rows, table has {total}"
    if max_rows is not None:
        assert max(counts) <= max_rows, f"largest chunk has {max(counts)} rows"
    return counts


def check_events(cur, schema, plan, order, locator, events: Sequence[tuple]) -> None:
    """Keys as an event would carry them (case/accent/padding variants...): the server, evaluating the chunk
    predicates on a copy of the key columns, and the locator must pick the same chunk."""
    columns = [schema.column(c) for c in plan.key_columns]
    defs = ", ".join(
        f"{c.quoted} {c.column_type}"
        + (f" CHARACTER SET {c.charset} COLLATE {c.collation}" if c.collation else "")
        for c in columns
    )
    cur.execute(f"CREATE TEMPORARY TABLE events_probe (eid INT PRIMARY KEY, {defs})")
    marks = ", ".join(["%s"] * (len(columns) + 1))
    cur.executemany(f"INSERT INTO events_probe VALUES ({marks})", [(i, *e) for i, e in enumerate(events)])
    server: dict[int, int] = {}
    for chunk in plan.chunks:
        where, params = plan_predicate(plan, schema, chunk)
        cur.execute(f"SELECT eid FROM events_probe WHERE {where}", params)
        for (eid,) in cur.fetchall():
            assert eid not in server, f"event key {events[eid]!r} matches two chunks"
            server[eid] = chunk.chunk_id
    cur.execute("DROP TEMPORARY TABLE events_probe")
    assert sorted(server) == list(range(len(events))), "some event key matches no chunk"
    located = locator.locate(list(events))
    wrong = [(events[i], server[i], located[i]) for i in range(len(events)) if server[i] != located[i]]
    assert not wrong, f"locator disagrees with the server (key, server, ours): {wrong[:5]}"


# --- edge cases -------------------------------------------------------------------------------------------


def test_empty_table_is_one_chunk(mysql_server, mysql_db, factory):
    for name, ddl in [("i", "CREATE TABLE i (id INT PRIMARY KEY)"),
                      ("s", "CREATE TABLE s (id VARCHAR(10) PRIMARY KEY)")]:
        table = create(mysql_server, mysql_db, ddl, table=name)
        plan = plan_table(factory, table, generation=3)
        assert plan.chunks == (Chunk(0, None, None),)
        assert (plan.generation, plan.row_estimate, plan.key_columns) == (3, 0, ("id",))
        check_plan(mysql_server, factory, plan, events=[("5",)])


def test_one_row(mysql_server, mysql_db, factory):
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id BIGINT PRIMARY KEY)", [(42,)])
    plan = plan_table(factory, table, generation=1, chunk_size=1)
    assert len(plan.chunks) == 1 and plan.row_estimate == 1
    check_plan(mysql_server, factory, plan, events=[(41,), (42,), (43,)])


def test_composite_key_with_few_leading_values_gives_bounded_chunks(mysql_server, mysql_db, factory):
    rows = [(t, i) for t in (1, 2, 3) for i in range(33_334)]  # 100,002 rows, 3 distinct first values
    ddl = "CREATE TABLE t (tenant TINYINT, id INT, PRIMARY KEY (tenant, id))"
    table = create(mysql_server, mysql_db, ddl, rows)
    plan = plan_table(factory, table, generation=1, chunk_size=2000)
    assert plan.split == "uneven" and plan.key_columns == ("tenant", "id")
    assert 50 <= len(plan.chunks) <= 52
    counts = check_plan(mysql_server, factory, plan, events=[(2, -1), (2, 40_000), (0, 0), (4, 0)],
                        max_rows=2000)
    assert min(counts[:-1]) == 2000  # every chunk but the last is exactly chunk_size


def test_dense_ids_split_evenly(mysql_server, mysql_db, factory):
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id INT PRIMARY KEY)",
                   [(i,) for i in range(1, 20_001)])
    plan = plan_table(factory, table, generation=1, chunk_size=1000)
    assert plan.split == "even" and len(plan.chunks) == 20
    assert [c.start for c in plan.chunks[1:4]] == [(1001,), (2001,), (3001,)]
    check_plan(mysql_server, factory, plan, events=[(0,), (1000,), (1001,), (10**9,)], max_rows=1000)


def test_sparse_ids_split_unevenly(mysql_server, mysql_db, factory):
    rng = random.Random(3)
    ids = rng.sample(range(10**12), 5000)
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id BIGINT PRIMARY KEY)", [(i,) for i in ids])
    plan = plan_table(factory, table, generation=1, chunk_size=300)
    assert plan.split == "uneven"  # distribution factor ~2e8 is above 1000
    counts = check_plan(mysql_server, factory, plan, events=[(i + 1,) for i in ids[:200]], max_rows=300)
    assert len(counts) == 17


def test_negative_ids(mysql_server, mysql_db, factory):
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id INT PRIMARY KEY)",
                   [(i,) for i in range(-10_000, 10_000, 2)])
    plan = plan_table(factory, table, generation=1, chunk_size=500)
    assert plan.split == "even" and plan.chunks[1].start == (-9000,)
    check_plan(mysql_server, factory, plan, events=[(-10_001,), (-9001,), (-9000,), (0,)], max_rows=500)


@pytest.mark.parametrize(
    "column_type, low, high",
    [("BIGINT", -(2**63), 2**63 - 1), ("BIGINT UNSIGNED", 0, 2**64 - 1), ("TINYINT", -128, 127),
     ("TINYINT UNSIGNED", 0, 255)],
)
def test_keys_at_type_limits(mysql_server, mysql_db, factory, column_type, low, high):
    rng = random.Random(column_type)
    values = {low, low + 1, high - 1, high, (low + high) // 2}
    if high > 2**32:
        values |= {v for v in (2**63 - 1, 2**63, 2**63 + 1, -1, 0, 1) if low <= v <= high}
        values |= {rng.randint(low, high) for _ in range(2000)}
    else:
        values |= set(range(low, high + 1))
    table = create(mysql_server, mysql_db, f"CREATE TABLE t (id {column_type} PRIMARY KEY)",
                   [(v,) for v in sorted(values)])
    events = [(v,) for v in sorted(values)[::7]] + [(low,), (high,)]
    for bounds in [(0.05, 1000.0), (0.05, 1e30)]:  # the second forces the even split over the full range
        plan = plan_table(factory, table, generation=1, chunk_size=100, distribution_factor_bounds=bounds)
        if high - low < 1000:
            assert plan.split == "even"
        elif bounds[1] > 1e20:
            assert plan.split == "even"
            assert all(low <= c.start[0] <= high for c in plan.chunks[1:])  # no overflow past the type
        counts = check_plan(mysql_server, factory, plan, events=events)
        assert len(counts) >= len(values) // 100 - 1


def test_decimal_keys_split_evenly_with_the_column_scale(mysql_server, mysql_db, factory):
    table = create(mysql_server, mysql_db, "CREATE TABLE t (amount DECIMAL(12,2) PRIMARY KEY)",
                   [(Decimal(i).scaleb(-2),) for i in range(-5000, 15000)])
    plan = plan_table(factory, table, generation=1, chunk_size=1000)
    assert plan.split == "even" and len(plan.chunks) == 20
    assert plan.chunks[1].start == (Decimal("-40.00"),)
    assert all(c.start[0].as_tuple().exponent == -2 for c in plan.chunks[1:])
    events = [(Decimal("-40.01"),), (Decimal(-40),), (Decimal("0.005"),)]
    check_plan(mysql_server, factory, plan, events=events, max_rows=1000)


def test_wide_decimal_keys_never_round(mysql_server, mysql_db, factory):
    rng = random.Random(5)
    values = sorted({Decimal(rng.randrange(-(10**64), 10**64)).scaleb(-30) for _ in range(3000)})
    ddl = "CREATE TABLE t (k DECIMAL(65,30) PRIMARY KEY)"
    table = create(mysql_server, mysql_db, ddl, [(v,) for v in values])
    for bounds in [(0.05, 1000.0), (1e-9, 1e80)]:
        plan = plan_table(factory, table, generation=1, chunk_size=200, distribution_factor_bounds=bounds)
        assert plan.split == ("even" if bounds[1] > 1e70 else "uneven")
        check_plan(mysql_server, factory, plan, events=[(v,) for v in values[::50]])


def test_datetime_keys(mysql_server, mysql_db, factory):
    rng = random.Random(9)
    start = datetime(2020, 1, 1)
    values = sorted({start + timedelta(microseconds=rng.randrange(10**14)) for _ in range(5000)})
    table = create(mysql_server, mysql_db, "CREATE TABLE t (ts DATETIME(6) PRIMARY KEY, v INT)",
                   [(v, 1) for v in values])
    plan = plan_table(factory, table, generation=1, chunk_size=400)
    assert plan.split == "uneven" and isinstance(plan.chunks[1].start[0], datetime)
    events = [(v,) for v in values[::97]] + [(v + timedelta(microseconds=1),) for v in values[::89]]
    check_plan(mysql_server, factory, plan, events=events, max_rows=400)


def test_case_insensitive_string_keys(mysql_server, mysql_db, factory):
    rng = random.Random(13)
    alphabet = "abcdeé ABCß"
    candidates = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(4000)})
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (k VARCHAR(10) COLLATE utf8mb4_unicode_ci PRIMARY KEY)")
        cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(v,) for v in candidates])  # 'a' = 'A ' here
        cur.execute("SELECT k FROM t")
        values = [r[0] for r in cur.fetchall()]
    assert len(values) > 2000
    plan = plan_table(factory, TableId(mysql_db, "t"), generation=1, chunk_size=250)
    assert plan.split == "uneven"
    events = []
    for v in candidates[::10]:  # variants an event may carry for the same or a neighbouring key
        events += [(v.upper(),), (v.lower(),), (v + " ",), (v + "\t",), (v.replace("e", "é"),),
                   (v.replace("ss", "ß"),), (v.rstrip(),)]
    boundaries = [c.start[0] for c in plan.chunks[1:]]
    events += [(b.swapcase(),) for b in boundaries] + [(b + "  ",) for b in boundaries]
    events = [e for e in events if len(e[0]) <= 10]  # 'ß'.upper() is 'SS': keep what the column can hold
    check_plan(mysql_server, factory, plan, events=events, max_rows=250)


@pytest.mark.parametrize("collation", ["utf8mb4_general_ci", "utf8mb4_unicode_520_ci", "utf8mb4_bin"])
def test_utf8mb4_emoji_keys(mysql_server, mysql_db, factory, collation):
    emoji = ["😀", "😁", "🙂", "🦀", "𝄞", "中", "文", "é", "e"]
    rng = random.Random(collation)
    candidates = sorted({"".join(rng.choice(emoji) for _ in range(rng.randint(1, 4))) for _ in range(3000)})
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (k VARCHAR(8) COLLATE {collation} PRIMARY KEY)")
        cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(v,) for v in candidates])  # collisions dropped
    plan = plan_table(factory, TableId(mysql_db, "t"), generation=1, chunk_size=100)
    check_plan(mysql_server, factory, plan, events=[(v,) for v in candidates[::5]], max_rows=100)


def test_binary_keys(mysql_server, mysql_db, factory):
    rng = random.Random(17)
    alphabet = [b"\x00", b"\x01", b" ", b"a", b"\xff"]
    values = sorted({b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(2000)})
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE vb (k VARBINARY(4) PRIMARY KEY)")
        cur.execute("CREATE TABLE b4 (k BINARY(4) PRIMARY KEY)")
        cur.executemany("INSERT INTO vb VALUES (%s)", [(v,) for v in values])
        cur.executemany("INSERT IGNORE INTO b4 VALUES (%s)", [(v,) for v in values])  # b"a" = b"a\0" here
    events = [(v,) for v in values[::3]] + [(v.rstrip(b"\x00"),) for v in values[::3]]
    for name in ("vb", "b4"):
        plan = plan_table(factory, TableId(mysql_db, name), generation=1, chunk_size=100)
        assert plan.split == "uneven"
        if name == "b4":  # boundaries are stored padded, as the server returns them
            assert all(len(c.start[0]) == 4 for c in plan.chunks[1:])
        check_plan(mysql_server, factory, plan, events=events, max_rows=100)


def test_float_and_double_keys(mysql_server, mysql_db, factory):
    rng = random.Random(19)
    values = sorted({round(rng.uniform(-1e4, 1e4), rng.randint(0, 9)) for _ in range(3000)})
    for column_type in ("DOUBLE", "FLOAT"):
        name = f"t_{column_type.lower()}"
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {name} (k {column_type} PRIMARY KEY)")
            cur.executemany(f"INSERT IGNORE INTO {name} VALUES (%s)", [(v,) for v in values])
        plan = plan_table(factory, TableId(mysql_db, name), generation=1, chunk_size=200)
        check_plan(mysql_server, factory, plan, events=[(v,) for v in values[::7]], max_rows=200)


def test_nullable_chunk_key_puts_nulls_in_the_first_chunk(mysql_server, mysql_db, factory):
    rng = random.Random(23)
    rows = [
        (i, None if i % 7 == 0 else rng.randrange(10_000), None if i % 5 == 0 else f"k{rng.randrange(10**6)}")
        for i in range(6000)
    ]
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id INT PRIMARY KEY, n INT, s VARCHAR(12))", rows)
    events = [(None,), (0,), (5000,), (9999,)]
    plan = plan_table(factory, table, generation=1, chunk_size=500, chunk_key="n")
    assert plan.key_columns == ("n",) and plan.split == "even"
    counts = check_plan(mysql_server, factory, plan, events=events)
    assert counts[0] >= sum(1 for r in rows if r[1] is None)
    plan = plan_table(factory, table, generation=2, chunk_size=500, chunk_key="S")  # any spelling of the name
    assert plan.key_columns == ("s",) and plan.split == "uneven"
    counts = check_plan(mysql_server, factory, plan, events=[(None,), ("k1",), ("zz",)])
    assert counts[0] == sum(1 for r in rows if r[2] is None) + 500
    with KeyOrder(factory, load_schema(mysql_server.admin(), table), ("s",)) as order:
        assert ChunkLocator(plan, order).locate([(None,)]) == [0]


def test_non_unique_chunk_key_terminates(mysql_server, mysql_db, factory):
    rows = [(i, ["x", "X", "y"][i % 3] if i % 11 else None) for i in range(20_000)]
    table = create(mysql_server, mysql_db, "CREATE TABLE t (id INT PRIMARY KEY, g VARCHAR(3))", rows)
    plan = plan_table(factory, table, generation=1, chunk_size=100, chunk_key="g")
    assert len(plan.chunks) <= 3  # 'x' = 'X' under the default case-insensitive collation
    check_plan(mysql_server, factory, plan, events=[("x",), ("X",), ("y ",), (None,), ("a",), ("z",)])
    # Few distinct integers over many rows: too dense for the even split, walked unevenly.
    table = create(mysql_server, mysql_db, "CREATE TABLE u (id INT PRIMARY KEY, g INT)",
                   [(i, i % 4) for i in range(20_000)], table="u")
    plan = plan_table(factory, table, generation=1, chunk_size=100, chunk_key="g")
    assert plan.split == "uneven" and [c.start for c in plan.chunks[1:]] == [(1,), (2,), (3,)]
    check_plan(mysql_server, factory, plan)


def test_table_without_primary_key_needs_a_chunk_key(mysql_server, mysql_db, factory):
    table = create(mysql_server, mysql_db, "CREATE TABLE t (a INT, b VARCHAR(5))", [(1, "x")])
    with pytest.raises(ConfigurationError) as info:
        plan_table(factory, table, generation=1)
    assert f"{mysql_db}.t" in str(info.value) and "chunk_key" in str(info.value)
    with pytest.raises(ConfigurationError, match="'nope' is not a column"):
        plan_table(factory, table, generation=1, chunk_key="nope")
    with pytest.raises(ConfigurationError, match="chunk_size"):
        plan_table(factory, table, generation=1, chunk_size=0, chunk_key="a")


def test_choose_chunk_key(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (a INT, b VARCHAR(5), doc JSON, PRIMARY KEY (b, a))")
        schema = load_schema(conn, TableId(mysql_db, "t"))
    assert choose_chunk_key(schema, None) == ("b", "a")
    assert choose_chunk_key(schema, "a") == ("a",)
    with pytest.raises(ConfigurationError, match="'doc'"):
        choose_chunk_key(schema, "doc")


def test_plan_round_trips_and_is_versioned():
    plan = ChunkPlan(
        table=TableId("db", "t.x"), generation=7, key_columns=("a", "b"),
        chunks=(Chunk(0, None, (2**64 - 1, b"\x00")), Chunk(1, (2**64 - 1, b"\x00"), None)),
        split="uneven", chunk_size=10, row_estimate=12,
    )
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["version"] == 1 and data["table"] == {"database": "db", "table": "t.x"}
    assert ChunkPlan.from_dict(data) == plan
    with pytest.raises(CdcError, match="version"):
        ChunkPlan.from_dict({**data, "version": 99})


def test_timestamp_keys_from_events_in_any_zone(mysql_server, mysql_db, factory):
    values = [datetime(2024, 3, 31, 0, 0) + timedelta(minutes=17 * i) for i in range(2000)]
    ddl = "CREATE TABLE t (ts TIMESTAMP PRIMARY KEY)"
    table = create(mysql_server, mysql_db, ddl, [(v,) for v in values])
    plan = plan_table(factory, table, generation=1, chunk_size=150)
    with mysql_server.admin(mysql_db) as conn:
        schema = load_schema(conn, table)
    check_plan(mysql_server, factory, plan, max_rows=150)
    with KeyOrder(factory, schema, ("ts",)) as order:
        locator = ChunkLocator(plan, order)
        zone = timezone(timedelta(hours=-7))
        naive = [(v,) for v in values[::13]]
        aware = [(v.replace(tzinfo=UTC).astimezone(zone),) for v in values[::13]]
        assert locator.locate(aware) == locator.locate(naive)


# --- uneven split: the index walk and the one ordered pass ------------------------------------------------


def old_rule_on_a_list(keys: list[int], chunk_size: int) -> list[int]:
    """The same walk over a sorted Python list (duplicates allowed), for the group arithmetic of the pass."""
    import bisect

    if not keys:
        return []
    boundaries: list[int] = []
    start = None
    while True:
        first = 0 if start is None else bisect.bisect_left(keys, start)
        if first + chunk_size >= len(keys):
            break
        boundary = keys[first + chunk_size]
        previous = keys[0] if start is None else start
        if boundary <= previous:
            after = bisect.bisect_right(keys, previous)
            if after >= len(keys):
                break
            boundary = keys[after]
        boundaries.append(boundary)
        start = boundary
    return boundaries


def test_group_arithmetic_of_the_pass_matches_the_walk():
    rng = random.Random(29)
    for _ in range(400):
        chunk_size = rng.randint(1, 12)
        choices = [1, 1, 1, 2, 3, chunk_size, chunk_size + 1, 3 * chunk_size]
        sizes = [rng.choice(choices) for _ in range(rng.randint(0, 40))]
        keys = [k for k, n in enumerate(sizes) for _ in range(n)]
        groups = [((k,), n) for k, n in enumerate(sizes)]
        expected = [(b,) for b in old_rule_on_a_list(keys, chunk_size)]
        assert planner._boundaries_from_groups(groups, chunk_size) == expected, (chunk_size, sizes)


def force_one_pass(monkeypatch) -> None:
    monkeypatch.setattr(planner, "_ordering_index", lambda *args: None)


def plan_three_ways(mysql_server, factory, monkeypatch, table: TableId, chunk_size: int, chunk_key=None):
    """(old boundaries, index-walk plan, one-pass plan) for one table."""
    walk = plan_table(factory, table, generation=1, chunk_size=chunk_size, chunk_key=chunk_key)
    with monkeypatch.context() as patch:
        force_one_pass(patch)
        one_pass = plan_table(factory, table, generation=2, chunk_size=chunk_size, chunk_key=chunk_key)
    assert walk.split == one_pass.split == "uneven"
    with mysql_server.admin(table.database) as conn:
        schema = load_schema(conn, table)
        columns = [schema.column(c) for c in walk.key_columns]
        with KeyOrder(factory, schema, walk.key_columns) as order:
            old = old_uneven_boundaries(conn, schema, columns, order, chunk_size)
            sort_keys = [order.sort_keys(b) for b in
                         (old, [c.start for c in walk.chunks[1:]], [c.start for c in one_pass.chunks[1:]])]
    # Equal under the collation (a non-unique key's boundary may be any spelling of its group: 'x' or 'X').
    assert sort_keys[1] == sort_keys[0], "index walk differs from the old walk"
    assert sort_keys[2] == sort_keys[0], "one ordered pass differs from the old walk"
    return old, walk, one_pass


def check_chunk_bound(mysql_server, plan: ChunkPlan, chunk_size: int) -> list[tuple[int, int]]:
    """The guarantee: a chunk holds at most chunk_size rows with a non-NULL key, unless all of them have one
    key value (equal under the collation), which no boundary can split. (rows, distinct keys) per chunk."""
    sizes = []
    with mysql_server.admin(plan.table.database) as conn, conn.cursor() as cur:
        schema = load_schema(conn, plan.table)
        columns = [schema.column(c) for c in plan.key_columns]
        quoted = ", ".join(c.quoted for c in columns)
        not_null = " AND ".join(f"{c.quoted} IS NOT NULL" for c in columns)
        for chunk in plan.chunks:
            where, params = plan_predicate(plan, schema, chunk)
            cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT {quoted}) FROM {plan.table.quoted} "
                        f"WHERE ({where}) AND {not_null}", params)
            rows, distinct = cur.fetchone()
            assert rows <= chunk_size or distinct == 1, (chunk.chunk_id, rows, distinct)
            sizes.append((rows, distinct))
    return sizes


CI_VARIANTS = ["resume", "Resume", "RÉSUMÉ", "résumé", "resume ", "Résume  ", "strasse", "STRASSE", "straße",
               "a", "A", "á", "À ", "ae", "Æ", "b", "B", "😀", "x", "X", "x "]


def test_case_and_accent_insensitive_key_with_many_equal_keys(mysql_server, mysql_db, factory, monkeypatch):
    """A non-unique chunk key under an accent- and case-insensitive collation: groups of keys the server calls
    equal, smaller and larger than a chunk. No group straddles a boundary, under either strategy."""
    rng = random.Random(31)
    weights = [rng.choice([1, 2, 5, 40]) for _ in CI_VARIANTS]
    rows = [(i, rng.choices(CI_VARIANTS, weights)[0] + (str(rng.randrange(3)) if i % 4 == 0 else ""))
            for i in range(6000)]
    rows = [(i, None if i % 13 == 0 else g) for i, g in rows]
    ddl = ("CREATE TABLE {name} (id INT PRIMARY KEY, g VARCHAR(12) CHARACTER SET utf8mb4 "
           "COLLATE utf8mb4_unicode_ci NULL{index})")
    for name, index in (("with_index", ", KEY g_id (g, id)"), ("no_index", "")):
        table = create(mysql_server, mysql_db, ddl.format(name=name, index=index), rows, table=name)
        for chunk_size in (7, 150):
            old, walk, one_pass = plan_three_ways(mysql_server, factory, monkeypatch, table, chunk_size, "g")
            assert len(old) >= 3
            events = [(v,) for v in CI_VARIANTS] + [(v.upper() + "1",) for v in CI_VARIANTS]
            events += [(None,), ("zz",)]
            for plan in (walk, one_pass):
                check_plan(mysql_server, factory, plan, events=events)
                sizes = check_chunk_bound(mysql_server, plan, chunk_size)
                # Groups larger than a chunk (one chunk each) and chunks of several smaller groups.
                assert any(rows > chunk_size and keys == 1 for rows, keys in sizes)
                assert any(keys > 1 for rows, keys in sizes)


@pytest.mark.parametrize("kind", ["sparse_bigint", "ci_strings", "emoji_general_ci", "binary4", "composite",
                                  "datetime", "double", "few_integers"])
def test_uneven_strategies_give_the_old_boundaries(mysql_server, mysql_db, factory, monkeypatch, kind):
    """On the shapes of the tests above, the index walk and the one ordered pass give the boundaries the old
    per-chunk walk gave (the same values for unique keys), and every chunk is bounded."""
    rng = random.Random(kind)
    chunk_key = None
    if kind == "sparse_bigint":
        ddl, chunk_size = "CREATE TABLE t (id BIGINT PRIMARY KEY)", 300
        rows = [(i,) for i in rng.sample(range(10**12), 3000)]
    elif kind == "ci_strings":
        alphabet = "abcdeé ABCß"
        values = {"".join(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(3000)}
        ddl, rows, chunk_size = None, None, 97
        ddl = "CREATE TABLE t (k VARCHAR(10) COLLATE utf8mb4_unicode_ci PRIMARY KEY)"
    elif kind == "emoji_general_ci":
        emoji = ["😀", "😁", "🙂", "🦀", "𝄞", "中", "文", "é", "e", "E"]
        values = {"".join(rng.choice(emoji) for _ in range(rng.randint(1, 4))) for _ in range(2000)}
        ddl, rows, chunk_size = None, None, 60
        ddl = "CREATE TABLE t (k VARCHAR(8) COLLATE utf8mb4_general_ci PRIMARY KEY)"
    elif kind == "binary4":
        alphabet = [b"\x00", b"\x01", b" ", b"a", b"\xff"]
        values = {b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(1500)}
        ddl, rows, chunk_size = "CREATE TABLE t (k BINARY(4) PRIMARY KEY)", None, 50
    elif kind == "composite":
        ddl = "CREATE TABLE t (tenant TINYINT, id INT, PRIMARY KEY (tenant, id))"
        rows, chunk_size = [(t, i) for t in (1, 2, 3) for i in range(3334)], 200
    elif kind == "datetime":
        start = datetime(2020, 1, 1)
        ddl, chunk_size = "CREATE TABLE t (ts DATETIME(6) PRIMARY KEY)", 150
        rows = [(v,) for v in {start + timedelta(microseconds=rng.randrange(10**14)) for _ in range(3000)}]
    elif kind == "double":
        ddl, chunk_size = "CREATE TABLE t (k DOUBLE PRIMARY KEY)", 120
        rows = [(v,) for v in {round(rng.uniform(-1e4, 1e4), rng.randint(0, 9)) for _ in range(3000)}]
    else:  # few distinct integers over many rows: too dense for the even split
        ddl, chunk_size, chunk_key = "CREATE TABLE t (id INT PRIMARY KEY, g INT, KEY (g))", 100, "g"
        rows = [(i, i % 4 if i % 9 else rng.randrange(50)) for i in range(4000)]
    if rows is None:
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute(ddl)
            # Keys equal under the collation collide: the first one stays.
            cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(v,) for v in sorted(values)])
        table = TableId(mysql_db, "t")
    else:
        table = create(mysql_server, mysql_db, ddl, rows)
    old, walk, one_pass = plan_three_ways(mysql_server, factory, monkeypatch, table, chunk_size, chunk_key)
    assert len(old) >= 3
    if chunk_key is None:  # a unique key: the very same values, every chunk but the last of chunk_size rows
        assert [c.start for c in walk.chunks[1:]] == old == [c.start for c in one_pass.chunks[1:]]
        counts = check_plan(mysql_server, factory, walk, max_rows=chunk_size)
        assert set(counts[:-1]) == {chunk_size}
    for plan in (walk, one_pass):
        check_chunk_bound(mysql_server, plan, chunk_size)


class StatementLog:
    """Wraps a connection factory: the statements sent on each session it opened (the planner's own session
    is the first; KeyOrder's, for sort keys, the second), and each session's storage-engine row reads
    (``Handler_read_%``), taken just before it closes."""

    def __init__(self, factory) -> None:
        self.factory = factory
        self.sessions: list[list[str]] = []
        self.reads: list[int] = []

    def __call__(self):
        conn = self.factory()
        query, close = conn.query, conn.close
        statements: list[str] = []
        self.sessions.append(statements)

        def logged_query(sql, unbuffered=False):
            statements.append(sql.decode() if isinstance(sql, bytes) else sql)
            return query(sql, unbuffered)

        def close_after_reading_counters():
            if conn.open:
                conn.query = query  # not logged
                with conn.cursor() as cur:
                    cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
                    self.reads.append(sum(int(v) for _, v in cur.fetchall()))
            close()

        conn.query, conn.close = logged_query, close_after_reading_counters
        return conn

    @property
    def planner_statements(self) -> list[str]:
        return self.sessions[0]

    @property
    def statements(self) -> list[str]:
        return [s for session in self.sessions for s in session]


def test_planning_cost_does_not_grow_with_the_chunk_count(mysql_server, mysql_db, factory):
    """Without an index on the chunk key: one statement reads the key, whatever the number of chunks
    (per-chunk queries would each sort the table). With one: a query per chunk, but each reads only its
    chunk's index entries, so the server reads the table about once (plus the exact COUNT(*) of small
    tables)."""
    rows = 20_000
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(40) COLLATE utf8mb4_unicode_ci NOT NULL, "
                    "u VARCHAR(40) NULL)")
        # CRC32, not MD5: Debian's Oracle MySQL 9.7 has neither MD5() nor SHA1()
        cur.execute("INSERT INTO t SELECT seq, CONCAT(CONV(CRC32(seq), 10, 36), '-', "
                    "CONV(CRC32(-seq), 10, 36)), IF(seq % 10, CONV(CRC32(seq * 7), 10, 36), NULL) "
                    f"FROM {numbers(rows)}")
        cur.execute("ALTER TABLE t ADD KEY s (s)")
    table = TableId(mysql_db, "t")
    one_pass: dict[int, tuple[int, int]] = {}
    for chunk_size in (1000, 50):
        log = StatementLog(factory)
        plan = plan_table(log, table, generation=1, chunk_size=chunk_size, chunk_key="u")
        assert len(plan.chunks) == -(-int(rows * 0.9) // chunk_size)
        assert max(log.reads) <= 3 * rows, "the planner read the table more than once (plus COUNT(*))"
        assert len(log.planner_statements) <= 10, log.planner_statements
        one_pass[chunk_size] = (len(log.planner_statements), len(log.statements))
        scans = [s for s in log.planner_statements if "GROUP BY" in s]
        assert len(scans) == 1 and "SQL_BIG_RESULT" in scans[0]
    assert one_pass[50][0] == one_pass[1000][0], one_pass  # 18 or 360 chunks: the same statements
    # the collation checks (3 queries, once per column) and the sort keys of 359 boundaries: batched
    assert one_pass[50][1] <= one_pass[50][0] + 5 + 1, one_pass

    for chunk_size in (1000, 50):
        log = StatementLog(factory)
        plan = plan_table(log, table, generation=1, chunk_size=chunk_size, chunk_key="s")
        chunks = len(plan.chunks)
        assert chunks == rows // chunk_size + (rows % chunk_size > 0)
        reads = max(log.reads)
        assert reads <= 2 * rows + 10 * chunks + 5000, f"index walk read the table more than once ({reads})"
        assert len(log.planner_statements) <= chunks + 10
        walks = [s for s in log.planner_statements if "OFFSET" in s]
        assert len(walks) == chunks and all("FORCE INDEX (`s`)" in s for s in walks)
        # the collation checks (3, once per column) and the boundaries' sort keys, batched by 200
        assert len(log.statements) - len(log.planner_statements) <= 4 + -(-chunks // 200)


def test_replanning_after_ddl_keeps_the_tables_plan_settings(mysql_server, mysql_db, tmp_path):
    """The stream's re-plan after TRUNCATE/RENAME keeps the chunk size, a chunk key that is not the primary
    key (a table without one could not be planned otherwise) and the zero-date layout."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
    from airflow_provider_mysqlcdc.engine.snapshot.replan import replan_table

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = create(mysql_server, mysql_db, "CREATE TABLE t (a INT NOT NULL, b INT, KEY (a))",
                   [(i, i % 5) for i in range(1, 501)])
    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        first, = plan_tables(settings, store, [str(table)], chunk_size=50, chunk_keys={str(table): "a"},
                             zero_dates="null")
        again = replan_table(settings, store, table)
        assert again.generation == first.generation + 1
        assert (again.key_columns, again.chunk_size, again.zero_dates) == (("a",), 50, "null")
        assert len(again.chunks) == len(first.chunks) > 5
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute("DROP TABLE t")
        with pytest.raises(ConfigurationError, match="does not exist"):
            replan_table(settings, store, table)


# --- many tables at once ------------------------------------------------------------------------------------


def _batch_tables(mysql_server, db: str) -> list[TableId]:
    """Tables of every kind of split, one with an odd name, each with a few hundred seeded rows."""
    rng = random.Random(17)
    ddls = {
        "ints": "CREATE TABLE `ints` (id INT PRIMARY KEY, v INT)",
        "names": "CREATE TABLE `names` (name VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "pairs": "CREATE TABLE `pairs` (b INT, a INT, v INT, PRIMARY KEY (b, a))",
        "we`ird é": "CREATE TABLE `we``ird é` (id BIGINT PRIMARY KEY, v INT)",
        "empty": "CREATE TABLE `empty` (id INT PRIMARY KEY)",
    }
    rows = {
        "ints": [(i, rng.randrange(100)) for i in range(1, 400)],
        "names": [(f"n{i:04d}-{rng.randrange(10**6)}", i) for i in range(300)],
        "pairs": [(i % 7, i, i) for i in range(350)],
        "we`ird é": [(i * 3, i) for i in range(250)],
    }
    tables = []
    for name, ddl in ddls.items():
        tables.append(create(mysql_server, db, ddl, rows.get(name, ()), table=name.replace("`", "``")))
    return [TableId(db, name) for name in ddls]


def test_a_batch_of_tables_is_planned_on_one_session_like_each_table_alone(mysql_server, mysql_db, factory):
    """``plan_batch`` (what ``plan_tables`` runs for up to PLAN_BATCH tables) gives every table the plan
    ``plan_table`` gives it alone, from one session and one binlog position read before every schema; under
    concurrent writes every plan still partitions its table."""
    import threading

    from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
    from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

    tables = _batch_tables(mysql_server, mysql_db)
    opened = []

    def counting():
        opened.append(1)
        return factory()

    stop, writing = threading.Event(), threading.Event()

    def write() -> None:
        rng = random.Random(5)
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("INSERT INTO `ints` VALUES (%s, 1) ON DUPLICATE KEY UPDATE v = v + 1",
                            (rng.randrange(1, 2000),))
                cur.execute("DELETE FROM `pairs` WHERE b = %s AND a = %s",
                            (rng.randrange(7), rng.randrange(350)))
                conn.commit()
                writing.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert writing.wait(30)
        plans = planner.plan_batch(counting, [(t, g) for g, t in enumerate(tables, start=1)], chunk_size=40,
                                   chunk_keys={f"{mysql_db}.pairs": "a"})
    finally:
        stop.set()
        writer.join()
    assert [p.table for p in plans] == tables and [p.generation for p in plans] == [1, 2, 3, 4, 5]
    assert len(opened) <= 2  # the batch's session, and KeyOrder's for the string key's sort keys
    assert len({p.planned_at for p in plans}) == 1 and len({p.planned_on for p in plans}) == 1
    with factory() as conn:
        now = current_binlog_status(conn, server_info(conn))
    assert plans[0].planned_at <= BinlogPosition(now.file, now.position)
    for plan in plans:
        check_plan(mysql_server, factory, plan)
    assert plans[2].key_columns == ("a",)

    again = planner.plan_batch(factory, [(t, 1) for t in tables], chunk_size=40,
                               chunk_keys={f"{mysql_db}.pairs": "a"})
    for table, plan in zip(tables, again):
        alone = plan_table(factory, table, 1, chunk_size=40,
                           chunk_key="a" if table.table == "pairs" else None)
        assert (plan.chunks, plan.split, plan.key_columns, plan.row_estimate) == (
            alone.chunks, alone.split, alone.key_columns, alone.row_estimate), table
    assert {p.split for p in again} == {"even", "uneven"}
    assert planner.plan_batch(factory, []) == []


def test_schemas_of_many_tables_equal_each_tables_own(mysql_server, mysql_db, monkeypatch):
    from airflow_provider_mysqlcdc.engine.source import catalog

    tables = _batch_tables(mysql_server, mysql_db)
    monkeypatch.setattr(catalog, "SCHEMA_BATCH", 2)  # several statements per database
    with mysql_server.admin(mysql_db) as conn:
        schemas = catalog.load_schemas(conn, [*tables, TableId("mysql", "db"), tables[0]])
        assert list(schemas) == [*tables, TableId("mysql", "db")]
        for table, schema in schemas.items():
            assert schema == load_schema(conn, table) and schema.approximate_rows == load_schema(
                conn, table).approximate_rows, table
        assert schemas[tables[2]].primary_key == ("b", "a")
        with pytest.raises(ConfigurationError, match="does not exist"):
            catalog.load_schemas(conn, [tables[0], TableId(mysql_db, "missing")])


def test_planning_many_tables_stores_each_batch_or_none_of_it(mysql_server, mysql_db, monkeypatch, tmp_path):
    """``plan_tables`` plans and stores PLAN_BATCH tables at a time: a table that cannot be planned fails its
    batch, naming the table and the fix, while the batches before it stay planned."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.snapshot import phase

    _batch_tables(mysql_server, mysql_db)
    create(mysql_server, mysql_db, "CREATE TABLE `zz_nokey` (v INT)", [(1,)], table="zz_nokey")
    monkeypatch.setattr(phase, "PLAN_BATCH", 2)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with ChunkStore(f"sqlite:///{tmp_path}/chunks.db") as store:
        with pytest.raises(ConfigurationError, match=f"{mysql_db}.zz_nokey has no primary key.*chunk_keys"):
            phase.plan_tables(settings, store, [f"{mysql_db}.*"], run_id="r1")
        # sorted: empty, ints | names, pairs | we`ird é, zz_nokey: the third batch is refused whole
        assert sorted(store.run_plans("r1")) == sorted(f"{mysql_db}.{t}"
                                                       for t in ("empty", "ints", "names", "pairs"))
        plans = phase.plan_tables(settings, store, [f"{mysql_db}.*"], run_id="r2",
                                  chunk_keys={f"{mysql_db}.zz_nokey": "v"})
        assert [p.generation for p in plans] == [2, 2, 2, 2, 1, 1]
        assert store.run_plans("r2") == {str(p.table): p.generation for p in plans}
        assert [store.plan(str(p.table)).plan for p in plans] == [p.to_dict() for p in plans]
