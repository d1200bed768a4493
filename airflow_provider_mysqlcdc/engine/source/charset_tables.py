"""Conversion tables of legacy character sets, read off the server once per process and charset.

``model.charsets`` decodes binlog strings with them, so the stream's value of a latin1/cp1251/sjis/...
column is the very string the snapshot's SELECT gets from the server's own conversion. One query per
charset: every single byte, and for multi-byte charsets every 2-byte sequence with a high lead byte (and
the 3-byte ``0x8F`` sequences of the EUC-JP charsets), each converted to utf8mb4 by the server.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.charsets import (
    FOUR_BYTE_CODECS,
    NOT_ALONE,
    REPLACEMENT,
    CharsetDecoder,
    CharsetTable,
    decoder_for,
    is_unicode,
)

_NAME = re.compile(r"^[a-z0-9_]+$")
_lock = threading.Lock()
_decoders: dict[tuple[str, str], CharsetDecoder] = {}

# (first, last) sequence numbers per width; a 3-byte range is only asked for charsets of maxlen 3.
_SINGLE = (0x00, 0xFF)
_DOUBLE = (0x8000, 0xFFFF)
_TRIPLE = (0x8F0000, 0x8FFFFF)


def charset_decoder(conn_factory: Callable[[], pymysql.connections.Connection], server: str,
                    charset: str) -> CharsetDecoder:
    """The decoder of ``charset`` as the server ``server`` (any stable name of it) converts it; cached."""
    charset = charset.lower()
    if is_unicode(charset):
        return CharsetDecoder(charset)
    key = (server, charset)
    with _lock:
        found = _decoders.get(key)
    if found is not None:
        return found
    conn = conn_factory()
    try:
        decoder = decoder_for(charset, read_table(conn, charset))
    finally:
        conn.close()
    with _lock:
        _decoders.setdefault(key, decoder)
    return decoder


def read_table(conn: pymysql.connections.Connection, charset: str) -> CharsetTable:
    """The server's conversion of every byte sequence of ``charset`` (a name from SHOW CHARACTER SET)."""
    if not _NAME.match(charset):
        raise ConfigurationError(f"unexpected character set name {charset!r}")
    with conn.cursor() as cur:
        cur.execute("SELECT MAXLEN FROM information_schema.CHARACTER_SETS WHERE CHARACTER_SET_NAME = %s",
                    (charset,))
        row = cur.fetchone()
        if row is None:
            raise ConfigurationError(f"the server has no character set {charset!r}")
        maxlen = int(row[0])
        _allow_deep_recursion(cur)
        single = _converted(cur, charset, *_SINGLE, width=1)
        chars = [
            char if len(char) == 1 and (char != REPLACEMENT or code == ord(REPLACEMENT)) else NOT_ALONE
            for code, char in ((c, single.get(c, "")) for c in range(256))
        ]
        multi: dict[bytes, str] = {}
        if maxlen > 1:
            ranges = [(_DOUBLE, 2)] + ([(_TRIPLE, 3)] if maxlen > 2 else [])
            if maxlen == 4:  # no 3-byte sequences; the 4-byte ones below
                ranges = [(_DOUBLE, 2)]
            for (first, last), width in ranges:
                for code, char in _converted(cur, charset, first, last, width=width).items():
                    sequence = code.to_bytes(width, "big")
                    # a well-formed sequence the charset leaves undefined is one '?'; a byte that is a
                    # character of its own never leads a sequence (Oracle MySQL converts 'ﾇ' + an incomplete
                    # lead byte to 'ﾇ' alone, MariaDB to 'ﾇ?')
                    if len(char) == 1 and chars[sequence[0]] == NOT_ALONE:
                        multi[sequence] = char
            if maxlen == 4:
                multi.update(_four_byte_exceptions(cur, charset))
    return CharsetTable(charset, "".join(chars), multi)


