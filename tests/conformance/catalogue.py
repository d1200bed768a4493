"""The conformance cases: column types, character sets and key shapes, with seeded value generators.

Every value is produced as a SQL literal (text), so what reaches the server is exactly what the case says
(pymysql's parameter escaping cannot hold every MySQL value: it writes a negative ``timedelta`` wrongly, for
one). Writers address rows by literal keys and let the server decide what a statement does (``INSERT IGNORE``
and ``UPDATE IGNORE`` where a collation-equal key may exist), so no Python model of the table is needed: the
source is the truth the mirror is compared with.

Cases a server lacks are found by asking it (``probe_*``), never assumed: the test of such a case is skipped
with the server's own error message, the others run.
"""
from __future__ import annotations

import datetime as dt
import json
import random
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pymysql
from pymysql.converters import escape_string

Literal = str
Gen = Callable[[random.Random], Literal]

# --- SQL literal helpers -----------------------------------------------------------------------------------


def sql_str(text: str) -> Literal:
    """A utf8mb4 string literal (the sessions' character set)."""
    return "'" + escape_string(text) + "'"


def sql_bytes(data: bytes) -> Literal:
    return f"X'{data.hex()}'"


def sql_binary(data: bytes) -> Literal:
    """Raw bytes for a string column: the server takes them as the column's own encoding."""
    return f"_binary X'{data.hex()}'"


NULL = "NULL"


def _column_name(case_id: str) -> str:
    return "c_" + re.sub(r"[^0-9a-zA-Z]+", "_", case_id).strip("_").lower()


# --- random text --------------------------------------------------------------------------------------------

_TEXT_CHARS = (
    [chr(c) for c in range(0x20, 0x7F)] * 3
    + list("\t\n\r\\'\"%_\x00\x7f")
    + list("éèêëàáâäãåæçñöøœßÿÀÉÎÕÜŸ")
    + list("ĀāĂăĄąĆćČčĐđĘęĞğİıŁłŃńŐőŒœŘřŚśŠšŢţŰűŹźŻżŽž")
    + list("ΑΒΓΔΩαβγδωάέήίόύώ") + list("АБВГДЕЁЖЗИЙабвгдеёжзий") + list("אבגדהוזחט")
    + list("ابتثجحخدذ") + list("กขฃคฅฆง") + list("中文日本語漢字汉字") + list("ひらがなカタカナｶﾀｶﾅ")
    + list("한국어가각") + list("€£¥©®™№∞≠≤≥─│┌┐") + ["\u00a0", "\u200b", "\ufeff", "\u0301"]
    + ["😀", "😁", "🎉", "👍🏽", "𠀀", "𝄞", "\U0010ffff"]
)


def random_text(rng: random.Random, max_chars: int, chars: list[str] | None = None) -> str:
    pool = chars or _TEXT_CHARS
    n = rng.choice([0, 1, rng.randint(0, max_chars), max_chars]) if max_chars else 0
    return "".join(rng.choice(pool) for _ in range(n))[:max_chars]  # some pool entries are two code points


def random_bytes(rng: random.Random, max_len: int) -> bytes:
    n = rng.choice([0, 1, rng.randint(0, max_len), max_len]) if max_len else 0
    data = bytes(rng.randrange(256) for _ in range(n))
    if data and rng.random() < 0.4:  # trailing zero bytes: BINARY pads with them, VARBINARY keeps them
        k = rng.randint(1, len(data))
        data = data[: len(data) - k] + b"\x00" * k
    return data


# --- types --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeCase:
    """One column type: its DDL, a random value generator and edge values (SQL literals)."""

    id: str
    table: str  # the wide table that holds it
    ddl: str
    gen: Gen
    edges: tuple[Literal, ...] = ()
    writable: bool = True  # generated columns are computed by the server
    report: bool = True  # helper columns (a generated column's base) are not cases of their own

    @property
    def column(self) -> str:
        return _column_name(self.id)


@dataclass(frozen=True)
class WideTable:
    name: str
    sql_mode: str | None  # the writers' session sql_mode (None: the server's default, strict)


WIDE_TABLES = {
    "num": WideTable("types_num", None),
    "time": WideTable("types_time", ""),  # zero dates and year-0 dates need the legacy mode
    "str": WideTable("types_str", ""),  # ENUM's invalid-value index 0 needs it
    "bin": WideTable("types_bin", None),
    "geo": WideTable("types_geo", None),
    "misc": WideTable("types_misc", None),
}


def _int_cases() -> list[TypeCase]:
    out = []
    for name, bits in (("tinyint", 8), ("smallint", 16), ("mediumint", 24), ("int", 32), ("bigint", 64)):
        for variant in ("", "-unsigned", "-zerofill"):
            lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if not variant else (0, 2**bits - 1)
            ddl = name.upper() + {"": "", "-unsigned": " UNSIGNED", "-zerofill": " ZEROFILL"}[variant]

            def gen(rng: random.Random, lo: int = lo, hi: int = hi) -> Literal:
                return str(rng.choice([rng.randint(lo, hi), rng.randint(max(lo, -100), min(hi, 100))]))

            out.append(TypeCase(name + variant, "num", ddl, gen,
                                (str(lo), str(hi), "0", NULL, str(lo + 1), str(hi - 1))))
    out.append(TypeCase("int(4)-zerofill", "num", "INT(4) ZEROFILL",
                        lambda r: str(r.choice([r.randint(0, 9999), r.randint(0, 2**32 - 1)])),
                        ("0", "7", "9999", "10000", "4294967295", NULL)))
    return out


def _bit_cases() -> list[TypeCase]:
    out = []
    for n in (1, 7, 8, 33, 64):
        def gen(rng: random.Random, n: int = n) -> Literal:
            return f"b'{rng.randrange(2**n):b}'"

        out.append(TypeCase(f"bit({n})", "num", f"BIT({n})", gen,
                            ("b'0'", f"b'{(2**n - 1):b}'", "b'1'", NULL, f"b'1{'0' * (n - 1)}'")))
    out.append(TypeCase("boolean", "num", "BOOLEAN",
                        lambda r: r.choice(["TRUE", "FALSE", str(r.randint(-128, 127))]),
                        ("0", "1", "-128", "127", NULL)))
    return out


