"""How users name the tables to capture: exact names, patterns, and backtick quoting for any name at all.

``db.table`` is an exact name or a pattern (``*``, ``?`` and ``[...]`` as in shell globs, database and table
matched apart, so a ``*`` never crosses the dot). A name that is spelled exactly as a table is named always
selects that table alone, even where it holds glob characters (``db.special[1]``). Any name can be written
quoted as MySQL quotes identifiers: `` `db`.`a,b.c` `` (a backtick inside is doubled); a quoted part is
literal, never a pattern, and commas and dots inside it belong to the name. Lists of names are split at the
commas outside backticks.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId

GLOB_CHARACTERS = "*?["


def _quoted_part(text: str, start: int) -> tuple[str, int]:
    """The backtick-quoted identifier at ``text[start]`` and the index right after its closing backtick."""
    name, i = [], start + 1
    while i < len(text):
        if text[i] == "`":
            if text.startswith("``", i):
                name.append("`")
                i += 2
                continue
            return "".join(name), i + 1
        name.append(text[i])
        i += 1
    raise ConfigurationError(f"table name {text!r}: a backtick-quoted name is not closed (write ` as ``)")


@dataclass(frozen=True)
class TablePattern:
    """One ``db.table`` name or pattern as a user wrote it; ``*_literal``: that part was backtick-quoted."""

    database: str
    table: str
    database_literal: bool = False
    table_literal: bool = False

    @classmethod
    def parse(cls, text: str) -> TablePattern:
        text = text.strip()
        if text.startswith("`"):
            database, end = _quoted_part(text, 0)
            if not text.startswith(".", end):
                raise ConfigurationError(f"table {text!r} must be written as database.table (`db`.`table`)")
            rest, database_literal = text[end + 1:], True
        else:
            database, sep, rest = text.partition(".")
            database_literal = False
            if not sep:
                raise ConfigurationError(f"table {text!r} must be written as database.table")
        if rest.startswith("`"):
            table, end = _quoted_part(rest, 0)
            if rest[end:].strip():
                raise ConfigurationError(
                    f"table {text!r}: unexpected {rest[end:]!r} after the quoted table name"
                )
            table_literal = True
        else:
            table, table_literal = rest, False
        if not database or not table:
            raise ConfigurationError(f"table {text!r} must be written as database.table")
        return cls(database, table, database_literal, table_literal)

    @property
    def exact(self) -> TableId:
        """The table this names, read as an exact name."""
        return TableId(self.database, self.table)

    @property
    def is_pattern(self) -> bool:
        """Whether an unquoted part holds glob characters (it may still name one table exactly)."""
        parts = ((self.database, self.database_literal), (self.table, self.table_literal))
        return any(not literal and any(ch in part for ch in GLOB_CHARACTERS) for part, literal in parts)

    def _glob_matches(self, table: TableId) -> bool:
        return all(
            name == part if literal else fnmatch.fnmatchcase(name, part)
            for name, part, literal in ((table.database, self.database, self.database_literal),
                                        (table.table, self.table, self.table_literal))
        )

    def select(self, tables: Iterable[TableId]) -> list[TableId]:
        """The tables this selects: the one named exactly,
        if there is one, else every match of the pattern."""
        candidates = list(tables)
        exact = self.exact
        if exact in candidates:
            return [exact]
        return [t for t in candidates if self._glob_matches(t)] if self.is_pattern else []


def matching_tables(tables: Iterable[TableId | str], patterns: Iterable[str]) -> list[TableId]:
    """The tables any of the names or patterns selects (``TablePattern.select``), in name order."""
    ids = [TableId.parse(t) if isinstance(t, str) else t for t in tables]
    found: set[TableId] = set()
    for pattern in patterns:
        found.update(TablePattern.parse(pattern).select(ids))
    return sorted(found)


def split_table_list(value: str | Iterable[str] | None) -> list[str]:
    """``"shop.orders, `shop`.`a,b`"`` or a list of such strings -> the names, split at the commas outside
    backticks, each stripped, empty ones dropped."""
    if not value:
        return []
    items = [value] if isinstance(value, str) else value
    names: list[str] = []
    for item in items:
        text, start, i, part_start = str(item), 0, 0, True
        while i < len(text):
            ch = text[i]
            if part_start and ch == "`":  # a quoted part: its commas and dots belong to the name
                try:
                    i = _quoted_part(text, i)[1]
                except ConfigurationError:
                    i = len(text)  # TablePattern.parse says what is wrong with it
                part_start = False
                continue
            if ch == ",":
                names.append(text[start:i])
                start, part_start = i + 1, True
            elif ch == ".":
                part_start = True
            elif not ch.isspace():
                part_start = False
            i += 1
        names.append(text[start:])
    return [n.strip() for n in names if n.strip()]


def quote_table_name(table: TableId) -> str:
    """``table`` written so that ``TablePattern.parse`` reads it back exactly, also inside a comma-separated
    list: the plain ``db.table`` where that is safe, else both parts backtick-quoted."""
    plain = str(table)
    unsafe = (
        "." in table.database or any(ch in plain for ch in ",`" + GLOB_CHARACTERS)
        or plain != plain.strip() or table.table != table.table.strip()
    )
    if not unsafe:
        return plain
    return ".".join("`" + part.replace("`", "``") + "`" for part in (table.database, table.table))
