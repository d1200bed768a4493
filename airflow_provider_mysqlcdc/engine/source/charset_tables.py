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
    NOT_ALONE,
    REPLACEMENT,
    CharsetDecoder,
    CharsetTable,
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
        decoder = CharsetDecoder(charset, read_table(conn, charset))
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
            for (first, last), width in ranges:
                for code, char in _converted(cur, charset, first, last, width=width).items():
                    if len(char) == 1:  # a well-formed sequence the charset leaves undefined is one '?'
                        multi[code.to_bytes(width, "big")] = char
    return CharsetTable(charset, "".join(chars), multi)


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
    return {int(n): bytes.fromhex(h).decode("utf-8", "surrogatepass") for n, h in cur.fetchall()}
