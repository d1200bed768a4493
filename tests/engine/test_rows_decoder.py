"""The compiled rows-event decoder against the Python path (mysql-replication, patched by ``row_decoding``,
then ``CapturedVersion.normalize``), on the real server: every column type and character set of the
conformance catalogue, written by its seeded writers (inserts, updates, key moves, deletes, multi-row
statements, MINIMAL and NOBLOB row images), each rows event decoded by both, value for value and type for
type. Plus: what the decoder refuses, and the package without its compiled module."""
from __future__ import annotations

import datetime as dt
import functools
import importlib
import logging
import random
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.column import Column as TableMapColumn
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from airflow_provider_mysqlcdc.engine.binlog import row_decoding
from airflow_provider_mysqlcdc.engine.binlog.captured import CapturedTables
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import (
    EventLayout,
    NotDecodable,
    compiled_available,
    decode_event,
    missing_reason,
)
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.codes import Out
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder, CharsetTable
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema, quote_ident
from airflow_provider_mysqlcdc.engine.model.values import UndecodableText, binlog_normalizer
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.charset_tables import charset_decoder
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from tests.conformance.catalogue import (
    CHARSETS,
    TYPE_CASES,
    charset_maxlen,
    random_json,
    representable,
    server_charsets,
    sql_str,
    unicode_pool,
)
from tests.conformance.runner import Ops, Sessions, TableSpec, ValueColumn
from tests.conformance.specs import SURROGATE_CHARSETS, charset_specs, probe_types, type_specs
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
SEED = 20261124
STATEMENTS_PER_TABLE = 120
READER_SLOT = 7


# --- the writes ---------------------------------------------------------------------------------------------


def _status(conn) -> BinlogPosition:
    return binlog_end(conn)


def _multi_row_statements(spec: TableSpec, database: str) -> list[str]:
    """Statements whose rows events hold many rows: a copy of the table under moved keys, an update of
    every row, a delete of a third."""
    table = TableId(database, spec.name).quoted
    key = quote_ident(spec.key_columns[0][0])
    names = ", ".join(quote_ident(c.name) for c in spec.value_columns)
    return [
        (f"INSERT IGNORE INTO {table} ({key}, `seq`, {names}) "
         f"SELECT {key} + 100000, `seq`, {names} FROM {table}"),
        f"UPDATE {table} SET `seq` = `seq` + 1",
        f"DELETE FROM {table} WHERE `seq` % 3 = 0",
    ]


def _write(server, database: str, specs: list[TableSpec], rng: random.Random, statements: int) -> None:
    sessions = Sessions(server, database)
    try:
        for spec in specs:
            ops = Ops(spec, database)
            for sql in ops.initial(rng):
                sessions.run(spec.sql_mode, [sql])
            for _ in range(statements):
                sessions.run(spec.sql_mode, ops.transaction(rng))
            sessions.run(spec.sql_mode, _multi_row_statements(spec, database))
    finally:
        sessions.close()


