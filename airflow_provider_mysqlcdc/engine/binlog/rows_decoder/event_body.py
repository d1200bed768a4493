"""Where a parsed rows event's row images lie in its packet, found without consuming anything.

Why: a "compare" mode decodes an event with the compiled decoder and then lets mysql-replication read the
same event (``event.rows``). So the bytes are located, never read through the packet: mysql-replication's
``BinLogPacketWrapper`` counts ``read_bytes`` from the end of the 19-byte header (+1 OK byte) and its rows
end where ``read_bytes`` reaches ``event.event_size`` (the header and, with ``binlog_checksum=CRC32``, the
4-byte checksum already taken off); the wrapped pymysql ``MysqlPacket`` holds the bytes and the cursor.
"""
from __future__ import annotations

from typing import Any


class BodyNotFound(Exception):
    """The event's packet is not in the state the compiled decoder reads it from."""


def rows_body(event: Any) -> tuple[bytes, int, int]:
    """``(data, start, end)``: the row images of ``event`` are ``data[start:end]``."""
    wrapper = event.packet
    if getattr(event, "_RowsEvent__rows", None) is not None:
        raise BodyNotFound("mysql-replication already read this event's rows")
    if getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b""):
        raise BodyNotFound("the packet holds bytes pushed back by mysql-replication")
    packet = wrapper.packet
    data = packet._data
    start = packet._position
    if type(data) is not bytes or not isinstance(start, int):
        raise BodyNotFound("the packet is not a pymysql MysqlPacket over bytes")
    end = start + (event.event_size - wrapper.read_bytes)
    if not 0 <= start <= end <= len(data):
        raise BodyNotFound(f"rows end at {end}, outside the packet's {len(data)} bytes")
    return data, start, end
