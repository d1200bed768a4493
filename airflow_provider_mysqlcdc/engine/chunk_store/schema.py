"""The chunk store's tables, its schema version, and the migration of a store written by an older release."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql as mysql_types
from sqlalchemy.engine import Connection

from airflow_provider_mysqlcdc.engine.chunk_store.errors import ChunkStoreVersionError, UnknownChunk

log = logging.getLogger(__name__)

SCHEMA_VERSION = 5  # 1: the first release; 2: table membership (removed_*, added_generation);
# 3: the server of each chunk HW (hw_server, hw_gtid_position) and the stream claims of server_id ranges;
# 4: the group runners of DAG runs, the chunk groups handed to them, and who announced a table's snapshot
# (tables only, no column added); 5: the verifications of chunks against the source (a table only)
JSON_VERSION = 1  # "v" of the store's own JSON columns (timings_json, extra_json)
PLANNED, RUNNING, COMMITTED, FAILED = "planned", "running", "committed", "failed"
STATUSES = (PLANNED, RUNNING, COMMITTED, FAILED)
MAX_ERROR_CHARS = 2000

# --- schema -------------------------------------------------------------------------------------------------

_NAME = sa.String(255).with_variant(
    mysql_types.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)  # "db.table": case-sensitive everywhere, as MySQL table names are on Linux
_SHORT = sa.String(255)
_RUN_ID = sa.String(250)  # Airflow's run_id limit
_KEY_TEXT = sa.Text().with_variant(mysql_types.MEDIUMTEXT(), "mysql", "mariadb")
_LONG_TEXT = sa.Text().with_variant(mysql_types.LONGTEXT(), "mysql", "mariadb")
_TS = sa.DateTime().with_variant(mysql_types.DATETIME(fsp=6), "mysql", "mariadb")  # naive UTC
_MYSQL_OPTS: dict[str, Any] = {
    "mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin",
}

metadata = sa.MetaData()

meta_table = sa.Table(
    "mysqlcdc_meta", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", _SHORT, nullable=False),
    **_MYSQL_OPTS,
)

tables_table = sa.Table(
    "mysqlcdc_tables", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("latest_generation", sa.Integer, nullable=False),
    sa.Column("created_at", _TS, nullable=False),
    sa.Column("updated_at", _TS, nullable=False),
    # schema version 2: pipeline membership (all NULL: in the pipeline since its first generation)
    sa.Column("removed_at", _TS, nullable=True),  # set: removed from the pipeline (remove_table)
    sa.Column("removed_run_id", _RUN_ID, nullable=True),
    sa.Column("removed_reason", sa.Text, nullable=True),
    sa.Column("added_generation", sa.Integer, nullable=True),  # first generation of the current membership
    **_MYSQL_OPTS,
)
plans_table = sa.Table(
    "mysqlcdc_plans", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("key_columns", sa.Text, nullable=False),  # JSON list of column names
    sa.Column("split_kind", sa.String(32), nullable=True),
    sa.Column("chunk_size", sa.BigInteger, nullable=True),
    sa.Column("chunk_count", sa.Integer, nullable=False),
    sa.Column("created_at", _TS, nullable=False),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("plan_json", _LONG_TEXT, nullable=False),  # opaque: the planner's ChunkPlan.to_dict()
    **_MYSQL_OPTS,
)

chunks_table = sa.Table(
    "mysqlcdc_chunks", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("chunk_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("start_key", _KEY_TEXT, nullable=True),  # opaque key-codec JSON; NULL = -inf
    sa.Column("end_key", _KEY_TEXT, nullable=True),  # opaque key-codec JSON; NULL = +inf
    # latest attempt
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("started_at", _TS, nullable=True),
    sa.Column("finished_at", _TS, nullable=True),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("rerun_pending", sa.Boolean, nullable=False),
    # committed result (replaced only by commit_chunk)
    sa.Column("row_count", sa.BigInteger, nullable=True),
    sa.Column("lw_file", _SHORT, nullable=True),
    sa.Column("lw_pos", sa.BigInteger, nullable=True),
    sa.Column("hw_file", _SHORT, nullable=True),
    sa.Column("hw_pos", sa.BigInteger, nullable=True),
    sa.Column("output_version", _SHORT, nullable=True),
    sa.Column("committed_at", _TS, nullable=True),
    sa.Column("committed_run_id", _RUN_ID, nullable=True),
    sa.Column("timings_json", sa.Text, nullable=True),  # {"v": 1, "read_s": ..., ...}
    sa.Column("extra_json", sa.Text, nullable=True),  # {"v": 1, ...}: watermark mode, GTID, ...
    # schema version 3: whose binlog the HW names (engine/source/identity.py; NULL: written by an earlier
    # release, taken to be the stream's server) and, where the server has one, the GTID position at the HW
    sa.Column("hw_server", _SHORT, nullable=True),
    sa.Column("hw_gtid_position", sa.Text, nullable=True),
    **_MYSQL_OPTS,
)

# Columns later schema versions added to existing tables: (version, table, column), applied in order.
_ADDED_COLUMNS = (
    (2, tables_table, tables_table.c.removed_at),
    (2, tables_table, tables_table.c.removed_run_id),
    (2, tables_table, tables_table.c.removed_reason),
    (2, tables_table, tables_table.c.added_generation),
    (3, chunks_table, chunks_table.c.hw_server),
    (3, chunks_table, chunks_table.c.hw_gtid_position),
)

history_table = sa.Table(
    "mysqlcdc_chunk_history", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("table_name", _NAME, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("chunk_id", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # started | committed | failed | invalidated
    sa.Column("happened_at", _TS, nullable=False),
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Column("row_count", sa.BigInteger, nullable=True),
    sa.Column("hw_file", _SHORT, nullable=True),
    sa.Column("hw_pos", sa.BigInteger, nullable=True),
    sa.Column("output_version", _SHORT, nullable=True),
    sa.Column("detail", sa.Text, nullable=True),  # error text, or a reason
    sa.Index("ix_mysqlcdc_chunk_history_chunk", "table_name", "chunk_id", "generation"),
    **_MYSQL_OPTS,
)

# schema version 3: which stream holds which server_id range on which MySQL server (engine/stream/
# server_id_claims.py). The claim itself is a set of GET_LOCKs on that server; a row only names its holder.
stream_claims_table = sa.Table(
    "mysqlcdc_stream_claims", metadata,
    sa.Column("checkpoint_key", sa.String(64), primary_key=True),  # sha256 of the checkpoint (any length)
    sa.Column("checkpoint", sa.Text, nullable=False),
    sa.Column("server", _SHORT, nullable=False),  # the MySQL server's identity token
    sa.Column("connection_id", sa.BigInteger, nullable=False),  # the session holding the GET_LOCKs
    sa.Column("low_id", sa.BigInteger, nullable=False),
    sa.Column("high_id", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),  # user@host pid
    sa.Column("claimed_at", _TS, nullable=False),
    **_MYSQL_OPTS,
)

# schema version 4: a Spark application that runs the chunk groups of one DAG run (its "scope") handed to it
# by the mapped snapshot tasks (engine/chunk_store/group_runs.py): the application, and each group's request.
runners_table = sa.Table(
    "mysqlcdc_group_runners", metadata,
    sa.Column("scope_key", sa.String(64), primary_key=True),  # sha256 of the scope (any length)
    sa.Column("scope", sa.Text, nullable=False),  # "<dag_id>/<run_id>"
    sa.Column("runner_id", sa.String(64), nullable=False),  # this incarnation (a restart gets a new one)
    sa.Column("state", sa.String(16), nullable=False),  # starting | serving | stopping | stopped | failed
    sa.Column("source", sa.Text, nullable=False),  # the MySQL URL it reads with, password left out
    sa.Column("host", _SHORT, nullable=False),
    sa.Column("pid", sa.BigInteger, nullable=True),  # of the process that started it, on ``host``
    sa.Column("started_at", _TS, nullable=False),
    sa.Column("heartbeat_at", _TS, nullable=False),
    sa.Column("finished_at", _TS, nullable=True),
    sa.Column("detail", sa.Text, nullable=True),  # where its log is; why it stopped
    **_MYSQL_OPTS,
)
group_requests_table = sa.Table(
    "mysqlcdc_group_requests", metadata,
    sa.Column("request_id", sa.String(64), primary_key=True),
    sa.Column("scope_key", sa.String(64), nullable=False),
    sa.Column("task", sa.Text, nullable=False),  # the mapped task instance that asked: "task_id[map_index]"
    sa.Column("name", sa.Text, nullable=False),  # the group's name, for the logs
    sa.Column("arguments_json", _LONG_TEXT, nullable=False),  # {"v": 1, "args": [snapshot app arguments]}
    sa.Column("state", sa.String(16), nullable=False),  # queued | running | done | failed | withdrawn
    sa.Column("runner_id", sa.String(64), nullable=True),  # the runner that took it
    sa.Column("requested_at", _TS, nullable=False),
    sa.Column("started_at", _TS, nullable=True),
    sa.Column("finished_at", _TS, nullable=True),
    sa.Column("result_json", _LONG_TEXT, nullable=True),  # {"v": 1, "result": ...} or {"v": 1, "error": ...}
    sa.Index("ix_mysqlcdc_group_requests_scope", "scope_key", "state"),
    **_MYSQL_OPTS,
)

# schema version 4: which task announces a table's completed snapshot (its Airflow asset event): one per
# (table, generation, run), so that two groups of a table finishing at once do not both announce it
announcements_table = sa.Table(
    "mysqlcdc_snapshot_announcements", metadata,
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("run_id", _RUN_ID, primary_key=True),
    sa.Column("announced_by", sa.Text, nullable=False),  # the task instance
    sa.Column("announced_at", _TS, nullable=False),
    **_MYSQL_OPTS,
)

# schema version 5: every verification of a chunk against the source (``mysqlcdc verify``), one row per
# (verify run, table, generation, chunk): when, at which binlog position, what it found
verifications_table = sa.Table(
    "mysqlcdc_verifications", metadata,
    sa.Column("verify_id", sa.String(64), primary_key=True),
    sa.Column("table_name", _NAME, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("chunk_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("verified_at", _TS, nullable=False),
    sa.Column("position", _SHORT, nullable=True),  # the read view's binlog position (or window low..high)
    sa.Column("result", sa.String(32), nullable=False),  # match | mismatch | repaired | unverified
    sa.Column("source_rows", sa.BigInteger, nullable=True),
    sa.Column("lake_rows", sa.BigInteger, nullable=True),
    sa.Column("detail_json", _LONG_TEXT, nullable=True),  # {"v": 1, ...}: hashes, what differs, the repair
    sa.Column("run_id", _RUN_ID, nullable=True),
    sa.Index("ix_mysqlcdc_verifications_table", "table_name", "verified_at"),
    **_MYSQL_OPTS,
)


VERSION_QUERY = sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")


def latest_query(table: str) -> sa.Select:
    return sa.select(tables_table.c.latest_generation).where(tables_table.c.table_name == table)




def latest_generation(conn: Connection, table: str) -> int | None:
    return conn.execute(latest_query(table)).scalar()


def resolve_generation(conn: Connection, table: str, generation: int | None) -> int:
    """``generation`` as given, else the table's latest; a table never planned is an error."""
    if generation is not None:
        return int(generation)
    latest = latest_generation(conn, table)
    if latest is None:
        raise UnknownChunk(f"chunk store has no plan for {table}: run the plan step first")
    return latest


