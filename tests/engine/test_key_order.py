"""Key order agrees with the server: KeyCodec round trips, KeyOrder vs the server's own comparisons, SQL
predicates, and rejected chunk key types."""
from __future__ import annotations

import json
import random
import struct
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import pymysql
import pytest

from airflow_provider_mysqlcdc.engine.chunks.key_codec import KeyCodec, decode_key, encode_key
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.key_sql import chunk_predicate, key_select_sql, tuple_compare_sql
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

# --- KeyCodec ---------------------------------------------------------------------------------------------

CODEC_VALUES = [
    None, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**200, True,
    Decimal(0), Decimal("-0.00"), Decimal("12.30"),
    Decimal("-99999999999999999999999999999999999.123456789012345678901234567890"),
    Decimal("1E+5"), 0.1, -0.0, 1e300, 5e-324, float("inf"),
    "", "a", "a ", "A\x00b", "ß😀\u0301", "\t\n",
    b"", b"\x00", b"a\x00\x00\x00", bytes(range(256)), bytearray(b"xy"),
    datetime(2024, 2, 29, 23, 59, 59, 999999), datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59),
    datetime(2024, 1, 1, 12, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    date(2024, 2, 29), date(1000, 1, 1),
    timedelta(0), timedelta(hours=-838, minutes=-59, seconds=-59), timedelta(hours=838, microseconds=1),
    timedelta(microseconds=-1), time(23, 59, 59, 123456),
]


@pytest.mark.parametrize("value", CODEC_VALUES, ids=lambda v: f"{type(v).__name__}:{v!r}"[:40])
def test_codec_round_trip_is_exact(value):
    encoded = encode_key((value, 7))
    through_json = json.loads(json.dumps(encoded))
    decoded = decode_key(through_json)
    expected = bytes(value) if isinstance(value, bytearray) else value
    expected = int(expected) if isinstance(expected, bool) else expected
    assert decoded == (expected, 7)
    assert type(decoded[0]) is type(expected)
    if isinstance(value, Decimal):
        assert decoded[0].as_tuple() == value.as_tuple()  # scale and sign kept
    if isinstance(value, float):
        assert struct.pack("<d", decoded[0]) == struct.pack("<d", value)  # -0.0 stays -0.0
    if isinstance(value, datetime):
        assert decoded[0].tzinfo == value.tzinfo


def test_codec_json_types_are_portable():
    encoded = encode_key((2**64 - 1, b"\xff", None))
    # Integers travel as strings: other JSON readers lose digits above 2^53.
    assert encoded == [["i", "18446744073709551615"], ["b", "/w=="], ["n", None]]
    assert KeyCodec.decode_key(encoded) == (2**64 - 1, b"\xff", None)


def test_codec_rejects_unknown_input():
    with pytest.raises(TypeError):
        encode_key((object(),))
    with pytest.raises(CdcError, match="unknown chunk key tag"):
        decode_key([["zz", 1]])
    with pytest.raises(CdcError, match="malformed"):
        decode_key([["i"]])


# --- SQL predicates (no server) ---------------------------------------------------------------------------


def test_composite_predicate_is_expanded_for_index_ranges():
    sql, params = tuple_compare_sql(["`a`", "`b`", "`c`"], (1, 2, 3), ">=")
    assert sql == (
        "(`a` >= %s AND ((`a` > %s) OR (`a` = %s AND `b` > %s) OR (`a` = %s AND `b` = %s AND `c` >= %s)))"
    )
    assert params == [1, 1, 1, 2, 1, 2, 3]
    sql, params = tuple_compare_sql(["`a`", "`b`"], ("x", "y"), "<")
    assert sql == "(`a` <= %s AND ((`a` < %s) OR (`a` = %s AND `b` < %s)))"
    assert params == ["x", "x", "x", "y"]


