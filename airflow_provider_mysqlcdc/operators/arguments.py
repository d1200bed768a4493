"""Operator arguments checked where a mistake is cheapest to see: at construction (DAG parse) when the value
is literal, else at the start of ``execute`` once templates are rendered, before anything is written or a
Spark application starts.

A bad value fails with one line naming the argument and the fix (``chunk_size: 0 is out of range: give a
whole number from 1 to 1000000000``); the checks are the pipeline's (``pipeline/arguments.py``), shared with
the CLI. Rendered templates arrive as text unless the DAG renders native objects, so every check here also
takes the text form of its value (``"8096"``, ``"true"``, ``'{"shop.events": "id"}'``), and ``""`` or
``"None"`` (the rendering of a missing param) means "not given".
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from airflow_provider_mysqlcdc.pipeline import arguments
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue, shown

T = TypeVar("T")
_CONN_ID = re.compile(r"^[\w.\-#!()/:\\]{1,250}$")  # what Airflow accepts as a connection id


def is_template(value: Any) -> bool:
    """A value Airflow renders before ``execute`` (checked then, not at construction): Jinja text, also inside
    a list or a mapping."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, (list, tuple, set)):
        return any(is_template(v) for v in value)
    if isinstance(value, Mapping):
        return any(is_template(k) or is_template(v) for k, v in value.items())
    return False


def not_given(value: Any) -> bool:
    """None, empty, or the text a missing param renders to (``"None"``, ``"null"``)."""
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))