def _decimal_literal(rng: random.Random, m: int, d: int) -> Literal:
    whole = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, m - d))) or "0"
    frac = "".join(rng.choice("0123456789") for _ in range(d))
    sign = rng.choice(["", "-"])
    return f"{sign}{whole}.{frac}" if d else f"{sign}{whole}"


def _decimal_cases() -> list[TypeCase]:
    out = []
    for m, d in ((1, 0), (10, 5), (12, 4), (38, 10), (39, 2), (65, 0), (65, 30)):
        biggest = "9" * (m - d) + ("." + "9" * d if d else "")
        smallest = ("0." + "0" * (d - 1) + "1") if d else "1"
        out.append(TypeCase(f"decimal({m},{d})", "num", f"DECIMAL({m},{d})",
                            lambda r, m=m, d=d: _decimal_literal(r, m, d),
                            (biggest, "-" + biggest, "0", NULL, smallest, "-" + smallest)))
    out.append(TypeCase("decimal(10,2)-unsigned", "num", "DECIMAL(10,2) UNSIGNED",
                        lambda r: _decimal_literal(r, 10, 2).lstrip("-"), ("99999999.99", "0", "0.01", NULL)))
    return out


def _single(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _float_gen(single: bool) -> Gen:
    def gen(rng: random.Random) -> Literal:
        exp = rng.randint(-30, 30) if single else rng.randint(-300, 300)
        value = rng.uniform(-10, 10) * 10.0**exp
        return repr(_single(value) if single else value)

    return gen


def _float_cases() -> list[TypeCase]:
    fmax, dmax = "3.4028234663852886e+38", "1.7976931348623157e+308"
    return [
        TypeCase("float", "num", "FLOAT", _float_gen(True),
                 ("0", fmax, "-" + fmax, "1.1754943508222875e-38", "1.401298464324817e-45", NULL, "-0.0",
                  "3.14")),
        TypeCase("float(7,3)", "num", "FLOAT(7,3)", lambda r: f"{r.uniform(-9999.999, 9999.999):.3f}",
                 ("9999.999", "-9999.999", "0", "0.001", NULL)),
        TypeCase("double", "num", "DOUBLE", _float_gen(False),
                 ("0", dmax, "-" + dmax, "2.2250738585072014e-308", "5e-324", NULL, "-0.0",
                  "0.30000000000000004")),
        TypeCase("real", "num", "REAL", _float_gen(False), ("0", dmax, "-" + dmax, "5e-324", NULL)),
    ]


def _fraction(rng: random.Random, p: int) -> str:
    return ("." + "".join(rng.choice("0123456789") for _ in range(p))) if p else ""


def _random_datetime(rng: random.Random, lo: dt.datetime, hi: dt.datetime) -> dt.datetime:
    return lo + dt.timedelta(seconds=rng.randrange(int((hi - lo).total_seconds())))


def _temporal_cases() -> list[TypeCase]:
    out = [
        TypeCase("date", "time", "DATE",
                 lambda r: sql_str(_random_datetime(r, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31))
                                   .date().isoformat()),
                 ("'1000-01-01'", "'9999-12-31'", "'0000-00-00'", "'2020-00-15'", "'2020-05-00'",
                  "'0000-06-15'", "'0001-01-01'", "'0100-03-01'", NULL)),
        TypeCase("year", "time", "YEAR", lambda r: str(r.randint(1901, 2155)),
                 ("1901", "2155", "0", NULL, "2000")),
    ]
    for p in range(7):
        frac9 = ("." + "9" * p) if p else ""
        frac0 = ("." + "0" * p) if p else ""
        out.append(TypeCase(
            f"datetime({p})", "time", f"DATETIME({p})",
            lambda r, p=p: sql_str(_random_datetime(r, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31))
                                   .isoformat(" ") + _fraction(r, p)),
            (f"'1000-01-01 00:00:00{frac0}'", f"'9999-12-31 23:59:59{frac9}'",
             f"'0000-00-00 00:00:00{frac0}'", "'2020-00-15 10:11:12'", "'0000-01-01 00:00:00'",
             "'2024-03-10 02:30:00'", NULL),
        ))
        out.append(TypeCase(
            f"timestamp({p})", "time", f"TIMESTAMP({p}) NULL DEFAULT NULL",
            lambda r, p=p: sql_str(_random_datetime(r, dt.datetime(1970, 1, 1, 0, 0, 1),
                                                    dt.datetime(2038, 1, 19, 3, 14, 7))
                                   .isoformat(" ") + _fraction(r, p)),
            (f"'1970-01-01 00:00:01{frac0}'", f"'2038-01-19 03:14:07{frac9}'",
             f"'0000-00-00 00:00:00{frac0}'", "'2024-11-03 08:59:59'", NULL),
        ))
        smallest_neg = f"'-00:00:00.{'0' * (p - 1)}1'" if p else "'-00:00:01'"
        out.append(TypeCase(
            f"time({p})", "time", f"TIME({p})", lambda r, p=p: _time_literal(r, p),
            ("'-838:59:59'", "'838:59:59'", f"'-838:59:59{frac0}'", f"'838:59:59{frac0}'", "'00:00:00'",
             smallest_neg, "'24:00:00'", "'-24:00:00'", NULL),
        ))
    return out


def _time_literal(rng: random.Random, p: int) -> Literal:
    seconds = (rng.randint(-838 * 3600 - 3599, 838 * 3600 + 3599) if rng.random() < 0.7
               else rng.randint(-90000, 90000))
    sign = "-" if seconds < 0 else ""
    h, rem = divmod(abs(seconds), 3600)
    frac = _fraction(rng, p) if abs(seconds) < 838 * 3600 + 3599 else ""
    return f"'{sign}{h}:{rem // 60:02d}:{rem % 60:02d}{frac}'"


