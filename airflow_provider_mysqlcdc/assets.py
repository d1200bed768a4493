"""One Airflow Asset per replicated table, so downstream DAGs can be scheduled on a table's replica.

The snapshot task emits the table's asset when the last chunk of its plan generation commits; the stream task
emits it after each available-now run. Tables are chosen at run time, so the tasks declare the alias
``mysqlcdc`` as their outlet and attach the table assets to it. Schedule a DAG on
``table_asset("db.example.com", 3306, "shop.orders")`` (URI ``mysqlcdc://db.example.com:3306/shop/orders``).
"""
from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import Asset, AssetAlias

from airflow_provider_mysqlcdc.engine.model.tables import TableId

ASSET_ALIAS = AssetAlias("mysqlcdc")


def table_asset_uri(host: str, port: int, table: str) -> str:
    t = TableId.parse(table)
    return f"mysqlcdc://{host}:{port}/{quote(t.database, safe='')}/{quote(t.table, safe='')}"


def table_asset(host: str, port: int, table: str) -> Asset:
    return Asset(uri=table_asset_uri(host, port, table), name=f"mysqlcdc {host}:{port} {table}",
                 group="mysqlcdc")