def committed_generations(conn: Connection, tables: Sequence[str]) -> dict[str, int]:
    """Latest generation whose every chunk has a committed snapshot, per table; only generations of the
    table's current membership count (a removed table planned again: from its re-adding generation on)."""
    c, t = chunks_table.c, tables_table.c
    floors: dict[str, int] = dict(conn.execute(sa.select(t.table_name, t.added_generation).where(
        t.table_name.in_(tables), t.added_generation.is_not(None))).all())
    result: dict[str, int] = {}
    for table, generation in conn.execute(
        sa.select(c.table_name, c.generation).where(c.table_name.in_(tables))
        .group_by(c.table_name, c.generation).having(sa.func.count() == sa.func.count(c.hw_pos))
    ):
        if generation < floors.get(table, 0):
            continue
        result[table] = max(generation, result.get(table, generation))
    return result


def ensure_schema(conn: Connection, display_url: str) -> None:
    inspector = sa.inspect(conn)
    version: int | None = None
    if inspector.has_table(meta_table.name):
        version = _check_version(conn, display_url)
    elif inspector.has_table(chunks_table.name):
        raise ChunkStoreVersionError(
            f"chunk store {display_url} has a {chunks_table.name} table but no {meta_table.name}: "
            "it was not written by airflow-provider-mysqlcdc, or it is damaged"
        )
    metadata.create_all(conn, checkfirst=True)
    if version is not None and version < SCHEMA_VERSION:
        _migrate(conn, version, display_url)
    found = conn.execute(VERSION_QUERY).scalar()
    if found is None:
        from airflow_provider_mysqlcdc import __version__

        conn.execute(
            sa.insert(meta_table),
            [
                {"name": "schema_version", "value": str(SCHEMA_VERSION)},
                {"name": "created_by", "value": f"airflow-provider-mysqlcdc {__version__}"},
            ],
        )

