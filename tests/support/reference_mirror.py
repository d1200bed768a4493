"""The mirror rule: the current state of a table from its snapshot records and its changelog.

Current state = each chunk's *current* snapshot, plus the changelog records of that chunk's key range whose
position is after that chunk's *current* HW; the latest record per key by position wins; deletes are removed.
A record emitted before a rerun and covered by the new snapshot is ignored, never resurrected. Tables without
a primary key are a multiset of whole rows.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from airflow_provider_mysqlcdc.engine.chunks.locator import Locator
from airflow_provider_mysqlcdc.engine.model.key_changes import identity_columns, split_key_changes
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, is_after
from airflow_provider_mysqlcdc.engine.model.records import DELETE, UPDATE_BEFORE, Record
from airflow_provider_mysqlcdc.engine.model.tables import TableSchema


def materialize(
    schema: TableSchema,
    key_columns: tuple[str, ...],
    locator: Locator,
    high_watermarks: dict[int, BinlogPosition],
    snapshot: dict[int, Iterable[dict[str, Any]]],
    changelog: Iterable[Record],
) -> list[dict[str, Any]]:
    """Rows of the mirror (dicts by column name), in no particular order.

    ``snapshot`` maps each chunk id of the current plan to that chunk's current snapshot rows;
    ``high_watermarks`` maps it to that snapshot's HW.
    """
    names = schema.column_names
    records = sorted(changelog, key=lambda r: r.key)
    records = split_key_changes(records, identity_columns(schema.primary_key, key_columns))
    keys = [tuple(r.values.get(c) for c in key_columns) for r in records]
    owners = locator.locate(keys) if keys else []
    relevant = [
        (owner, r) for r, owner in zip(records, owners)
        if owner in high_watermarks and is_after(r.key, high_watermarks[owner])
    ]
    # State is kept per chunk: a row whose chunk key moved it from chunk A to chunk B is a delete in A and an
    # insert in B, and each chunk's snapshot answers only for its own range.
    if schema.primary_key:
        pk = schema.primary_key
        state: dict[tuple, dict[str, Any] | None] = {}
        for chunk_id, rows in snapshot.items():
            for row in rows:
                state[(chunk_id, *(row[c] for c in pk))] = row
        for owner, r in relevant:
            ident = (owner, *(r.values.get(c) for c in pk))
            state[ident] = None if r.op in (DELETE, UPDATE_BEFORE) else dict(r.values)
        return [row for row in state.values() if row is not None]
    bag: Counter[tuple] = Counter()
    for chunk_id, rows in snapshot.items():
        bag.update((chunk_id, *(row[c] for c in names)) for row in rows)
    for owner, r in relevant:
        row = (owner, *(r.values.get(c) for c in names))
        if r.op in (DELETE, UPDATE_BEFORE):
            if bag[row] > 0:
                bag[row] -= 1
        else:
            bag[row] += 1
    return [dict(zip(names, row[1:])) for row in bag.elements()]
