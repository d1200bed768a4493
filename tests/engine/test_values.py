"""Canonical values: a row read by SELECT and the same row decoded from the binlog are equal, per column.

One table holds every type we support, with edge values; the rows are written once and read both ways, then
converted to Arrow and back.
"""
from __future__ import annotations

import datetime as dt
import random
import struct
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema, quote_ident
from airflow_provider_mysqlcdc.engine.model.values import (
    UnsupportedType,
    ZeroDate,
    arrow_schema,
    binlog_normalizer,
    enum_members,
    python_rows,
    select_list,
    snapshot_normalizer,
    to_arrow_batch,
)
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

UTC = dt.UTC

DDL = """
CREATE TABLE all_types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(12,4), d0 DECIMAL(10,0), dbig DECIMAL(65,30),
  f FLOAT, db DOUBLE,
  dt DATETIME, dt6 DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL, dte DATE,
  tm TIME, tm3 TIME(3), tm6 TIME(6), y YEAR,
  c CHAR(10), vc VARCHAR(100), tx TEXT, lt LONGTEXT,
  e ENUM('small','medium','large'), st SET('a','b','c','it''s'),
  b1 BIT(1), b10 BIT(10), b64 BIT(64),
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  j JSON, g POINT
) DEFAULT CHARSET=utf8mb4
"""
COLUMNS = [
    "id", "ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu", "d", "d0", "dbig", "f", "db", "dt",
    "dt6", "ts", "dte", "tm", "tm3", "tm6", "y", "c", "vc", "tx", "lt", "e", "st", "b1", "b10", "b64", "bn",
    "vb", "bl", "j", "g",
]
JSON_DOC = '{"z": [1, 2.5, {"\u00fc": "\U0001F600"}], "a": {"nested": true, "n": null, "deep": {"x": [[]]}}}'


def edge_rows() -> list[dict]:
    return [
        {  # maxima, negatives, microseconds, DST-adjacent instants, unicode
            "id": 1, "ti": -128, "tiu": 255, "si": -32768, "siu": 65535, "mi": -8388608, "miu": 16777215,
            "i": -2147483648, "iu": 4294967295, "bi": -(2**63), "biu": 2**64 - 1, "d": "-12345678.1234",
            "d0": "-9999999999",
            "dbig": "-12345678901234567890123456789012345.123456789012345678901234567890",
            "f": 3.14, "db": 0.1 + 0.2, "dt": "2024-02-29 23:59:59", "dt6": "2024-03-10 02:30:00.123456",
            "ts": "2024-03-10 09:59:59.999999", "dte": "1000-01-01", "tm": "-838:59:59",
            "tm3": "-12:34:56.789", "tm6": "-00:00:00.000001", "y": 2155, "c": "abc",
            "vc": "\U0001F600 na\u00efve \u4e2d\u6587 \u00df", "tx": "line1\nline2\t\u00e9", "lt": "x" * 5000,
            "e": "large", "st": "a,c,it's", "b1": 1, "b10": 0b1000000001, "b64": 2**64 - 1,
            "bn": b"\x01\x02\x00\x00", "vb": b"\x00\xff\x00", "bl": bytes(range(256)), "j": JSON_DOC,
            "g": "POINT(1 2)",
        },
        {  # minima, empty values, zeros
            "id": 2, "ti": 127, "tiu": 0, "si": 32767, "siu": 0, "mi": 8388607, "miu": 0, "i": 2147483647,
            "iu": 0, "bi": 2**63 - 1, "biu": 0,
            "d": "0.0001", "d0": "0", "dbig": "0.000000000000000000000000000001", "f": -1.5e-38,
            "db": -1.7976931348623157e308,
            "dt": "9999-12-31 23:59:59", "dt6": "9999-12-31 23:59:59.999999", "ts": "1970-01-01 00:00:01",
            "dte": "9999-12-31", "tm": "838:59:59", "tm3": "00:00:00.001", "tm6": "838:59:59.000000",
            "y": 1901, "c": "", "vc": "", "tx": "", "lt": "", "e": "small", "st": "", "b1": 0, "b10": 0,
            "b64": 0, "bn": b"\x00\x00\x00\x00", "vb": b"", "bl": b"",
            "j": "[]", "g": "POINT(-180 90)",
        },
        {"id": 3},  # NULL everywhere
        {  # the other side of the autumn DST change, trailing spaces, a JSON scalar
            "id": 4, "ts": "2024-11-03 08:59:59.5", "dt6": "2024-11-03 01:30:00.000001", "c": "pad  ",
            "vc": "trail  ", "st": "d,b,a".replace("d", "c"), "e": "medium", "j": '"just a string \u00e9"',
            "bn": b"\xff", "tm": "-00:00:01", "tm3": "-00:00:00.5", "y": 0,
        },
    ]


