"""Applying changelog records to a chunk's mirror state: the latest record per primary key, or a multiset of
whole rows for a table without one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.engine.lake.mirror_records import OP
from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE
from airflow_provider_mysqlcdc.engine.model.values import ZERO_DATE_SUFFIX

_ASSERTS = pa.array([INSERT, UPDATE_AFTER])
_RETRACTS = (DELETE, UPDATE_BEFORE)


def apply_latest(state: pa.Table, changes: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """Rows of ``state`` with the latest of ``changes`` (sorted by position) per primary key applied."""
    if changes.num_rows == 0:
        return state
    pk = list(primary_key)
    indexed = _join_keys(changes, pk).append_column(
        "_i", pa.array(np.arange(changes.num_rows, dtype=np.int64))
    )
    last = indexed.group_by(pk, use_threads=False).aggregate([("_i", "max")]).column("_i_max")
    latest = changes.take(pa.array(np.sort(last.to_numpy())))
    rows = _join_keys(state, pk).append_column("_s", pa.array(np.arange(state.num_rows, dtype=np.int64)))
    kept_rows = rows.join(_join_keys(latest, pk), keys=pk, join_type="left anti", use_threads=False)
    kept = state.take(pa.array(np.sort(kept_rows.column("_s").to_numpy())))
    upserts = latest.filter(pc.is_in(latest.column(OP), value_set=_ASSERTS))
    names = state.schema.names
    return pa.concat_tables([kept.select(names).cast(state.schema), upserts.select(names).cast(state.schema)])


def _join_keys(table: pa.Table, names: list[str]) -> pa.Table:
    """The key columns with their NULLs made values, since joins never match NULLs: a zero-date companion's
    NULL (no zero date) becomes "", and a date column's NULL next to its companion (the row holds a zero
    date there) becomes the epoch; the companion keeps the two apart from a real 1970-01-01."""
    present = set(names)
    columns = []
    for n in names:
        column = table.column(n)
        if n.endswith(ZERO_DATE_SUFFIX):
            column = pc.fill_null(column, "")
        elif n + ZERO_DATE_SUFFIX in present:
            column = pc.fill_null(column, _epoch(column.type))
        columns.append(column)
    return pa.table(columns, names=names)


def _epoch(arrow_type: pa.DataType) -> pa.Scalar:
    return pa.scalar(0, pa.int32() if pa.types.is_date32(arrow_type) else pa.int64()).cast(arrow_type)


def apply_multiset(state: pa.Table, changes: pa.Table) -> pa.Table:
    """A table without a primary key: inserts add one copy of the row, retractions remove one if present."""
    if changes.num_rows == 0:
        return state
    names = state.schema.names
    bag: Counter[tuple] = Counter(zip(*(state.column(n).to_pylist() for n in names)))
    rows = zip(*(changes.column(n).to_pylist() for n in names))
    for op, row in zip(changes.column(OP).to_pylist(), rows):
        if op in _RETRACTS:
            if bag[row] > 0:
                bag[row] -= 1
        else:
            bag[row] += 1
    out = list(bag.elements())
    if not out:
        return state.schema.empty_table()
    columns = list(zip(*out))
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, state.schema)], schema=state.schema
    )
