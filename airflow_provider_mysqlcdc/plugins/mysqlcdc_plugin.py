"""The Airflow plugin: the status app under ``/mysqlcdc`` and a "MySQL CDC" tab on every DAG run page.

Airflow loads it through the ``airflow.plugins`` entry point only: listed in ``get_provider_info`` as well, it
would be found twice with ``[core] lazy_discover_providers = False`` (a plugin import error).

The tab is an external view with destination ``dag_run``: the UI shows it on each DAG run page and loads its
``href`` in an iframe after replacing ``{DAG_ID}`` and ``{RUN_ID}`` with the run's ids (URL-encoded). The
iframe is same-origin, so the UI's ``_token`` cookie authenticates the page.

Task processes load plugins too (for macros and listeners) and have no business importing the API server,
so the FastAPI app is imported only when ``fastapi_apps`` is read, which only the API server (and the
plugin listings) do.
"""
from __future__ import annotations

from typing import Any

from airflow.sdk.plugins_manager import AirflowPlugin

URL_PREFIX = "/mysqlcdc"
RUN_PAGE_HREF = URL_PREFIX + "/runs/{DAG_ID}/{RUN_ID}"


class _StatusApps:
    """``fastapi_apps``, built on first read, on the class as on an instance (Airflow reads both)."""

    def __get__(self, obj: object, owner: type | None = None) -> list[dict[str, Any]]:
        from airflow_provider_mysqlcdc.plugins.status_app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "MySQL CDC status"}]


class MySqlCdcPlugin(AirflowPlugin):
    """Per DAG run: snapshot phase progress, stream position and lag of each replicated table."""

    name = "mysqlcdc"
    fastapi_apps = _StatusApps()
    external_views = [  # noqa: RUF012 - AirflowPlugin's interface: a class attribute Airflow reads
        {
            "name": "MySQL CDC",
            "href": RUN_PAGE_HREF,
            "destination": "dag_run",
            "url_route": "mysqlcdc",
        }
    ]
