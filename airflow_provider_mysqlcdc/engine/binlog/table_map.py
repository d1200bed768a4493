"""The schema in force at a binlog event, read off its TABLE_MAP (``binlog_row_metadata=FULL``).

A stream that replays old binlog, or runs behind a table's DDL, must decode each rows event with the columns
the table had when the event was written, not with today's. With full row metadata every TABLE_MAP carries
the column names, types, signedness, charsets and ENUM/SET members: enough to decode exactly. Columns that
are unchanged against a known schema keep its details (nullability, collation, declared type text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE as T

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder, is_unicode
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema

_INTS = {T.TINY: "tinyint", T.SHORT: "smallint", T.INT24: "mediumint", T.LONG: "int", T.LONGLONG: "bigint"}
_PLAIN = {
    T.FLOAT: "float",
    T.DOUBLE: "double",
    T.YEAR: "year",
    T.DATE: "date",
    T.NEWDATE: "date",
    T.TIME: "time",
    T.TIME2: "time",
    T.DATETIME: "datetime",
    T.DATETIME2: "datetime",
    T.TIMESTAMP: "timestamp",
    T.TIMESTAMP2: "timestamp",
    T.JSON: "json",
    T.GEOMETRY: "geometry",
}
_NATIVE_WIDTHS = {"uuid": 16, "inet4": 4, "inet6": 16}  # MariaDB's own types, BINARY(n) in a TABLE_MAP
_BLOBS = {
    1: ("tinytext", "tinyblob"),
    2: ("text", "blob"),
    3: ("mediumtext", "mediumblob"),
    4: ("longtext", "longblob"),
}


def decode_member_names(
    event: Any, table: TableId, known: TableSchema | None, decoders: Callable[[str], CharsetDecoder] | None
) -> None:
    """Decode the ENUM/SET member names of a TABLE_MAP (kept as bytes by ``binlog.row_decoding``) in each
    column's own character set, in place, before any of its rows is read: the names are how the binlog's
    member numbers become values."""
    for c in event.columns:
        for attr in ("enum_values", "set_values"):
            names = getattr(c, attr, None)
            if not names or all(type(n) is str for n in names):
                continue
            charset = _member_charset(c, known)
            if is_unicode(charset):
                decode: Callable[[bytes], str] = CharsetDecoder(charset)
            elif decoders is not None:
                decode = decoders(charset)
            else:
                raise CdcError(f"{table}: the member names of column {c.name!r} ({charset}) need the "
                               "server's conversion table to decode")
            setattr(c, attr, [n if type(n) is str else decode(n) for n in names])


def _member_charset(c: Any, known: TableSchema | None) -> str:
    """The charset a TABLE_MAP names an ENUM/SET column's members in (as for text columns), else the
    schema's."""
    if getattr(c, "character_set_name", None):
        return _charset_name(c.character_set_name)
    have = known.column_by_name.get(c.name) if known is not None else None
    return (have.charset if have is not None and have.charset else "utf8mb4").lower()


def table_map_signature(event: Any) -> tuple:
    """What identifies a TABLE_MAP's column layout (cheap to build; equal layouts, equal signatures)."""
    return tuple(
        (
            c.name,
            c.type,
            c.unsigned,
            getattr(c, "max_length", None),
            getattr(c, "precision", None),
            getattr(c, "decimals", None),
            getattr(c, "fsp", None),
            getattr(c, "bits", None),
            getattr(c, "length_size", None),
            tuple(c.enum_values or ()),
            tuple(c.set_values or ()),
            c.collation_name,
        )
        for c in event.columns
    )


def schema_from_table_map(event: Any, table: TableId, known: TableSchema | None) -> TableSchema:
    """The table's schema as the TABLE_MAP ``event`` describes it; ``known`` lends unchanged columns."""
    nullable = _null_bits(event)
    columns = []
    for i, c in enumerate(event.columns):
        derived = _column(c, nullable[i] if i < len(nullable) else True)
        have = known.column_by_name.get(derived.name) if known is not None else None
        columns.append(have if have is not None and _same_type(have, derived) else derived)
    names = {c.name for c in columns}
    if known is not None and all(k in names for k in known.primary_key):
        primary_key = known.primary_key
    else:
        pk = getattr(getattr(event, "optional_metadata", None), "simple_primary_key_list", None) or []
        primary_key = tuple(columns[i].name for i in pk if i < len(columns))
    return TableSchema(table, tuple(columns), primary_key, engine=known.engine if known else None)


def _null_bits(event: Any) -> list[bool]:
    mask = getattr(event, "null_bitmask", b"") or b""
    return [bool(mask[i >> 3] & (1 << (i & 7))) for i in range(len(mask) * 8)]


