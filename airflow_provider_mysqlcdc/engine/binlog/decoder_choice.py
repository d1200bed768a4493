"""Which decoder turns a captured table's rows events into values: the compiled one, or mysql-replication's.

The compiled decoder (``rows_decoder``) is used wherever it reproduces the Python path exactly; a table map it
cannot take (a type it does not know, an extension that was not built) keeps mysql-replication's pure-Python
path for that table, said once per table in the log, never skipped. ``$MYSQLCDC_ROWS_DECODER`` chooses:

* ``compiled`` (default): the compiled decoder where it can, the Python path elsewhere;
* ``python``: always the Python path (the reference; a way out should the compiled decoder ever be wrong);
* ``compare``: decode every event both ways and stop with ``DecoderMismatch`` at the first difference (the
  test suite runs in this mode, so every stream test is also a differential test of the decoder).
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import (
    EventLayout,
    NotDecodable,
    compiled_available,
    decode_event,
    decode_framed,
)
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema

log = logging.getLogger(__name__)

COMPILED, PYTHON, COMPARE = "compiled", "python", "compare"
MODES = (COMPILED, PYTHON, COMPARE)

_said: set[tuple[TableId, str]] = set()
_said_lock = threading.Lock()
_compared: dict[TableId, int] = {}  # compare mode: row images checked per table, in this process


class DecoderMismatch(CdcError):
    """The compiled decoder and mysql-replication gave different values for one row image (compare mode)."""


def decoder_mode() -> str:
    """The mode ``$MYSQLCDC_ROWS_DECODER`` asks for (default ``compiled``)."""
    raw = os.environ.get(ROWS_DECODER_ENV, "").strip().lower() or COMPILED
    if raw not in MODES:
        raise ConfigurationError(
            f"{ROWS_DECODER_ENV}={raw!r}: give one of {', '.join(MODES)} (or leave it unset for {COMPILED})"
        )
    return raw


def layout_for(
    table_map_event: Any, schema: TableSchema, decoders: Callable[[str], CharsetDecoder] | None
) -> EventLayout | None:
    """The compiled layout of this table map, or None: the table's events take the Python path (said once)."""
    if decoder_mode() == PYTHON or not compiled_available():  # a missing extension is said once per process
        return None
    layout, reason = EventLayout.of(table_map_event, schema, decoders)
    if layout is None:
        _say_once(schema.table, reason or "unknown reason")
    return layout


def decoded_columns(
    event: Any, layout: EventLayout, table: TableId, names: list[str],
    python_images: Callable[[], dict[str, list[dict]]],
) -> dict[str, list[list]] | None:
    """Every row image of ``event`` by half (mysql-replication's keys: "values", or "before_values" and
    "after_values"), as columns in the order of ``names``, decoded by the compiled decoder; None when this
    event must take the Python path (said once per table). In compare mode ``python_images()`` (the Python
    path's) must equal them."""
    try:
        decoded = decode_event(event, layout)
    except NotDecodable as exc:
        _say_once(table, str(exc))
        return None
    if list(decoded.column_names) != names:
        _say_once(table, f"the compiled layout's columns {list(decoded.column_names)} are not {names}")
        return None
    if decoder_mode() == COMPARE:
        _compare(event.packet.log_pos, decoded.as_dicts(), table, python_images())
    return dict(zip(decoded.halves, decoded.images))


def framed_columns(
    event: Any, layout: EventLayout, table: TableId, names: list[str], update: bool,
    python_images: Callable[[], dict[str, list[dict]]], compare: bool,
) -> dict[str, list[list]] | None:
    """``decoded_columns`` for a rows event the compiled framer parsed (``event_framer``): its body decoded
    where the framer found it, without mysql-replication's packet; None when it takes the Python path.
    ``compare``: the read runs in compare mode (asked once per read, not per event)."""
    if event.column_count != layout.column_count:
        _say_once(table, f"a rows event of {event.column_count} columns, its layout has "
                         f"{layout.column_count}")
        return None
    if list(layout.column_names) != names:
        _say_once(table, f"the compiled layout's columns {list(layout.column_names)} are not {names}")
        return None
    decoded = decode_framed(event, layout, update)
    if compare:
        _compare(event.log_pos, decoded.as_dicts(), table, python_images())
    return dict(zip(decoded.halves, decoded.images))


def _compare(end_pos: int, images: dict[str, list[dict]], table: TableId,
             expected: dict[str, list[dict]]) -> None:
    where = f"the rows event ending at {end_pos}"
    for half, rows in expected.items():
        got = images.get(half, [])
        if len(got) != len(rows):
            raise DecoderMismatch(
                f"{table}: the compiled decoder found {len(got)} row images ({half}) in {where}, "
                f"mysql-replication {len(rows)}"
            )
        for i, (a, b) in enumerate(zip(rows, got)):
            check_same(table, f"{where}, row {i} ({half})", a, b)
        with _said_lock:
            _compared[table] = _compared.get(table, 0) + len(rows)


def fallback_reasons(table: TableId) -> list[str]:
    """Why events of ``table`` took the Python path in this process (said once each in the log)."""
    with _said_lock:
        return sorted(reason for t, reason in _said if t == table)


def compared_images(table: TableId) -> int:
    """Row images of ``table`` decoded both ways and found equal in this process (compare mode)."""
    with _said_lock:
        return _compared.get(table, 0)


def check_same(table: TableId, where: str, python_value: dict, compiled_value: dict) -> None:
    """Raise ``DecoderMismatch`` naming the first column whose value or type differs."""
    if python_value == compiled_value and all(
        type(python_value[k]) is type(compiled_value.get(k)) for k in python_value
    ):
        return
    for name in sorted(set(python_value) | set(compiled_value)):
        a, b = python_value.get(name, "<absent>"), compiled_value.get(name, "<absent>")
        if a != b or type(a) is not type(b):
            raise DecoderMismatch(
                f"{table}, column {name!r}, row image at {where}: mysql-replication gives {a!r} "
                f"({type(a).__name__}), the compiled decoder {b!r} ({type(b).__name__}). Set "
                f"{ROWS_DECODER_ENV}=python to read with mysql-replication only, and report this"
            )


def _say_once(table: TableId, reason: str) -> None:
    key = (table, reason)
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    log.warning("rows events of %s are decoded by mysql-replication in pure Python (slower): %s",
                table, reason)