def _text_case(case_id: str, ddl: str, max_chars: int, edges: tuple[Literal, ...]) -> TypeCase:
    return TypeCase(case_id, "str", ddl, lambda r: sql_str(random_text(r, max_chars)), edges + ("''", NULL))


ENUM_MEMBERS = ["a,b", "it's", '"dq"', "back\\slash", "ünï", "😀", " trailing ", "Z", "日本"]
SET_MEMBERS = ["it's", '"dq"', "ünï", "😀", "back\\slash", "x y", "日本"]


def _members_ddl(kind: str, members: list[str]) -> str:
    return f"{kind}(" + ", ".join(sql_str(m) for m in members) + ")"


def _set_value(rng: random.Random, members: list[str]) -> Literal:
    chosen = [m for m in members if rng.random() < 0.4]
    rng.shuffle(chosen)  # the server stores members in definition order, whatever the input order
    return sql_str(",".join(chosen))


def _string_cases() -> list[TypeCase]:
    return [
        _text_case("char(1)", "CHAR(1)", 1, ("' '", "'é'", "'😀'", "'\\0'")),
        _text_case("char(255)", "CHAR(255)", 255,
                   (sql_str("é" * 255), sql_str("😀" * 255), "'x  '", "'  x'")),
        TypeCase("varchar(0)", "str", "VARCHAR(0)", lambda r: "''", ("''", NULL)),
        _text_case("varchar(1000)", "VARCHAR(1000)", 1000,
                   (sql_str("😀" * 1000), "'trail  '", "' '", "'\\0\\0'")),
        _text_case("tinytext", "TINYTEXT", 63, (sql_str("😀" * 63 + "abc"), sql_str("x" * 255))),
        _text_case("text", "TEXT", 400, (sql_str("é" * 30000),)),
        _text_case("mediumtext", "MEDIUMTEXT", 400, (sql_str("ü" * 70000),)),
        _text_case("longtext", "LONGTEXT", 400, (sql_str("😀" * 50000),)),
        TypeCase("enum", "str", _members_ddl("ENUM", ENUM_MEMBERS), lambda r: sql_str(r.choice(ENUM_MEMBERS)),
                 tuple(sql_str(m) for m in ENUM_MEMBERS) + ("'not a member'", "'z'", NULL, "''", "1", "9")),
        TypeCase("set-with-comma-member", "str", _members_ddl("SET", ["a,b", "c"]), lambda r: sql_str("c"),
                 ("'a,b'", "''", NULL)),
        TypeCase("set", "str", _members_ddl("SET", SET_MEMBERS), lambda r: _set_value(r, SET_MEMBERS),
                 (sql_str(",".join(SET_MEMBERS)), "''", NULL, sql_str("x y,it's"), sql_str("😀"), "'nope'")),
        TypeCase("json", "str", "JSON", lambda r: sql_str(random_json(r)),
                 ("'{}'", "'[]'", "'null'", "'\"s\\u00e9\"'", "'1e308'",
                  sql_str(json.dumps({"k": [[[[[]]]]]})),
                  sql_str('{"b": 1, "a": "😀 \\" \\\\ é", "n": null, "big": 123456789012345678901234567890}'),
                  NULL)),
    ]


def random_json(rng: random.Random, depth: int = 0) -> str:
    def value(d: int):
        kind = rng.randrange(7 if d < 3 else 4)
        if kind == 0:
            return rng.randint(-(2**63), 2**63)
        if kind == 1:
            return rng.choice([0.5, -1.25, 1e-7, 3.0, 12345.678])
        if kind == 2:
            return random_text(rng, 12)
        if kind == 3:
            return rng.choice([True, False, None])
        if kind in (4, 5):
            return {random_text(rng, 6): value(d + 1) for _ in range(rng.randint(0, 4))}
        return [value(d + 1) for _ in range(rng.randint(0, 4))]

    return json.dumps(value(depth), ensure_ascii=rng.random() < 0.5)


def _binary_cases() -> list[TypeCase]:
    def blob(case_id: str, ddl: str, max_len: int, edges: tuple[Literal, ...]) -> TypeCase:
        return TypeCase(case_id, "bin", ddl, lambda r: sql_bytes(random_bytes(r, max_len)),
                        edges + ("X''", NULL, sql_bytes(b"\x00"), sql_bytes(b"a\x00\x00")))

    return [
        blob("binary(1)", "BINARY(1)", 1, (sql_bytes(b"\xff"),)),
        blob("binary(16)", "BINARY(16)", 16,
             (sql_bytes(b"\x00" * 16), sql_bytes(b"\xff" * 16), sql_bytes(b"\x01"))),
        blob("varbinary(20)", "VARBINARY(20)", 20,
             (sql_bytes(b"\x00" * 20), sql_bytes(b"\xff" * 19 + b"\x00"))),
        blob("tinyblob", "TINYBLOB", 255, (sql_bytes(bytes(range(255))),)),
        blob("blob", "BLOB", 300, (sql_bytes(bytes(range(256)) * 100),)),
        blob("mediumblob", "MEDIUMBLOB", 300, (sql_bytes(bytes(range(256)) * 300),)),
        blob("longblob", "LONGBLOB", 300, (sql_bytes(b"\x00" * 100000),)),
    ]


def _coord(rng: random.Random) -> str:
    return repr(rng.choice([round(rng.uniform(-180, 180), rng.randint(0, 9)), rng.randint(-5, 5), 0.1 + 0.2]))