def _column(c: Any, nullable: bool) -> Column:
    code = c.type
    binary = (c.collation_name or "").lower() == "binary" or (c.character_set_name or "").lower() == "binary"
    precision = scale = dt_precision = max_length = None
    members: list[str] | None = None
    if code in _INTS:
        data_type = _INTS[code]
    elif code in (T.NEWDECIMAL, T.DECIMAL):
        data_type, precision, scale = "decimal", getattr(c, "precision", None), getattr(c, "decimals", None)
    elif code == T.BIT:
        data_type, precision = "bit", getattr(c, "bits", None)
    elif code in _PLAIN:
        data_type = _PLAIN[code]
        if data_type in ("time", "datetime", "timestamp"):
            dt_precision = getattr(c, "fsp", 0) or 0
    elif code == T.ENUM:
        data_type, members = "enum", list(c.enum_values or ())
    elif code == T.SET:
        data_type, members = "set", list(c.set_values or ())
    elif code in (T.VARCHAR, T.VAR_STRING):
        data_type, max_length = ("varbinary" if binary else "varchar"), getattr(c, "max_length", None)
    elif code == T.STRING:
        data_type, max_length = ("binary" if binary else "char"), getattr(c, "max_length", None)
    elif code in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
        text, blob = _BLOBS.get(getattr(c, "length_size", 2) or 2, ("text", "blob"))
        data_type = blob if binary else text
    else:
        data_type = f"type{code}"  # values.py refuses it by name, with the column
    column_type = data_type
    if members is not None:
        column_type += "(" + ",".join("'" + m.replace("'", "''") + "'" for m in members) + ")"
    elif data_type == "decimal":
        column_type += f"({precision},{scale})"
    elif data_type in ("binary", "varbinary", "char", "varchar") and max_length:
        column_type += f"({max_length})"
    if c.unsigned and data_type in (*_INTS.values(), "decimal", "float", "double"):
        column_type += " unsigned"
    return Column(
        name=str(c.name),
        data_type=data_type,
        column_type=column_type,
        nullable=nullable,
        charset=None if binary or not c.character_set_name else _charset_name(c.character_set_name),
        collation=c.collation_name,
        char_max_length=max_length if data_type == "binary" else None,
        numeric_precision=precision,
        numeric_scale=scale,
        datetime_precision=dt_precision,
    )


def _same_type(have: Column, derived: Column) -> bool:
    """``have`` (from information_schema) decodes like ``derived`` (from the TABLE_MAP)."""
    if have.data_type != derived.data_type and not (
        have.data_type in ("numeric",) and derived.data_type == "decimal"
    ):
        # MariaDB's JSON is a LONGTEXT in the binlog; its UUID/INET4/INET6 are BINARY(16/4/16) there
        if not (have.data_type == "json" and derived.data_type == "longtext") and not (
            derived.data_type == "binary" and _NATIVE_WIDTHS.get(have.data_type) == derived.char_max_length
        ):
            return False
        if derived.data_type == "binary":
            return True
    if have.unsigned != derived.unsigned:
        return False
    if derived.charset and have.charset and _charset_name(have.charset) != _charset_name(derived.charset):
        return False  # ALTER ... CONVERT TO CHARACTER SET: older events carry the old charset's bytes
    if derived.data_type in ("decimal", "bit") and (
        have.numeric_precision != derived.numeric_precision
        or (have.numeric_scale or 0) != (derived.numeric_scale or 0)
    ):
        return False
    if derived.data_type in ("time", "datetime", "timestamp") and (
        (have.datetime_precision or 0) != (derived.datetime_precision or 0)
    ):
        return False
    if derived.data_type in ("enum", "set") and have.column_type.split(")")[0].lower() != (
        derived.column_type.split(")")[0].lower()
    ):
        return False
    return not (derived.data_type == "binary" and have.char_max_length != derived.char_max_length)


def _charset_name(name: str) -> str:
    """The server's name of a charset mysql-replication reports by pymysql's codec name (latin1 ->
    cp1252, utf8mb3/utf8mb4 -> utf8); the two UTF-8 charsets decode alike, so both read as utf8mb4."""
    return _MYSQL_NAMES.get(name.lower(), name.lower())


# The inverse of pymysql's ``Charset.encoding`` where it renames, plus utf8mb3 (decoded like utf8mb4).
_MYSQL_NAMES = {
    "cp1252": "latin1", "koi8_r": "koi8r", "koi8_u": "koi8u", "utf8": "utf8mb4", "utf8mb3": "utf8mb4",
}
