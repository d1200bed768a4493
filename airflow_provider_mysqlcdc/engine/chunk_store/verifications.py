"""The record of every chunk verification (``mysqlcdc verify``): when, at which binlog position, what it
found.

One row per (verify run, table, generation, chunk); a run that resumes skips the chunks it has rows for.
``status``, the UI tab and the JSON route show each table's latest verification and its open mismatches (a
chunk whose latest row is a mismatch).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, write_stamp
from airflow_provider_mysqlcdc.engine.chunk_store.records import aware_utc
from airflow_provider_mysqlcdc.engine.chunk_store.schema import JSON_VERSION, verifications_table

MATCH, MISMATCH, REPAIRED, UNVERIFIED = "match", "mismatch", "repaired", "unverified"
RESULTS = (MATCH, MISMATCH, REPAIRED, UNVERIFIED)


@dataclass(frozen=True)
class Verification:
    verify_id: str
    table: str
    generation: int
    chunk_id: int
    result: str
    position: str | None = None
    source_rows: int | None = None
    lake_rows: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    verified_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "verify_id": self.verify_id, "table": self.table, "generation": self.generation,
            "chunk_id": self.chunk_id, "result": self.result, "position": self.position,
            "source_rows": self.source_rows, "lake_rows": self.lake_rows, "detail": self.detail,
            "run_id": self.run_id,
            "verified_at": self.verified_at.isoformat(timespec="seconds") if self.verified_at else None,
        }


class ChunkVerifications(StoreDatabase):
    """Recording and reading chunk verifications."""

    def record_verification(self, v: Verification) -> None:
        """Record (or replace: a repair updates its mismatch) one chunk's verification in a run."""
        c = verifications_table.c
        key = ((c.verify_id == v.verify_id) & (c.table_name == v.table) & (c.generation == v.generation)
               & (c.chunk_id == v.chunk_id))
        row = {"verified_at": write_stamp(), "position": v.position, "result": v.result,
               "source_rows": v.source_rows, "lake_rows": v.lake_rows, "run_id": v.run_id,
               "detail_json": json.dumps({"v": JSON_VERSION, **v.detail}, sort_keys=True)}

        def work(conn: Connection, _retry: bool) -> None:  # idempotent: the same row again
            conn.execute(sa.delete(verifications_table).where(key))
            conn.execute(sa.insert(verifications_table).values(
                verify_id=v.verify_id, table_name=v.table, generation=v.generation, chunk_id=v.chunk_id,
                **row))

        self._write(work)

    def verifications(self, table: str | None = None, verify_id: str | None = None) -> list[Verification]:
        """Verifications, oldest first; of one table and/or one verify run."""
        c = verifications_table.c
        query = sa.select(verifications_table)
        if table is not None:
            query = query.where(c.table_name == table)
        if verify_id is not None:
            query = query.where(c.verify_id == verify_id)
        query = query.order_by(c.verified_at, c.table_name, c.chunk_id)
        rows = self._read_tx(lambda conn: conn.execute(query).mappings().all())
        return [_verification(r) for r in rows]

    def latest_verifications(self, table: str) -> list[Verification]:
        """Each chunk's latest verification (of any generation), by generation and chunk: one query that
        reads only those rows, however many verify runs the table has had (``status`` calls it often)."""
        c = verifications_table.c
        newest = (sa.select(c.generation, c.chunk_id, sa.func.max(c.verified_at).label("at"))
                  .where(c.table_name == table).group_by(c.generation, c.chunk_id).subquery())
        query = (sa.select(verifications_table)
                 .join(newest, (c.generation == newest.c.generation) & (c.chunk_id == newest.c.chunk_id)
                       & (c.verified_at == newest.c.at))
                 .where(c.table_name == table).order_by(c.generation, c.chunk_id, c.verify_id))
        rows = self._read_tx(lambda conn: conn.execute(query).mappings().all())
        latest = {(v.generation, v.chunk_id): v for v in map(_verification, rows)}  # a tie: one of them
        return list(latest.values())


def _verification(r: Any) -> Verification:
    detail = json.loads(r["detail_json"]) if r["detail_json"] else {}
    detail.pop("v", None)
    return Verification(
        verify_id=r["verify_id"], table=r["table_name"], generation=int(r["generation"]),
        chunk_id=int(r["chunk_id"]), result=r["result"], position=r["position"],
        source_rows=r["source_rows"], lake_rows=r["lake_rows"], detail=detail, run_id=r["run_id"],
        verified_at=aware_utc(r["verified_at"]),
    )
