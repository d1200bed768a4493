"""A table's schema history in the output: the DDL the stream followed, and how older rows catch up with it.

The changelog and the snapshot keep each file in the columns the table had when it was written. The stream
records every DDL statement it followed in ``<table>/changelog/_schema_history.json`` (before the batch's
markers, so a reader never sees data ahead of it), with its position in the binlog order and what it did to
the columns (``engine.binlog.ddl.ColumnChanges``). ``conform`` brings rows written at an earlier position into
the newest columns: renamed columns take their new name, dropped ones go, and added ones hold the value the
source gave existing rows (the column's default). Type changes are casts that must keep every value.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.ddl import ColumnChanges
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, read_json, table_dir, write_json_atomic
from airflow_provider_mysqlcdc.engine.model.tables import TableId

HISTORY_FILE = "_schema_history.json"
VERSION = 1


class SchemaConformError(CdcError):
    """Older rows cannot be shown in the table's newer columns: the table needs a new snapshot."""


@dataclass(frozen=True)
class SchemaEvent:
    position: str  # the DDL's place in the binlog order (``position_text.format_row_key``)
    verb: str
    statement: str
    changes: ColumnChanges
    resnapshot: str | None  # the DDL needed a new snapshot, which a plan made after it covers
    commit_ts: str | None
    batch_id: int | None

    @classmethod
    def from_dict(cls, data: dict) -> SchemaEvent:
        return cls(
            str(data["position"]),
            str(data.get("verb") or ""),
            str(data.get("statement") or ""),
            ColumnChanges.from_dict(data.get("changes") or {}),
            data.get("resnapshot"),
            data.get("commit_ts"),
            data.get("batch_id"),
        )


def history_path(root: str, table: TableId) -> str:
    return posixpath.join(table_dir(root, table), CHANGELOG, HISTORY_FILE)


def read_schema_history(root: str, table: TableId) -> list[SchemaEvent]:
    """The DDL the stream followed for ``table``, in binlog order (empty when there was none)."""
    data = read_json(history_path(root, table)) or {}
    if data and data.get("version") != VERSION:
        raise CdcError(
            f"{history_path(root, table)}: schema history version {data.get('version')!r} is not "
            f"supported (this release reads version {VERSION}): upgrade the provider"
        )
    return [SchemaEvent.from_dict(e) for e in data.get("events") or []]


def record_schema_changes(root: str, table: TableId, events: list[dict], batch_id: int) -> None:
    """Add the DDL rows of a batch to the table's history (a replayed batch adds nothing twice)."""
    path = history_path(root, table)
    data = read_json(path) or {"version": VERSION, "table": str(table), "events": []}
    known = {e["position"] for e in data["events"]}
    added = False
    for event in events:
        if event["position"] in known:
            continue
        known.add(event["position"])
        data["events"].append(
            {k: event.get(k) for k in ("position", "verb", "statement", "changes", "resnapshot", "commit_ts")}
            | {"batch_id": batch_id}
        )
        added = True
    if added:
        data["events"].sort(key=lambda e: e["position"])
        write_json_atomic(path, data)


def schema_version(history: list[SchemaEvent]) -> int:
    """1 for the schema the table was captured with, plus one per column-changing DDL followed since."""
    return 1 + sum(1 for e in history if _changes_columns(e.changes))


def _changes_columns(c: ColumnChanges) -> bool:
    return bool(c.renamed or c.added or c.dropped or c.modified)


def events_after(history: list[SchemaEvent], since: str) -> list[SchemaEvent]:
    """The DDL that came after binlog order ``since`` (a ``_position``, or ``after_bound`` of a watermark)."""
    return [e for e in history if e.position > since]


def columns_after(names: list[str], events: list[SchemaEvent]) -> list[str]:
    """Column names after ``events`` (renames, drops and adds applied in order)."""
    out = list(names)
    for event in events:
        c = event.changes
        out = [c.renamed.get(n, n) for n in out if n not in c.dropped]
        out += [n for n in c.added if n not in out]
    return out


