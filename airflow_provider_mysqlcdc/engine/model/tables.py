"""Tables we capture: identifiers (always quoted), selection by name or pattern, and column metadata.

Every identifier that reaches SQL goes through ``quote_ident``; values never do (they are parameters).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
DECIMAL_TYPES = {"decimal", "numeric"}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
TEMPORAL_TYPES = {"date", "datetime", "timestamp", "time", "year"}


def quote_ident(name: str) -> str:
    """Backtick-quote one identifier (a backtick inside is doubled)."""
    if not name or "\x00" in name:
        raise ConfigurationError(f"invalid identifier {name!r}")
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True, order=True)
class TableId:
    database: str
    table: str

    @property
    def quoted(self) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(self.table)}"

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"

    @classmethod
    def parse(cls, text: str) -> TableId:
        database, sep, table = text.partition(".")
        if not sep or not database or not table:
            raise ConfigurationError(f"table {text!r} must be written as database.table")
        return cls(database, table)


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # lower-case base type: int, varchar, decimal, datetime, ...
    column_type: str  # full type: "int(10) unsigned", "enum('a','b')", "decimal(12,2)"
    nullable: bool
    charset: str | None = None
    collation: str | None = None
    char_max_length: int | None = None
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()

    @property
    def is_integer(self) -> bool:
        return self.data_type in INTEGER_TYPES

    @property
    def is_decimal(self) -> bool:
        return self.data_type in DECIMAL_TYPES

    @property
    def is_string(self) -> bool:
        return self.data_type in STRING_TYPES

    @property
    def is_binary(self) -> bool:
        return self.data_type in BINARY_TYPES

    @property
    def quoted(self) -> str:
        return quote_ident(self.name)


@dataclass(frozen=True)
class TableSchema:
    table: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    engine: str | None = None
    approximate_rows: int = 0
    column_by_name: dict[str, Column] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.column_by_name.update({c.name: c for c in self.columns})

    def column(self, name: str) -> Column:
        try:
            return self.column_by_name[name]
        except KeyError:
            raise ConfigurationError(
                f"table {self.table} has no column {name!r} (columns: {[c.name for c in self.columns]})"
            ) from None

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @functools.cached_property
    def schema_id(self) -> str:
        """A short, stable name of this table's column layout (names and types): one per schema version."""
        text = json.dumps([str(self.table), *([c.name, c.column_type, c.data_type, c.numeric_precision,
                           c.numeric_scale, c.datetime_precision, c.nullable] for c in self.columns)],
                          separators=(",", ":"))
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]

    def to_dict(self) -> dict:
        return {
            "table": str(self.table),
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "primary_key": list(self.primary_key),
            "engine": self.engine,
        }

    @classmethod
    def from_dict(cls, data: dict) -> TableSchema:
        return cls(
            TableId.parse(str(data["table"])),
            tuple(Column(**c) for c in data["columns"]),
            tuple(data.get("primary_key") or ()),
            engine=data.get("engine"),
        )
