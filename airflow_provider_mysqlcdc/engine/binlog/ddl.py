"""DDL in the binlog: which tables a statement changes, and what it does to a captured table.

The stream follows a captured table's DDL without a new snapshot when the changelog can represent it: added
columns (their default is what existing rows hold), dropped, renamed and modified columns. Everything that
changes rows without row events (TRUNCATE, partition DROP/TRUNCATE/EXCHANGE, RENAME TABLE, DROP/CREATE TABLE)
or that we cannot reproduce for existing rows (expression defaults, generated columns, primary key changes)
needs a new snapshot of the table: ``TableDdl.resnapshot`` says why. An ALTER clause we do not recognise is
treated the same way: never a silent guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>/\*(?!!|M!).*?\*/|--(?=\s)[^\n]*|\#[^\n]*)
  | (?P<exec>/\*M?!\d*|\*/)
  | (?P<bq>`(?:[^`]|``)*`)
  | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<word>[\w$\u0080-\U0010ffff]+)
  | (?P<punct>.)
    """,
    re.DOTALL | re.VERBOSE,
)

DDL_VERBS = {"ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"}
DML_VERBS = {"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD"}

TableRef = tuple[str | None, str | None]  # (database or None for the default, table or None for "all")


@dataclass
class _Tokens:
    items: list[
        tuple[str, str]
    ]  # (kind, text): "id" quoted name, "kw" bare word, "s" string, "p" punctuation
    i: int = 0
    starts: list[int] = field(default_factory=list)  # where each item starts in the statement
    sql: str = ""

    @classmethod
    def parse(cls, sql: str) -> _Tokens:
        items: list[tuple[str, str]] = []
        starts: list[int] = []
        for m in _TOKEN.finditer(sql):
            kind = m.lastgroup
            text = m.group()
            if kind in ("bq", "word", "punct", "str"):
                starts.append(m.start())
            if kind == "bq":
                items.append(("id", text[1:-1].replace("``", "`")))
            elif kind == "word":
                items.append(("kw", text))
            elif kind == "punct":
                items.append(("p", text))
            elif kind == "str":
                items.append(("s", text))
        return cls(items, 0, starts, sql)

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        if j >= len(self.items):
            return ""
        kind, text = self.items[j]
        return text.upper() if kind == "kw" else ("" if kind in ("id", "s") else text)

    def accept(self, *words: str) -> bool:
        if self.peek() in words:
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        if all(self.peek(n) == w for n, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def name(self) -> TableRef | None:
        """``ident`` or ``ident.ident`` at the cursor."""
        first = self._ident()
        if first is None:
            return None
        if self.peek() == "." and self.i + 1 < len(self.items):
            self.i += 1
            second = self._ident()
            return (first, second) if second is not None else (None, first)
        return None, first

    def _ident(self) -> str | None:
        if self.i >= len(self.items):
            return None
        kind, text = self.items[self.i]
        if kind in ("id", "kw"):
            self.i += 1
            return text
        return None

    def all_names(self) -> list[TableRef]:
        names: list[TableRef] = []
        while self.i < len(self.items):
            if self.items[self.i][0] in ("id", "kw"):
                ref = self.name()
                if ref:
                    names.append(ref)
            else:
                self.i += 1
        return names


def statement_tables(sql: str) -> tuple[str, list[TableRef]]:
    """The verb of a statement and the tables whose data or definition it changes.

    DDL: the table it alters, creates, drops, renames or truncates (``(db, None)`` for DROP DATABASE).
    DML (statement-based logging): every name in the statement, conservatively. Other statements: none.
    """
    t = _Tokens.parse(sql)
    verb = t.peek()
    t.accept(verb)
    refs: list[TableRef] = []
    if verb in DML_VERBS:
        return verb, t.all_names()
    if verb == "ALTER":
        t.accept("ONLINE", "OFFLINE")
        t.accept("IGNORE")
        if t.accept("TABLE"):
            t.accept_seq("IF", "EXISTS")
            if (ref := t.name()) is not None:
                refs.append(ref)
            while t.i < len(t.items):  # RENAME TO x, EXCHANGE PARTITION p WITH TABLE x
                if t.accept("RENAME"):
                    if t.peek() in ("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
                        continue
                    t.accept("TO", "AS")
                    if (ref := t.name()) is not None:
                        refs.append(ref)
                elif t.accept_seq("WITH", "TABLE"):
                    if (ref := t.name()) is not None:
                        refs.append(ref)
                else:
                    t.i += 1
    elif verb == "CREATE":
        t.accept_seq("OR", "REPLACE")
        t.accept("TEMPORARY")
        t.accept("ONLINE", "OFFLINE")
        t.accept("UNIQUE", "FULLTEXT", "SPATIAL")
        if t.accept("TABLE"):
            t.accept_seq("IF", "NOT", "EXISTS")
            if (ref := t.name()) is not None:
                refs.append(ref)
        elif t.accept("INDEX"):
            refs.extend(_index_target(t))
    elif verb == "DROP":
        t.accept("TEMPORARY")
        if t.accept("TABLE", "TABLES"):
            t.accept_seq("IF", "EXISTS")
            while (ref := t.name()) is not None:
                refs.append(ref)
                if not t.accept(","):
                    break
        elif t.accept("INDEX"):
            refs.extend(_index_target(t))
        elif t.accept("DATABASE", "SCHEMA"):
            t.accept_seq("IF", "EXISTS")
            if (ref := t.name()) is not None:
                refs.append((ref[1], None))
    elif verb == "RENAME":
        if t.accept("TABLE", "TABLES"):
            keywords = ("TO", "WAIT", "NOWAIT")
            refs = [r for r in t.all_names() if r[0] is not None or (r[1] or "").upper() not in keywords]
    elif verb == "TRUNCATE":
        t.accept("TABLE")
        if (ref := t.name()) is not None:
            refs.append(ref)
    return verb, refs


def _index_target(t: _Tokens) -> list[TableRef]:
    while t.i < len(t.items):
        if t.accept("ON"):
            ref = t.name()
            return [ref] if ref is not None else []
        t.i += 1
    return []


# --- what a DDL statement does to one captured table -----------------------------------------------------


@dataclass(frozen=True)
class ColumnChanges:
    """Column changes the changelog follows in place, in statement order."""

    renamed: dict[str, str] = field(default_factory=dict)  # old name -> new name
    added: dict[str, str | None] = field(
        default_factory=dict
    )  # new column -> default SQL literal (None: NULL)
    dropped: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()  # columns whose type may have changed (by their new name)

    def to_dict(self) -> dict:
        return {
            "renamed": self.renamed,
            "added": self.added,
            "dropped": list(self.dropped),
            "modified": list(self.modified),
        }

    @classmethod
    def from_dict(cls, data: dict) -> ColumnChanges:
        return cls(
            dict(data.get("renamed") or {}),
            dict(data.get("added") or {}),
            tuple(data.get("dropped") or ()),
            tuple(data.get("modified") or ()),
        )


@dataclass(frozen=True)
class TableDdl:
    """One DDL statement as it concerns one captured table."""

    verb: str
    statement: str
    changes: ColumnChanges
    resnapshot: str | None = None  # why the table must be snapshotted again; None: the changelog follows it


# types whose non-NULL literal default we cannot turn into the value existing rows hold exactly
_UNREPRODUCIBLE_DEFAULT_TYPES = {
    "timestamp",
    "bit",
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
    "set",
    "json",
    "time",
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
    "geomcollection",
    "year",
    "enum",
    "inet4",
    "inet6",
    "uuid",
}
_ZERO_DEFAULT_TYPES = {
    "tinyint",
    "smallint",
    "mediumint",
    "int",
    "integer",
    "bigint",
    "decimal",
    "numeric",
    "float",
    "double",
    "real",
    "bool",
    "boolean",
}
_EMPTY_DEFAULT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_LITERAL = re.compile(
    r"""\s*(?:_\w+\s*)?(
        NULL\b | TRUE\b | FALSE\b
      | [+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?
      | '(?:[^'\\]|\\.|'')*' | "(?:[^"\\]|\\.|"")*"
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_INDEX_WORDS = {"INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT", "CHECK", "VECTOR"}
_HARMLESS_PARTITION_OPS = {
    "REORGANIZE",
    "COALESCE",
    "REBUILD",
    "OPTIMIZE",
    "ANALYZE",
    "CHECK",
    "REPAIR",
    "REMOVE",
}
_TABLE_OPTIONS = {
    "ENGINE",
    "COMMENT",
    "ROW_FORMAT",
    "AUTO_INCREMENT",
    "DEFAULT",
    "CHARACTER",
    "CHARSET",
    "COLLATE",
    "FORCE",
    "ALGORITHM",
    "LOCK",
    "ORDER",
    "WAIT",
    "NOWAIT",
    "KEY_BLOCK_SIZE",
    "STATS_PERSISTENT",
    "STATS_AUTO_RECALC",
    "STATS_SAMPLE_PAGES",
    "PACK_KEYS",
    "CHECKSUM",
    "DELAY_KEY_WRITE",
    "MAX_ROWS",
    "MIN_ROWS",
    "PAGE_CHECKSUM",
    "PAGE_COMPRESSED",
    "PAGE_COMPRESSION_LEVEL",
    "TRANSACTIONAL",
    "ENCRYPTED",
    "ENCRYPTION_KEY_ID",
    "IETF_QUOTES",
    "INSERT_METHOD",
    "DATA",
    "INDEX",
    "ENABLE",
    "DISABLE",
    "SEQUENCE",
    "AVG_ROW_LENGTH",
    "CONNECTION",
    "PASSWORD",
    "UNION",
    "STORAGE",
    "TABLESPACE",
    "VALIDATION",
    "WITH",
    "WITHOUT",
    "NO_WRITE_TO_BINLOG",
    "LOCAL",
    "PARTITION",
    "PARTITIONS",
    "SUBPARTITION",
    "UPGRADE",
}


def table_ddl(sql: str, primary_key: tuple[str, ...] = ()) -> TableDdl:
    """What ``sql`` (a DDL statement naming the captured table) does to that table.

    ``primary_key``: the table's key columns; changing one needs a new snapshot (chunks and the mirror are
    keyed by it).
    """
    t = _Tokens.parse(sql)
    verb = t.peek()
    statement = redacted(sql.strip())
    if verb == "TRUNCATE":
        return TableDdl(verb, statement, ColumnChanges(), "TRUNCATE removes every row without row events")
    if verb == "RENAME":
        return TableDdl(verb, statement, ColumnChanges(), "RENAME TABLE replaces the table under its name")
    if verb == "DROP" and t.peek(1) not in ("INDEX",):
        return TableDdl(verb, statement, ColumnChanges(), "the table was dropped")
    if verb == "CREATE" and t.peek(1) not in ("INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE"):
        return TableDdl(verb, statement, ColumnChanges(), "the table was created anew")
    if verb in ("CREATE", "DROP"):  # CREATE/DROP INDEX: no data changes
        return TableDdl(verb, statement, ColumnChanges())
    if verb != "ALTER":
        return TableDdl(verb, statement, ColumnChanges(), f"{verb} statements are not understood by mysqlcdc")
    return _alter(t, statement, {k.lower() for k in primary_key})


def _alter(t: _Tokens, statement: str, key: set[str]) -> TableDdl:
    t.accept("ALTER")
    t.accept("ONLINE", "OFFLINE")
    t.accept("IGNORE")
    if not t.accept("TABLE"):
        return TableDdl("ALTER", statement, ColumnChanges(), "an ALTER of an unknown kind")
    t.accept_seq("IF", "EXISTS")
    t.name()
    clauses = _AlterClauses(key)
    for spec in _specs(t):
        why = clauses.read(spec)
        if why is not None:
            return TableDdl("ALTER", statement, clauses.changes(), why)
    return TableDdl("ALTER", statement, clauses.changes())


class _AlterClauses:
    """The clauses of one ALTER TABLE, read in statement order: collects the column changes the changelog
    follows; each reader returns None (followed, or no data change) or why the table needs a new snapshot."""

    def __init__(self, key: set[str]) -> None:
        self.key = key  # the primary key's columns, lower case
        self.renamed: dict[str, str] = {}
        self.added: dict[str, str | None] = {}
        self.dropped: list[str] = []
        self.modified: list[str] = []

    def changes(self) -> ColumnChanges:
        return ColumnChanges(self.renamed, self.added, tuple(self.dropped), tuple(self.modified))

    def read(self, spec: _Tokens) -> str | None:
        s = _Tokens(spec.items, 0, spec.starts, spec.sql)
        word = s.peek()
        s.i += 1
        if word == "ADD":
            return self._add(s)
        if word == "DROP":
            return self._drop(s, spec)
        if word in ("MODIFY", "CHANGE"):
            return self._modify(s, word, spec)
        if word == "RENAME":
            return self._rename(s, spec)
        return _clause_without_columns(word, s, spec)

    def _add(self, s: _Tokens) -> str | None:
        if s.peek() == "PRIMARY" or (s.peek() == "CONSTRAINT" and "PRIMARY" in _words(s)):
            return "the primary key changed"
        if s.peek() == "PARTITION" or s.peek() in _INDEX_WORDS or s.peek() == "PERIOD":
            return None
        if s.peek() == "SYSTEM":
            return "system versioning was added"
        s.accept("COLUMN")
        s.accept_seq("IF", "NOT", "EXISTS")
        definitions = _column_definitions(s)
        for name, definition in definitions:
            why = _added_default(name, definition, self.added)
            if why:
                return why
        return None

    def _drop(self, s: _Tokens, spec: _Tokens) -> str | None:
        if s.peek() == "PRIMARY":
            return "the primary key changed"
        if s.peek() in ("PARTITION",):
            return "DROP PARTITION removes rows without row events"
        if s.peek() in _INDEX_WORDS or s.peek() == "PERIOD":
            return None
        if s.peek() == "SYSTEM":
            return "system versioning was dropped"
        s.accept("COLUMN")
        s.accept_seq("IF", "EXISTS")
        name = s._ident()
        if name is None:
            return _unrecognised(spec)
        if name.lower() in self.key:
            return f"primary key column {name} was dropped"
        self.dropped.append(name)
        return None

    def _modify(self, s: _Tokens, word: str, spec: _Tokens) -> str | None:
        s.accept("COLUMN")
        s.accept_seq("IF", "EXISTS")
        old = s._ident()
        new = s._ident() if word == "CHANGE" else old
        if old is None or new is None:
            return _unrecognised(spec)
        if old.lower() in self.key:
            return f"primary key column {old} was changed"
        rest = _words(s)
        if "AS" in rest or "GENERATED" in rest:
            return f"column {new} became a generated column"
        if old != new:
            self.renamed[old] = new
        self.modified.append(new)
        return None

    def _rename(self, s: _Tokens, spec: _Tokens) -> str | None:
        if s.peek() in ("INDEX", "KEY", "CONSTRAINT"):
            return None
        if s.accept("COLUMN"):
            old = s._ident()
            s.accept("TO")
            new = s._ident()
            if old is None or new is None:
                return _unrecognised(spec)
            if old.lower() in self.key:
                return f"primary key column {old} was renamed"
            self.renamed[old] = new
            return None
        return "ALTER TABLE ... RENAME moves the table to another name"


def _clause_without_columns(word: str, s: _Tokens, spec: _Tokens) -> str | None:
    """An ALTER clause (``word``, ``s`` after it) that changes no column the changelog follows: None when it
    changes no data either, else why the table needs a new snapshot."""
    if word == "ALTER":
        s.accept("COLUMN")
        if s.peek() == "INDEX" or s.peek(1) in ("SET", "DROP"):
            return None  # SET/DROP DEFAULT, visibility, index visibility: no data changes
        return _unrecognised(spec)
    if word in ("TRUNCATE", "EXCHANGE", "DISCARD", "IMPORT"):
        return f"{word} {s.peek()} changes rows without row events"
    if word == "CONVERT":
        if s.peek() in ("PARTITION", "TABLE"):
            return "CONVERT PARTITION/TABLE moves rows without row events"
        return "CONVERT TO CHARACTER SET re-encodes every text value"
    if word in _HARMLESS_PARTITION_OPS and (word != "REMOVE" or s.peek() == "PARTITIONING"):
        return None
    if word in _TABLE_OPTIONS or word in ("ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE"):
        if word == "PARTITION" and s.peek() != "BY":
            return _unrecognised(spec)
        return None
    if word == "":
        return None
    return _unrecognised(spec)


def _unrecognised(spec: _Tokens) -> str:
    return f"unrecognised clause {_text(spec)!r}"


def _specs(t: _Tokens) -> list[_Tokens]:
    """The comma-separated clauses of an ALTER TABLE after the table name (commas inside parentheses kept)."""
    out: list[_Tokens] = []
    depth = 0
    items: list[tuple[str, str]] = []
    starts: list[int] = []
    while t.i < len(t.items):
        kind, text = t.items[t.i]
        if kind == "p" and text == "(":
            depth += 1
        elif kind == "p" and text == ")":
            depth -= 1
        if kind == "p" and text == "," and depth == 0:
            out.append(_Tokens(items, 0, starts, t.sql))
            items, starts = [], []
        elif not (kind == "p" and text == ";"):
            items.append((kind, text))
            starts.append(t.starts[t.i] if t.i < len(t.starts) else 0)
        t.i += 1
    if items:
        out.append(_Tokens(items, 0, starts, t.sql))
    return out


def _column_definitions(s: _Tokens) -> list[tuple[str, _Tokens]]:
    """``name type ...`` or ``(name type ..., name type ...)`` after ADD [COLUMN]."""
    if s.peek() == "(":
        s.i += 1
        inner = _Tokens(
            s.items[s.i : -1] if s.items and s.items[-1] == ("p", ")") else s.items[s.i :],
            0,
            s.starts[s.i :],
            s.sql,
        )
        return [d for part in _specs(inner) for d in _column_definitions(part)]
    name = s._ident()
    if name is None:
        return []
    rest = _Tokens(s.items[s.i :], 0, s.starts[s.i :], s.sql)
    return [(name, rest)]


def _added_default(name: str, d: _Tokens, added: dict[str, str | None]) -> str | None:
    """Record the value existing rows hold in the added column ``name``; else say why we cannot know it."""
    words = _words(d)
    data_type = d.peek().lower() if d.items else ""
    if "AS" in words or "GENERATED" in words:
        return f"added column {name} is generated from other columns"
    if "AUTO_INCREMENT" in words:
        return f"added column {name} numbers existing rows (AUTO_INCREMENT)"
    if "DEFAULT" in words:
        j = next(j for j, (k, text) in enumerate(d.items) if k == "kw" and text.upper() == "DEFAULT")
        after = d.starts[j] + len("DEFAULT") if j < len(d.starts) else None
        match = _LITERAL.match(d.sql, after) if after is not None else None
        if match is None:
            return f"the default of added column {name} is an expression, evaluated per existing row"
        literal = match.group(1)
        tail = d.sql[match.end() :].lstrip()
        if tail[:1] and tail[:1] in "+-*/|&^%(":
            return f"the default of added column {name} is an expression, evaluated per existing row"
        if literal.upper() == "NULL":
            added[name] = None
            return None
        if data_type in _UNREPRODUCIBLE_DEFAULT_TYPES or data_type not in (
            _ZERO_DEFAULT_TYPES | _EMPTY_DEFAULT_TYPES | {"date", "datetime"}
        ):
            return (
                f"existing rows of added column {name} ({data_type}) hold a default mysqlcdc cannot reproduce"
            )
        added[name] = literal
        return None
    if "NOT" in words and "NULL" in words[words.index("NOT") + 1 : words.index("NOT") + 2]:
        if data_type in _ZERO_DEFAULT_TYPES:
            added[name] = "0"
            return None
        if data_type in _EMPTY_DEFAULT_TYPES:
            added[name] = "''"
            return None
        return f"added NOT NULL column {name} ({data_type}) gives existing rows an implicit default"
    added[name] = None
    return None


def _words(s: _Tokens) -> list[str]:
    return [text.upper() for kind, text in s.items[s.i :] if kind == "kw"]


def _text(spec: _Tokens) -> str:
    if not spec.starts:
        return ""
    return spec.sql[spec.starts[0] : spec.starts[-1] + len(spec.items[-1][1]) + 2].strip()[:120]


_SECRET_OPTION = re.compile(
    r"""\b(CONNECTION|PASSWORD|ENCRYPTION_KEY)(\s*=?\s*)"""
    r"""('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")""",
    re.IGNORECASE,
)


def redacted(sql: str) -> str:
    """The statement with table options that may hold credentials (``CONNECTION='mysql://u:pw@h'``,
    ``PASSWORD='...'``) blanked: DDL text reaches errors, logs, the schema history and the UI."""
    return _SECRET_OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}'***'", sql)