def excluded_after(excluded: Iterable[str], changes: Iterable[SchemaEvent | ColumnChanges]) -> set[str]:
    """The names excluded columns (``--exclude-columns``) have after ``changes``, in binlog order: an excluded
    column renamed stays excluded under its new name (its values never reach a file), and the configured
    names stay excluded too (a column added or renamed to one of them later is excluded as well)."""
    out = set(excluded)
    for change in changes:
        c = change.changes if isinstance(change, SchemaEvent) else change
        out.update(new for old, new in c.renamed.items() if old in out)
    return out


def conform(
    table: pa.Table, events: list[SchemaEvent], target: pa.Schema, name: str, keep: tuple[str, ...] = ()
) -> pa.Table:
    """``table`` in the ``target`` columns after ``events`` (the DDL that came after its rows) in order, every
    column cast to its target type (values must survive). Columns ``keep`` (bookkeeping) go first, as
    they are.
    ``name`` is the table's, for errors."""
    columns = {n: table.column(n) for n in table.column_names}
    fields = {f.name: f for f in target}
    for event in events:
        c = event.changes
        for old, new in c.renamed.items():
            if old in columns:
                columns[new] = columns.pop(old)
        for gone in c.dropped:
            columns.pop(gone, None)
        for added, literal in c.added.items():
            field = fields.get(added)
            value = None if field is None else default_value(literal, field.type, name, added, event)
            kind = field.type if field is not None else pa.null()
            columns[added] = pa.array([value] * table.num_rows, type=kind)
    arrays, out_fields = [], []
    for n in keep:
        arrays.append(table.column(n))
        out_fields.append(table.schema.field(n))
    for field in target:
        column = columns.get(field.name)
        if column is None:
            column = pa.nulls(table.num_rows, field.type)
        elif column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaConformError(
                    f"{name}: column {field.name} changed type to {field.type} in the source, and its "
                    "earlier "
                    f"values ({column.type}) do not convert exactly ({exc}). Snapshot the table again "
                    "(mysqlcdc plan --tables <table>, then mysqlcdc snapshot) so its mirror is exact"
                ) from None
        arrays.append(column)
        out_fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(out_fields))


def default_value(literal: str | None, kind: pa.DataType, table: str, column: str, event: SchemaEvent) -> Any:
    """The value existing rows hold in a column added with ``DEFAULT literal`` (an SQL literal)."""
    if literal is None or literal.upper() == "NULL":
        return None
    text = literal
    if text[:1] in ("'", '"'):
        quote = text[0]
        text = text[1:-1].replace(quote * 2, quote)
        text = _unescape(text)
    elif text.upper() in ("TRUE", "FALSE"):
        text = "1" if text.upper() == "TRUE" else "0"
    try:
        if pa.types.is_integer(kind):
            return int(Decimal(text.strip() or "0").to_integral_value())
        if pa.types.is_decimal(kind):
            return Decimal(text.strip() or "0").quantize(Decimal(1).scaleb(-kind.scale))
        if pa.types.is_floating(kind):
            return float(text.strip() or "0")
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return text
        if pa.types.is_date(kind):
            return date.fromisoformat(text.strip()[:10])
        if pa.types.is_timestamp(kind) and kind.tz is None:
            return datetime.fromisoformat(text.strip())
    except (InvalidOperation, ValueError) as exc:
        raise SchemaConformError(
            f"{table}: the default {literal} of column {column}, added by {event.statement[:200]!r}, "
            "is not a "
            f"{kind} mysqlcdc can reproduce ({exc}); snapshot the table again"
        ) from None
    raise SchemaConformError(
        f"{table}: column {column} ({kind}) was added with default {literal} by {event.statement[:200]!r}; "
        "mysqlcdc cannot reproduce that value for existing rows: snapshot the table again"
    )


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    table = {
        "0": "\0",
        "b": "\b",
        "n": "\n",
        "r": "\r",
        "t": "\t",
        "Z": "\x1a",
        "\\": "\\",
        "'": "'",
        '"': '"',
        "%": "\\%",
        "_": "\\_",
    }
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(table.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
