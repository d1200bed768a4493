"""The compiled decoder of rows-event bodies: WRITE/UPDATE/DELETE_ROWS images decoded and normalised in C,
columnar, equal value for value and type for type to mysql-replication's rows normalised by
``model.values.binlog_normalizer`` (the Python path), ~50x faster.

Use: ``layout, reason = EventLayout.of(table_map_event, version.schema, decoders)`` once per table map
layout (``CapturedVersion``); if ``layout`` is None, decode that table's events with mysql-replication and log
``reason`` once. Otherwise ``decode_event(event, layout)`` per rows event, before anything reads
``event.rows``; it raises ``NotDecodable`` for an event it cannot take (the packet is then still unread, so
``event.rows`` works). Without the built extension everything still imports: ``compiled_available()`` is
False, ``missing_reason()`` says why (logged once per process) and every layout is None.

In C: integers, FLOAT/DOUBLE, DECIMAL, DATE/DATETIME/TIMESTAMP/TIME (5.6+ formats and the older ones),
zero dates, YEAR, BIT, ENUM, SET, CHAR/VARCHAR/TEXT in utf8/utf8mb3/utf8mb4/ucs2/utf16/utf16le/utf32 and in
every legacy charset with a table read off the server (single- and multi-byte), BINARY/VARBINARY/BLOB,
GEOMETRY, MariaDB UUID/INET4/INET6; partial row images (MINIMAL/NOBLOB). One Python call per value: JSON
columns (canonical text; Oracle MySQL's binary form through ``model.mysql_json``) and text whose decoder is
not a ``CharsetDecoder`` table. No layout (Python path): types mysql-replication does not read either, a
schema that does not match the table map, MySQL's partial JSON updates (PartialUpdateRowsEvent:
``decode_event`` refuses it).
"""
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.decode import (
    NotDecodable,
    compiled_available,
    decode_event,
    decode_framed,
    missing_reason,
)
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.decoded import DecodedRows
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.layout import EventLayout, LayoutChoice

__all__ = [
    "DecodedRows",
    "EventLayout",
    "LayoutChoice",
    "NotDecodable",
    "compiled_available",
    "decode_event",
    "decode_framed",
    "missing_reason",
]