def _wkt(rng: random.Random, kind: str) -> str:
    def pts(n: int) -> str:
        return ", ".join(f"{_coord(rng)} {_coord(rng)}" for _ in range(n))

    def ring() -> str:
        x, y = rng.randint(-50, 50), rng.randint(-50, 50)
        s = rng.randint(1, 9)
        return f"({x} {y}, {x + s} {y}, {x + s} {y + s}, {x} {y + s}, {x} {y})"

    if kind == "point":
        return f"POINT({pts(1)})"
    if kind == "linestring":
        return f"LINESTRING({pts(rng.randint(2, 5))})"
    if kind == "polygon":
        return f"POLYGON({ring()})"
    if kind == "multipoint":
        return "MULTIPOINT(" + ", ".join(f"({pts(1)})" for _ in range(rng.randint(1, 4))) + ")"
    if kind == "multilinestring":
        return ("MULTILINESTRING("
                + ", ".join(f"({pts(rng.randint(2, 4))})" for _ in range(rng.randint(1, 3))) + ")")
    if kind == "multipolygon":
        return "MULTIPOLYGON(" + ", ".join(f"({ring()})" for _ in range(rng.randint(1, 3))) + ")"
    parts = [_wkt(rng, rng.choice(["point", "linestring", "polygon"])) for _ in range(rng.randint(0, 3))]
    return "GEOMETRYCOLLECTION(" + ", ".join(parts) + ")" if parts else "GEOMETRYCOLLECTION EMPTY"


