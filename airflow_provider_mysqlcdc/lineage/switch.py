"""Whether Airflow emits OpenLineage here: the provider is installed and configured (a transport, a config
file or connection; not ``[openlineage] disabled``). Checked before work done only for lineage."""
from __future__ import annotations


def openlineage_on() -> bool:
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()