def _write_partial_images(server, database: str, specs: list[TableSpec], rng: random.Random) -> None:
    """Updates and deletes in MINIMAL and NOBLOB sessions: row images with absent columns."""
    for image in ("MINIMAL", "NOBLOB"):
        for spec in specs:
            with server.admin(database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION binlog_row_image = %s", (image,))
                if spec.sql_mode is not None:
                    cur.execute("SET SESSION sql_mode = %s", (spec.sql_mode,))
                ops = Ops(spec, database)
                for _ in range(15):
                    cur.execute(ops.statement(rng))
                cur.execute(_multi_row_statements(spec, database)[1])


def _legacy_formats(conn, database: str) -> list[TableSpec]:
    """MariaDB only: DATETIME, TIME and TIMESTAMP in the pre-5.6 binary formats (binlog types 12, 11 and 7: a
    table created under mysql56_temporal_format=OFF) and latin1 ENUM/SET columns with non-ASCII members.

    Both paths agree on them, mysql-replication's readings included, which this pins rather than endorses:
    it reads a negative pre-5.6 TIME as unsigned ('-12:34:56' -> 69 days 9:38:00) and decodes the table
    map's ENUM/SET members as UTF-8, so latin1 'é' becomes ''."""
    cases = {c.id: c for c in TYPE_CASES}
    members = ["é", "b", "ü x"]
    spec = TableSpec(
        name="legacy_formats",
        key_columns=[("id", "INT NOT NULL")],
        key_pool=[(str(i),) for i in range(1, 90)],
        value_columns=[ValueColumn(cases[i].column, cases[i].ddl, cases[i].gen, cases[i].edges)
                       for i in ("datetime(0)", "time(0)", "timestamp(0)")] + [
            ValueColumn("e_latin1", f"ENUM({', '.join(map(sql_str, members))}) CHARACTER SET latin1 NULL",
                        lambda r: r.choice([*map(sql_str, members), "NULL"])),
            ValueColumn("s_latin1", f"SET({', '.join(map(sql_str, members))}) CHARACTER SET latin1 NULL",
                        lambda r: sql_str(",".join(m for m in members if r.random() < 0.5))),
        ],
        sql_mode="",
    )
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.mysql56_temporal_format")
        (before,) = cur.fetchone()
        cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
        try:
            cur.execute(spec.create_sql(database))
        finally:
            cur.execute("SET GLOBAL mysql56_temporal_format = %s", (before,))
    return [spec]


def _charset_specs(conn) -> list[TableSpec]:
    """The catalogue's value and raw-byte tables of every charset of the server."""
    offered = set(server_charsets(conn))
    pool = unicode_pool()
    specs = []
    for charset in CHARSETS:
        if charset not in offered:
            continue
        tables = charset_specs(charset, representable(conn, charset, pool),
                               charset_maxlen(conn, charset) or 1)
        values_table = tables["values"]
        values_table.initial_rows = 12
        specs += [values_table, tables["raw"]]
    return specs


# --- the comparison -----------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, (float, Decimal)):
        return repr(a) == repr(b)  # -0.0 vs 0.0, Decimal('1.50') vs Decimal('1.5')
    if hasattr(a, "tzinfo"):
        return a.tzinfo is b.tzinfo
    return True


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class Differential:
    """Both decodings of every rows event of the captured tables, compared cell by cell."""

    def __init__(self) -> None:
        self.images = 0
        self.events = Counter()
        self.mismatches: dict[str, list[str]] = defaultdict(list)
        self.unsupported: dict[str, str] = {}
        self.outs: dict[str, Counter] = defaultdict(Counter)
        self.binlog_types: Counter = Counter()
        self.partial_events = 0  # events whose images leave columns out (MINIMAL, NOBLOB)
        self.compiled_seconds = 0.0
        self.python_seconds = 0.0
        self.rechecked = False

    def compare(self, event: Any, layout: EventLayout, normalize: Any) -> None:
        t0 = time.perf_counter()
        mine = decode_event(event, layout).as_dicts()
        t1 = time.perf_counter()
        rows = event.rows
        if isinstance(event, UpdateRowsEvent):
            want = {
                "before_values": [normalize(r["before_values"], r["before_none_sources"]) for r in rows],
                "after_values": [normalize(r["after_values"], r["after_none_sources"]) for r in rows],
            }
        else:
            want = {"values": [normalize(r["values"], r["none_sources"]) for r in rows]}
        self.python_seconds += time.perf_counter() - t1
        self.compiled_seconds += t1 - t0
        self.events[type(event).__name__, event.event_type] += 1
        bitmaps = [event.columns_present_bitmap, getattr(event, "columns_present_bitmap2", None)]
        if any(b is not None and not all(b[i >> 3] & (1 << (i & 7)) for i in range(len(event.columns)))
               for b in bitmaps):
            self.partial_events += 1
        table = f"{event.schema}.{event.table}"
        assert mine.keys() == want.keys(), f"{table}: halves {list(mine)} != {list(want)}"
        for half, rows_want in want.items():
            rows_mine = mine[half]
            if len(rows_mine) != len(rows_want):
                self.mismatches[f"{table} (row count)"].append(
                    f"{len(rows_mine)} rows, Python path {len(rows_want)}")
                continue
            self.images += len(rows_want)
            for i, (got, exp) in enumerate(zip(rows_mine, rows_want)):
                assert list(got) == list(exp), f"{table}: columns {list(got)} != {list(exp)}"
                for name, value in exp.items():
                    if not _same(got[name], value):
                        self.mismatches[f"{table}.{name}"].append(
                            f"{half}[{i}]: compiled {_short(got[name])} ({type(got[name]).__name__}), "
                            f"Python path {_short(value)} ({type(value).__name__})")
        if not self.rechecked:  # the packet was left unread: once mysql-replication read it, no second pass
            self.rechecked = True
            with pytest.raises(NotDecodable, match="already read"):
                decode_event(event, layout)

    def report(self) -> str:
        lines = [f"{len(self.mismatches)} columns differ:"]
        for column, problems in sorted(self.mismatches.items())[:25]:
            lines.append(f"  {column}: {len(problems)} values, first: " + "; ".join(problems[:3]))
        return "\n".join(lines)


def _read(settings: MySQLSettings, captured: CapturedTables, start: BinlogPosition, end: BinlogPosition,
          diff: Differential) -> None:
    """Every event in [start, end): each captured table map gets its CapturedVersion (as the reader's) and
    its layout; each rows event is decoded both ways."""
    row_decoding.install()
    stream = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(),
        server_id=allocate_server_id(settings, READER_SLOT), resume_stream=True, blocking=False,
        log_file=start.file, log_pos=start.pos, is_mariadb=False,
        filter_non_implemented_events=False, freeze_schema=False, enable_logging=False,
    )
    by_table_id: dict[int, tuple[Any, EventLayout]] = {}
    layouts: dict[tuple, EventLayout] = {}
    try:
        for event in stream:
            if isinstance(event, TableMapEvent):
                version = captured.table_map(event, stream.log_file, event.packet.log_pos)
                if version is not None:
                    signature = (version.table, tuple((c.name, c.type) for c in event.columns), id(version))
                    layout = layouts.get(signature)
                    if layout is None:
                        layout, reason = EventLayout.of(event, version.schema, captured.decoders)
                        if layout is None:
                            diff.unsupported[str(version.table)] = reason
                        else:
                            layouts[signature] = layout
                            for plan, column in zip(layout.columns, event.columns):
                                diff.outs[str(version.table)][plan.out.name] += 1
                                diff.binlog_types[column.type] += 1
                    by_table_id[event.table_id] = (version, layout)
            elif event.__class__ in ROWS_EVENTS and event.table_id in by_table_id:
                version, layout = by_table_id[event.table_id]
                if layout is not None:
                    diff.compare(event, layout, version.normalize)
            if stream.log_file == end.file and event.packet.log_pos >= end.pos:
                break
    finally:
        stream.close()


