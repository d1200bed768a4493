"""What each operator reports: its inputs and outputs as OpenLineage datasets, and its run facet.

A task start reports the datasets by name only (no query: the task has not read anything yet); its end
(success or failure) adds the schemas, read in one batched ``information_schema`` query through the catalog
the planner uses, and each table's plan from the chunk store (which zero-date companions and key columns its
files hold). Lineage never fails a task: a schema that cannot be read (the server is down, a table dropped)
leaves that dataset without schema, with a warning. Imports ``openlineage``: load this module only from the
operators' lineage methods.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.openlineage.extractors import OperatorLineage

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, MIRROR, SNAPSHOT
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema, load_schemas
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.lineage.datasets import (
    lake_input,
    lake_name,
    lake_output,
    source_dataset,
    source_name,
)
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url

log = logging.getLogger(__name__)


def plan_lineage(settings: MySQLSettings, tables: Sequence[str], *, detailed: bool,
                 run_facets: Mapping[str, Any]) -> OperatorLineage:
    """The plan task reads the tables (their key ranges and sizes) and writes only the chunk store."""
    ids = _ids(tables)
    schemas = load_schemas_quietly(settings, ids) if detailed else {}
    inputs = [source_dataset(source_name(settings.host, settings.port, t), schemas.get(t)) for t in ids]
    return OperatorLineage(inputs=inputs, run_facets=dict(run_facets))


def snapshot_lineage(settings: MySQLSettings, output_root: str, store_url: str | None, group: ChunkGroup,
                     excluded: Mapping[str, Sequence[str]], *, detailed: bool,
                     run_facets: Mapping[str, Any]) -> OperatorLineage:
    """A chunk group reads its tables and writes their snapshot files."""
    ids = _ids(group.tables)
    schemas = load_schemas_quietly(settings, ids) if detailed else {}
    plans = (read_plans(store_url, {p.table: p.generation for p in group.parts})
             if detailed and store_url else {})
    inputs, outputs = [], []
    for t in ids:
        source = source_name(settings.host, settings.port, t)
        inputs.append(source_dataset(source, schemas.get(t)))
        outputs.append(lake_output(output_root, t, SNAPSHOT, schemas.get(t), [source],
                                   **_layout(plans.get(str(t)), excluded.get(str(t), ()))))
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=dict(run_facets))


def stream_lineage(settings: MySQLSettings, output_root: str, store_url: str | None, tables: Sequence[str],
                   excluded: Mapping[str, Sequence[str]], *, detailed: bool,
                   run_facets: Mapping[str, Any]) -> OperatorLineage:
    """The stream reads the tables' binlog changes (and, to refresh a snapshotted table's mirror, its
    snapshot files) and writes each table's changelog and mirror."""
    ids = _ids(tables)
    schemas = load_schemas_quietly(settings, ids) if detailed else {}
    plans = read_plans(store_url, {str(t): None for t in ids}) if store_url else {}
    inputs, outputs = [], []
    for t in ids:
        source, schema, plan = source_name(settings.host, settings.port, t), schemas.get(t), plans.get(str(t))
        layout = _layout(plan, excluded.get(str(t), ()))
        inputs.append(source_dataset(source, schema))
        mirror_sources = [source]
        if plan is not None:  # a table snapshotted: its mirror is its snapshot plus the changes since
            inputs.append(lake_input(output_root, t, SNAPSHOT, schema, **layout))
            mirror_sources.append(lake_name(output_root, t, SNAPSHOT))
        outputs.append(lake_output(output_root, t, CHANGELOG, schema, [source], **layout))
        outputs.append(lake_output(output_root, t, MIRROR, schema, mirror_sources, **layout))
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=dict(run_facets))


def verify_lineage(settings: MySQLSettings, output_root: str, tables: Sequence[str], *, detailed: bool,
                   run_facets: Mapping[str, Any]) -> OperatorLineage:
    """A verify run reads the tables' digests from the source and their snapshot, changelog and mirror from
    the lake; it writes only the chunk store (its verdicts)."""
    ids = _ids(tables)
    schemas = load_schemas_quietly(settings, ids) if detailed else {}
    inputs = []
    for t in ids:
        inputs.append(source_dataset(source_name(settings.host, settings.port, t), schemas.get(t)))
        inputs += [lake_input(output_root, t, kind, None) for kind in (SNAPSHOT, CHANGELOG, MIRROR)]
    return OperatorLineage(inputs=inputs, run_facets=dict(run_facets))


def load_schemas_quietly(settings: MySQLSettings, tables: Sequence[TableId]) -> dict[TableId, TableSchema]:
    """The tables' schemas (a few batched catalog queries); the tables it cannot read are left out."""
    if not tables:
        return {}
    try:
        with connect(settings) as conn:
            try:
                return load_schemas(conn, tables)
            except Exception:  # noqa: BLE001 - one table gone: read the others one by one
                found = {}
                for t in tables:
                    try:
                        found[t] = load_schema(conn, t)
                    except Exception as exc:  # noqa: BLE001 - lineage must not fail the task
                        log.warning("lineage: no schema for %s (%s)", t, exc)
                return found
    except Exception as exc:  # noqa: BLE001 - lineage must not fail the task
        log.warning("lineage: the source's schemas could not be read (%s); datasets go without schema", exc)
        return {}


def read_plans(store_url: str | None, wanted: Mapping[str, int | None]) -> dict[str, ChunkPlan]:
    """Each table's plan (its given generation, or the latest), from the chunk store; tables never planned
    are left out."""
    if not store_url or not wanted:
        return {}
    try:
        with ChunkStore(store_url) as store:
            present = {t: g for t, g in wanted.items() if g is not None or store.latest_generation(t)}
            return {info.table: ChunkPlan.from_dict(info.plan)
                    for info in store.plans(list(present.items()))}
    except Exception as exc:  # noqa: BLE001 - lineage must not fail the task
        log.warning("lineage: the plans could not be read from the chunk store (%s)", exc)
        return {}


def chunk_store_or_none(chunk_store: Any, output_root: str) -> str | None:
    """The chunk store as the task uses it (the given one, else the default), or None where there is no
    default: lineage then goes without the plans."""
    given = None if chunk_store is None or str(chunk_store).strip().lower() in ("", "none", "null") else str(
        chunk_store)
    try:
        return chunk_store_url(given, output_root)
    except CdcError:
        return None


def _layout(plan: ChunkPlan | None, excluded: Sequence[str]) -> dict[str, Any]:
    """What shapes a table's lake columns besides its schema (as the writers take it from the plan)."""
    if plan is None:
        return {"excluded": tuple(excluded)}
    return {"excluded": tuple(excluded), "zero_dates": plan.zero_dates, "key_columns": plan.key_columns}


def _ids(tables: Sequence[str]) -> list[TableId]:
    return [TableId.parse(t) for t in dict.fromkeys(tables)]