def test_predicate_null_rule():
    first, middle, only = Chunk(0, None, (5,)), Chunk(1, (5,), (9,)), Chunk(0, None, None)
    assert chunk_predicate(first, ["`k`"], [True]) == ("((`k` < %s) OR `k` IS NULL)", [5])
    assert chunk_predicate(first, ["`k`"], [False]) == ("`k` < %s", [5])
    assert chunk_predicate(middle, ["`k`"], [True]) == ("`k` >= %s AND `k` < %s", [5, 9])
    assert chunk_predicate(only, ["`k`"], [True]) == ("1 = 1", [])
    # Aware datetimes become UTC wall clock (sessions run in UTC).
    aware = datetime(2024, 1, 1, 5, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert chunk_predicate(Chunk(1, (aware,), None), ["`k`"])[1] == [datetime(2024, 1, 1)]


# --- against the server -----------------------------------------------------------------------------------


def cdc_factory(mysql_server):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    return lambda: connect(settings)


def has_collation(mysql_server, collation: str) -> bool:
    charset = collation.split("_")[0]
    with mysql_server.admin() as conn, conn.cursor() as cur:
        try:
            cur.execute(f"SELECT CAST('a' AS CHAR CHARACTER SET {charset}) COLLATE {collation}")
        except pymysql.MySQLError:  # the server does not know the charset or collation
            return False
    return True


def server_comparisons(conn, table: str) -> dict[tuple[int, int], int]:
    """The server's verdict (-1, 0, 1) on every pair of values of column ``v``."""
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT a.id, b.id, (a.v > b.v) - (a.v < b.v) FROM {table} a JOIN {table} b WHERE a.id < b.id"
        )
        return {(int(x), int(y)): int(c) for x, y, c in cur.fetchall()}


def assert_order_agrees(mysql_server, db: str, table: str, values_by_id: dict[int, object]) -> KeyOrder:
    """Our comparison of every pair equals the server's, for the values read back and as given."""
    factory = cdc_factory(mysql_server)
    with mysql_server.admin(db) as conn:
        schema = load_schema(conn, TableId(db, table))
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, {key_select_sql([schema.column('v')])} FROM `{table}`")
            read_back = {int(i): v for i, v in cur.fetchall()}
        truth = server_comparisons(conn, f"`{table}`")
    order = KeyOrder(factory, schema, ("v",))
    ids = sorted(read_back)
    for source in (read_back, values_by_id):
        keys = dict(zip(ids, order.sort_keys([(source[i],) for i in ids])))
        wrong = [
            (source[a], source[b], expected, (keys[a] > keys[b]) - (keys[a] < keys[b]))
            for (a, b), expected in truth.items()
            if (keys[a] > keys[b]) - (keys[a] < keys[b]) != expected
        ]
        assert not wrong, f"{len(wrong)} pairs disagree with the server, e.g. {wrong[:5]}"
    return order


TRICKY = ["", " ", "\t", "a", "A", "a ", "a\t", "á", "Á", "a\u0301", "ä", "ae", "æ", "ß", "ss", "SS", "ﬃ",
          "ffi", "b", "B ", "\u00a0", "😀", "😁", "x😀", "x😁", "z", "Z", "0", "-", "ab", "aB", "Ab ",
          # expansions at full column width: padding must count weights, not characters
          "ﬃﬃﬃﬃﬃﬃ", "ﬃﬃﬃﬃﬃf", "ﬃﬃﬃﬃﬃ", "ßßßßßß", "ßßßßßs", "ßßßßß"]
UNICODE_ALPHABET = "aAáÁäbB sSß\tæ😀😁\u0301ﬃ0-"
LATIN1_ALPHABET = "aAáÁäbB sSß\tæ0-"
COLLATIONS = [
    "utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_unicode_520_ci", "utf8mb4_bin", "utf8mb4_nopad_bin",
    "utf8mb4_general_nopad_ci", "utf8mb4_unicode_nopad_ci", "utf8mb4_uca1400_ai_ci", "utf8mb4_uca1400_as_cs",
    "utf8mb4_uca1400_nopad_as_cs", "utf8mb4_0900_ai_ci", "utf8mb4_0900_as_cs", "latin1_swedish_ci",
    "latin1_german2_ci", "latin1_bin",
]


