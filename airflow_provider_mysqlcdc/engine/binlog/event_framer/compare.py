"""Compare mode of the framer: every framed event is also parsed by mysql-replication, field by field equal.

The suite runs with ``$MYSQLCDC_ROWS_DECODER=compare``: each event the framer parses is handed to
mysql-replication too, and the read stops with ``FramerMismatch`` at the first field they read differently
(the header, the fields of its type, where a rows event's images lie). The row images themselves are compared
by the rows decoder's compare mode (``decoder_choice.framed_columns``).
"""
from __future__ import annotations

from typing import Any

from pymysqlreplication import event as ev
from pymysqlreplication import row_event as rv

from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.event_body import rows_body
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError

ROWS_TYPES = {0x17: rv.WriteRowsEvent, 0x18: rv.UpdateRowsEvent, 0x19: rv.DeleteRowsEvent,
              0x1E: rv.WriteRowsEvent, 0x1F: rv.UpdateRowsEvent, 0x20: rv.DeleteRowsEvent}
# mysql-replication's class of each type the framer parses
EXPECTED_CLASS: dict[int, type] = {
    0x02: ev.QueryEvent, 0x03: ev.StopEvent, 0x04: ev.RotateEvent, 0x10: ev.XidEvent,
    0x13: rv.TableMapEvent, 0x1B: ev.HeartbeatLogEvent, 0x1D: ev.RowsQueryLogEvent, 0x21: ev.GtidEvent,
    0x22: ev.NotImplementedEvent, 0x23: ev.PreviousGtidsEvent, 0xA0: ev.MariadbAnnotateRowsEvent,
    0xA1: ev.MariadbBinLogCheckPointEvent, 0xA2: ev.MariadbGtidEvent, 0xA3: ev.MariadbGtidListEvent,
    **ROWS_TYPES,
}


class FramerMismatch(CdcError):
    """The compiled framer and mysql-replication read one event differently (compare mode)."""


def check_framed(framed: Any, parsed: Any, checksum: bool) -> None:
    """Raise ``FramerMismatch`` naming the first field of ``framed`` that ``parsed`` (mysql-replication's
    object of the same packet) holds otherwise."""
    code = framed.event_type
    where = f"event of type {code:#04x} ending at {framed.log_pos}"
    if parsed is None:
        if code in ROWS_TYPES:
            return  # a rows event of a table id mysql-replication has no map for: both pass over it
        raise _mismatch(where, "the event", "parsed", "passed over")
    if parsed.__class__ is not EXPECTED_CLASS.get(code):
        raise _mismatch(where, "its class", EXPECTED_CLASS.get(code), parsed.__class__)
    reference: Any = parsed
    packet = reference.packet
    body_size = framed.event_size - 19 - (4 if checksum else 0)
    _same(where, "header", (framed.timestamp, code, framed.server_id, body_size, framed.log_pos,
                            framed.header_flags),
          (packet.timestamp, packet.event_type, packet.server_id, reference.event_size, packet.log_pos,
           packet.flags))
    for name, ours, theirs in _fields(framed, parsed):
        _same(where, name, ours, theirs)


def _fields(framed: Any, parsed: Any) -> list[tuple[str, Any, Any]]:
    code = framed.event_type
    if code == 0x02:
        return [("schema", framed.schema, parsed.schema), ("query", framed.query, parsed.query)]
    if code == 0x04:
        return [("position", framed.position, parsed.position),
                ("next_binlog", framed.next_binlog, parsed.next_binlog)]
    if code == 0x10:
        return [("xid", framed.xid, parsed.xid)]
    if code == 0x13:
        return [("table_id", framed.table_id, parsed.table_id), ("schema", framed.schema, parsed.schema),
                ("table", framed.table, parsed.table)]
    if code == 0x21:
        return [("gtid", framed.gtid, parsed.gtid)]
    if code == 0xA2:
        return [("gtid", framed.gtid, parsed.gtid), ("gtid flags", framed.gtid_flags, parsed.flags)]
    if code in ROWS_TYPES:
        _, start, end = rows_body(parsed)
        offset = framed.packet_start
        fields = [
            ("table_id", framed.table_id, parsed.table_id), ("flags", framed.rows_flags, parsed.flags),
            ("column count", framed.column_count, parsed.number_of_columns),
            ("present columns", framed.present, bytes(parsed.columns_present_bitmap)),
            ("row images", (framed.body_start - offset, framed.body_end - offset), (start, end)),
        ]
        if parsed.__class__ is rv.UpdateRowsEvent:
            fields.append(("present columns after", framed.present_after,
                           bytes(parsed.columns_present_bitmap2)))
        return fields
    return []


def _same(where: str, name: str, ours: Any, theirs: Any) -> None:
    if ours != theirs or type(ours) is not type(theirs):
        raise _mismatch(where, name, ours, theirs)


def _mismatch(where: str, name: str, ours: Any, theirs: Any) -> FramerMismatch:
    return FramerMismatch(
        f"{where}: the compiled framer reads {name} as {ours!r}, mysql-replication as {theirs!r}. Set "
        f"{ROWS_DECODER_ENV}=python to read with mysql-replication only, and report this"
    )
