"""Chunk keys: their JSON form, and an order in Python that agrees with the server's.

A binlog event belongs to the chunk whose ``[start, end)`` holds its key. The snapshot side decides
membership with SQL predicates (``chunk_predicate``), which the server evaluates under each column's
collation; the stream side decides it in Python (``ChunkLocator``). Both must give the same answer for every
key, or events are lost or applied twice. So Python never compares strings by itself: string columns are
compared through sort keys the server computes (``WEIGHT_STRING``) under the column's collation, and every
string column is checked against the server's own comparisons once, before its first use (a collation we
cannot reproduce is an error, not a guess).

Numbers and temporal values compare natively. NULL sorts first (MySQL's ``ASC`` order), and a key with a NULL
belongs to the first chunk.
"""
from __future__ import annotations

import ipaddress
import logging
import re
import struct
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Self

import pymysql

from airflow_provider_mysqlcdc.engine.chunks.key_codec import Key, timedelta_micros
from airflow_provider_mysqlcdc.engine.chunks.key_sql import chunk_predicate
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import DECIMAL_TYPES, INTEGER_TYPES, Column, TableSchema
from airflow_provider_mysqlcdc.engine.model.values import GEOMETRY_TYPES

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk

log = logging.getLogger(__name__)

ConnFactory = Callable[[], pymysql.connections.Connection]
SortKey = tuple[tuple[Any, ...], ...]

FLOAT_TYPES = {"float", "double", "real", "double precision"}
STRING_KEY_TYPES = {"char", "varchar"}
BINARY_KEY_TYPES = {"binary", "varbinary"}
DATETIME_TYPES = {"date", "datetime", "timestamp"}
ADDRESS_TYPES = {"uuid", "inet4", "inet6"}  # MariaDB's own types: ordered by their binary form
ORDERABLE_TYPES = (
    INTEGER_TYPES | DECIMAL_TYPES | FLOAT_TYPES | STRING_KEY_TYPES | BINARY_KEY_TYPES | DATETIME_TYPES
    | ADDRESS_TYPES | {"time", "year"}
)
# Why a type cannot be a chunk key (the rest of the message says what to do instead).
_UNORDERABLE_REASONS = {
    "enum": "ORDER BY sorts ENUM by member index but comparisons use the member text, so ranges disagree",
    "set": "ORDER BY sorts SET by its bit value but comparisons use the text, so ranges disagree",
    "bit": "BIT values have no range predicate that agrees with their binlog form",
    "json": "JSON values have no total order usable for ranges",
    "geometry": "spatial values have no total order",
}

_NULL = (0,)  # NULL sorts before every value (MySQL ASC order)
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_TEMPORAL_TEXT = re.compile(r"^(\d+)-(\d+)-(\d+)(?:[ T](\d+):(\d+):(\d+)(?:\.(\d{1,6}))?)?$")
_DEFAULT_SORTLEN = 8  # most weights per character of any MariaDB/MySQL collation we know (UCA)
_MIN_PAD_EXPANSION = 3  # weights per character the padding allows for at least, when padded here
_PROBE_MAX_CHARS = 4  # padding covers at least this many characters, so the self-check probes fit
_COLLATION_PROBES = (
    "", " ", "\t", "\x00", "a", "A", "a ", "a\t", "á", "a\u0301", "ä", "ae", "æ", "ß", "ss", "ﬃ", "ffi",
    "b", "B ", "\u00a0", "😀", "😁", "z", "Z", "0", "-",
    # beyond Latin: legacy multi-byte collations (big5_chinese_ci) compare codes but sort keys by stroke
    "ュ", "シ", "中", "文", "丁", "한", "Ж", "ж", "Ω", "α", "ø", "ą", "ñ",
    # Thai: tis620_thai_ci reorders leading vowels and weighs tone marks after the base letters
    "ก", "ก่", "ก่ ", "เก", "กา",
)
# "a" + each of these against "a": where the pad weight and a character's own weight disagree (latin7's space
# weighs more than its pad), a character that sorts between them would be misplaced
_PAD_PROBES = tuple("a" + chr(i) for i in range(0x100)) + tuple(
    "a" + c for c in _COLLATION_PROBES if len(c) == 1 and ord(c) > 0xFF
)