def argument(name: str, value: Any, check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``check(value, ...)``, its :class:`BadValue` named after the argument (unless it names it already)."""
    try:
        return check(value, *args, **kwargs)
    except BadValue as exc:
        if exc.problem.startswith(f"{name} ") or exc.problem.startswith(f"{name}:"):
            raise
        raise exc.named(name) from None


def check_rendered(operator: Any, checks: Mapping[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """In ``execute``: every argument of ``operator`` as rendered, through its check (named when bad)."""
    return {name: argument(name, getattr(operator, name), check) for name, check in checks.items()}


def check_literals(name_values: Mapping[str, Any], checks: Mapping[str, Callable[[Any], Any]]) -> None:
    """At construction: each value that is not a template (nor a mapped ``XComArg``) through its check."""
    for name, check in checks.items():
        value = name_values.get(name)
        if is_template(value) or type(value).__module__.startswith("airflow"):
            continue
        argument(name, value, check)


def conn_id(value: Any) -> str:
    """An Airflow connection id."""
    written = arguments.text(value, what="a connection id", max_chars=250)
    if not _CONN_ID.match(written):
        raise BadValue(f"{shown(written)} is no connection id: use letters, digits and _ . - "
                       "(e.g. mysql_default)")
    return written


def optional(check: Callable[..., T], *args: Any, **kwargs: Any) -> Callable[[Any], T | None]:
    """``check``, or None for a value :func:`not_given`."""
    def run(value: Any) -> T | None:
        return None if not_given(value) else check(value, *args, **kwargs)

    return run


def mapping(value: Any, *, example: str) -> dict[Any, Any]:
    """A mapping as given, or its text (JSON, or a Python literal as a non-native rendering of a dict
    shows it); nothing means ``{}``."""
    if isinstance(value, Mapping):
        return dict(value)
    if not_given(value) or (isinstance(value, str) and value.strip() == "{}"):
        return {}
    if isinstance(value, str) and value.strip().startswith("{"):
        arguments.text(value, what=f"a mapping such as {example}", max_chars=100_000, allow_control=True)
        for load in (json.loads, ast.literal_eval):
            try:
                parsed = load(value.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, dict):
                return parsed
    raise BadValue(f"give a mapping such as {example}, got {shown(value)}")


def chunk_keys(value: Any) -> dict[str, str]:
    """``{"db.table": "column"}`` (or its JSON text, or ``"db.t=col; db.u=col"``): the chunk key of each
    table, keyed by its ``db.table`` form; nothing (None, ``""``, ``"None"``, ``{}``) means none. Its errors
    name ``chunk_keys`` themselves."""
    example = '{"shop.events": "id"} or "shop.events=id"'
    wrong = f"chunk_keys must map each table to one column name, e.g. {example}; got {shown(value)}"
    try:
        if isinstance(value, str) and not value.strip().startswith("{") and not not_given(value):
            pairs = [arguments.chunk_key(part) for part in re.split(r"[;,]", value) if part.strip()]
        else:
            items = mapping(value, example=example)
            if any(not isinstance(c, str) or not c.strip() or not isinstance(t, str)
                   for t, c in items.items()):
                raise BadValue(wrong)
            pairs = [(arguments.table_key(t), arguments.identifier(c.strip())) for t, c in items.items()]
    except BadValue as exc:
        named = exc.problem.startswith("chunk_keys")
        raise BadValue(exc.problem if named else f"{wrong} ({exc.problem})") from None
    out: dict[str, str] = {}
    for table, column in pairs:
        if table in out:
            raise BadValue(f"chunk_keys names {table} twice: give each table one chunk key")
        out[table] = column
    return out


def exclude_columns(value: Any) -> dict[str, tuple[str, ...]]:
    """``{"db.table": ["col", ...]}`` (or ``"col,col"`` per table, or the JSON text of either): the columns
    never written, keyed by the table's ``db.table`` form."""
    items = mapping(value, example='{"shop.users": ["password_hash"]}')
    out: dict[str, tuple[str, ...]] = {}
    for table, columns in items.items():
        if not isinstance(table, str):
            raise BadValue(f"give table names as keys (db.table), got {shown(table)}")
        key = arguments.table_key(table)
        if key in out:
            raise BadValue(f"names {key} twice: give its columns once")
        out[key] = arguments.column_list(columns)
    return out


def table_list(value: Any) -> list[str]:
    """Table names or patterns (a comma-separated string or a list); nothing means none."""
    if not_given(value) or (isinstance(value, (list, tuple)) and not value):
        return []
    return arguments.table_patterns(value)


def one_of(*choices: str) -> Callable[[Any], str]:
    """One of ``choices`` (case and surrounding space ignored)."""
    def choose(value: Any) -> str:
        picked = str(value).strip().lower() if isinstance(value, str) else None
        if picked not in choices:
            raise BadValue(f"{shown(value)} is not one of {', '.join(choices)}")
        return picked

    return choose


_REDO_ITEM = re.compile(r"^\s*([^=:\s]+\.[^=:\s]+)\s*[=:]\s*(.+?)\s*$")


def parse_redo_chunks(value: str | Mapping[str, Any] | None) -> dict[str, tuple[int, ...]]:
    """``"shop.orders=3,7; shop.items=0-2"`` or ``{"shop.orders": "3,7"}`` / ``{"shop.orders": [3, 7]}`` (or
    the JSON text of a mapping): the chunk ids to snapshot again, by table; nothing means none. Its errors
    name ``redo_chunks`` themselves."""
    if not_given(value) or (isinstance(value, Mapping) and not value):
        return {}
    example = "'db.table=3,7; db.other=0-2' or {\"db.table\": \"3,7\"}"
    items: dict[Any, Any]
    if isinstance(value, Mapping) or (isinstance(value, str) and value.strip().startswith("{")):
        try:
            items = mapping(value, example=example)
        except BadValue:
            raise BadValue(f"redo_chunks must look like {example}, got {shown(value)}") from None
    elif isinstance(value, str):
        items = {}
        for part in value.split(";"):
            if not part.strip():
                continue
            match = _REDO_ITEM.match(part)
            if not match:
                raise BadValue(f"redo_chunks must look like 'db.table=3,7; db.other=0-2', got "
                               f"{shown(part.strip())}")
            items[match.group(1)] = match.group(2)
    else:
        raise BadValue(f"redo_chunks must look like {example}, got {shown(value)}")
    out: dict[str, tuple[int, ...]] = {}
    for table, ids in items.items():
        try:
            name = arguments.table_name(table)
            parsed = arguments.chunk_ids(ids)
        except BadValue as exc:
            raise BadValue(f"redo_chunks: {shown(table)}: {exc.problem}") from None
        out[name] = parsed
    return out


# The limits chunk reads keep on the source: the snapshot operator's, and the stream's for its re-snapshots.
SOURCE_LIMIT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "max_concurrent_reads": optional(arguments.whole_number, minimum=0,
                                     maximum=arguments.MAX_CONCURRENT_READS),
    "rows_per_second": optional(arguments.number, minimum=0, maximum=arguments.MAX_ROWS_PER_SECOND),
    "query_timeout": optional(arguments.number, minimum=0, maximum=arguments.MAX_QUERY_TIMEOUT_S,
                              unit="seconds"),
}
