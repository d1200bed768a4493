"""Decoding one parsed rows event with its layout: the public entry point of the compiled decoder."""
from __future__ import annotations

from typing import Any

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import compiled
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.decoded import DecodedRows
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.event_body import BodyNotFound, rows_body
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.layout import EventLayout
from airflow_provider_mysqlcdc.engine.common.errors import CdcError

# Exact classes: PartialUpdateRowsEvent (MySQL's partial JSON) is an UpdateRowsEvent with other images.
_HALVES = {
    WriteRowsEvent: ("values",),
    DeleteRowsEvent: ("values",),
    UpdateRowsEvent: ("before_values", "after_values"),
}
# v1 (MariaDB 10.11 writes these, types 23-25) and v2 (Oracle MySQL 5.6+, types 30-32). Their bodies are
# alike: v2 only adds extra data (NDB info, partition ids) to the header, which mysql-replication has read
# before the event reaches us; the row images start where its cursor stands (the suite runs both flavors,
# the compiled decoder in compare mode). MariaDB's compressed rows events (log_bin_compress, types 166-171)
# reach mysql-replication as NotImplementedEvent and never come here (the reader refuses them).
_ROWS_EVENT_TYPES = {
    BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.DELETE_ROWS_EVENT_V1,
    BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2,
}


class NotDecodable(CdcError):
    """This event cannot go through the compiled decoder (the message says why): decode it with
    mysql-replication (``event.rows``) instead; nothing of it was consumed."""


def compiled_available() -> bool:
    """Whether the compiled decoder is built and loaded (if not, the log says so once per process)."""
    return compiled.module() is not None


def missing_reason() -> str | None:
    """Why the compiled decoder is not available, or None."""
    return compiled.missing_reason()


def decode_event(event: Any, layout: EventLayout) -> DecodedRows:
    """Every row image of ``event`` (a WriteRowsEvent/UpdateRowsEvent/DeleteRowsEvent whose header
    mysql-replication has parsed), normalised as ``layout`` says; the packet is left unread."""
    if compiled.module() is None:
        raise NotDecodable(compiled.missing_reason() or "the compiled decoder is not loaded")
    halves = _HALVES.get(event.__class__)
    if halves is None or event.event_type not in _ROWS_EVENT_TYPES:
        raise NotDecodable(f"{type(event).__name__} (type {event.event_type}) is not a plain rows event")
    if event.number_of_columns != layout.column_count or not layout.matches(event.columns):
        raise NotDecodable(
            f"the rows event of {layout.table} does not have the columns the layout was built for"
        )
    try:
        data, start, end = rows_body(event)
    except BodyNotFound as exc:
        raise NotDecodable(str(exc)) from None
    after = event.columns_present_bitmap2 if len(halves) == 2 else None
    images, rows = layout.compiled.decode(data, start, end, event.columns_present_bitmap, after)
    return DecodedRows(layout.column_names, rows, halves, tuple(images))


def decode_framed(event: Any, layout: EventLayout, update: bool) -> DecodedRows:
    """Every row image of a rows event the compiled framer parsed (``event_framer.FramedEvent``), read from
    the received bytes where the framer found them; ``update``: two halves per row."""
    halves = _HALVES[UpdateRowsEvent] if update else _HALVES[WriteRowsEvent]
    images, rows = layout.compiled.decode(event.data, event.body_start, event.body_end, event.present,
                                          event.present_after if update else None)
    return DecodedRows(layout.column_names, rows, halves, tuple(images))