# (host, port, server version, sort-key SQL, pad weight) of string sort keys whose order was verified
_VERIFIED: set[tuple[Any, ...]] = set()


def unorderable_reason(column: Column) -> str | None:
    """Why this column cannot be a chunk key, or None when it can."""
    if column.data_type in ORDERABLE_TYPES:
        return None
    if column.data_type in _UNORDERABLE_REASONS:
        return _UNORDERABLE_REASONS[column.data_type]
    if "text" in column.data_type or "blob" in column.data_type:
        return "TEXT/BLOB values can only be indexed by a prefix, so ranges over them are not index ranges"
    if column.data_type in GEOMETRY_TYPES:
        return _UNORDERABLE_REASONS["geometry"]
    return f"type {column.data_type} is not supported as a chunk key"


def validate_chunk_key(schema: TableSchema, key_columns: Sequence[str]) -> tuple[Column, ...]:
    """The key columns of ``schema``; a column whose order we cannot reproduce is a ConfigurationError."""
    if not key_columns:
        raise ConfigurationError(f"table {schema.table}: the chunk key has no columns")
    columns = tuple(schema.column(name) for name in key_columns)
    for column in columns:
        reason = unorderable_reason(column)
        if reason is None:
            continue
        where = "its primary key column" if column.name in schema.primary_key else "chunk key column"
        raise ConfigurationError(
            f"table {schema.table}: {where} {column.name!r} ({column.column_type}) cannot be a chunk key: "
            f"{reason}. Fix: set the option chunk_key for this table to a column of an orderable type "
            "(integer, decimal, float/double, date/time, CHAR/VARCHAR, BINARY/VARBINARY, UUID, INET4/INET6)"
        )
    return columns