def random_rows(seed: int, count: int, first_id: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for n in range(count):
        micro = rng.randrange(1_000_000)
        seconds = rng.randrange(-838 * 3600, 838 * 3600)
        sign = "-" if seconds < 0 else ""
        h, rem = divmod(abs(seconds), 3600)
        stamp = dt.datetime(2001, 1, 1) + dt.timedelta(seconds=rng.randrange(10**9), microseconds=micro)
        rows.append(
            {
                "id": first_id + n, "i": rng.randrange(-(2**31), 2**31), "biu": rng.randrange(2**64),
                "bi": rng.randrange(-(2**63), 2**63), "d": f"{rng.randrange(-10**12, 10**12) / 10**4:.4f}",
                "dbig": f"{rng.randrange(-10**40, 10**40)}.{rng.randrange(10**30):030d}",
                "f": struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0],
                "db": rng.uniform(-1e300, 1e300),
                "dt6": stamp.isoformat(" "), "ts": (stamp + dt.timedelta(days=100)).isoformat(" "),
                "tm3": f"{sign}{h}:{rem // 60:02d}:{rem % 60:02d}.{micro // 1000:03d}",
                "tm6": f"{sign}{h}:{rem // 60:02d}:{rem % 60:02d}.{micro:06d}",
                "st": ",".join(m for m in ("a", "b", "c", "it's") if rng.random() < 0.5),
                "b10": rng.randrange(1024), "b64": rng.randrange(2**64),
                "bn": bytes(rng.randrange(256) for _ in range(rng.randrange(5))),
                "vc": "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x4E00, 0x9FFF),
                                              0x1F600]))
                              for _ in range(rng.randrange(20))),
            }
        )
    return rows


def _insert(conn, table: str, rows: list[dict]) -> None:
    with conn.cursor() as cur:
        for row in rows:
            names = list(row)
            values_sql = ", ".join("ST_GeomFromText(%s)" if n == "g" else "%s" for n in names)
            cur.execute(
                f"INSERT INTO {table} ({', '.join(quote_ident(n) for n in names)}) VALUES ({values_sql})",
                [row[n] for n in names],
            )


def _status(conn) -> BinlogPosition:
    return binlog_end(conn)


def _with_json_column(schema: TableSchema, name: str) -> TableSchema:
    """MariaDB reports JSON as longtext; mark it as json the way a JSON-aware schema would."""
    columns = tuple(
        Column(**{**c.__dict__, "data_type": "json"}) if c.name == name else c for c in schema.columns
    )
    return TableSchema(schema.table, columns, schema.primary_key)


@pytest.fixture
def loaded(mysql_server, mysql_db):
    """The all-types table, written after a recorded binlog position, read via SELECT and via the binlog."""
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "all_types")
    with mysql_server.admin(mysql_db) as admin:
        with admin.cursor() as cur:
            cur.execute(DDL)
        start = _status(admin)
        _insert(admin, table.quoted, edge_rows())
        with admin.cursor() as cur:  # zero dates need a permissive sql_mode
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(
                f"INSERT INTO {table.quoted} (id, dte, dt, dt6, ts) VALUES "
                "(5, '0000-00-00', '0000-00-00 00:00:00', '2020-00-00 00:00:00', '0000-00-00 00:00:00')"
            )
        _insert(admin, table.quoted, random_rows(seed=20240229, count=40, first_id=100))
        end = _status(admin)
        schema = _with_json_column(load_schema(admin, table), "j")
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {select_list(schema)} FROM {table.quoted} ORDER BY id")
        normalize = snapshot_normalizer(schema)
        selected = [normalize(row) for row in cur.fetchall()]
    reader = BinlogReader(settings, allocate_server_id(settings, 1), {table}, {table: schema})
    changes = list(reader.read(BinlogOffset.at(start), end, timeout=60))
    streamed = [tuple(c.values[name] for name in schema.column_names) for c in changes]
    return schema, selected, streamed, changes


def test_snapshot_and_binlog_values_are_identical(loaded):
    schema, selected, streamed, changes = loaded
    assert schema.column_names == COLUMNS
    assert [c.op for c in changes] == ["+I"] * len(selected)
    assert len(selected) == len(streamed) == 45
    for sel, bin_ in zip(selected, sorted(streamed, key=lambda r: r[0])):
        for name, a, b in zip(schema.column_names, sel, bin_):
            assert type(a) is type(b) and a == b, f"row {sel[0]} column {name}: SELECT {a!r} != binlog {b!r}"
            if isinstance(a, Decimal):
                assert a.as_tuple().exponent == -schema.column(name).numeric_scale, (name, a)
            if isinstance(a, dt.datetime) and name == "ts":
                assert a.utcoffset() == dt.timedelta(0)
            if isinstance(a, dt.datetime) and name != "ts":
                assert a.tzinfo is None


