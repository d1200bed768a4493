"""Tables for the catalogue's cases, shaped by what the server accepts (probed, never assumed)."""
from __future__ import annotations

import random
import zlib

import pymysql

from airflow_provider_mysqlcdc.engine.model.tables import quote_ident
from tests.conformance.catalogue import (
    NULL,
    TYPE_CASES,
    UNICODE_CHARSETS,
    WIDE_TABLES,
    KeyCase,
    charset_text,
    legacy_multibyte_soup,
    random_text,
    sql_binary,
    sql_str,
)
from tests.conformance.runner import TableSpec, ValueColumn

TYPE_ROWS = 30


def seed_of(name: str) -> int:
    """A fixed seed per case name (stable across runs and Python processes)."""
    return zlib.crc32(name.encode("utf-8"))


def _try_create(cur: pymysql.cursors.Cursor, name: str, columns: str) -> str | None:
    """None if the server accepts the table, else its error message."""
    try:
        cur.execute(f"CREATE TABLE {quote_ident(name)} ({columns})")
    except pymysql.err.MySQLError as exc:
        return f"the server refuses it: ({exc.args[0]}) {exc.args[1] if len(exc.args) > 1 else exc}"
    cur.execute(f"DROP TABLE {quote_ident(name)}")
    return None


def probe_types(conn: pymysql.connections.Connection) -> dict[str, str]:
    """Type cases this server cannot create, with the reason (its error)."""
    skipped: dict[str, str] = {}
    base = next(c for c in TYPE_CASES if c.id == "generated-base")
    with conn.cursor() as cur:
        for table in WIDE_TABLES:
            cases = [c for c in TYPE_CASES if c.table == table]
            cols = ", ".join(f"{quote_ident(c.column)} {c.ddl}" for c in cases)
            if _try_create(cur, "probe_wide", f"id INT PRIMARY KEY, {cols}") is None:
                continue
            for c in cases:
                helper = (f", {quote_ident(base.column)} {base.ddl}"
                          if c is not base and "generated" in c.id else "")
                reason = _try_create(cur, "probe_one",
                                     f"id INT PRIMARY KEY{helper}, {quote_ident(c.column)} {c.ddl}")
                if reason:
                    skipped[c.id] = f"{c.ddl}: {reason}"
    return skipped


def type_specs(skipped: dict[str, str], suffix: str = "") -> list[TableSpec]:
    specs = []
    for key, wide in WIDE_TABLES.items():
        cases = [c for c in TYPE_CASES if c.table == key and c.id not in skipped]
        specs.append(TableSpec(
            name=wide.name + suffix,
            key_columns=[("id", "INT NOT NULL")],
            key_pool=[(str(i),) for i in range(1, 3 * TYPE_ROWS)],
            value_columns=[ValueColumn(c.column, c.ddl, c.gen, c.edges) for c in cases if c.writable],
            computed_columns=[(c.column, c.ddl) for c in cases if not c.writable],
            sql_mode=wide.sql_mode,
            initial_rows=TYPE_ROWS,
        ))
    return specs


def probe_key_case(conn: pymysql.connections.Connection, case: KeyCase) -> str | None:
    """Why the server cannot hold this key case (None: it can), asked under the case's own ``sql_mode``: a
    zero-date default that a legacy mode allows is refused under Oracle MySQL's strict default."""
    with conn.cursor() as cur:
        if case.sql_mode is not None:
            cur.execute("SET SESSION sql_mode = %s", (case.sql_mode,))
        for ddl in case.needs:
            reason = _try_create(cur, "probe_key", f"x {ddl}")
            if reason:
                return f"{ddl}: {reason}"
        cols = ", ".join(f"{quote_ident(n)} {ddl}" for n, ddl in case.columns)
        return _try_create(cur, "probe_key", cols)


def key_spec(case: KeyCase, suffix: str = "") -> TableSpec:
    rng = random.Random(seed_of("pool:" + case.id))
    id_column = case.extra_columns[0] if case.extra_columns else None
    return TableSpec(
        name=case.table + suffix,
        key_columns=list(case.columns),
        key_pool=case.pool(rng),
        value_columns=[
            ValueColumn("v", "INT NOT NULL", lambda r: str(r.randint(-1000, 1000)), ("0", "-2147483648")),
            ValueColumn("note", "VARCHAR(16) NULL", lambda r: sql_str(random_text(r, 16)), (NULL, "''")),
        ],
        primary_key=case.primary_key,
        id_column=id_column,
        id_pool=[v[0] for v in case.extra_pool(rng)] if case.extra_pool else [],
        sql_mode=case.sql_mode,
        chunk_key=case.chunk_key,
        initial_rows=36,
        key_rewrites=case.key_rewrites,
    )


SURROGATE_CHARSETS = {"ucs2": "D880", "utf32": "0000D880"}  # charset -> a lone surrogate in it


def is_single_byte(maxlen: int) -> bool:
    return maxlen == 1