# random coordinates with a SRID: a projected one, whose coordinates Oracle MySQL does not range-check (a
# geographic one, 4326, must hold latitudes in [-90, 90] there)
PROJECTED_SRID = 3857
GEOMETRY_KINDS = ["point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                  "geometrycollection"]


def _geometry_cases() -> list[TypeCase]:
    def literal(wkt: str, srid: int = 0) -> Literal:
        return f"ST_GeomFromText({sql_str(wkt)}, {srid})"

    out = [TypeCase("geometry", "geo", "GEOMETRY",
                    lambda r: literal(_wkt(r, r.choice(GEOMETRY_KINDS)), r.choice([0, PROJECTED_SRID])),
                    (literal("POINT(0 0)"), literal("GEOMETRYCOLLECTION EMPTY"), literal("POINT(1 2)", 4326),
                     NULL))]
    edges = {
        # Oracle MySQL reads SRID 4326 latitude first and checks the range: (90, -180) is its corner
        "point": (literal("POINT(0 0)"), literal("POINT(90 -180)", 4326), literal("POINT(1e300 -1e-300)")),
        "linestring": (literal("LINESTRING(0 0, 1 1)"),),
        "polygon": (literal("POLYGON((0 0, 10 0, 10 10, 0 10, 0 0), (2 2, 3 2, 3 3, 2 2))"),),
        "multipoint": (literal("MULTIPOINT((1 1))"),),
        "multilinestring": (literal("MULTILINESTRING((0 0, 1 1), (2 2, 3 3))"),),
        "multipolygon": (literal("MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)))"),),
        "geometrycollection": (literal("GEOMETRYCOLLECTION EMPTY"),
                               literal("GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))")),
    }
    for kind in GEOMETRY_KINDS:
        out.append(TypeCase(kind, "geo", kind.upper(),
                            lambda r, kind=kind: literal(_wkt(r, kind), r.choice([0, 0, 3857])),
                            edges[kind] + (NULL,)))
    return out


def random_inet6(rng: random.Random) -> str:
    words = [rng.choice([0, 0, 0, rng.randrange(65536), 0xFFFF]) for _ in range(8)]
    if rng.random() < 0.2:
        words = [0] * 5 + [0xFFFF] + [rng.randrange(65536), rng.randrange(65536)]
    import ipaddress

    return str(ipaddress.IPv6Address(b"".join(w.to_bytes(2, "big") for w in words)))


def _misc_cases() -> list[TypeCase]:
    def uuid_gen(r: random.Random) -> Literal:
        return sql_str(str(uuid.UUID(int=r.getrandbits(128))))

    def uuid_v1(r: random.Random) -> Literal:  # time-based: MariaDB stores its time fields swapped
        return sql_str(str(uuid.UUID(fields=(r.getrandbits(32), r.getrandbits(16), 0x1000 | r.getrandbits(12),
                                             0x80 | r.getrandbits(6), r.getrandbits(8), r.getrandbits(48)))))

    return [
        TypeCase("uuid", "misc", "UUID", lambda r: r.choice([uuid_gen, uuid_v1])(r),
                 ("'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
                  "'123e4567-e89b-12d3-a456-426614174000'", "'00000000-0000-0000-0000-000000000001'", NULL)),
        TypeCase("inet4", "misc", "INET4",
                 lambda r: sql_str(".".join(str(r.randrange(256)) for _ in range(4))),
                 ("'0.0.0.0'", "'255.255.255.255'", "'127.0.0.1'", "'10.0.0.0'", NULL)),
        TypeCase("inet6", "misc", "INET6", lambda r: sql_str(random_inet6(r)),
                 ("'::'", "'::1'", "'::ffff:1.2.3.4'", "'::1.2.3.4'",
                  "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'", "'2001:db8::1'", "'1::'", "'1:0:0:2::3'",
                  "'fe80::1:0:0:0'", "'0:0:1::'", "'1:0:1:0:1:0:1:0'", NULL)),
        TypeCase("generated-base", "misc", "INT NULL", lambda r: str(r.randint(-1000, 1000)), ("0", NULL),
                 report=False),
        TypeCase("generated-virtual", "misc", f"BIGINT AS ({_column_name('generated-base')} * 3 - 1) VIRTUAL",
                 lambda r: NULL, writable=False),
        TypeCase("generated-stored", "misc",
                 f"VARCHAR(40) AS (CONCAT('g', {_column_name('generated-base')}, 'é😀')) STORED",
                 lambda r: NULL, writable=False),
        TypeCase("invisible", "misc", "INT NULL INVISIBLE", lambda r: str(r.randint(-10, 10)),
                 ("0", NULL, "-1")),
    ]


TYPE_CASES: list[TypeCase] = [
    *_int_cases(), *_bit_cases(), *_decimal_cases(), *_float_cases(), *_temporal_cases(), *_string_cases(),
    *_binary_cases(), *_geometry_cases(), *_misc_cases(),
]
REPORTED_TYPE_CASES = [c for c in TYPE_CASES if c.report]
assert len({c.column for c in TYPE_CASES}) == len(TYPE_CASES), "two type cases map to one column name"


# --- character sets -----------------------------------------------------------------------------------------

# Every character set of MariaDB 10.x/11.x and MySQL 8.x (``binary`` aside). The suite checks that the
# server's SHOW CHARACTER SET holds nothing beyond this list, so a new charset cannot go untested.
CHARSETS = [
    "armscii8", "ascii", "big5", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852", "cp866", "cp932",
    "dec8", "eucjpms", "euckr", "gb18030", "gb2312", "gbk", "geostd8", "greek", "hebrew", "hp8", "keybcs2",
    "koi8r", "koi8u", "latin1", "latin2", "latin5", "latin7", "macce", "macroman", "sjis", "swe7", "tis620",
    "ucs2", "ujis", "utf16", "utf16le", "utf32", "utf8", "utf8mb3", "utf8mb4",
]
UNICODE_CHARSETS = {"utf8", "utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32"}


def unicode_pool(seed: int = 20240601) -> list[str]:
    """Candidate characters for every charset: printable ASCII, Latin, Greek, Cyrillic, Armenian, Hebrew,
    Arabic, Thai, Georgian, symbols and box drawing, kana, samples of CJK and Hangul, fullwidth and halfwidth
    forms, and characters outside the BMP."""
    rng = random.Random(seed)
    codes: list[int] = list(range(0x20, 0x7F))
    spans = [
        (0xA0, 0x250), (0x2B0, 0x2E0), (0x384, 0x3CF), (0x400, 0x460), (0x490, 0x4A0), (0x531, 0x557),
        (0x561, 0x588), (0x589, 0x58B), (0x5B0, 0x5C4), (0x5D0, 0x5EB), (0x60C, 0x60D), (0x61B, 0x620),
        (0x621, 0x64B), (0x660, 0x66A), (0x67E, 0x67F), (0x686, 0x687), (0x698, 0x699), (0x6AF, 0x6B0),
        (0xE01, 0xE3B), (0xE3F, 0xE5C), (0x10D0, 0x10F7), (0x1E00, 0x1E10), (0x1EA0, 0x1EFA),
        (0x2010, 0x2045), (0x20A0, 0x20B6), (0x2100, 0x2123), (0x2190, 0x219A), (0x2200, 0x2266),
        (0x2500, 0x25A1), (0x25B2, 0x25CC), (0x2640, 0x2643), (0x3000, 0x3016), (0x3041, 0x3094),
        (0x309B, 0x309F), (0x30A1, 0x30F7), (0x30FB, 0x30FF), (0x3131, 0x3164), (0xFF01, 0xFF5F),
        (0xFF61, 0xFFA0), (0xFFE0, 0xFFE7),
    ]
    for lo, hi in spans:
        codes.extend(range(lo, hi))
    codes.extend(rng.sample(range(0x4E00, 0x9FA6), 160))  # CJK unified ideographs
    codes.extend([0x4E2D, 0x6587, 0x65E5, 0x672C, 0x8A9E, 0x6F22, 0x5B57, 0x9F98, 0x5F20, 0x7E41])
    codes.extend(rng.sample(range(0xAC00, 0xD7A4), 120))  # Hangul syllables
    codes.extend([0xAC00, 0xB098, 0xB2E4, 0xD55C, 0xAD6D, 0xC5B4])
    codes.extend([0x1F600, 0x1F601, 0x1F389, 0x1F44D, 0x20000, 0x1D11E, 0x10FFFF, 0x2A6D6, 0xFFFD])
    return [chr(c) for c in dict.fromkeys(codes)]


def representable(conn: pymysql.connections.Connection, charset: str, pool: list[str]) -> list[str]:
    """The characters of ``pool`` the server converts to ``charset`` and back unchanged (compared as
    bytes)."""
    if not re.fullmatch(r"[a-z0-9_]+", charset):
        raise ValueError(charset)
    out: list[str] = []
    with conn.cursor() as cur:
        for i in range(0, len(pool), 400):
            part = pool[i : i + 400]
            exprs = ", ".join(f"HEX(CONVERT(CONVERT(%s USING {charset}) USING utf8mb4))" for _ in part)
            cur.execute(f"SELECT {exprs}", part)
            row = cur.fetchone()
            out.extend(ch for ch, h in zip(part, row) if h == ch.encode("utf-8").hex().upper())
    return out


def charset_maxlen(conn: pymysql.connections.Connection, charset: str) -> int | None:
    with conn.cursor() as cur:
        cur.execute("SELECT MAXLEN FROM information_schema.CHARACTER_SETS WHERE CHARACTER_SET_NAME = %s",
                    (charset,))
        row = cur.fetchone()
    return int(row[0]) if row else None


def server_charsets(conn: pymysql.connections.Connection) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW CHARACTER SET")
        return sorted(str(r[0]) for r in cur.fetchall() if str(r[0]) != "binary")


def charset_text(rng: random.Random, chars: list[str], max_chars: int, non_ascii_share: float = 0.75) -> str:
    """A random string of ``chars`` (those the charset can hold), mostly non-ASCII when it has any."""
    high = [c for c in chars if ord(c) > 0x7F]
    low = [c for c in chars if ord(c) <= 0x7F]
    n = rng.randint(1, max_chars)
    out = []
    for _ in range(n):
        pool = high if high and (rng.random() < non_ascii_share or not low) else low
        out.append(rng.choice(pool))
    return "".join(out)


def legacy_multibyte_soup(rng: random.Random, pairs: int) -> bytes:
    """Random lead/trail byte pairs of the East Asian multi-byte charsets (valid or not: the server
    decides)."""
    out = bytearray()
    for _ in range(pairs):
        out += bytes([rng.randint(0x81, 0xFE),
                      rng.choice([rng.randint(0x40, 0x7E), rng.randint(0x80, 0xFE)])])
    return bytes(out)


# --- key shapes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyCase:
    """A table shape: key columns (DDL) and a pool of key literals; writers insert, update, move and delete
    rows by those literals. ``primary_key=False``: the key columns are a plain (nullable) chunk key."""

    id: str
    columns: tuple[tuple[str, str], ...]
    pool: Callable[[random.Random], list[tuple[Literal, ...]]]
    primary_key: bool = True
    chunk_key: str | None = None  # a non-PK column to chunk by
    extra_columns: tuple[tuple[str, str], ...] = ()  # e.g. the PK when the chunk key is another column
    extra_pool: Callable[[random.Random], list[tuple[Literal, ...]]] | None = None
    sql_mode: str | None = None
    needs: tuple[str, ...] = ()  # column DDL the server must accept (probed), e.g. a collation
    key_rewrites: tuple[str, ...] = ()  # in-place key rewrites (collation-equal moves), see runner.Ops

    @property
    def table(self) -> str:
        return "k_" + re.sub(r"[^0-9a-zA-Z]+", "_", self.id).strip("_").lower()


def _ints(lo: int, hi: int,
          extra: tuple[int, ...] = ()) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = {lo, hi, lo + 1, hi - 1, 0 if lo <= 0 <= hi else lo + 2, *extra}
        while len(values) < 70:
            values.add(rng.choice([rng.randint(lo, hi), rng.randint(max(lo, -50), min(hi, 50)),
                                   rng.randint(max(lo, hi - 40), hi)]))
        return [(str(v),) for v in sorted(values)]

    return pool


def _decimals(m: int, d: int) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        biggest = "9" * (m - d) + ("." + "9" * d if d else "")
        values = {biggest, "-" + biggest, "0", ("0." + "0" * (d - 1) + "1") if d else "1"}
        while len(values) < 60:
            values.add(_decimal_literal(rng, m, d))
        return [(v,) for v in sorted(values)]

    return pool


def _doubles(rng: random.Random) -> list[tuple[Literal, ...]]:
    values = {"1.7976931348623157e+308", "-1.7976931348623157e+308", "0", "-0.0", "5e-324", "-5e-324",
              "2.2250738585072014e-308", "0.1", "0.30000000000000004", "1e15", "9007199254740993"}
    while len(values) < 60:
        values.add(repr(rng.uniform(-10, 10) * 10.0 ** rng.randint(-20, 20)))
    return [(v,) for v in sorted(values)]


def _temporals(kind: str, p: int = 0) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        if kind == "date":
            values = {"'1000-01-01'", "'9999-12-31'", "'2024-02-29'", "'1970-01-01'"}
            lo, hi = dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31)
        elif kind == "datetime":
            values = {"'1000-01-01 00:00:00'", f"'9999-12-31 23:59:59.{'9' * p}'", "'2024-03-10 02:30:00.5'",
                      "'2024-03-10 02:30:00.500001'"}
            lo, hi = dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31)
        else:  # timestamp
            values = {"'1970-01-01 00:00:01'", "'2038-01-19 03:14:07'", "'2024-11-03 08:59:59'",
                      "'2024-11-03 09:00:00'"}
            lo, hi = dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7)
        while len(values) < 60:
            stamp = _random_datetime(rng, lo, hi)
            if kind == "date":
                values.add(sql_str(stamp.date().isoformat()))
            else:
                values.add(sql_str(stamp.isoformat(" ") + _fraction(rng, p)))
        return [(v,) for v in sorted(values)]

    return pool


