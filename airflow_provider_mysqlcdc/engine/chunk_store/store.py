"""The chunk store: the durable, transactional record of chunk plans and of every chunk's committed snapshot.

One row per plan ``(table, generation)`` and one row per chunk ``(table, generation, chunk id)``, in a
SQLite file (the default), MySQL/MariaDB or PostgreSQL, chosen by URL (SQLAlchemy Core; no ORM).

Pipeline membership: a table joins the pipeline when it is first planned. :meth:`ChunkStore.remove_table`
takes it out (``removed_at`` on its ``mysqlcdc_tables`` row; its plans, chunks and output stay as they are);
planning it again puts it back with a new generation, and only generations from that one on count
(``added_generation``): a snapshot from before the removal is never combined with the changes after it, which
nobody captured. :meth:`ChunkStore.active_tables` lists the tables in the pipeline (planned, not removed).

What each chunk row carries, and who reads it:

* the *committed result* -- ``rows``, LW, HW, ``output_version`` (the versioned output directory holding the
  snapshot), ``committed_at``, ``committed_run_id``. Only :meth:`ChunkStore.commit_chunk` replaces it, in one
  transaction. The **mirror** reads it (:meth:`ChunkStore.mirror_view`): a rerun leaves it in force until the
  rerun commits.
* ``rerun_pending`` -- set when a chunk that already has a committed result is started again (or
  invalidated), cleared by the next commit. The **stream filter** (:meth:`ChunkStore.stream_view`) treats such
  a chunk, like a never-committed one, as HW = -inf: it emits every event of the chunk until a committed
  snapshot covers it.
* the *latest attempt* -- ``status`` ('planned' | 'running' | 'committed' | 'failed'), ``attempts``,
  ``started_at``, ``finished_at``, ``run_id``, ``error``: what on-call engineers look at.
* ``hw_server``, ``hw_gtid_position`` -- whose binlog LW and HW name (the server the chunk was read from) and
  the GTID position at HW there: a stream refuses to start from HWs of another server (NULL in rows of an
  earlier release: taken to be the stream's server).

``mysqlcdc_stream_claims`` names the stream (checkpoint) that holds a server_id range on a MySQL server
(``engine/stream/server_id_claims.py``), so that a second stream on an overlapping range can say whose it is.
``mysqlcdc_group_runners`` and ``mysqlcdc_group_requests`` hand a DAG run's chunk groups to one application
that runs them all (``group_runs.py``); ``mysqlcdc_snapshot_announcements`` which task announced a table's
snapshot (``announcements.py``); ``mysqlcdc_verifications`` every chunk verification (``verifications.py``).

Chunk bounds (``start_key``/``end_key``) and the plan (``plan_json``) are opaque JSON text produced by the
planner and its key codec, which version their own formats; the store never interprets them. The store's own
JSON columns (``timings_json``, ``extra_json``) carry ``"v": 1``. The schema carries a version in
``mysqlcdc_meta``: a store written by a newer release is refused with a clear error, and an older store is
migrated in place when it is opened (version 1 -> 2: the membership columns of ``mysqlcdc_tables``, NULL for
existing rows, which means "in the pipeline, every generation counts"; 2 -> 3: ``hw_server`` and
``hw_gtid_position`` of ``mysqlcdc_chunks``, NULL for existing rows, and the ``mysqlcdc_stream_claims``
table; 3 -> 4: the group-run and announcement tables, created empty; 4 -> 5: the verifications table, created
empty).

Concurrency: every write is one short transaction (SQLite: WAL, ``BEGIN IMMEDIATE`` and a busy timeout;
MySQL/PostgreSQL: row locks), so Spark and Airflow tasks in several processes may commit different chunks at
once.
A SQLite store must live on a local file system (WAL needs shared memory), not on NFS or an object store.

Outages: a store that is unreachable for a while (a server restarting, a network cut, a SQLite file locked
longer than the busy timeout) does not fail the caller at once: every read and write transaction is retried as
a whole, with exponential backoff, for up to the *outage budget* (``outage_s``, default
``$MYSQLCDC_CHUNK_STORE_OUTAGE_S`` or 300 s), then :class:`ChunkStoreUnavailable` is raised. A retried write
is never applied twice (see the comment on the store's transactions). Other errors (credentials, a
missing database or table) fail at once.
"""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.chunk_store.announcements import SnapshotAnnouncements
from airflow_provider_mysqlcdc.engine.chunk_store.attempts import ChunkAttempts
from airflow_provider_mysqlcdc.engine.chunk_store.claims import StreamClaims
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import GroupRuns
from airflow_provider_mysqlcdc.engine.chunk_store.plans import PlanStore
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import ChunkVerifications
from airflow_provider_mysqlcdc.engine.chunk_store.views import StoreViews


class ChunkStore(PlanStore, ChunkAttempts, StoreViews, StreamClaims, GroupRuns, SnapshotAnnouncements,
                 ChunkVerifications):
    """Plans and chunk results in a SQL database. Thread-safe; one instance per process is enough.

    ``url``: ``sqlite:///path/chunks.db`` (or just a path), ``mysql+pymysql://user:pw@host/db``,
    ``postgresql://user@host/db`` (driver ``psycopg``). ``outage_s``: how long a call keeps retrying while the
    store is unreachable (default ``$MYSQLCDC_CHUNK_STORE_OUTAGE_S``, else 300 s; 0 fails at once).
    """
