"""The OpenLineage datasets of a replicated table: the source table, and its lake datasets (the snapshot's
files, the changelog and mirror Delta tables), with schema, storage and column-lineage facets.

The source's schema facet gives MySQL's own column types (``int(10) unsigned``, ``varchar(32)``); a lake
dataset's gives the Arrow types its files hold (``columns.lake_columns``). Column lineage maps each lake
column to the source column it carries, one to one (a zero-date companion to its date column); excluded
columns are in neither. Imports ``openlineage``: load this module only from the operators' lineage methods.
"""
from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence

from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    DatasetFacet,
    column_lineage_dataset,
    schema_dataset,
    storage_dataset,
)

from airflow_provider_mysqlcdc.engine.lake.layout import SNAPSHOT, table_dir
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.lineage.columns import OutputColumn, lake_columns
from airflow_provider_mysqlcdc.lineage.naming import DatasetName, lake_location, source_table

IDENTITY = "the value as the source holds it"
COMPANION = "the source column's zero dates, as MySQL's text"


def source_name(host: str, port: int, table: TableId) -> DatasetName:
    return source_table(host, port, table)


def lake_name(root: str, table: TableId, kind: str) -> DatasetName:
    """The root is named first: what it holds besides a location (credentials, a query) never reaches the
    table's name."""
    where = lake_location(root)
    return DatasetName(where.namespace, posixpath.join(table_dir(where.name, table), kind))


def source_dataset(name: DatasetName, schema: TableSchema | None) -> InputDataset:
    facets: dict[str, DatasetFacet] = {}
    if schema is not None:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
            schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.column_type, ordinal_position=i)
            for i, c in enumerate(schema.columns, start=1)])
    return InputDataset(namespace=name.namespace, name=name.name, facets=facets)


def lake_facets(kind: str, columns: Sequence[OutputColumn] | None) -> dict[str, DatasetFacet]:
    facets: dict[str, DatasetFacet] = {
        "storage": storage_dataset.StorageDatasetFacet(
            storageLayer="mysqlcdc" if kind == SNAPSHOT else "delta", fileFormat="parquet"),
    }
    if columns is not None:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
            schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.type, ordinal_position=i)
            for i, c in enumerate(columns, start=1)])
    return facets


def column_lineage(columns: Iterable[OutputColumn],
                   sources: Sequence[DatasetName]) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    """Each column that carries a source column, from that column of every dataset in ``sources``."""
    fields = {}
    for c in columns:
        if c.source is None:
            continue
        subtype, text = ("TRANSFORMATION", COMPANION) if c.companion else ("IDENTITY", IDENTITY)
        transformation = column_lineage_dataset.Transformation(type="DIRECT", subtype=subtype,
                                                               description=text)
        fields[c.name] = column_lineage_dataset.Fields(inputFields=[
            column_lineage_dataset.InputField(namespace=s.namespace, name=s.name, field=c.source,
                                              transformations=[transformation])
            for s in sources])
    return column_lineage_dataset.ColumnLineageDatasetFacet(fields=fields)


def lake_input(root: str, table: TableId, kind: str, schema: TableSchema | None, *,
               excluded: Sequence[str] = (), zero_dates: str = "keep",
               key_columns: Sequence[str] = ()) -> InputDataset:
    name = lake_name(root, table, kind)
    columns = None if schema is None else lake_columns(schema, kind, excluded=excluded, zero_dates=zero_dates,
                                                       key_columns=key_columns)
    return InputDataset(namespace=name.namespace, name=name.name, facets=lake_facets(kind, columns))


def lake_output(root: str, table: TableId, kind: str, schema: TableSchema | None,
                sources: Sequence[DatasetName], *, excluded: Sequence[str] = (), zero_dates: str = "keep",
                key_columns: Sequence[str] = ()) -> OutputDataset:
    name = lake_name(root, table, kind)
    columns = None if schema is None else lake_columns(schema, kind, excluded=excluded, zero_dates=zero_dates,
                                                       key_columns=key_columns)
    facets = lake_facets(kind, columns)
    if columns is not None:
        facets["columnLineage"] = column_lineage(columns, sources)
    return OutputDataset(namespace=name.namespace, name=name.name, facets=facets)
