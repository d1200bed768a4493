"""Which chunk of a plan each record of an Arrow table belongs to: the mirror's vectorized chunk locator."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunks.key_order import ConnFactory, KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


class ChunkAssigner:
    """Chunk index of each record's key under one plan, vectorized where Arrow's order is the server's.

    A single integer, DATE, DATETIME or TIMESTAMP key compares natively (as ``KeyOrder`` does), so it is
    located with one ``searchsorted``; any other key (and a temporal key holding zero dates, which only the
    companion column tells apart) goes through ``ChunkLocator`` and the server's collation sort keys. Keys
    with a NULL belong to the first chunk.
    """

    def __init__(self, plan: ChunkPlan, schema: TableSchema, conn_factory: ConnFactory | None) -> None:
        self.plan, self.schema, self._conn_factory = plan, schema, conn_factory
        self.chunk_ids = [c.chunk_id for c in plan.chunks]
        self._index = {cid: i for i, cid in enumerate(self.chunk_ids)}
        self._order: KeyOrder | None = None
        self._locator: ChunkLocator | None = None
        self._bounds: dict[pa.DataType, np.ndarray | None] = {}

    def close(self) -> None:
        if self._order is not None:
            self._order.close()
            self._order = self._locator = None

    def indexes(self, table: pa.Table) -> np.ndarray:
        """Index into ``plan.chunks`` for every row of ``table`` (which holds the key columns)."""
        if table.num_rows == 0 or len(self.chunk_ids) == 1:
            return np.zeros(table.num_rows, dtype=np.int64)
        name = self.plan.key_columns[0]
        companion = values.zero_date_field(name)
        zero_dates = companion in table.schema.names and table.column(companion).null_count < table.num_rows
        if len(self.plan.key_columns) == 1 and not zero_dates:
            column = table.column(name)
            native, bounds = _native_ints(column), self._native_bounds(column.type)
            if native is not None and bounds is not None:
                keys, nulls = native
                out = np.searchsorted(bounds, keys, side="right")
                out[nulls] = 0
                return out
        return self._slow(table)

    def _native_bounds(self, arrow_type: pa.DataType) -> np.ndarray | None:
        """The plan's inner chunk starts as int64 in the column's Arrow type (None: not natively ordered)."""
        if arrow_type not in self._bounds:
            starts = pa.chunked_array(
                [
                    pa.array(
                        [c.start[0] for c in self.plan.chunks[1:]],  # type: ignore[index]
                        type=arrow_type,
                    )
                ]
            )
            native = _native_ints(starts)
            self._bounds[arrow_type] = None if native is None or native[1].any() else native[0]
        return self._bounds[arrow_type]

    def _slow(self, table: pa.Table) -> np.ndarray:
        if self._locator is None:
            factory = self._conn_factory or _no_connection(self.schema.table)
            self._order = KeyOrder(factory, self.schema, self.plan.key_columns)
            self._locator = ChunkLocator(self.plan, self._order)
        keys = values.python_rows(table, self.schema, self.plan.key_columns)  # zero dates as ZeroDate
        return np.fromiter(
            (self._index[c] for c in self._locator.locate(keys)), dtype=np.int64, count=len(keys)
        )


def _native_ints(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 values, null mask) of a column whose Arrow order is the server's order; None otherwise."""
    t = column.type
    if pa.types.is_integer(t) and t != pa.uint64():
        target = column
    elif pa.types.is_timestamp(t):
        target = column.cast(pa.int64())
    elif pa.types.is_date32(t):
        target = column.cast(pa.int32())
    else:
        return None
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    filled = target.fill_null(0) if column.null_count else target
    return filled.to_numpy().astype(np.int64, copy=False), nulls


def _no_connection(table: TableId) -> ConnFactory:
    def fail() -> object:
        raise CdcError(
            f"{table}: locating string chunk keys needs a MySQL connection (collation sort keys); "
            "give the mirror refresher the MySQL settings"
        )

    return fail
