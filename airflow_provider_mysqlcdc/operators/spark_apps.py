"""Where the ``spark_apps/`` entry points are, in a source checkout and in an installed package.

``setup.py`` installs them as data files under ``<prefix>/share/airflow-provider-mysqlcdc/spark_apps``; a
checkout (or an editable install) uses the repository's own folder.
"""
from __future__ import annotations

import sys
from pathlib import Path

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

SNAPSHOT_APP = "snapshot_chunks.py"
STREAM_APP = "binlog_stream.py"
RUNNER_APP = "snapshot_runner.py"
SHARE_DIR = Path("share") / "airflow-provider-mysqlcdc" / "spark_apps"


def app_path(name: str) -> str:
    candidates = [
        Path(__file__).resolve().parents[2] / "spark_apps" / name,
        Path(sys.prefix) / SHARE_DIR / name,
        Path(sys.base_prefix) / SHARE_DIR / name,
    ]
    for path in candidates:
        if path.is_file():
            return str(path)
    raise ConfigurationError(
        f"cannot find the Spark app {name} (looked in {', '.join(str(c.parent) for c in candidates)}): "
        "reinstall airflow-provider-mysqlcdc, or pass application= to the operator"
    )
