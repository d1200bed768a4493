"""The ``apache_airflow_provider`` entry point: what Airflow's provider manager learns about this package.

Hooks, operators, triggers, the ``mysqlcdc`` connection type (a ``mysql`` connection works too), the
``mysqlcdc://`` asset URIs (checked on definition, and converted to OpenLineage datasets when the OpenLineage
provider is installed) and the UI plugin.
"""
from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-mysqlcdc",
        "name": "MySQL CDC",
        "description": "Lock-free, parallel, exactly-once MySQL snapshot and binlog stream on Apache Spark.",
        "versions": [__version__],
        "hooks": [
            {"integration-name": "MySQL CDC", "python-modules": ["airflow_provider_mysqlcdc.hooks.mysqlcdc"]},
        ],
        "operators": [
            {
                "integration-name": "MySQL CDC",
                "python-modules": [
                    "airflow_provider_mysqlcdc.operators.plan",
                    "airflow_provider_mysqlcdc.operators.snapshot",
                    "airflow_provider_mysqlcdc.operators.snapshot_runner",
                    "airflow_provider_mysqlcdc.operators.stream",
                    "airflow_provider_mysqlcdc.operators.verify",
                ],
            },
        ],
        "triggers": [
            {"integration-name": "MySQL CDC",
             "python-modules": ["airflow_provider_mysqlcdc.triggers.group_request",
                                "airflow_provider_mysqlcdc.triggers.stream_position"]},
        ],
        "asset-uris": [
            {
                "schemes": ["mysqlcdc"],
                "handler": "airflow_provider_mysqlcdc.assets.sanitize_table_uri",
                "to_openlineage_converter":
                    "airflow_provider_mysqlcdc.lineage.asset_datasets.convert_asset_to_openlineage",
            },
        ],
        "connection-types": [
            {
                "connection-type": "mysqlcdc",
                "hook-class-name": "airflow_provider_mysqlcdc.hooks.mysqlcdc.MySqlCdcHook",
            },
        ],
        # The UI plugin registers through the "airflow.plugins" entry point (setup.py); listing it here as
        # well makes Airflow load it twice when providers are discovered eagerly.
        "plugins": [],
    }
