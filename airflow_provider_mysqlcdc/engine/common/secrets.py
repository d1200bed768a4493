"""Secrets in settings: a password read from a file, and whether a URL carries one.

A URL with a password must not reach a command line, Spark options, plans or logs; the password comes from the
environment (``engine.common.environment``) or from a file instead. Errors name the file or the setting, never
the secret.
"""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError


def read_password_file(path: str | None) -> str | None:
    """The password in the file ``path`` without its trailing newline; None when no file is named.

    Inside Spark, a file that is not at ``path`` is also looked for by its name among the files shipped with
    ``spark-submit --files`` (``SparkFiles``): that is how executors find it.
    """
    if not path:
        return None
    candidate = Path(path)
    if not candidate.exists():
        candidate = _shipped_file(candidate.name) or candidate
    try:
        return candidate.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the MySQL password file {path!r}: {exc.strerror}") from None


def _shipped_file(name: str) -> Path | None:
    """``name`` among the files shipped with ``spark-submit --files``, if this process runs Spark.

    pyspark is looked up, not imported: the engine does not depend on Spark, and a Spark driver or executor
    has it loaded already (``pyspark`` exports ``SparkFiles``).
    """
    spark_files = getattr(sys.modules.get("pyspark"), "SparkFiles", None)
    if spark_files is None:
        return None
    try:
        shipped = Path(spark_files.get(name))
    except Exception:  # noqa: BLE001 - no SparkContext in this process, or no SparkFiles root
        return None
    return shipped if shipped.exists() else None


def url_has_password(url: str | None) -> bool:
    """Whether ``url`` carries a password: a MySQL URL (``mysql://user:pw@host``) or a chunk store URL
    (SQLAlchemy, e.g. ``postgresql://user:pw@host/db``). A plain path (a SQLite file) never does.

    A password counts if either parser finds one (``urlsplit``, which reads MySQL URLs, or SQLAlchemy's
    ``make_url``, which reads chunk store URLs): a check that keeps secrets out of command lines errs on the
    safe side. A URL neither can read carries none here; it is reported where it is used.
    """
    if not url or "://" not in url or "@" not in url:
        return False  # a path, or a URL without user info
    try:
        if urlsplit(url).password is not None:
            return True
    except ValueError:
        pass
    from sqlalchemy.engine import make_url  # only here: short-lived Spark Python workers load this module

    try:
        return make_url(url).password is not None
    except Exception:  # noqa: BLE001 - not a SQLAlchemy URL
        return False