def _times(p: int) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = {"'-838:59:59'", "'838:59:59'", "'00:00:00'", "'-00:00:01'", "'24:00:00'", "'-24:00:00'"}
        if p:
            values |= {f"'-00:00:00.{'0' * (p - 1)}1'", f"'00:00:00.{'0' * (p - 1)}1'", "'-12:34:56.5'"}
        while len(values) < 60:
            values.add(_time_literal(rng, p))
        return [(v,) for v in sorted(values)]

    return pool


# Strings that collide under case-, accent- and pad-insensitive collations, and some that do not.
COLLIDING = ["a", "A", "a ", "A ", "á", "Á", "à", "ä", "Ä", "ae", "AE", "æ", "Æ", "ß", "ss", "SS", "ẞ",
             "o", "ö", "oe", "Œ", "œ", "", " ", "abc", "ABC ", "Abc\t", "abc\t", "x", "X", "😀", "😁", "ﬃ",
             "ffi", "\u00a0", "e\u0301", "é", "É", "z", "Z", "0", "-", "y", "ÿ", "Ÿ", "i", "I", "ı", "İ", "ø",
             "Ø"]


def _strings(max_chars: int,
             chars: list[str] | None = None) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = [s for s in COLLIDING
                  if len(s) <= max_chars and (chars is None or all(c in chars for c in s))]
        while len(values) < 80:
            base = random_text(rng, max_chars, chars)
            values.append(base)
            values.append(base.upper() if rng.random() < 0.5 else base + " ")
        return [(sql_str(v[:max_chars]),) for v in dict.fromkeys(values)]

    return pool


_LATIN1 = [chr(c) for c in range(0x20, 0x7F)] + [chr(c) for c in range(0xA0, 0x100)]
_BMP = sorted({ch for text in _TEXT_CHARS + COLLIDING for ch in text if ord(ch) < 0x10000})


def _binaries(width: int) -> Callable[[random.Random], list[tuple[Literal, ...]]]:
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = {b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"\xff" * width, b"\x00" * width, b"\x80", b"A"}
        while len(values) < 60:
            values.add(random_bytes(rng, width))
        return [(sql_bytes(v[:width]),) for v in sorted(values)]

    return pool


