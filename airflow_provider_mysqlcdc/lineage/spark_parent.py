"""The parent job of our Spark applications, so Spark's own OpenLineage events (``openlineage-spark`` on the
cluster) link to the Airflow task that started them.

As ``SparkSubmitOperator`` does with ``[openlineage] spark_inject_parent_job_info``, but read when the task
runs (the Spark provider reads the setting once, when its module is imported) and applied to every
``spark-submit`` of ours, the group runner's included. Conf that names a parent already is left alone.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def with_parent_job(conf: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """``conf`` plus ``spark.openlineage.parent*`` / ``rootParent*`` of the running task, when the
    OpenLineage provider is installed and the setting is on."""
    try:
        from airflow.providers.openlineage.conf import spark_inject_parent_job_info
    except ImportError:
        return dict(conf)
    if not spark_inject_parent_job_info():
        return dict(conf)
    from airflow.providers.openlineage.utils.spark import inject_parent_job_information_into_spark_properties

    return dict(inject_parent_job_information_into_spark_properties(dict(conf), context))