# Collations whose WEIGHT_STRING disagrees with their own comparisons (big5_chinese_ci: '=' and '<' compare
# the character codes, sort keys follow stroke order), so no chunk key can be ordered in them: the planner
# refuses such a key naming the column and the way out, a _bin collation of the same charset.
UNORDERABLE_COLLATIONS = {"big5": "big5_chinese_ci"}
# Oracle MySQL's tis620_thai_ci gives NUL no weight of its own but compares '' > '\x00' (PAD SPACE)
MYSQL_UNORDERABLE_COLLATIONS = {"tis620": "tis620_thai_ci"}


def unorderable_collations(flavor: str) -> dict[str, str]:
    return {**UNORDERABLE_COLLATIONS, **(MYSQL_UNORDERABLE_COLLATIONS if flavor == "mysql" else {})}


def charset_specs(charset: str, chars: list[str], maxlen: int, suffix: str = "",
                  key_collation: str | None = None) -> dict[str, TableSpec]:
    """Tables of one charset: ``values`` (``cs_``: CHAR/VARCHAR/TEXT columns in the charset with non-ASCII
    values, and ``hb``: raw high bytes), ``key`` (``csk_``: a VARCHAR primary key in the charset, with
    collation-equal variants of its keys), ``raw`` (``csb_``, identity only: bytes written as ``_binary``
    under sql_mode '': every byte 0x80..0xFF for a single-byte charset, random high-byte soup for the
    others)."""
    rng = random.Random(seed_of("pool:" + charset))
    cs = f"CHARACTER SET {charset}"
    keys = []
    for _ in range(60):
        text = charset_text(rng, chars, 8)
        keys.append(text)
        variant = text.upper() if rng.random() < 0.5 else text.lower() + " "
        if all(c in chars for c in variant.strip()):  # collation-equal variants of the same key
            keys.append(variant[:16])
    high = bytes(range(0x80, 0x100))
    if is_single_byte(maxlen):
        hb_edges = tuple(sql_binary(high[i:i + 32]) for i in range(0, 128, 32)) + (sql_binary(high),)
    elif charset in UNICODE_CHARSETS:
        hb_edges = (NULL,)
    else:
        hb_edges = tuple(sql_binary(legacy_multibyte_soup(random.Random(i), 20)) for i in range(4))
    all_high = "".join(c for c in chars if ord(c) > 0x7F)
    value_table = TableSpec(
        name=f"cs_{charset}{suffix}",
        key_columns=[("id", "INT NOT NULL")],
        key_pool=[(str(i),) for i in range(1, 90)],
        value_columns=[
            ValueColumn("c", f"CHAR(10) {cs} NULL", lambda r: sql_str(charset_text(r, chars, 10)),
                        (NULL, "''")),
            ValueColumn("v", f"VARCHAR(64) {cs} NULL", lambda r: sql_str(charset_text(r, chars, 64)),
                        (sql_str(all_high[:64]), "' trailing  '")),
            ValueColumn("t", f"TEXT {cs} NULL", lambda r: sql_str(charset_text(r, chars, 300)),
                        (sql_str(all_high),)),
            ValueColumn("hb", f"VARCHAR(140) {cs} NULL", lambda r: NULL, hb_edges),
        ],
        sql_mode="",
        initial_rows=30,
    )
    collate = f" COLLATE {key_collation}" if key_collation else ""
    key_table = TableSpec(
        name=f"csk_{charset}{'_bin' if key_collation else ''}{suffix}",
        key_columns=[("k", f"VARCHAR(16) {cs}{collate} NOT NULL")],
        key_pool=[(sql_str(k),) for k in dict.fromkeys(keys)],
        key_rewrites=("UPPER({col})", "LOWER({col})", "CONCAT({col}, ' ')", "RTRIM({col})"),
        value_columns=[ValueColumn("v", f"VARCHAR(20) {cs} NULL",
                                   lambda r: sql_str(charset_text(r, chars, 20)))],
        sql_mode="",
        initial_rows=30,
    )
    if is_single_byte(maxlen):
        byte_values = [sql_binary(bytes([b])) for b in high]
    else:
        soup = random.Random(seed_of("soup:" + charset))
        # ucs2/utf32 take lone UTF-16 surrogates (code units D800-DFFF), which have no Unicode form:
        # those are refused with an error (test_no_unicode_form); no byte D8-DF, no surrogate
        avoid = range(0xD8, 0xE0) if charset in SURROGATE_CHARSETS else range(0)
        byte_values = [sql_binary(bytes(soup.choice([b for b in range(0x80, 0x100) if b not in avoid])
                                        for _ in range(soup.randint(1, 4))))
                       for _ in range(128)]
    raw = TableSpec(
        name=f"csb_{charset}{suffix}",
        key_columns=[("id", "INT NOT NULL")],
        key_pool=[(str(i),) for i in range(len(byte_values))],
        value_columns=[ValueColumn("b", f"VARCHAR(8) {cs} NULL", lambda r: NULL, tuple(byte_values))],
        sql_mode="",
        initial_rows=len(byte_values),
        pipeline=False,
    )
    return {"values": value_table, "key": key_table, "raw": raw}
