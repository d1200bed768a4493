"""Who announces a table's completed snapshot: exactly one task per table, plan generation and run.

Several chunk groups of one table may finish at the same moment, and each then finds the table complete. Each
would send the table's Airflow asset event; two first events of a new asset at once make Airflow create the
asset twice, and one task fails on the duplicate. The first to claim the announcement here sends it.
"""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, utc_now
from airflow_provider_mysqlcdc.engine.chunk_store.schema import announcements_table


class SnapshotAnnouncements(StoreDatabase):
    """Claiming the announcement of a table's snapshot."""

    def claim_announcement(self, table: str, generation: int, run_id: str, by: str) -> bool:
        """True for the first caller of (table, generation, run) only."""
        a = announcements_table.c
        key = (a.table_name == table) & (a.generation == int(generation)) & (a.run_id == run_id)

        def work(conn: Connection, _retry: bool) -> bool:
            # idempotent: a retry whose first try committed finds its own row
            holder = conn.execute(sa.select(a.announced_by).where(key)).scalar()
            if holder is not None:
                return bool(holder == by)
            conn.execute(sa.insert(announcements_table).values(
                table_name=table, generation=int(generation), run_id=run_id, announced_by=by,
                announced_at=utc_now()))
            return True

        return self._write(work)
