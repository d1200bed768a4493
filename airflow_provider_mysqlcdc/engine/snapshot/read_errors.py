"""How a chunk read fails when DDL changes its table under it: shared by every way of reading a chunk."""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.common.errors import CdcError

DDL_REREADS = 3  # how often a chunk is read again in a fresh read view after DDL changed its table
COLUMNS_CHANGED = "after its schema was loaded (its columns differ at the chunk's high watermark)"


class TableChangedDuringRead(CdcError):
    """DDL changed the table during the chunk's read, over every read view the reread budget allows: it
    rebuilt the table after a view opened (the server refuses that view), or changed its columns after the
    schema the read uses was loaded."""


class ChunkKeyChanged(CdcError):
    """DDL changed the primary key or the chunk key of a planned table: the plan's boundaries no
    longer apply."""