def _check_version(conn: Connection, display_url: str) -> int | None:
    raw = conn.execute(VERSION_QUERY).scalar()
    if raw is None:
        return None  # created by a process that has not written its version row yet
    try:
        version = int(raw)
    except ValueError:
        raise ChunkStoreVersionError(
            f"chunk store {display_url}: schema_version {raw!r} in {meta_table.name} is not a number"
        ) from None
    if version > SCHEMA_VERSION:
        raise ChunkStoreVersionError(
            f"chunk store {display_url} has schema version {version}, written by a newer release of "
            f"airflow-provider-mysqlcdc; this release reads versions up to {SCHEMA_VERSION}. Upgrade "
            "airflow-provider-mysqlcdc everywhere that uses this store (Airflow workers and Spark)."
        )
    return version  # older: _migrate brings it up to date

def _migrate(conn: Connection, version: int, display_url: str) -> None:
    """Bring a store of an older schema version up to :data:`SCHEMA_VERSION`, in place: add the columns
    later versions added (NULL in existing rows), then record the new version.

    Idempotent, so two processes opening an old store at once are fine: a column another process added
    meanwhile is skipped (if both add it, the loser's "duplicate column" error makes ``StoreDatabase._open``
    retry, and its retry finds the column). On MySQL each ``ALTER TABLE`` commits on its own.
    """
    quote = conn.dialect.identifier_preparer.quote
    for added_in, table, column in _ADDED_COLUMNS:
        if added_in <= version:
            continue
        present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
        if column.name in present:
            continue
        spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {spec}")
    conn.execute(sa.update(meta_table).where(meta_table.c.name == "schema_version")
                 .values(value=str(SCHEMA_VERSION)))
    log.warning("chunk store %s: schema migrated from version %d to %d (releases before this one can no "
                "longer open it)", display_url, version, SCHEMA_VERSION)