def _uuids(rng: random.Random) -> list[tuple[Literal, ...]]:
    values = {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
              "00000000-0000-1000-8000-000000000000", "123e4567-e89b-12d3-a456-426614174000"}
    while len(values) < 60:
        if rng.random() < 0.5:  # time-based: MariaDB orders these by their swapped time fields
            values.add(str(uuid.UUID(fields=(rng.getrandbits(32), rng.getrandbits(16),
                                             0x1000 | rng.getrandbits(12), 0x80 | rng.getrandbits(6),
                                             rng.getrandbits(8), rng.getrandbits(48)))))
        else:
            values.add(str(uuid.UUID(int=rng.getrandbits(128))))
    return [(sql_str(v),) for v in sorted(values)]


def _inet6s(rng: random.Random) -> list[tuple[Literal, ...]]:
    values = {"::", "::1", "::ffff:1.2.3.4", "::1.2.3.4", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "1::",
              "fe80::1", "2001:db8::"}
    while len(values) < 60:
        values.add(random_inet6(rng))
    return [(sql_str(v),) for v in sorted(values)]


def _inet4s(rng: random.Random) -> list[tuple[Literal, ...]]:
    values = {"0.0.0.0", "255.255.255.255", "127.0.0.1", "128.0.0.0", "127.255.255.255"}
    while len(values) < 60:
        values.add(".".join(str(rng.randrange(256)) for _ in range(4)))
    return [(sql_str(v),) for v in sorted(values)]


def _product(*pools: Callable[[random.Random], list[tuple[Literal, ...]]], size: int = 90):
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        parts = [p(rng) for p in pools]
        out = {tuple(v for part in parts for v in rng.choice(part)) for _ in range(size)}
        return sorted(out)

    return pool


# Rewrites of a string key in place: under a case-/pad-insensitive collation most give a key equal to the
# old one (the row keeps its identity, its stored text changes); under _bin they move the row.
STRING_KEY_REWRITES = ("UPPER({col})", "LOWER({col})", "CONCAT({col}, ' ')", "RTRIM({col})",
                       "REPLACE({col}, 'a', 'á')", "REPLACE({col}, 'ss', 'ß')")
ZERO_DATE_REWRITES = ("DATE_ADD({col}, INTERVAL 0 DAY)", "'0000-00-00'", "{col}")

ZERO_DATES = ["'0000-00-00'", "'2020-00-15'", "'2020-05-00'", "'0000-01-01'", "'0000-12-31'", "'2020-01-01'",
              "'1999-12-31'", "'9999-12-31'", "'1000-01-01'"]
ZERO_DATETIMES = ["'0000-00-00 00:00:00'", "'2020-00-15 10:11:12'", "'0000-01-01 00:00:00'",
                  "'2020-01-00 00:00:00'", "'2020-01-01 00:00:00'", "'9999-12-31 23:59:59'",
                  "'1000-01-01 00:00:00'", "'2024-03-10 02:30:00'"]


def _zero_dates(rng: random.Random) -> list[tuple[Literal, ...]]:
    return sorted({(str(rng.randint(1, 4)), rng.choice(ZERO_DATETIMES), rng.choice(ZERO_DATES))
                   for _ in range(200)})


def _zero_dates_ts(rng: random.Random) -> list[tuple[Literal, ...]]:
    stamps = ["'0000-00-00 00:00:00'", "'0000-00-00 00:00:00.000'", "'1970-01-01 00:00:01'",
              "'2038-01-19 03:14:07.999'", "'2024-11-03 08:59:59.5'"]
    return sorted({(str(rng.randint(1, 3)), rng.choice(stamps), rng.choice(ZERO_DATES)) for _ in range(200)})