class _StringColumn:
    """How one string column's sort keys are asked for from the server: cast, collation and padding."""

    def __init__(self, column: Column, charset: str, collation: str, pad_space: bool, sortlen: int) -> None:
        self.column = column
        self.pad_space = pad_space
        # PAD SPACE compares as if the shorter string were padded with spaces. A fixed-width weight string
        # (every value padded to the same number of weights) reproduces that with a plain byte comparison.
        # The width is in weights, and one character can expand to up to ``sortlen`` weights ('ß' -> 'ss'),
        # so pad to (max characters x sortlen) or an expansion near the end would be cut off.
        self.max_chars = max(column.char_max_length or 1, _PROBE_MAX_CHARS)
        self.pad_weights = self.max_chars * max(sortlen, 1)
        cast = f"CAST(%s AS CHAR CHARACTER SET {charset}) COLLATE {collation}"
        self.cast_sql = cast
        self.weight_sql = f"WEIGHT_STRING({cast} AS CHAR({self.pad_weights}))" if pad_space else (
            f"WEIGHT_STRING({cast})"
        )
        self.approx_weight_bytes = self.pad_weights * 2 * 3 if pad_space else 64
        self.space_pad = b""  # set by use_space_padding

    def use_space_padding(self, space: bytes) -> None:
        """Comparisons pad with the weight of a space, but a few collations' WEIGHT_STRING pads with another
        weight (latin7_general_ci: a space weighs 0x30, the pad 0x20; '' > '-' on the server), and Oracle
        MySQL's pads by characters. For those the weights are taken unpadded and padded here with the space's
        weight. (Trailing spaces are not trimmed:
        tis620_thai_ci moves tone marks behind them, so for it 'x ' and 'x' differ.)"""
        self.weight_sql = f"WEIGHT_STRING({self.cast_sql})"
        self.space_pad = space
        # the catalogue's SORTLEN is 1 for some expanding collations on Oracle MySQL (latin1_german2_ci:
        # 'ß' weighs as 'SS'): a width of 3 weights a character bounds every expansion we know
        self.pad_weights = self.max_chars * max(self.pad_weights // self.max_chars, _MIN_PAD_EXPANSION)

    def finish(self, weight: bytes) -> bytes:
        """The sort key of a weight string the server returned for ``weight_sql``."""
        if not self.space_pad:
            return weight
        width = self.pad_weights * len(self.space_pad)
        missing = width - len(weight)
        if missing < 0 or missing % len(self.space_pad):
            raise CdcError(
                f"column {self.column.name!r}: a sort key of {len(weight)} bytes does not pad to {width} "
                f"bytes in weights of {len(self.space_pad)} bytes: set the option chunk_key to another column"
            )
        return weight + self.space_pad * (missing // len(self.space_pad))


class KeyOrder:
    """Sort keys for chunk keys that compare (with plain ``<`` on tuples) exactly as the server does.

    String sort keys come from the server in batches and are cached (LRU, bounded in bytes). Not thread-safe:
    give each thread its own instance. Close it (or use ``with``) to release its connection.
    """

    def __init__(
        self,
        conn_factory: ConnFactory,
        schema: TableSchema,
        key_columns: Sequence[str],
        *,
        cache_bytes: int = 64 * 1024 * 1024,
        batch_size: int = 200,
    ) -> None:
        self.schema = schema
        self.key_columns = tuple(key_columns)
        self.columns = validate_chunk_key(schema, self.key_columns)
        self._conn_factory = conn_factory
        self._conn: pymysql.connections.Connection | None = None
        self._strings: dict[int, _StringColumn] = {}
        self._cache: OrderedDict[tuple[int, Any], bytes] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        self._batch_size = batch_size
        self.weight_queries = 0  # server round trips for sort keys (for tests and metrics)
        self._uuid_rules: dict[int, bool] = {}  # column index -> MariaDB's force_swap order

    # -- lifecycle

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except pymysql.err.Error:
                pass
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- SQL helpers bound to this key

    @property
    def quoted_columns(self) -> tuple[str, ...]:
        return tuple(c.quoted for c in self.columns)

    @property
    def nullable(self) -> tuple[bool, ...]:
        return tuple(c.nullable for c in self.columns)

    def predicate(self, chunk: Chunk) -> tuple[str, list[Any]]:
        """``chunk_predicate`` for this table's key columns."""
        return chunk_predicate(chunk, self.quoted_columns, self.nullable)

    # -- values

    def normalize(self, key: Sequence[Any]) -> Key:
        """A key as the server stores it: BINARY(n) padded with 0x00, FLOAT narrowed to single precision,
        aware datetimes in naive UTC. Equal keys (for the server) may still differ here: compare sort keys."""
        self._check_arity(key)
        return tuple(self._normalize_value(c, v) for c, v in zip(self.columns, key))

    def sort_key(self, key: Sequence[Any]) -> SortKey:
        return self.sort_keys([key])[0]

    def sort_keys(self, keys: Iterable[Sequence[Any]]) -> list[SortKey]:
        """One sort key per key, asking the server only for string values not in the cache (batched)."""
        keys = list(keys)
        for key in keys:
            self._check_arity(key)
        strings = [i for i, c in enumerate(self.columns) if c.data_type in STRING_KEY_TYPES]
        weights = self._weights(
            (i, _string_value(self.columns[i], key[i])) for key in keys for i in strings if key[i] is not None
        )
        return [
            tuple(self._sort_value(i, c, v, weights) for i, (c, v) in enumerate(zip(self.columns, key)))
            for key in keys
        ]

    def compare(self, a: Sequence[Any], b: Sequence[Any]) -> int:
        """-1, 0 or 1, as the server compares the two keys (NULL first)."""
        ka, kb = self.sort_keys([a, b])
        return (ka > kb) - (ka < kb)

    # -- internals

    def _check_arity(self, key: Sequence[Any]) -> None:
        if len(key) != len(self.columns):
            raise ValueError(
                f"table {self.schema.table}: a chunk key has {len(self.columns)} value(s) "
                f"({', '.join(self.key_columns)}), got {len(key)}: {key!r}"
            )

    def _normalize_value(self, column: Column, value: Any) -> Any:
        if value is None:
            return None
        kind = column.data_type
        if kind in BINARY_KEY_TYPES:
            return self._binary(column, value)
        if kind == "char" and isinstance(value, str):
            return value.rstrip(" ")  # CHAR does not keep trailing spaces (they matter under NO PAD)
        if kind == "float" and isinstance(value, (int, float, Decimal)):
            return struct.unpack("<f", struct.pack("<f", float(value)))[0]
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value

    def _binary(self, column: Column, value: Any) -> bytes:
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogateescape")
        else:
            data = bytes(value)
        if column.data_type == "binary":
            width = column.char_max_length or 0
            if len(data) > width:
                raise CdcError(
                    f"table {self.schema.table}: key value {data!r} is longer than BINARY({width}) column "
                    f"{column.name!r}: was the column altered? Re-plan the table"
                )
            data = data.ljust(width, b"\x00")
        return data

    def _sort_value(
        self, index: int, column: Column, value: Any, weights: dict[tuple[int, Any], bytes]
    ) -> tuple[Any, ...]:
        if value is None:
            return _NULL
        kind = column.data_type
        if kind in STRING_KEY_TYPES:
            return (1, weights[(index, _string_value(column, value))])
        if kind in BINARY_KEY_TYPES:
            return (1, self._binary(column, value))
        if kind in DATETIME_TYPES:
            return (1, _datetime_parts(value))
        if kind in ADDRESS_TYPES:
            return (1, self._address(index, column, value))
        if kind == "time":
            return (1, _time_micros(value))
        if kind == "float":
            return (1, self._normalize_value(column, value))
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return (1, value)
        if isinstance(value, bool):
            return (1, int(value))
        if isinstance(value, str) and (column.is_integer or column.is_decimal or kind == "year"):
            return (1, Decimal(value))
        raise CdcError(
            f"table {self.schema.table}: key value {value!r} ({type(value).__name__}) does not fit "
            f"column {column.name!r} ({column.column_type})"
        )

    # MariaDB's UUID / INET4 / INET6

    def _address(self, index: int, column: Column, value: Any) -> bytes:
        if column.data_type == "uuid":
            if index not in self._uuid_rules:
                self._uuid_rules[index] = self._verify_uuid_order(column)
            return uuid_sort_bytes(str(value), force_swap=self._uuid_rules[index])
        return address_bytes(column.data_type, str(value))

    def _verify_uuid_order(self, column: Column) -> bool:
        """Which of MariaDB's two UUID orders the column has (10.10+ swaps only time-based UUIDs; columns
        made by 10.7-10.9 swap every value): the one that sorts probe values as the server does."""
        probes = list(_UUID_PROBES)
        expr = "(CAST(%s AS UUID) > CAST(%s AS UUID)) - (CAST(%s AS UUID) < CAST(%s AS UUID))"
        pairs = [(a, b) for i, a in enumerate(probes) for b in probes[i + 1:]]
        params: list[Any] = []
        for a, b in pairs:
            params.extend((a, b, a, b))
        server = [int(v) for v in self._query_row("SELECT " + ", ".join([expr] * len(pairs)), params)]
        for force_swap in (False, True):
            keys = {p: uuid_sort_bytes(p, force_swap=force_swap) for p in probes}
            if all((keys[a] > keys[b]) - (keys[a] < keys[b]) == want for (a, b), want in zip(pairs, server)):
                return force_swap
        raise ConfigurationError(
            f"table {self.schema.table}: the server orders UUID column {column.name!r} in a way mysqlcdc "
            "cannot reproduce. Fix: set the option chunk_key to another column"
        )

    # string weights from the server

    def _connection(self) -> pymysql.connections.Connection:
        if self._conn is None:
            self._conn = self._conn_factory()
        return self._conn

    def _query_row(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...]:
        """One row; a dropped connection is reopened once (long-running streams outlive idle timeouts; a
        silent network path ends in the session's read timeout)."""
        for attempt in (0, 1):
            try:
                with self._connection().cursor() as cur:
                    cur.execute(sql, params)
                    row = cur.fetchone()
                self.weight_queries += 1
                return tuple(row) if row is not None else ()
            except pymysql.err.OperationalError as exc:
                code = exc.args[0] if exc.args else None
                if attempt or code not in (2006, 2013, 2055):
                    raise
                log.warning("%s: the sort-key session was lost (%s); opening a new one", self.schema.table,
                            exc.args[-1])
                self.close()
        raise AssertionError("unreachable")

    def _string_column(self, index: int) -> _StringColumn:
        info = self._strings.get(index)
        if info is None:
            info = self._load_string_column(self.columns[index])
            self._strings[index] = info
            self._verify(index, info)
        return info

    def _load_string_column(self, column: Column) -> _StringColumn:
        charset, collation = column.charset, column.collation
        if not charset or not collation or not _NAME.match(charset) or not _NAME.match(collation):
            raise ConfigurationError(
                f"table {self.schema.table}: column {column.name!r} has no usable character set/collation "
                f"({charset!r}/{collation!r}); set the option chunk_key to another column"
            )
        candidates = [collation]
        if collation.startswith(charset + "_"):  # MariaDB lists uca1400_ai_ci, not utf8mb4_uca1400_ai_ci
            candidates.append(collation[len(charset) + 1:])
        with self._connection().cursor() as cur:
            cur.execute(
                "SELECT * FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (%s, %s)",
                (candidates[0], candidates[-1]),
            )
            names = [d[0].upper() for d in cur.description]
            rows = {str(r[names.index("COLLATION_NAME")]): r for r in cur.fetchall()}
        row = next((rows[c] for c in candidates if c in rows), None)
        sortlen = _DEFAULT_SORTLEN
        pad_attribute: str | None = None
        if row is not None:
            if "SORTLEN" in names and row[names.index("SORTLEN")]:
                sortlen = max(int(row[names.index("SORTLEN")]), 1)
            if "PAD_ATTRIBUTE" in names and row[names.index("PAD_ATTRIBUTE")]:
                pad_attribute = str(row[names.index("PAD_ATTRIBUTE")]).upper()
        if pad_attribute is not None:
            pad_space = pad_attribute == "PAD SPACE"
        else:
            lowered = collation.lower()
            pad_space = not ("nopad" in lowered or "_0900_" in lowered)
        info = _StringColumn(column, charset, collation, pad_space, sortlen)
        if pad_space:
            pad, space, mariadb = self._query_row(
                f"SELECT WEIGHT_STRING({info.cast_sql} AS CHAR(1)), WEIGHT_STRING({info.cast_sql}), "
                "VERSION() LIKE '%%MariaDB%%'", ("", " ")
            )
            # Oracle MySQL's WEIGHT_STRING(x AS CHAR(n)) pads x to n *characters*, so a character that
            # expands to several weights ('ss' for 'ß') makes an equal string's key longer: pad here instead
            if space and (not mariadb or (pad is not None and bytes(pad) != bytes(space))):
                info.use_space_padding(bytes(space))
        return info

    def _weights(self, items: Iterable[tuple[int, Any]]) -> dict[tuple[int, Any], bytes]:
        """Sort keys of string values: cached ones, the rest from the server in batches."""
        found: dict[tuple[int, Any], bytes] = {}
        pending: dict[tuple[int, Any], tuple[int, Any]] = {}
        for index, value in items:
            cache_key = (index, _cache_value(value))
            if cache_key in found or cache_key in pending:
                continue
            cached = self._cache.get(cache_key)
            if cached is not None:
                self._cache.move_to_end(cache_key)
                found[cache_key] = cached
            else:
                pending[cache_key] = (index, value)
        work = list(pending.items())
        start = 0
        while start < len(work):
            batch: list[tuple[tuple[int, Any], tuple[int, Any]]] = []
            budget = 4 * 1024 * 1024  # keep each result row well below max_allowed_packet
            while start < len(work) and len(batch) < self._batch_size:
                info = self._string_column(work[start][1][0])
                if batch and budget < info.approx_weight_bytes:
                    break
                budget -= info.approx_weight_bytes
                batch.append(work[start])
                start += 1
            found.update(self._fetch_batch(batch))
        return found

    def _fetch_batch(
        self, batch: list[tuple[tuple[int, Any], tuple[int, Any]]]
    ) -> dict[tuple[int, Any], bytes]:
        exprs: list[str] = []
        params: list[Any] = []
        for _, (index, value) in batch:
            info = self._string_column(index)
            self._check_length(info, value)
            exprs.append(info.weight_sql)
            params.append(value)
        row = self._query_row("SELECT " + ", ".join(exprs), params)
        out: dict[tuple[int, Any], bytes] = {}
        for (cache_key, (index, value)), weight in zip(batch, row):
            if weight is None:
                raise CdcError(
                    f"table {self.schema.table}: the server returned no sort key for {value!r} in column "
                    f"{self.columns[index].name!r} (result larger than max_allowed_packet?)"
                )
            out[cache_key] = self._string_column(index).finish(bytes(weight))
            self._remember(cache_key, out[cache_key])
        return out

    def _check_length(self, info: _StringColumn, value: Any) -> None:
        if not info.pad_space:
            return
        chars = len(value) if isinstance(value, str) else len(bytes(value)) // 4
        if chars > info.max_chars:
            raise CdcError(
                f"table {self.schema.table}: key value of {chars} characters is longer than column "
                f"{info.column.name!r} ({info.column.column_type}): was the column altered? Re-plan the table"
            )

    def _remember(self, cache_key: tuple[int, Any], weight: bytes) -> None:
        old = self._cache.pop(cache_key, None)
        if old is not None:
            self._cache_bytes -= len(old)
        self._cache[cache_key] = weight
        self._cache_bytes += len(weight)
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._cache_bytes -= len(dropped)

    def _verify(self, index: int, info: _StringColumn) -> None:
        """Compare our order with the server's on tricky strings, once per column: every pair of
        ``_COLLATION_PROBES``, and each of ``_PAD_PROBES`` against "a". Disagreement is an error, so a
        collation whose sort keys do not reproduce its comparisons can never misplace an event.

        A check that passed holds for every later instance asking the same server the same way (a stream
        makes one per table and batch): it is done once per process (``_VERIFIED``), not per instance."""
        conn = self._connection()
        verified = (conn.host, conn.port, conn.server_version, info.weight_sql, info.space_pad)
        if verified in _VERIFIED:
            return
        probes = list(dict.fromkeys(["a", *_COLLATION_PROBES, *_PAD_PROBES]))
        row = self._query_row("SELECT " + ", ".join([info.weight_sql] * len(probes)), probes)
        if len(row) != len(probes) or any(w is None for w in row):
            raise CdcError(
                f"table {self.schema.table}: the server returned no sort keys for the probe strings"
            )
        weights = {value: info.finish(bytes(w)) for value, w in zip(probes, row)}
        pairs = [(a, b) for i, a in enumerate(_COLLATION_PROBES) for b in _COLLATION_PROBES[i + 1:]]
        pairs += [(probe, "a") for probe in _PAD_PROBES]
        expr = f"({info.cast_sql} > {info.cast_sql}) - ({info.cast_sql} < {info.cast_sql})"
        params: list[Any] = []
        for a, b in pairs:
            params.extend((a, b, a, b))
        server_row = self._query_row("SELECT " + ", ".join([expr] * len(pairs)), params)
        for (a, b), server in zip(pairs, server_row):
            ours = (weights[a] > weights[b]) - (weights[a] < weights[b])
            if ours != int(server):
                raise self._unreproducible(info, a, b, int(server), ours)
        for value in _COLLATION_PROBES:
            self._remember((index, value), weights[value])
        _VERIFIED.add(verified)

    def _unreproducible(self, info: _StringColumn, a: str, b: str, server: int,
                        ours: int) -> ConfigurationError:
        return ConfigurationError(
            f"table {self.schema.table}: the order of collation {info.column.collation} of column "
            f"{info.column.name!r} cannot be reproduced from its sort keys ({a!r} vs {b!r}: server {server}, "
            f"ours {ours}), so the stream could not place changes in chunks. Fix: set the option chunk_key "
            "to a column with another collation (any orderable column, unique or not), or change the "
            "column's collation"
        )


def _cache_value(value: Any) -> Any:
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def _string_value(column: Column, value: Any) -> Any:
    """The value a string column holds: CHAR drops trailing spaces (they matter under NO PAD collations)."""
    value = _cache_value(value)
    if column.data_type == "char":
        return value.rstrip(" ") if isinstance(value, str) else value.rstrip(b" ")
    return value


def _datetime_parts(value: Any) -> tuple[int, ...]:
    """DATE/DATETIME/TIMESTAMP as (y, m, d, H, M, S, us): also orders zero dates ('0000-00-00'), which pymysql
    returns as text."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return (value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, date):
        return (value.year, value.month, value.day, 0, 0, 0, 0)
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("ascii")
    if isinstance(value, str):
        match = _TEMPORAL_TEXT.match(value.strip())
        if match:
            parts = [int(g) if g is not None else 0 for g in match.groups()[:6]]
            fraction = match.group(7)
            micros = int(fraction.ljust(6, "0")) if fraction else 0
            return (*parts, micros)
    raise CdcError(f"cannot order the date/time key value {value!r}")


def address_bytes(kind: str, text: str) -> bytes:
    """INET4/INET6 order: their binary form, byte by byte."""
    return ipaddress.IPv4Address(text).packed if kind == "inet4" else ipaddress.IPv6Address(text).packed


def uuid_sort_bytes(text: str, force_swap: bool = False) -> bytes:
    """MariaDB's UUID order: the stored ("record") form compared byte by byte. Time-based UUIDs (version
    1-5, RFC variant; all UUIDs with ``force_swap``) are stored node, clock sequence, time high, time mid,
    time low, so they sort by time within a node; the others as written."""
    data = uuid.UUID(text).bytes
    if force_swap or (0 < data[6] < 0x60 and data[8] & 0x80):
        return data[10:16] + data[8:10] + data[6:8] + data[4:6] + data[0:4]
    return data


# Probes for the UUID order: time-based and not, versions 0..8, variants, equal nodes, extremes.
_UUID_PROBES = (
    "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "6ccd780c-baba-1026-9564-5b8c656024db", "6ccd780c-baba-4026-9564-5b8c656024db",
    "0003f135-24d4-1913-8f5f-db948c1a1e17", "162434cc-0469-185f-9eed-c643757b3060",
    "22881234-b031-0e08-e38b-97cb904be17e", "244770d5-65b4-2a78-1ca5-d05acc9499c8",
    "01bb9027-926d-51a3-8809-b488dec65517", "02193a3d-ba90-f361-f366-56e8fbf217da",
    "5a12ef54-ed3a-0241-a3f4-caa67b7c43be", "5b6d4534-ce8b-f15d-b6d8-b99fa9b816d4",
    "018f2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b", "ffffffff-ffff-1fff-bfff-000000000000",
)


def _time_micros(value: Any) -> int:
    if isinstance(value, timedelta):
        return timedelta_micros(value)
    if isinstance(value, time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    raise CdcError(f"cannot order the TIME key value {value!r}")
