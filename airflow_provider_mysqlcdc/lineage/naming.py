"""OpenLineage dataset names: a source table, and a location in the lake, as OpenLineage's naming conventions
spell them (https://openlineage.io/docs/spec/naming), so our datasets meet other tools' datasets of the same
table or files.

Names never carry credentials: a URI's user info (pyarrow reads ``s3://key:secret@bucket/...``), its query
(``?secret_key=...``) and fragment are dropped.
"""
from __future__ import annotations

import os
import posixpath
from typing import NamedTuple
from urllib.parse import urlsplit

from airflow_provider_mysqlcdc.engine.model.tables import TableId

# schemes whose first URI part is a bucket (the name is the object key, without a leading slash)
_BUCKETS = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
_AZURE = {"abfs": "abfss", "abfss": "abfss", "az": "abfss", "wasb": "wasbs", "wasbs": "wasbs"}


class DatasetName(NamedTuple):
    namespace: str
    name: str


def source_table(host: str, port: int, table: TableId | str) -> DatasetName:
    """A MySQL/MariaDB table: namespace ``mysql://host:port``, name ``db.table``."""
    t = TableId.parse(table) if isinstance(table, str) else table
    return DatasetName(f"mysql://{host}:{int(port)}", f"{t.database}.{t.table}")


def lake_location(path: str) -> DatasetName:
    """A directory of the lake (a Delta table, the snapshot's files): ``file`` + absolute path for a local
    path, ``s3://bucket`` / ``gs://bucket`` + the key, ``hdfs://host:port`` + the path,
    ``abfss://container@account...`` + the path, else ``scheme://host`` + the path."""
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # no scheme (or a Windows drive letter): a local path
        return DatasetName("file", posixpath.normpath(os.path.abspath(path)))
    host = parts.netloc.rpartition("@")[2]  # no user info (credentials)
    key = parts.path
    if scheme == "file":
        return DatasetName(f"file://{host}" if host and host != "localhost" else "file",
                           posixpath.normpath(key or "/"))
    if scheme in _BUCKETS:
        return DatasetName(f"{_BUCKETS[scheme]}://{host}", key.strip("/"))
    if scheme in _AZURE:
        # container@account...: the container is the user info's name (its password part, a key, dropped)
        container = parts.username or ""
        account = host if "." in host else f"{host}.dfs.core.windows.net"
        where = f"{container}@{account}" if container else account
        return DatasetName(f"{_AZURE[scheme]}://{where}", key.strip("/"))
    if scheme in ("hdfs", "viewfs"):
        return DatasetName(f"hdfs://{host}", key or "/")
    return DatasetName(f"{scheme}://{host}", key or "/")
