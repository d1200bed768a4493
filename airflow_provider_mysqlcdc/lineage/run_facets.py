"""Our run facets: what a plan, snapshot or stream task did, in the terms of the design (plan generation,
chunk, low/high watermark, position), under the keys ``mysqlcdc_plan``, ``mysqlcdc_snapshot``,
``mysqlcdc_stream`` and ``mysqlcdc_verify``.

Chunks appear by id, never by their key range: the boundaries are primary-key values of the source rows, which
a lineage backend has no business storing. Imports ``openlineage``: load this module only where the
OpenLineage provider is installed (the operators' lineage methods).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import Factory, define
from openlineage.client.facet_v2 import RunFacet

from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup, format_chunk_ids
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan

PLAN_FACET, SNAPSHOT_FACET, STREAM_FACET = "mysqlcdc_plan", "mysqlcdc_snapshot", "mysqlcdc_stream"
VERIFY_FACET = "mysqlcdc_verify"


@define
class MysqlcdcPlanRunFacet(RunFacet):
    """The plan task's result: per table its new plan generation (or the chunks to redo), and the groups."""

    tables: dict[str, dict[str, Any]]
    groups: int | None = None
    startupMode: str | None = None


@define
class MysqlcdcSnapshotRunFacet(RunFacet):
    """One chunk group: per table its generation and chunk ids, and once read each chunk's rows, LW and HW."""

    group: str
    tables: dict[str, dict[str, Any]]
    chunks: list[dict[str, Any]] = Factory(list)
    rows: int | None = None
    minHw: str | None = None
    maxHw: str | None = None


@define
class MysqlcdcStreamRunFacet(RunFacet):
    """Where the stream started and ended (binlog positions, batch ids), and per table where it stands."""

    trigger: str
    startupMode: str
    start: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    tables: dict[str, dict[str, Any]] = Factory(dict)


@define
class MysqlcdcVerifyRunFacet(RunFacet):
    """A verify run: its id and, once it ended, the count of chunks per result (match, repaired, mismatch,
    unverified), over all tables and per table."""

    verifyId: str | None = None
    chunks: dict[str, int] | None = None
    tables: dict[str, dict[str, int]] = Factory(dict)


def plan_facet(plans: Sequence[ChunkPlan], redo: Mapping[str, Sequence[int]], groups: int | None,
               startup_mode: str) -> MysqlcdcPlanRunFacet:
    tables: dict[str, dict[str, Any]] = {}
    for p in plans:
        tables[str(p.table)] = {
            "generation": p.generation, "chunks": len(p.chunks),
            "chunkIds": format_chunk_ids(c.chunk_id for c in p.chunks), "split": p.split,
            "keyColumns": list(p.key_columns), "chunkSize": p.chunk_size, "rowEstimate": p.row_estimate,
            "plannedAt": None if p.planned_at is None else str(p.planned_at), "zeroDates": p.zero_dates,
        }
    for table, ids in redo.items():
        tables.setdefault(table, {})["redoChunkIds"] = format_chunk_ids(ids)
    return MysqlcdcPlanRunFacet(tables=tables, groups=groups, startupMode=startup_mode)


def snapshot_facet(group: ChunkGroup, result: Mapping[str, Any] | None) -> MysqlcdcSnapshotRunFacet:
    """``result``: the task's outcome (``snapshot_outcome.group_result``), None before it is known."""
    tables: dict[str, dict[str, Any]] = {
        p.table: {"generation": p.generation, "chunkIds": format_chunk_ids(p.chunk_ids)} for p in group.parts}
    if result is None:
        return MysqlcdcSnapshotRunFacet(group=group.name, tables=tables)
    for part in result.get("parts", ()):
        tables.setdefault(part["table"], {}).update({
            "rows": part["rows"], "minHw": part["min_hw"], "maxHw": part["max_hw"],
            "tableComplete": part["table_complete"]})
    chunks = [{"table": c["table"], "chunkId": c["chunk_id"], "status": c["status"], "rows": c["rows"],
               "attempts": c["attempts"], "lw": c["lw"], "hw": c["hw"],
               **({"error": c["error"]} if c.get("error") else {})} for c in result.get("chunks", ())]
    return MysqlcdcSnapshotRunFacet(group=group.name, tables=tables, chunks=chunks, rows=result.get("rows"),
                                    minHw=result.get("min_hw"), maxHw=result.get("max_hw"))


def stream_facet(trigger: str, startup_mode: str, start: Mapping[str, Any] | None,
                 end: Mapping[str, Any] | None,
                 tables: Mapping[str, Mapping[str, Any]] | None = None) -> MysqlcdcStreamRunFacet:
    return MysqlcdcStreamRunFacet(
        trigger=trigger, startupMode=startup_mode, start=dict(start) if start else None,
        end=dict(end) if end else None, tables={t: dict(v) for t, v in (tables or {}).items()})


def verify_facet(verify_id: str | None, summary: Mapping[str, Any] | None) -> MysqlcdcVerifyRunFacet:
    """``summary``: the verify task's return value, None before it is known."""
    if summary is None:
        return MysqlcdcVerifyRunFacet(verifyId=verify_id)
    return MysqlcdcVerifyRunFacet(verifyId=verify_id, chunks=dict(summary["chunks"]),
                                  tables={t: dict(c) for t, c in summary["tables"].items()})
