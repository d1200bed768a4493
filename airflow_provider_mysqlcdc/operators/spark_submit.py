"""What our Spark tasks share on top of the Spark provider's ``SparkSubmitOperator``.

Secrets reach ``spark-submit`` only through its environment (the MySQL password, and a chunk store URL that
carries one); they are registered with Airflow's secrets masker so a stray log line shows ``***``. With the
OpenLineage provider and ``[openlineage] spark_inject_parent_job_info`` on, the Spark conf names the task as
the application's OpenLineage parent (``lineage/spark_parent.py``).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS, table_asset
from airflow_provider_mysqlcdc.engine.common.native_faults import WORKER_CONF
from airflow_provider_mysqlcdc.engine.common.secrets import url_has_password
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.lineage.spark_parent import with_parent_job

DEFAULT_CONF = {
    "spark.speculation": "false",  # one read per chunk: a speculative copy would read with another HW
    "spark.sql.session.timeZone": "UTC",
    # Spark's INFO lines (~200 per job, thousands per stream run) drowned our own in the task log; its
    # warnings and errors stay. Set "spark.log.level": "INFO" in ``conf`` to get them back.
    "spark.log.level": "WARN",
    **WORKER_CONF,  # a Python worker's native abort reports its Python stack in the task's error
}


if TYPE_CHECKING:  # what the mixin reads and sets is the SparkSubmitOperator's it is mixed into
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator as _SparkOperator
else:
    _SparkOperator = object


class SparkAppMixin(_SparkOperator):
    """For ``SparkSubmitOperator`` subclasses that run one of our ``spark_apps``."""

    spark_conn_id: str  # the subclass's templated connection id

    def prepare_spark(self, hook: MySqlCdcHook, store_url: str, store_env: str, context: Any) -> None:
        from airflow.sdk.log import mask_secret

        settings = hook.settings()
        env = dict(self.env_vars or {})
        env.update(hook.spark_env())
        if settings.password:
            mask_secret(settings.password)
        if url_has_password(store_url):
            env[store_env] = store_url
            mask_secret(store_url)
            try:
                password = make_url(store_url).password
            except Exception:  # noqa: BLE001 - not a SQLAlchemy URL: the whole URL is masked above
                password = None
            if password:
                mask_secret(str(password))
        else:
            self.application_args = [*(self.application_args or []), "--chunk-store", store_url]
        self.env_vars = env
        conf = {**DEFAULT_CONF, **(self.conf or {})}
        if "spark.pyspark.python" not in conf:
            conf["spark.pyspark.python"] = sys.executable  # the workers need this environment's packages
        self.conf = with_parent_job(conf, context)
        # done here, for every path (the group runner's too): SparkSubmitOperator.execute need not repeat it
        self._openlineage_inject_parent_job_info = False
        self._conn_id = self.spark_conn_id  # templated
        self._hook = None  # built from the attributes set here

    def emit_table_asset(self, context: Any, settings: MySQLSettings, table: str,
                         extra: dict[str, Any]) -> None:
        asset = table_asset(settings.host, settings.port, table)
        context["outlet_events"][ASSET_ALIAS].add(asset, extra={"table": table, **extra})
        self.log.info("asset event: %s", asset.uri)
