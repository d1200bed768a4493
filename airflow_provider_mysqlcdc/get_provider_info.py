"""The ``apache_airflow_provider`` entry point: what Airflow's provider manager learns about this package.

Hooks, operators, connection types and the UI plugin are listed here as they come to exist.
"""
from __future__ import annotations

from typing import Any

from . import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-mysqlcdc",
        "name": "MySQL CDC",
        "description": "Lock-free, parallel, exactly-once MySQL snapshot and binlog stream on Apache Spark.",
        "versions": [__version__],
        "hooks": [],
        "operators": [],
        "connection-types": [],
        "plugins": [],
    }