def _decoders(settings: MySQLSettings):
    return functools.partial(charset_decoder, lambda: connect(settings.with_database(None)),
                             f"{settings.host}:{settings.port}")


# --- tests --------------------------------------------------------------------------------------------------


def test_compiled_decoding_equals_the_python_path_for_every_type_and_charset(mysql_server, mysql_db,
                                                                            server_flavor):
    assert compiled_available(), missing_reason()
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    rng = random.Random(SEED)
    with mysql_server.admin(mysql_db) as admin, admin.cursor() as cur:
        types = type_specs(probe_types(admin))
        charsets = _charset_specs(admin)
        for spec in types + charsets:
            cur.execute(spec.create_sql(mysql_db))
        legacy = _legacy_formats(admin, mysql_db) if server_flavor == "mariadb" else []
        start = _status(admin)
    _write(mysql_server, mysql_db, types + legacy, rng, STATEMENTS_PER_TABLE)
    _write(mysql_server, mysql_db, charsets, rng, 6)
    _write_partial_images(mysql_server, mysql_db, types, rng)
    with mysql_server.admin(mysql_db) as admin:
        end = _status(admin)
        schemas = {TableId(mysql_db, s.name): load_schema(admin, TableId(mysql_db, s.name))
                   for s in types + charsets + legacy}
    captured = CapturedTables(set(schemas), schemas, decoders=_decoders(settings))
    diff = Differential()
    _read(settings, captured, start, end, diff)

    assert not diff.unsupported, f"tables left to the Python path: {diff.unsupported}"
    assert not diff.mismatches, diff.report()
    seen = {name for name, _ in diff.events}
    assert seen == {"WriteRowsEvent", "UpdateRowsEvent", "DeleteRowsEvent"}, diff.events
    assert diff.images > 8000, diff.images
    assert diff.partial_events > 0, "no MINIMAL/NOBLOB images were compared"
    if legacy:
        assert {FIELD_TYPE.DATETIME, FIELD_TYPE.TIME, FIELD_TYPE.TIMESTAMP} <= set(diff.binlog_types), (
            diff.binlog_types)
    outs = Counter()
    for table_outs in diff.outs.values():
        outs.update(table_outs)
    # every text and value family went through C; one Python call per value only for JSON columns
    native = ("UUID", "INET4", "INET6") if server_flavor == "mariadb" else ()
    for needed in ("RAW", "BYTES", "PADDED", "UTF8", "UTF16BE", "UTF16LE", "UTF32BE", "CHARMAP", "MULTIBYTE",
                   *native):
        assert outs[needed], f"no column decoded as {needed}: {dict(outs)}"
    print(f"\nrows decoder: {diff.images} row images in {sum(diff.events.values())} events "
          f"({dict(diff.events)}, {diff.partial_events} with partial images) of {len(schemas)} tables "
          "identical; binlog types "
          f"{dict(sorted(diff.binlog_types.items()))}; column outputs {dict(outs)}; compiled "
          f"{diff.compiled_seconds:.2f} s, Python path {diff.python_seconds:.2f} s")


@pytest.mark.parametrize("charset", sorted(SURROGATE_CHARSETS))
def test_a_value_without_unicode_form_fails_as_on_the_python_path(mysql_server, server_flavor, mysql_db,
                                                                  charset):
    """A lone UTF-16 surrogate in a ucs2/utf32 column: the compiled decoder raises the normaliser's own
    UndecodableText, naming the table and column, as the Python path does. (Oracle MySQL's utf32 stores ''
    instead, so there it is ucs2 only.)"""
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "surrogate")
    with mysql_server.admin(mysql_db) as admin, admin.cursor() as cur:
        if charset not in server_charsets(admin):
            pytest.skip(f"{charset}: not in this server's SHOW CHARACTER SET")
        if (server_flavor, charset) == ("mysql", "utf32"):
            pytest.skip("Oracle MySQL's utf32 refuses a lone surrogate on insert (it stores '')")
        cur.execute(f"CREATE TABLE surrogate (id INT PRIMARY KEY, v VARCHAR(4) CHARACTER SET {charset})")
        start = _status(admin)
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"INSERT INTO surrogate VALUES (1, _binary X'{SURROGATE_CHARSETS[charset]}')")
        end = _status(admin)
        schema = load_schema(admin, table)
    captured = CapturedTables({table}, {table: schema})
    errors: list[tuple[str, str]] = []

    class Both(Differential):
        def compare(self, event: Any, layout: EventLayout, normalize: Any) -> None:
            with pytest.raises(UndecodableText) as compiled_error:
                decode_event(event, layout)
            with pytest.raises(UndecodableText) as python_error:
                normalize(event.rows[0]["values"], event.rows[0]["none_sources"])
            errors.append((str(compiled_error.value), str(python_error.value)))

    _read(settings, captured, start, end, Both())
    assert len(errors) == 1
    compiled_message, python_message = errors[0]
    assert compiled_message == python_message
    assert f"table {table}, column 'v'" in compiled_message