@pytest.mark.parametrize("collation", COLLATIONS)
@pytest.mark.parametrize("column_type", ["VARCHAR(6)", "CHAR(6)"])
def test_string_order_agrees_with_server(mysql_server, mysql_db, collation, column_type):
    if not has_collation(mysql_server, collation):
        pytest.skip(f"server has no collation {collation}")
    charset = collation.split("_")[0]
    alphabet = LATIN1_ALPHABET if charset == "latin1" else UNICODE_ALPHABET
    rng = random.Random(f"{collation}-{column_type}")
    values = [v for v in TRICKY if charset != "latin1" or all(ord(ch) < 256 for ch in v)]
    values += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(90)]
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        column = f"{column_type} CHARACTER SET {charset} COLLATE {collation}"
        cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, v {column})")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", list(enumerate(values)))
    order = assert_order_agrees(mysql_server, mysql_db, "t", dict(enumerate(values)))
    order.close()


def test_sort_keys_are_batched_and_cached(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (v VARCHAR(20) COLLATE utf8mb4_unicode_ci PRIMARY KEY)")
        schema = load_schema(conn, TableId(mysql_db, "t"))
    keys = [(f"key-{i}",) for i in range(1000)]
    with KeyOrder(cdc_factory(mysql_server), schema, ("v",), batch_size=200) as order:
        first = order.sort_keys(keys)
        # collation checks (pad weight, probe weights, server comparisons) + one query per 200 values
        assert order.weight_queries <= 3 + 1000 // 200
        before = order.weight_queries
        assert order.sort_keys(keys) == first
        assert order.weight_queries == before  # all cached
    with KeyOrder(cdc_factory(mysql_server), schema, ("v",), cache_bytes=1) as tiny:
        assert tiny.sort_keys(keys) == first  # a cache smaller than one call still answers correctly


def test_binary_order_agrees_and_pads(mysql_server, mysql_db):
    rng = random.Random(7)
    alphabet = [b"\x00", b" ", b"a", b"A", b"\xff", b"\x7f"]
    values = [b"", b"a", b"a\x00", b"a\x00\x00\x00", b"a ", b"\x00"]
    values += [b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(80)]
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE vb (id INT PRIMARY KEY, v VARBINARY(4))")
        cur.execute("CREATE TABLE b4 (id INT PRIMARY KEY, v BINARY(4))")
        cur.executemany("INSERT INTO vb VALUES (%s, %s)", list(enumerate(values)))
        cur.executemany("INSERT INTO b4 VALUES (%s, %s)", list(enumerate(values)))
    assert_order_agrees(mysql_server, mysql_db, "vb", dict(enumerate(values)))
    # BINARY(4) stores b"a" as b"a\0\0\0": a key given without the padding must compare equal to it.
    order = assert_order_agrees(mysql_server, mysql_db, "b4", dict(enumerate(values)))
    assert order.compare((b"a",), (b"a\x00\x00\x00",)) == 0
    assert order.normalize((b"a",)) == (b"a\x00\x00\x00",)
    with pytest.raises(CdcError, match="longer than BINARY"):
        order.sort_keys([(b"12345",)])


def test_numeric_and_temporal_order_agrees(mysql_server, mysql_db):
    rng = random.Random(11)
    cases = {
        "BIGINT UNSIGNED": [0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]
        + [rng.randrange(2**64) for _ in range(30)],
        "BIGINT": [-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 1]
        + [rng.randrange(-(2**63), 2**63) for _ in range(30)],
        "DECIMAL(40,10)": [Decimal(0), Decimal("-0.0000000001"), Decimal("0.0000000001"),
                           Decimal("999999999999999999999999999999.9999999999"),
                           Decimal("-999999999999999999999999999999.9999999999")]
        + [Decimal(rng.randrange(-10**20, 10**20)).scaleb(-10) for _ in range(30)],
        "DOUBLE": [0.0, -0.0, 0.1 + 0.2, 0.3, 1e308, -1e308, 5e-324]
        + [rng.uniform(-1e6, 1e6) for _ in range(30)],
        "FLOAT": [0.1, 1.2345678, 16777217.0, -3.4e38, 1e-45] + [rng.uniform(-1e3, 1e3) for _ in range(30)],
        "DATETIME(6)": [datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999),
                        datetime(2024, 1, 1), datetime(2024, 1, 1, 0, 0, 0, 1)]
        + [datetime(2020, 1, 1) + timedelta(microseconds=rng.randrange(10**14)) for _ in range(30)],
        "TIMESTAMP(6)": [datetime(1970, 1, 1, 0, 0, 1), datetime(2038, 1, 19, 3, 14, 7)]
        + [datetime(2000, 1, 1) + timedelta(microseconds=rng.randrange(10**15)) for _ in range(30)],
        "DATE": [date(1000, 1, 1), date(9999, 12, 31)]
        + [date(2000, 1, 1) + timedelta(days=rng.randrange(20000)) for _ in range(30)],
        "TIME(6)": [timedelta(hours=-838, minutes=-59, seconds=-59), timedelta(microseconds=-1), timedelta(0),
                    timedelta(hours=838, minutes=59, seconds=59)]
        + [timedelta(microseconds=rng.randrange(-3 * 10**12, 3 * 10**12)) for _ in range(30)],
        "YEAR": [1901, 2155, 2000, 0],
        "TINYINT": list(range(-128, 128, 7)) + [127],
    }
    for index, (column_type, values) in enumerate(cases.items()):
        table = f"n{index}"
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v {column_type})")
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", list(enumerate(values)))
        given = dict(enumerate(values))
        if column_type.startswith("FLOAT"):
            given = {i: struct.unpack("<f", struct.pack("<f", v))[0] for i, v in given.items()}  # as stored
        if column_type.startswith("TIMESTAMP"):  # an event may carry an aware instant
            given = {i: v.replace(tzinfo=UTC).astimezone(timezone(timedelta(hours=-7)))
                     for i, v in given.items()}
        assert_order_agrees(mysql_server, mysql_db, table, given).close()