def _with_nulls(base: Callable[[random.Random], list[tuple[Literal, ...]]], share: int = 6):
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = base(rng)
        return values + [(NULL,)] * max(1, len(values) // share)

    return pool


def _dupes(base: Callable[[random.Random], list[tuple[Literal, ...]]]):
    def pool(rng: random.Random) -> list[tuple[Literal, ...]]:
        values = base(rng)[:20]
        return values * 3

    return pool


def _key_cases() -> list[KeyCase]:
    def one(case_id: str, ddl: str, pool, **kw) -> KeyCase:
        return KeyCase(case_id, (("k", ddl),), pool, **kw)

    def ci(collation: str, width: int = 12, ddl: str = "VARCHAR") -> KeyCase:
        charset = collation.split("_")[0]
        chars = {"latin1": _LATIN1, "utf8mb3": _BMP}.get(charset)
        return one(f"{ddl.lower()}[{collation}]",
                   f"{ddl}({width}) CHARACTER SET {charset} COLLATE {collation} NOT NULL",
                   _strings(width, chars), needs=(f"{ddl}(4) CHARACTER SET {charset} COLLATE {collation}",),
                   key_rewrites=STRING_KEY_REWRITES)

    return [
        one("tinyint", "TINYINT NOT NULL", _ints(-128, 127)),
        one("int", "INT NOT NULL", _ints(-(2**31), 2**31 - 1)),
        one("int-unsigned", "INT UNSIGNED NOT NULL", _ints(0, 2**32 - 1)),
        one("bigint", "BIGINT NOT NULL", _ints(-(2**63), 2**63 - 1)),
        one("bigint-unsigned", "BIGINT UNSIGNED NOT NULL",
            _ints(0, 2**64 - 1, (2**63, 2**63 - 1, 2**64 - 2))),
        one("bigint-unsigned-dense-top", "BIGINT UNSIGNED NOT NULL",
            lambda r: [(str(2**64 - 1 - i),) for i in range(0, 120, 2)]),
        one("int-dense", "INT NOT NULL", lambda r: [(str(i),) for i in range(-30, 60)]),
        one("decimal(20,6)", "DECIMAL(20,6) NOT NULL", _decimals(20, 6)),
        one("decimal(65,30)", "DECIMAL(65,30) NOT NULL", _decimals(65, 30)),
        one("decimal(65,0)", "DECIMAL(65,0) NOT NULL", _decimals(65, 0)),
        one("double", "DOUBLE NOT NULL", _doubles),
        one("date", "DATE NOT NULL", _temporals("date")),
        one("datetime(6)", "DATETIME(6) NOT NULL", _temporals("datetime", 6)),
        one("timestamp", "TIMESTAMP NOT NULL DEFAULT '1970-01-01 00:00:01'", _temporals("timestamp")),
        one("timestamp(6)", "TIMESTAMP(6) NOT NULL DEFAULT '1970-01-01 00:00:01'",
            _temporals("timestamp", 6)),
        one("time", "TIME NOT NULL", _times(0)),
        one("time(6)", "TIME(6) NOT NULL", _times(6)),
        one("year", "YEAR NOT NULL",
            lambda r: [("0",), ("1901",), ("2155",)]
            + [(str(y),) for y in sorted(r.sample(range(1902, 2155), 50))]),
        ci("utf8mb4_general_ci"),
        ci("utf8mb4_unicode_ci"),
        ci("utf8mb4_unicode_520_ci"),
        ci("utf8mb4_uca1400_ai_ci"),
        ci("utf8mb4_general_nopad_ci"),
        ci("utf8mb4_bin"),
        ci("utf8mb4_nopad_bin"),
        ci("latin1_swedish_ci"),
        ci("latin1_german2_ci"),
        ci("latin1_bin"),
        ci("utf8mb3_general_ci"),
        ci("utf8mb4_general_ci", width=8, ddl="CHAR"),
        ci("utf8mb4_bin", width=8, ddl="CHAR"),
        one("binary(4)", "BINARY(4) NOT NULL", _binaries(4)),
        one("varbinary(8)", "VARBINARY(8) NOT NULL", _binaries(8)),
        one("uuid", "UUID NOT NULL", _uuids, needs=("UUID",)),
        one("inet6", "INET6 NOT NULL", _inet6s, needs=("INET6",)),
        one("inet4", "INET4 NOT NULL", _inet4s, needs=("INET4",)),
        KeyCase("composite[int,varchar-ci]",
                (("a", "INT NOT NULL"), ("b", "VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL")),
                _product(lambda r: [(str(i),) for i in (-1, 0, 1, 2)], _strings(8)),
                key_rewrites=STRING_KEY_REWRITES),
        KeyCase("composite[tinyint,bigint-unsigned]",
                (("a", "TINYINT NOT NULL"), ("b", "BIGINT UNSIGNED NOT NULL")),
                _product(lambda r: [("-128",), ("0",), ("127",)], _ints(0, 2**64 - 1))),
        KeyCase("composite[date,decimal]", (("a", "DATE NOT NULL"), ("b", "DECIMAL(10,3) NOT NULL")),
                _product(_temporals("date"), _decimals(10, 3))),
        KeyCase("composite[varbinary,datetime(6)]",
                (("a", "VARBINARY(4) NOT NULL"), ("b", "DATETIME(6) NOT NULL")),
                _product(lambda r: _binaries(4)(r)[:6], _temporals("datetime", 6))),
        KeyCase("composite[varchar-bin,time,int]", (("a", "VARCHAR(6) COLLATE utf8mb4_bin NOT NULL"),
                                                    ("b", "TIME(3) NOT NULL"), ("c", "INT NOT NULL")),
                _product(lambda r: _strings(6)(r)[:8], _times(3),
                         lambda r: [(str(i),) for i in range(-2, 3)])),
        KeyCase("composite[double,year]", (("a", "DOUBLE NOT NULL"), ("b", "YEAR NOT NULL")),
                _product(_doubles, lambda r: [("0",), ("1901",), ("2155",), ("2000",)])),
        KeyCase("zero-dates", (("id", "INT NOT NULL"), ("dt", "DATETIME NOT NULL"), ("d", "DATE NOT NULL")),
                _zero_dates, sql_mode="", key_rewrites=ZERO_DATE_REWRITES),
        KeyCase("zero-dates-timestamp", (("id", "INT NOT NULL"), ("ts", "TIMESTAMP(3) NOT NULL DEFAULT 0"),
                                         ("d", "DATE NOT NULL")), _zero_dates_ts, sql_mode=""),
        one("zero-date-single", "DATE NOT NULL", lambda r: [(d,) for d in ZERO_DATES] +
            [(sql_str(f"{y:04d}-{m:02d}-{dd:02d}"),) for y, m, dd in
             sorted({(r.choice([0, 1, 2020, 9999]), r.randint(0, 12), r.randint(0, 31)) for _ in range(60)})],
            sql_mode=""),
        KeyCase("null-chunk-key[int]", (("ck", "INT NULL"),), _with_nulls(_ints(-1000, 1000)), chunk_key="ck",
                extra_columns=(("id", "INT NOT NULL PRIMARY KEY"),),
                extra_pool=lambda r: [(str(i),) for i in range(1, 120)]),
        KeyCase("null-chunk-key[varchar-ci]", (("ck", "VARCHAR(10) COLLATE utf8mb4_general_ci NULL"),),
                _with_nulls(_strings(10)), chunk_key="ck",
                extra_columns=(("id", "INT NOT NULL PRIMARY KEY"),),
                extra_pool=lambda r: [(str(i),) for i in range(1, 120)]),
        KeyCase("null-chunk-key[date-zero]", (("ck", "DATE NULL"),),
                _with_nulls(lambda r: [(d,) for d in ZERO_DATES]),
                chunk_key="ck", extra_columns=(("id", "INT NOT NULL PRIMARY KEY"),),
                extra_pool=lambda r: [(str(i),) for i in range(1, 120)], sql_mode=""),
        KeyCase("no-primary-key[int]", (("ck", "INT NULL"),), _dupes(_with_nulls(_ints(-50, 50), 4)),
                primary_key=False, chunk_key="ck"),
        KeyCase("no-primary-key[varchar-ci]", (("ck", "VARCHAR(8) COLLATE utf8mb4_general_ci NULL"),),
                _dupes(_with_nulls(_strings(8), 4)), primary_key=False, chunk_key="ck"),
    ]


KEY_CASES: list[KeyCase] = _key_cases()
assert len({c.table for c in KEY_CASES}) == len(KEY_CASES), "two key cases map to one table name"