# --- random row images, without a server ------------------------------------------------------------------
# Bytes laid out as the server lays out rows-event bodies, decoded by mysql-replication (through a packet
# built around them) and by the compiled decoder: corners the server rarely writes (odd fsp with negative
# TIME fractions, DECIMAL of every precision and scale, every BIT width, 1- to 4-byte lengths, absent
# columns).

_DIG2BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def _decimal_bytes(rng: random.Random, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL of a random value: 9-digit groups in 4 bytes, partial groups in fewer, all bits
    inverted for a negative value, the top bit flipped."""
    integral = "".join(rng.choice("0123456789") for _ in range(precision - scale))
    fraction = "".join(rng.choice("0123456789") for _ in range(scale))
    out = bytearray()
    lead = len(integral) % 9
    if lead:
        out += int(integral[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, len(integral), 9):
        out += int(integral[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(fraction[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fraction[scale - scale % 9:]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if rng.random() < 0.5:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def _fraction_bytes(rng: random.Random, fsp: int) -> bytes:
    if not fsp:
        return b""
    digits = rng.randrange(10 ** fsp)
    stored = digits * 10 if fsp % 2 else digits  # odd precisions are kept in tenths of the next digit
    return stored.to_bytes((fsp + 1) // 2, "big")


def _calendar(rng: random.Random) -> tuple[int, int, int]:
    if rng.random() < 0.2:  # zero and partial-zero dates
        return rng.choice([0, 2020]), rng.choice([0, 5]), rng.choice([0, 17])
    day = dt.date(1000, 1, 1) + dt.timedelta(days=rng.randrange(3_287_000))
    return day.year, day.month, day.day


def _date(rng: random.Random) -> bytes:
    y, m, d = _calendar(rng)
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def _datetime2(rng: random.Random, fsp: int) -> bytes:
    y, m, d = _calendar(rng)
    packed = ((1 << 39) | ((y * 13 + m) << 22) | (d << 17) | (rng.randrange(24) << 12)
              | (rng.randrange(60) << 6))
    return (packed | rng.randrange(60)).to_bytes(5, "big") + _fraction_bytes(rng, fsp)


def _timestamp2(rng: random.Random, fsp: int) -> bytes:
    seconds = rng.choice([0, 0, 1, rng.randrange(-2**31, 2**31), rng.randrange(2**31)])
    fraction = _fraction_bytes(rng, fsp) if rng.random() < 0.9 else b"\xff" * ((fsp + 1) // 2)
    return seconds.to_bytes(4, "big", signed=True) + fraction


def _old_datetime(rng: random.Random) -> bytes:
    y, m, d = _calendar(rng)
    value = ((y * 100 + m) * 100 + d) * 1_000_000 + rng.randrange(24) * 10_000 + rng.randrange(60) * 100 + 59
    return value.to_bytes(8, "little")


def _finite(rng: random.Random, width: int) -> bytes:
    while True:
        data = rng.randbytes(width)
        top = int.from_bytes(data, "little") >> (width * 8 - 1 - (8 if width == 4 else 11))
        if top & ((1 << (8 if width == 4 else 11)) - 1) != (1 << (8 if width == 4 else 11)) - 1:
            return data  # not NaN or infinity: MySQL stores neither


def _text(rng: random.Random, codec: str, max_chars: int, size: int, bmp: bool = False) -> bytes:
    text = "".join(rng.choice(_FUZZ_CHARS) for _ in range(rng.randint(0, max_chars)))
    if bmp:
        text = "".join(c for c in text if ord(c) < 0x10000)
    data = text.encode(codec)
    return len(data).to_bytes(size, "little") + data


_FUZZ_CHARS = list("abc xyz\t'\"\\") + list("éüßÆø€ŁΩЖש中文日本語한") + ["😀", "𝄞", "\u00a0", "\ufeff"]


def _pascal(data: bytes, size: int) -> bytes:
    return len(data).to_bytes(size, "little") + data


def _stripped(rng: random.Random, width: int) -> bytes:
    data = rng.randbytes(width)
    if rng.random() < 0.5:
        data = data[: rng.randrange(width + 1)] + b"\x00" * width
    return data[:width].rstrip(b"\x00")  # the binlog drops BINARY's trailing zero bytes


class _PythonOnlyDecoder(CharsetDecoder):
    """A decoder the compiled decoder does not look into: one Python call per value."""


def _charset_tables() -> dict[str, CharsetDecoder]:
    single = "".join(bytes([b]).decode("cp1252", errors="replace").replace("\ufffd", "\ufffe")
                     for b in range(256))
    multi = {}
    for lead in range(0x81, 0xF0):
        for trail in range(0x40, 0xFD):
            pair = bytes([lead, trail])
            try:
                char = pair.decode("shift_jis")
            except UnicodeDecodeError:
                continue
            if len(char) == 1:
                multi[pair] = char
    sjis_single = "".join(chr(b) if b < 0x80
                          else ("\ufffe" if b < 0xA1 or b > 0xDF else bytes([b]).decode("shift_jis"))
                          for b in range(256))
    return {
        "latin1": CharsetDecoder("latin1", CharsetTable("latin1", single)),
        "sjis": CharsetDecoder("sjis", CharsetTable("sjis", sjis_single, multi)),
        "cp1250": _PythonOnlyDecoder("cp1250", CharsetTable("cp1250", single)),
    }


def _fuzz_columns() -> list[tuple[dict, Column, Any]]:
    """(mysql-replication's table map column, the schema column, a generator of the value's bytes)."""
    out: list[tuple[dict, Column, Any]] = []

    def add(name: str, tm: dict, schema: dict, gen: Any) -> None:
        column = Column(name, schema.pop("data_type"), schema.pop("column_type"), True, **schema)
        out.append((dict(tm, name=name), column, gen))

    for code, width, sql in ((FIELD_TYPE.TINY, 1, "tinyint"), (FIELD_TYPE.SHORT, 2, "smallint"),
                             (FIELD_TYPE.INT24, 3, "mediumint"), (FIELD_TYPE.LONG, 4, "int"),
                             (FIELD_TYPE.LONGLONG, 8, "bigint")):
        for unsigned in (False, True):
            add(f"{sql}_{unsigned:d}", {"type": code, "unsigned": unsigned},
                {"data_type": sql, "column_type": sql + (" unsigned" if unsigned else "")},
                lambda r, w=width: r.randbytes(w))
    add("f", {"type": FIELD_TYPE.FLOAT, "size": 4}, {"data_type": "float", "column_type": "float"},
        lambda r: _finite(r, 4))
    add("d", {"type": FIELD_TYPE.DOUBLE, "size": 8}, {"data_type": "double", "column_type": "double"},
        lambda r: _finite(r, 8))
    for precision, scale in ((1, 0), (1, 1), (9, 0), (9, 9), (10, 1), (18, 9), (19, 4), (20, 10), (38, 10),
                             (40, 20), (65, 0), (65, 30), (65, 5), (27, 13), (7, 3)):
        add(f"dec_{precision}_{scale}",
            {"type": FIELD_TYPE.NEWDECIMAL, "precision": precision, "decimals": scale},
            {"data_type": "decimal", "column_type": f"decimal({precision},{scale})",
             "numeric_precision": precision, "numeric_scale": scale},
            lambda r, p=precision, s=scale: _decimal_bytes(r, p, s))
    add("day", {"type": FIELD_TYPE.DATE}, {"data_type": "date", "column_type": "date"}, _date)
    for fsp in range(7):
        add(f"dt{fsp}", {"type": FIELD_TYPE.DATETIME2, "fsp": fsp},
            {"data_type": "datetime", "column_type": f"datetime({fsp})", "datetime_precision": fsp},
            lambda r, f=fsp: _datetime2(r, f))
        add(f"ts{fsp}", {"type": FIELD_TYPE.TIMESTAMP2, "fsp": fsp},
            {"data_type": "timestamp", "column_type": f"timestamp({fsp})", "datetime_precision": fsp},
            lambda r, f=fsp: _timestamp2(r, f))
        add(f"tm{fsp}", {"type": FIELD_TYPE.TIME2, "fsp": fsp},
            {"data_type": "time", "column_type": f"time({fsp})", "datetime_precision": fsp},
            lambda r, f=fsp: r.randbytes(3 + (f + 1) // 2))
    add("old_dt", {"type": FIELD_TYPE.DATETIME}, {"data_type": "datetime", "column_type": "datetime"},
        _old_datetime)
    add("old_ts", {"type": FIELD_TYPE.TIMESTAMP}, {"data_type": "timestamp", "column_type": "timestamp"},
        lambda r: r.choice([b"\0\0\0\0", r.randbytes(4)]))
    add("old_tm", {"type": FIELD_TYPE.TIME}, {"data_type": "time", "column_type": "time"},
        lambda r: r.randbytes(3))
    add("yr", {"type": FIELD_TYPE.YEAR}, {"data_type": "year", "column_type": "year"},
        lambda r: r.choice([b"\0", r.randbytes(1)]))
    members = ["", "a", "b,c", "é", "😀"] + [f"m{i}" for i in range(300)]
    for size, count in ((1, 5), (2, 300)):
        add(f"enum{size}", {"type": FIELD_TYPE.ENUM, "size": size, "enum_values": members[:count + 1]},
            {"data_type": "enum",
             "column_type": "enum(" + ",".join(f"'{m}'" for m in members[1:count + 1]) + ")"},
            lambda r, s=size, c=count: r.randrange(c + 1).to_bytes(s, "little"))
    for count in (1, 3, 8, 9, 17, 33, 64):
        names = [f"s{i}" for i in range(count)]
        size = (count + 7) // 8
        add(f"set{count}", {"type": FIELD_TYPE.SET, "size": size, "set_values": names},
            {"data_type": "set", "column_type": "set(" + ",".join(f"'{m}'" for m in names) + ")"},
            lambda r, s=size: r.choice([bytes(s), r.randbytes(s)]))
    for bits in (1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64):
        add(f"bit{bits}", {"type": FIELD_TYPE.BIT, "bits": bits, "bytes": (bits + 7) // 8},
            {"data_type": "bit", "column_type": f"bit({bits})", "numeric_precision": bits},
            lambda r, b=bits: r.randbytes((b + 7) // 8))
    for charset, codec, bmp in (("utf8mb4", "utf-8", False), ("utf8mb3", "utf-8", True),
                                ("ucs2", "utf-16-be", True), ("utf16", "utf-16-be", False),
                                ("utf16le", "utf-16-le", False), ("utf32", "utf-32-be", False)):
        add(f"v_{charset}", {"type": FIELD_TYPE.VARCHAR, "max_length": 400, "character_set_name": charset},
            {"data_type": "varchar", "column_type": "varchar(100)", "charset": charset},
            lambda r, c=codec, b=bmp: _text(r, c, 60, 2, b))
        add(f"c_{charset}", {"type": FIELD_TYPE.STRING, "max_length": 40, "character_set_name": charset},
            {"data_type": "char", "column_type": "char(10)", "charset": charset},
            lambda r, c=codec, b=bmp: _text(r, c, 5, 1, b))
    for charset in ("latin1", "sjis", "cp1250"):
        for size, max_length in ((1, 200), (2, 1000)):
            add(f"v_{charset}_{size}",
                {"type": FIELD_TYPE.VARCHAR, "max_length": max_length, "character_set_name": charset},
                {"data_type": "varchar", "column_type": "varchar(200)", "charset": charset},
                lambda r, s=size: _pascal(r.randbytes(r.randrange(60)), s))
    for size, sql in ((1, "tinytext"), (2, "text"), (3, "mediumtext"), (4, "longtext")):
        add(f"{sql}", {"type": FIELD_TYPE.BLOB, "length_size": size, "character_set_name": "utf8mb4"},
            {"data_type": sql, "column_type": sql, "charset": "utf8mb4"},
            lambda r, s=size: _text(r, "utf-8", 50, s))
        add(f"{sql}_blob", {"type": FIELD_TYPE.BLOB, "length_size": size},
            {"data_type": sql.replace("text", "blob"), "column_type": sql.replace("text", "blob")},
            lambda r, s=size: _pascal(r.randbytes(r.randrange(80)), s))
    add("geo", {"type": FIELD_TYPE.GEOMETRY, "length_size": 4},
        {"data_type": "geometry", "column_type": "geometry"},
        lambda r: _pascal(r.randbytes(r.randrange(60)), 4))
    for width in (1, 8, 16):
        add(f"bin{width}", {"type": FIELD_TYPE.STRING, "max_length": width},
            {"data_type": "binary", "column_type": f"binary({width})", "char_max_length": width},
            lambda r, w=width: _pascal(_stripped(r, w), 1))
    add("vbin", {"type": FIELD_TYPE.VARCHAR, "max_length": 300},
        {"data_type": "varbinary", "column_type": "varbinary(300)"},
        lambda r: _pascal(r.randbytes(r.randrange(300)), 2))
    for kind, width in (("uuid", 16), ("inet4", 4), ("inet6", 16)):
        def native(r: random.Random, w: int = width) -> bytes:
            if w == 16 and r.random() < 0.5:  # runs of zero words, IPv4-mapped and -compatible forms
                words = [r.choice([0, 0, 0xFFFF, r.randrange(65536)]) for _ in range(8)]
                return _pascal(b"".join(x.to_bytes(2, "big") for x in words).rstrip(b"\x00"), 1)
            return _pascal(_stripped(r, w), 1)

        add(kind, {"type": FIELD_TYPE.STRING, "max_length": width}, {"data_type": kind, "column_type": kind},
            native)
    add("doc", {"type": FIELD_TYPE.BLOB, "length_size": 4, "character_set_name": "utf8mb4"},
        {"data_type": "json", "column_type": "json", "charset": "utf8mb4"},
        lambda r: _pascal(random_json(r).encode("utf-8"), 4))
    return out


def _packet_event(cls: type, event_type: int, columns: list[TableMapColumn], body: bytes, present: bytes,
                  present_after: bytes | None) -> Any:
    """A rows event as mysql-replication leaves it after parsing the header: the packet's cursor at the
    first row image, ``read_bytes`` counted from the header, a checksum after the body."""
    header = b"\x00" * 31
    packet = MysqlPacket(header + body + b"CRC!", "utf8")
    packet.advance(len(header))
    wrapper = BinLogPacketWrapper.__new__(BinLogPacketWrapper)
    wrapper.packet, wrapper.read_bytes = packet, 11
    wrapper._BinLogPacketWrapper__data_buffer = b""
    event = cls.__new__(cls)
    event.__dict__.update(
        packet=wrapper, event_type=event_type, event_size=11 + len(body), table_id=1, schema="db",
        table="fuzz", table_map={1: Table(1, "db", "fuzz", columns)}, columns=columns,
        number_of_columns=len(columns),
        columns_present_bitmap=present, complete=True, _ignore_decode_errors=False, _ctl_connection=None,
        _RowsEvent__rows=None, _RowsEvent__none_sources={},
    )
    if present_after is not None:
        event.columns_present_bitmap2 = present_after
    return event


def _image(rng: random.Random, gens: list[Any], present: list[bool]) -> bytes:
    shown = [i for i, p in enumerate(present) if p]
    nulls = bytearray((len(shown) + 7) // 8)
    values = bytearray()
    for k, i in enumerate(shown):
        if rng.random() < 0.15:
            nulls[k >> 3] |= 1 << (k & 7)
        else:
            values += gens[i](rng)
    return bytes(nulls) + bytes(values)


def _bitmap(flags: list[bool]) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for i, flag in enumerate(flags):
        if flag:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def test_random_row_images_decode_as_mysql_replication_decodes_them():
    assert compiled_available(), missing_reason()
    row_decoding.install()
    rng = random.Random(SEED)
    spec = _fuzz_columns()
    tables = _charset_tables()
    schema = TableSchema(TableId("db", "fuzz"), tuple(c for _, c, _ in spec), ())
    normalize = binlog_normalizer(schema, tables.__getitem__)
    gens = [g for _, _, g in spec]
    diff = Differential()
    for n in range(300):
        columns = [_tm_column(tm["name"], tm["type"],
                              **{k: v for k, v in tm.items() if k not in ("name", "type")})
                   for tm, _, _ in spec]
        layout, reason = EventLayout.of(_table_map(*columns), schema, tables.__getitem__)
        assert reason is None, reason
        update = n % 2 == 1
        minimal = n % 5 == 4  # MINIMAL-like images: some columns absent
        present = [not minimal or rng.random() < 0.6 for _ in spec]
        present_after = [not minimal or rng.random() < 0.6 for _ in spec]
        body = b"".join(_image(rng, gens, present) + (_image(rng, gens, present_after) if update else b"")
                        for _ in range(rng.randint(1, 4)))
        cls, code = ((UpdateRowsEvent, rng.choice([0x18, 0x1F])) if update
                     else (WriteRowsEvent, rng.choice([0x17, 0x1E])))
        event = _packet_event(cls, code, columns, body, _bitmap(present),
                              _bitmap(present_after) if update else None)
        diff.compare(event, layout, normalize)
    assert not diff.mismatches, diff.report()
    assert diff.images > 600
    outs = Counter(p.out.name for p in layout.columns)
    # cp1250 and JSON by Python
    assert outs["PYCALL"] == 3 and outs["CHARMAP"] == 2 and outs["MULTIBYTE"] == 2, outs


def _outcome(decode: Any) -> tuple[str, Any]:
    try:
        return "value", decode()
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return "error", (type(exc), str(exc) if isinstance(exc, UndecodableText) else None)


def test_bytes_that_are_no_value_fail_as_on_the_python_path():
    """Garbage where a value should be (a DECIMAL group beyond 9 digits, hour 31, day 31 of February, an
    ENUM index past its members, invalid UTF-8/UTF-16, a fraction of 1.27 s): the compiled decoder fails with
    the exception the Python path raises (UndecodableText word for word), or gives the same value."""
    assert compiled_available(), missing_reason()
    row_decoding.install()
    rng = random.Random(SEED + 1)
    cases = [
        ({"type": FIELD_TYPE.NEWDECIMAL, "precision": 12, "decimals": 3},
         {"data_type": "decimal", "column_type": "decimal(12,3)"}, 6),
        ({"type": FIELD_TYPE.DATETIME2, "fsp": 0}, {"data_type": "datetime", "column_type": "datetime"}, 5),
        ({"type": FIELD_TYPE.DATETIME}, {"data_type": "datetime", "column_type": "datetime"}, 8),
        ({"type": FIELD_TYPE.DATE}, {"data_type": "date", "column_type": "date"}, 3),
        ({"type": FIELD_TYPE.TIMESTAMP2, "fsp": 2},
         {"data_type": "timestamp", "column_type": "timestamp(2)", "datetime_precision": 2}, 5),
        ({"type": FIELD_TYPE.ENUM, "size": 1, "enum_values": ["", "a", "b"]},
         {"data_type": "enum", "column_type": "enum('a','b')"}, 1),
        ({"type": FIELD_TYPE.VARCHAR, "max_length": 40, "character_set_name": "utf8mb4"},
         {"data_type": "varchar", "column_type": "varchar(10)", "charset": "utf8mb4"}, None),
        ({"type": FIELD_TYPE.VARCHAR, "max_length": 40, "character_set_name": "ucs2"},
         {"data_type": "varchar", "column_type": "varchar(20)", "charset": "ucs2"}, None),
        ({"type": FIELD_TYPE.VARCHAR, "max_length": 40, "character_set_name": "utf32"},
         {"data_type": "varchar", "column_type": "varchar(10)", "charset": "utf32"}, None),
    ]
    kinds = Counter()
    for tm, schema_column, width in cases:
        column = Column("x", schema_column.pop("data_type"), schema_column.pop("column_type"), True,
                        **schema_column)
        schema = TableSchema(TableId("db", "garbage"), (column,), ())
        normalize = binlog_normalizer(schema)
        for _ in range(60):
            data = rng.randbytes(width) if width else _pascal(rng.randbytes(rng.randrange(1, 12)), 1)
            columns = [_tm_column("x", tm["type"], **{k: v for k, v in tm.items() if k != "type"})]
            layout, reason = EventLayout.of(_table_map(*columns), schema)
            assert reason is None, reason
            event = _packet_event(WriteRowsEvent, 0x17, columns, b"\x00" + data, b"\x01", None)
            mine = _outcome(lambda event=event, layout=layout:
                            decode_event(event, layout).as_dicts()["values"][0]["x"])
            python = _outcome(lambda event=event, normalize=normalize:
                              normalize(event.rows[0]["values"], event.rows[0]["none_sources"])["x"])
            kinds[mine[0]] += 1
            assert mine[0] == python[0], f"{tm}: {data.hex()}: compiled {mine}, Python path {python}"
            if mine[0] == "value":
                assert _same(mine[1], python[1]), f"{tm}: {data.hex()}: compiled {mine}, Python path {python}"
            else:
                assert mine[1] == python[1], f"{tm}: {data.hex()}: compiled {mine}, Python path {python}"
    assert kinds["error"] > 100 and kinds["value"] > 100, kinds


def _table_map(*columns: TableMapColumn) -> Any:
    return SimpleNamespace(columns=list(columns))


def _tm_column(name: str, code: int, **metadata: Any) -> TableMapColumn:
    fields = {"type": code, "name": name, "unsigned": False, "is_primary": False, "charset_id": None,
              "character_set_name": None, "collation_name": None, "enum_values": None, "set_values": None,
              "visibility": False}
    fields.update(metadata)
    return TableMapColumn(**fields)


def test_a_layout_the_decoder_does_not_support_is_none_with_a_reason():
    table = TableId("db", "t")
    schema = TableSchema(table, (Column("id", "int", "int", False), Column("j", "json", "json", True)),
                         ("id",))
    mysql_json = _table_map(_tm_column("id", FIELD_TYPE.LONG),
                            _tm_column("j", FIELD_TYPE.JSON, length_size=4))
    layout, reason = EventLayout.of(mysql_json, schema)
    assert (layout is not None) is compiled_available(), reason  # MySQL's binary JSON: decoded per value
    odd_json = _table_map(_tm_column("id", FIELD_TYPE.LONG), _tm_column("j", FIELD_TYPE.JSON, length_size=5))
    layout, reason = EventLayout.of(odd_json, schema)
    assert layout is None and reason
    if compiled_available():
        assert "column 'j'" in reason and "JSON length of 5 bytes" in reason, reason

        nameless = _table_map(_tm_column(None, FIELD_TYPE.LONG), _tm_column(None, FIELD_TYPE.LONG))
        layout, reason = EventLayout.of(nameless, schema)
        assert layout is None and "binlog_row_metadata" in reason, reason

        newdate = TableSchema(table, (Column("id", "int", "int", False), Column("d", "date", "date", True)),
                              ("id",))
        old = _table_map(_tm_column("id", FIELD_TYPE.LONG), _tm_column("d", FIELD_TYPE.NEWDATE))
        layout, reason = EventLayout.of(old, newdate)
        assert (layout is None and "column 'd'" in reason
                and f"binlog type {FIELD_TYPE.NEWDATE}" in reason), reason

        # a schema the normaliser reads differently (a VARCHAR said to be a BIT): no guessing
        bits = TableSchema(table, (Column("id", "int", "int", False),
                                   Column("j", "bit", "bit(8)", True, numeric_precision=8)),
                           ("id",))
        text = _table_map(_tm_column("id", FIELD_TYPE.LONG),
                          _tm_column("j", FIELD_TYPE.VARCHAR, max_length=20))
        layout, reason = EventLayout.of(text, bits)
        assert layout is None and "column 'j'" in reason, reason

        supported = _table_map(_tm_column("id", FIELD_TYPE.LONG),
                               _tm_column("j", FIELD_TYPE.BLOB, length_size=4, character_set_name="utf8mb4"))
        layout, reason = EventLayout.of(supported, schema)
        assert reason is None and [c.out for c in layout.columns] == [Out.RAW, Out.PYCALL]


def test_the_package_imports_and_falls_back_without_the_compiled_module(monkeypatch, caplog):
    """Where the extension was not built: the package imports, says why once in the log, and gives no
    layout (the caller keeps the pure-Python path); decode_event refuses rather than guesses."""
    package = "airflow_provider_mysqlcdc.engine.binlog.rows_decoder"
    binlog = importlib.import_module("airflow_provider_mysqlcdc.engine.binlog")
    monkeypatch.setattr(binlog, "rows_decoder", sys.modules[package])  # restored after the test
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package + "._rows", None)  # import of the extension fails
    with caplog.at_level(logging.WARNING):
        fresh = importlib.import_module(package)
        assert fresh.compiled_available() is False
        assert fresh.compiled_available() is False
        reason = fresh.missing_reason()
        schema = TableSchema(TableId("db", "t"), (Column("id", "int", "int", False),), ("id",))
        layout, why = fresh.EventLayout.of(_table_map(_tm_column("id", FIELD_TYPE.LONG)), schema)
    assert reason and "not available" in reason and "pure Python" in reason
    assert layout is None and why == reason
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith(package)]
    assert len(warnings) == 1 and "not available" in warnings[0].getMessage()
    with pytest.raises(fresh.NotDecodable, match="not available"):
        fresh.decode_event(SimpleNamespace(), None)
