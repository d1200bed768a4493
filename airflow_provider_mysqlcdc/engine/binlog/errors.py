"""Why a binlog read stops: each error says what happened at which position, and what to do."""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

# Type codes mysql-replication maps to NotImplementedEvent that mean compressed events.
COMPRESSED_CODES = {
    0x28: "TRANSACTION_PAYLOAD_EVENT (MySQL binlog_transaction_compression)",
    0xA5: "QUERY_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xA6: "WRITE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA7: "UPDATE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA8: "DELETE_ROWS_COMPRESSED_EVENT_V1 (MariaDB log_bin_compress)",
    0xA9: "WRITE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xAA: "UPDATE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
    0xAB: "DELETE_ROWS_COMPRESSED_EVENT (MariaDB log_bin_compress)",
}


class BinlogReadError(CdcError):
    """Reading the binlog failed; the message says where and what to do."""


class UnsupportedEvent(BinlogReadError):
    """An event we cannot apply exactly (unknown type, compressed, statement-based, XA with captured rows)."""


class CompressedEvent(UnsupportedEvent):
    """A compressed binlog event: turn compression off on the server (``mysqlcdc check`` says how)."""


class SchemaChangeError(BinlogReadError):
    """A schema change of a captured table the stream cannot follow."""


class ResnapshotRequired(SchemaChangeError):
    """DDL that changed a captured table's rows without row events (or in a way the changelog cannot show):
    the table must be snapshotted again, planned at or after ``position``."""

    def __init__(self, message: str, table: TableId, position: BinlogPosition, reason: str, statement: str):
        super().__init__(message)
        self.table, self.position, self.reason, self.statement = table, position, reason, statement


class BinlogPurged(BinlogReadError):
    """The binlog file a read must start in is gone from the server."""


class OffsetMismatch(BinlogReadError):
    """The binlog at the offset is not what the offset describes (wrong server, RESET MASTER, bad offset)."""


class ReadTimeout(BinlogReadError):
    """A read with an end position did not reach it within its timeout."""



class DeadlineReached(Exception):
    """Raised inside mysql-replication's reconnect path to end a read whose time is up."""


def unsupported_event(code: int, where: str) -> UnsupportedEvent:
    """The error for an event type mysql-replication could not decode (``NotImplementedEvent``)."""
    if code in COMPRESSED_CODES:
        return CompressedEvent(
            f"compressed binlog event {COMPRESSED_CODES[code]} at {where}: mysqlcdc cannot decode "
            "compressed events; turn compression off on the server (MariaDB: SET GLOBAL "
            "log_bin_compress=OFF; MySQL: binlog_transaction_compression=OFF), then re-snapshot the "
            "tables whose changes were written compressed"
        )
    if code == 0x1A:
        return UnsupportedEvent(
            f"INCIDENT event at {where}: the server reports that changes may be missing from the binlog; "
            "re-snapshot the captured tables"
        )
    return UnsupportedEvent(
        f"binlog event type {code:#04x} at {where} is not understood by mysqlcdc; refusing to skip it"
    )


def dummy_event(where: str) -> UnsupportedEvent:
    return UnsupportedEvent(
        f"the server replaced the event at {where} with a dummy because it thinks this "
        "replica cannot handle it; mysqlcdc refuses to skip it (upgrade mysqlcdc or report the event)"
    )