def _four_byte_exceptions(cur: pymysql.cursors.Cursor, charset: str) -> dict[bytes, str]:
    """Where the server's conversion of a 4-byte sequence differs from Python's codec of the same standard
    (MySQL 9.7's gb18030: one, 0x8135F437). Every sequence of the range mapped by table (first bytes 81-84:
    50,400) is compared; the rest of the 1.1 million map arithmetically onto the supplementary planes, so a
    sample of every first byte is compared there, and a difference refuses the charset."""
    codec = FOUR_BYTE_CODECS.get(charset)
    if codec is None:
        raise ConfigurationError(f"the character set {charset!r} has 4-byte sequences mysqlcdc cannot decode")
    found: dict[bytes, str] = {}
    for first, last, thirds in ((0x81, 0x84, None), (0x85, 0xFE, (0x81, 0x9F, 0xC0, 0xFE))):
        for sequence, server in _four_byte_conversions(cur, charset, first, last, thirds):
            try:
                ours = sequence.decode(codec)
            except UnicodeDecodeError:
                ours = REPLACEMENT
            if server != ours and thirds is None:
                found[sequence] = server
            elif server != ours:
                raise ConfigurationError(
                    f"the server converts {charset} sequence 0x{sequence.hex()} to {server!r}, Python's "
                    f"codec to {ours!r}: mysqlcdc cannot decode this character set from the binlog exactly"
                )
    return found


def _four_byte_conversions(cur: pymysql.cursors.Cursor, charset: str, first: int, last: int,
                           thirds: tuple[int, ...] | None) -> list[tuple[bytes, str]]:
    """The server's text of each sequence [first..last][30-39][81-FE or ``thirds``][30-39]."""
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
    third = (f"(SELECT {thirds[0]} AS v" + "".join(f" UNION ALL SELECT {t}" for t in thirds[1:]) + ")"
             if thirds else "(SELECT v FROM third)")
    cur.execute(
        "WITH RECURSIVE firsts (v) AS (SELECT %s UNION ALL SELECT v + 1 FROM firsts WHERE v < %s), "
        "third (v) AS (SELECT 129 UNION ALL SELECT v + 1 FROM third WHERE v < 254) "
        "SELECT s, HEX(CONVERT(CONVERT(UNHEX(s) USING " + charset + ") USING utf8mb4)) FROM ("
        "SELECT CONCAT(HEX(firsts.v), HEX(48 + d2.d), HEX(t.v), HEX(48 + d4.d)) AS s "
        f"FROM firsts, {digits} AS d2, {third} AS t, {digits} AS d4) AS sequences",
        (first, last),
    )
    return [(bytes.fromhex(s), "" if h is None else bytes.fromhex(h).decode("utf-8", "surrogatepass"))
            for s, h in cur.fetchall()]


def _allow_deep_recursion(cur: pymysql.cursors.Cursor) -> None:
    """Both flavors stop recursive CTEs at 1000 rows by default, each with a variable of its own."""
    for variable in ("max_recursive_iterations", "cte_max_recursion_depth"):  # MariaDB, Oracle MySQL
        try:
            cur.execute(f"SET SESSION {variable} = 100000")
        except pymysql.err.MySQLError:
            pass


def _converted(cur: pymysql.cursors.Cursor, charset: str, first: int, last: int,
               width: int) -> dict[int, str]:
    digits = 2 * width
    cur.execute(
        "WITH RECURSIVE seq (n) AS (SELECT %s UNION ALL SELECT n + 1 FROM seq WHERE n < %s) "
        f"SELECT n, HEX(CONVERT(CONVERT(UNHEX(LPAD(HEX(n), {digits}, '0')) USING {charset}) USING utf8mb4)) "
        "FROM seq",
        (first, last),
    )
    # a sequence the charset does not define converts to '?' on MariaDB and to NULL on Oracle MySQL: both
    # mean "not a character of its own" (left out here)
    return {int(n): bytes.fromhex(h).decode("utf-8", "surrogatepass") for n, h in cur.fetchall()
            if h is not None}