def test_null_sorts_first(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(5), n INT)")
        schema = load_schema(conn, TableId(mysql_db, "t"))
    factory = cdc_factory(mysql_server)
    with KeyOrder(factory, schema, ("s",)) as order:
        assert order.compare((None,), ("",)) < 0 and order.compare((None,), (None,)) == 0
    with KeyOrder(factory, schema, ("n",)) as order:
        assert sorted([(3,), (None,), (-(2**70),)], key=order.sort_key) == [(None,), (-(2**70),), (3,)]
        assert order.sort_key((None,)) < order.sort_key((-(2**70),))


@pytest.mark.parametrize(
    "column_type",
    ["JSON", "TEXT", "BLOB", "MEDIUMTEXT", "BIT(8)", "ENUM('b','a')", "SET('x','y')", "GEOMETRY", "POINT"],
)
def test_unorderable_types_are_rejected(mysql_server, mysql_db, column_type):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, bad {column_type})")
        schema = load_schema(conn, TableId(mysql_db, "t"))
    with pytest.raises(ConfigurationError) as info:
        KeyOrder(cdc_factory(mysql_server), schema, ("bad",))
    message = str(info.value)
    assert f"{mysql_db}.t" in message and "'bad'" in message and "chunk_key" in message


def test_wrong_key_arity_is_an_error(mysql_server, mysql_db):
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b))")
        schema = load_schema(conn, TableId(mysql_db, "t"))
    with (
        KeyOrder(cdc_factory(mysql_server), schema, ("a", "b")) as order,
        pytest.raises(ValueError, match="2 value"),
    ):
        order.sort_keys([(1,)])
