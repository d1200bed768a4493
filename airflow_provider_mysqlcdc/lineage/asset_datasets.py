"""``mysqlcdc://`` assets as OpenLineage datasets: Airflow's OpenLineage provider calls the converter
registered for the scheme (``get_provider_info``: ``asset-uris``) for a task's inlets and outlets and for the
assets hooks report, so a downstream task that declares ``inlets=[table_asset(...)]`` reads the very dataset
our operators report as their input.

A table asset names the source table only (no output root), so it converts to the source table's dataset. This
module is imported when Airflow discovers the providers' asset URIs: it imports nothing heavy.
"""
from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc.assets import parse_table_asset_uri
from airflow_provider_mysqlcdc.lineage.naming import source_table


def convert_asset_to_openlineage(asset: Any, lineage_context: Any) -> Any:
    """The OpenLineage ``Dataset`` of a table asset (the URI says it all: ``lineage_context`` is unused)."""
    from openlineage.client.event_v2 import Dataset

    ref = parse_table_asset_uri(asset.uri)
    name = source_table(ref.host, ref.port, ref.table)
    return Dataset(namespace=name.namespace, name=name.name)
