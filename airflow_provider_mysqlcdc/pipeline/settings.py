"""Settings every task of a pipeline shares: the tables, the chunk store, the output and the checkpoint."""
from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import split_table_list

CHUNK_STORE_FILE = "_mysqlcdc_chunks.db"
CHECKPOINT_DIR = "_mysqlcdc_checkpoint"


def split_tables(tables: str | Sequence[str]) -> list[str]:
    """``"shop.orders, shop.items_*"`` or a list: table names or patterns; at least one."""
    out = split_table_list(tables)
    if not out:
        raise ConfigurationError("no tables given: set tables to db.table names or patterns (db.orders_*)")
    return out


def chunk_store_url(chunk_store: str | None, output: str) -> str:
    """The chunk store: the given URL, else ``$MYSQLCDC_CHUNK_STORE_URL`` (a URL with a password belongs
    there, not in DAG code), else a SQLite file in a local output root."""
    if chunk_store:
        return chunk_store
    if os.environ.get(CHUNK_STORE_URL_ENV):
        return os.environ[CHUNK_STORE_URL_ENV]
    if "://" in output and not output.startswith("file://"):
        raise ConfigurationError(
            f"the output {output} is not a local path, so the chunk store cannot default to a SQLite file in "
            f"it: set chunk_store (a postgresql:// or mysql:// URL) or ${CHUNK_STORE_URL_ENV}"
        )
    local = output.removeprefix("file://")
    return os.path.join(local, CHUNK_STORE_FILE)


def default_checkpoint(output: str) -> str:
    return posixpath.join(output.rstrip("/"), CHECKPOINT_DIR)