def test_edge_values_are_the_documented_canonical_form(loaded):
    schema, selected, _, _ = loaded
    rows = {r[0]: dict(zip(schema.column_names, r)) for r in selected}
    one, two, null, four, zero = rows[1], rows[2], rows[3], rows[4], rows[5]
    assert one["biu"] == 2**64 - 1 and one["bi"] == -(2**63) and one["tiu"] == 255
    assert one["d"] == Decimal("-12345678.1234") and str(one["d0"]) == "-9999999999"
    assert one["f"] == struct.unpack("<f", struct.pack("<f", 3.14))[0]  # the exact single-precision value
    assert one["db"] == 0.1 + 0.2
    assert one["dt6"] == dt.datetime(2024, 3, 10, 2, 30, 0, 123456)  # a wall clock inside a US DST gap
    assert one["ts"] == dt.datetime(2024, 3, 10, 9, 59, 59, 999999, tzinfo=UTC)
    assert four["ts"] == dt.datetime(2024, 11, 3, 8, 59, 59, 500000, tzinfo=UTC)
    assert one["tm"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert one["tm3"] == -dt.timedelta(hours=12, minutes=34, seconds=56, milliseconds=789)
    assert one["tm6"] == -dt.timedelta(microseconds=1)
    assert four["tm3"] == -dt.timedelta(milliseconds=500) and four["y"] == 0
    assert one["st"] == "a,c,it's" and two["st"] == "" and four["st"] == "a,b,c"
    assert one["b1"] == 1 and one["b10"] == 513 and one["b64"] == 2**64 - 1
    assert one["bn"] == b"\x01\x02\x00\x00" and four["bn"] == b"\xff\x00\x00\x00" and two["vb"] == b""
    assert one["vc"] == "\U0001F600 na\u00efve \u4e2d\u6587 \u00df"
    assert four["c"] == "pad" and four["vc"] == "trail  "  # CHAR drops trailing spaces, VARCHAR keeps them
    assert one["j"] == (
        '{"a":{"deep":{"x":[[]]},"n":null,"nested":true},"z":[1,2.5,{"\u00fc":"\U0001F600"}]}'
    )
    assert four["j"] == '"just a string \u00e9"' and two["j"] == "[]"
    assert isinstance(one["g"], bytes) and len(one["g"]) == 25
    assert all(v is None for k, v in null.items() if k != "id")
    # zero dates keep their value: MySQL's text of it, from both sources
    assert zero["dte"] == ZeroDate("0000-00-00") and zero["dt"] == ZeroDate("0000-00-00 00:00:00")
    assert zero["dt6"] == ZeroDate("2020-00-00 00:00:00.000000")
    assert zero["ts"] == ZeroDate("0000-00-00 00:00:00.000000")
    assert all(type(zero[c]) is ZeroDate for c in ("dte", "dt", "dt6", "ts"))


def test_arrow_batch_keeps_values_exact(loaded):
    schema, selected, streamed, _ = loaded
    target = arrow_schema(schema)
    assert target.field("biu").type == pa.decimal128(20, 0)
    assert target.field("b64").type == pa.decimal128(20, 0) and target.field("b10").type == pa.int64()
    assert target.field("d").type == pa.decimal128(12, 4) and target.field("dbig").type == pa.string()
    assert target.field("dt6").type == pa.timestamp("us")
    assert target.field("ts").type == pa.timestamp("us", "UTC")
    assert target.field("tm6").type == pa.duration("us") and target.field("f").type == pa.float32()
    assert target.field("dte").nullable and not target.field("id").nullable
    for rows in (selected, streamed):
        batch = to_arrow_batch(schema, rows)
        assert batch.schema == target and batch.num_rows == len(rows)
        assert batch.column("dt__zero_date").to_pylist()[-41] == "0000-00-00 00:00:00"  # row 5's companion
        back = [dict(zip(schema.column_names, r)) for r in python_rows(batch, schema, schema.column_names)]
        for row, again in zip(rows, back):
            for name, value in zip(schema.column_names, row):
                got = again[name]
                if name == "dbig" and value is not None:
                    assert Decimal(got) == value and got == str(value)
                else:
                    assert got == value, f"row {row[0]} column {name}: {value!r} -> Arrow -> {got!r}"
    assert to_arrow_batch(schema, []).num_rows == 0


def test_normalizers_are_identity_when_nothing_to_convert():
    schema = TableSchema(
        TableId("d", "t"),
        (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(10)", True)),
        ("id",),
    )
    row = (1, "a")
    assert snapshot_normalizer(schema)(row) is row
    ints = TableSchema(TableId("d", "t"), schema.columns[:1], ("id",))
    values = {"id": 1}
    assert binlog_normalizer(ints)(values) is values
    # strings arrive as the column's bytes (binlog.row_decoding) and are decoded by its charset
    assert binlog_normalizer(schema)({"id": 1, "v": "\u00e9".encode()}) == {"id": 1, "v": "\u00e9"}
    assert select_list(schema) == "`id` AS `id`, `v` AS `v`"


def test_unsupported_types_fail_when_the_normalizer_is_built():
    # a type this release does not know (a later server's)
    schema = TableSchema(TableId("d", "t"), (Column("u", "sparsevector", "sparsevector(3)", True),), ())
    with pytest.raises(UnsupportedType, match="'u'.*sparsevector"):
        snapshot_normalizer(schema)
    with pytest.raises(UnsupportedType):
        binlog_normalizer(schema)


def test_a_column_named_like_a_zero_date_companion_is_refused_by_name():
    schema = TableSchema(
        TableId("d", "t"),
        (Column("d", "date", "date", True), Column("d__zero_date", "varchar", "varchar(9)", True)),
        (),
    )
    with pytest.raises(UnsupportedType, match="'d__zero_date'.*rename the column"):
        arrow_schema(schema)


def test_enum_members_parse_quotes():
    assert enum_members("set('a','b,c','it''s','')") == ["a", "b,c", "it's", ""]
    assert enum_members("enum('x')") == ["x"]


# Oracle MySQL's binary JSON: what mysql-replication got wrong, value by value (model/mysql_json.py)
MYSQL_JSON_VALUES = [
    "CAST(CAST('12:00:00.5' AS TIME(1)) AS JSON)", "CAST(CAST('-838:59:59' AS TIME) AS JSON)",
    "CAST(CAST('-00:00:00.5' AS TIME(1)) AS JSON)", "CAST(DATE'2020-01-02' AS JSON)",
    "CAST(CAST('2020-01-02 03:04:05.25' AS DATETIME(2)) AS JSON)",
    "CAST(TIMESTAMP'2020-01-02 03:04:05' AS JSON)",
    "CAST(x'00ff' AS JSON)", "CAST(CAST(1.50 AS DECIMAL(5,2)) AS JSON)",
    "JSON_ARRAY(CAST(-123456789012345678901234567890.123 AS DECIMAL(40,3)), CAST(x'41' AS BINARY), 1e300)",
    "'\"text\"'", "'null'", "'\"123\"'", "'true'", "'18446744073709551615'", "'-9223372036854775808'",
    "'1e-7'", "'\"\"'", "'{\"b\":1,\"a\":[1,2,{\"c\":null}],\"\":\"\",\"é\":\"😀\"}'",
    "CAST(ST_GeomFromText('POINT(1 2)') AS JSON)", "JSON_OBJECT('k', REPEAT('x', 70000))",
    "JSON_ARRAY(32767, -32768, 65535, 2147483647, -2147483648, 4294967295, 0.5)",
]


@pytest.mark.mysql_only
def test_mysql_binary_json_streams_as_the_select_reads_it(mysql_server, mysql_db):
    """Every kind of value of MySQL's binary JSON (scalars at the top, null, nesting, large documents,
    opaque DATE/TIME/DATETIME/DECIMAL/binary) streams to the canonical text the SELECT's gives."""
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "js")
    with mysql_server.admin(mysql_db) as admin:
        with admin.cursor() as cur:
            cur.execute("CREATE TABLE js (id INT PRIMARY KEY, j JSON NULL)")
            start = _status(admin)
            for i, value in enumerate(MYSQL_JSON_VALUES):
                cur.execute(f"INSERT INTO js VALUES ({i}, {value})")
            cur.execute("INSERT INTO js VALUES (99, NULL)")
            cur.execute("UPDATE js SET j = JSON_ARRAY(j, j) WHERE id < 3")
        end = _status(admin)
        schema = load_schema(admin, table)
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {select_list(schema)} FROM {table.quoted} ORDER BY id")
        normalize = snapshot_normalizer(schema)
        selected = {row[0]: row for row in (normalize(r) for r in cur.fetchall())}
    reader = BinlogReader(settings, allocate_server_id(settings, 1), {table}, {table: schema})
    latest = {}
    for change in reader.read(BinlogOffset.at(start), end, timeout=60):
        latest[change.values["id"]] = (change.values["id"], change.values["j"])
    assert len(latest) == len(MYSQL_JSON_VALUES) + 1
    assert latest == selected
    assert selected[99][1] is None and selected[10][1] == "null" and selected[11][1] == '"123"'
