"""One Airflow Asset per replicated table, so downstream DAGs can be scheduled on a table's replica.

The snapshot task emits the table's asset when the last chunk of its plan generation commits; the stream task
emits it after each available-now run. Tables are chosen at run time, so the tasks declare the alias
``mysqlcdc`` as their outlet and attach the table assets to it. Schedule a DAG on
``table_asset("db.example.com", 3306, "shop.orders")`` (URI ``mysqlcdc://db.example.com:3306/shop/orders``).

With the OpenLineage provider, such an asset (a task's inlet, say) is the source table's OpenLineage dataset
(``mysql://db.example.com:3306``, ``shop.orders``), the one our operators report as their input
(``lineage/asset_datasets.py``, registered in ``get_provider_info``).
"""
from __future__ import annotations

from typing import NamedTuple
from urllib.parse import SplitResult, quote, unquote, urlsplit

from airflow.sdk import Asset, AssetAlias

from airflow_provider_mysqlcdc.engine.model.tables import TableId

ASSET_ALIAS = AssetAlias("mysqlcdc")


def table_asset_uri(host: str, port: int, table: str) -> str:
    t = TableId.parse(table)
    return f"mysqlcdc://{host}:{port}/{quote(t.database, safe='')}/{quote(t.table, safe='')}"


def table_asset(host: str, port: int, table: str) -> Asset:
    return Asset(uri=table_asset_uri(host, port, table), name=f"mysqlcdc {host}:{port} {table}",
                 group="mysqlcdc")


class TableAssetRef(NamedTuple):
    """What a ``mysqlcdc://host:port/db/table`` URI names."""

    host: str
    port: int
    table: TableId


def parse_table_asset_uri(uri: str) -> TableAssetRef:
    """The source and table of a table asset's URI; ValueError for another form."""
    return _parse(urlsplit(uri))


def sanitize_table_uri(parts: SplitResult) -> SplitResult:
    """Airflow's URI handler for the ``mysqlcdc`` scheme (``get_provider_info``): an asset of another form
    fails where it is defined, naming the form, instead of matching no table's events."""
    _parse(parts)
    return parts


def _parse(parts: SplitResult) -> TableAssetRef:
    netloc = parts.netloc.rpartition("@")[2]  # never user info (a password) in the message
    host, _, port = netloc.rpartition(":")
    segments = parts.path.strip("/").split("/")
    if (parts.scheme.lower() != "mysqlcdc" or not host or not port.isdigit() or len(segments) != 2
            or not all(segments)):
        shown = parts._replace(netloc=netloc, query="", fragment="").geturl()
        raise ValueError(f"a MySQL CDC table asset is mysqlcdc://<host>:<port>/<database>/<table>, "
                         f"got {shown}")
    return TableAssetRef(host, int(port), TableId(unquote(segments[0]), unquote(segments[1])))
