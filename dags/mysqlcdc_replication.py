"""MySQL -> data lake: plan -> snapshot (one mapped task per chunk group) -> stream.

Copy this DAG and set its params (or pass them with ``airflow dags test mysqlcdc_replication -c '{...}'`` /
"Trigger DAG w/ config"). Connections: ``mysql_conn_id`` (type mysql: host, port, login, password; extras
``ssl``, ``server_id``, ``charset``) and ``spark_conn_id`` (type spark, master in the host, e.g. ``local[2]``
or ``spark://master:7077``).

Startup modes (param ``startup_mode``): ``initial`` snapshots, then streams; ``snapshot-only`` stops after the
snapshot; ``latest-offset``, ``earliest-offset``, ``specific-offset:<file>:<pos>`` (or ``:gtid=<set>``) and
``timestamp:<ISO 8601>`` take no snapshot and stream every change from that point (a new checkpoint only).

Adding and removing tables while the stream runs: add a table to ``tables`` (or create one a pattern
matches) and trigger the DAG again: only the new table is planned and snapshotted (``only_new``, the default),
the other tables keep their snapshot and the running stream captures the new one from then on. Remove one by
taking it out of ``tables`` and triggering a run with ``remove_tables`` (``"shop.old"``): the stream stops
capturing it, its output stays as it is. ``only_new=false`` re-plans and re-snapshots every table.

The snapshot's chunk groups run in one Spark application started for the DAG run (``start_runner``, a setup
task; ``stop_runner`` is its teardown); each mapped task hands its group over and waits deferred, without a
worker slot (a triggerer must run: ``airflow triggerer``, part of ``airflow standalone``). Param
``shared_spark_app=false`` gives each group a Spark application of its own (``spark-submit`` per group).

Reruns: clear one mapped ``snapshot_phase.snapshot_chunk_group`` task with Downstream on (the Clear dialog's
default) to rerun exactly that chunk group and then the stream (the MySQL CDC tab links the failed one); or
trigger a run with ``redo_chunks`` (``"shop.orders=3,7"``) to re-snapshot only those chunks while the stream
keeps running (that run's stream task then skips, as the running stream picks the new HWs up itself).
"""
from __future__ import annotations

import os

from airflow.sdk import DAG, Param, TaskGroup

from airflow_provider_mysqlcdc.assets import ASSET_ALIAS
from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
from airflow_provider_mysqlcdc.operators.snapshot import MAP_INDEX_TEMPLATE, MySqlCdcSnapshotOperator
from airflow_provider_mysqlcdc.operators.snapshot_runner import (
    MySqlCdcStartRunnerOperator,
    MySqlCdcStopRunnerOperator,
)
from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator

DEFAULT_OUTPUT = os.environ.get("MYSQLCDC_DEMO_OUTPUT", "/tmp/mysqlcdc-demo/lake")
# JSON-schema patterns the trigger form checks before a run starts (the tasks check everything again).
SOME_TEXT = r"^[^\u0000-\u001f]*[^\s,][^\u0000-\u001f]*$"  # a non-blank line, not only commas
CONN_ID = r"^[\w.\-#!()/:\\]{1,250}$"
TRIGGER = r"^\s*(available-now|continuous|processing-time=.*\S.*)\s*$"
STARTUP_MODE = (r"^\s*(initial|snapshot-only|latest-offset|earliest-offset|specific-offset:\S.*|"
                r"timestamp:\S.*)\s*$")
_REDO_ITEM = r"\s*[^=:;\s]+\.[^=:;\s]+\s*[=:]\s*[0-9][0-9,\s-]*"  # db.table=3,7 or db.table=0-15
REDO_CHUNKS = rf"^(\s*|{_REDO_ITEM}(;{_REDO_ITEM})*;?\s*)$"
TABLE_KEY = {"pattern": r"^[^\u0000-\u001f]+\.[^\u0000-\u001f]+$", "maxLength": 200}  # db.table
COLUMN = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[^\u0000]*[^\s\u0000]$"}
COLUMNS = {"oneOf": [{"type": "array", "minItems": 1, "items": COLUMN}, {"type": "string", "minLength": 1}]}

with DAG(
    dag_id="mysqlcdc_replication",
    description="Lock-free parallel snapshot of MySQL tables on Spark, then the binlog stream, exactly once",
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    tags=["mysqlcdc"],
    doc_md=__doc__,
    params={
        "tables": Param("demo.orders", type="string", minLength=1, maxLength=4096, pattern=SOME_TEXT,
                        description="db.table names or patterns, comma-separated"),
        "output": Param(DEFAULT_OUTPUT, type="string", minLength=1, maxLength=4096, pattern=SOME_TEXT,
                        description="output root (Parquet): path or URI"),
        "chunk_store": Param(None, type=["null", "string"], maxLength=4096,
                             description="chunk store URL (default: a SQLite file in a local output root)"),
        "chunk_size": Param(32768, type="integer", minimum=1, maximum=1_000_000_000,
                            description="rows per chunk"),
        "chunks_per_group": Param(512, type="integer", minimum=1, maximum=1_000_000,
                                  description="chunks per Spark application (one mapped task)"),
        "shared_spark_app": Param(True, type="boolean",
                                  description="run every chunk group in one Spark application started for "
                                              "the run (false: a spark-submit per group)"),
        "pack_tables": Param(True, type="boolean",
                             description="tables smaller than chunks_per_group share Spark applications "
                                         "(false: one table per mapped task)"),
        "stream_trigger": Param("available-now", type="string", pattern=TRIGGER,
                                description="available-now (catch up, finish), continuous, or "
                                            "processing-time=10 seconds"),
        "startup_mode": Param("initial", type="string", pattern=STARTUP_MODE,
                              description="initial (snapshot, then stream) | snapshot-only | latest-offset | "
                                          "earliest-offset | specific-offset:<file>:<pos> | "
                                          "specific-offset:gtid=<set> | timestamp:<ISO 8601>"),
        # optional text: null by default (the trigger form holds an empty string param for missing and keeps
        # its Trigger button disabled)
        "redo_chunks": Param(None, type=["null", "string"], maxLength=4096, pattern=REDO_CHUNKS,
                             description="only re-snapshot these chunks, e.g. demo.orders=3,7 (no re-plan)"),
        "only_new": Param(True, type="boolean",
                          description="plan and snapshot only tables not in the pipeline yet (false: re-plan "
                                      "and re-snapshot every table)"),
        "remove_tables": Param(None, type=["null", "string"], maxLength=4096,
                               description="take these planned tables (names or patterns, comma-separated) "
                                           "out of the pipeline; their output stays"),
        "zero_dates": Param("keep", type="string", enum=["keep", "null"],
                            description="zero dates (0000-00-00) written exactly in a <column>__zero_date "
                                        "companion (keep) or as NULL only (null); applies to newly planned "
                                        "tables"),
        "chunk_keys": Param({}, type="object", propertyNames=TABLE_KEY, additionalProperties=COLUMN,
                            description='chunk by this column instead of the primary key, e.g. '
                                        '{"shop.events": "id"}; required for a table without a primary key'),
        "exclude_columns": Param({}, type="object", propertyNames=TABLE_KEY,
                                 additionalProperties=COLUMNS,
                                 description='columns never written, e.g. {"shop.users": ["password_hash"]}'),
        "max_concurrent_reads": Param(4, type="integer", minimum=0, maximum=10_000,
                                      description="chunk reads the source serves at once, over all groups "
                                                  "(0: no cap)"),
        "rows_per_second": Param(0, type="number", minimum=0, maximum=1e12,
                                 description="rows/s the source serves to all chunk reads together "
                                             "(0: no limit)"),
        "query_timeout": Param(600, type="number", minimum=0, maximum=4_294_967,
                               description="server-side time limit of each chunk SELECT, seconds "
                                           "(0: none)"),
        "catchup_partitions": Param(0, type="integer", minimum=0, maximum=10_000,
                                    description="Spark tasks decoding one binlog batch when the stream is "
                                                "far behind (parallel catch-up; 0: Spark's default "
                                                "parallelism, 1: off)"),
        "mysql_conn_id": Param("mysqlcdc_source", type="string", pattern=CONN_ID),
        "spark_conn_id": Param("spark_default", type="string", pattern=CONN_ID),
    },
) as dag:
    plan = MySqlCdcPlanOperator(
        task_id="plan",
        mysql_conn_id="{{ params.mysql_conn_id }}",
        tables="{{ params.tables }}",
        output_path="{{ params.output }}",
        chunk_store="{{ params.chunk_store }}",
        chunk_size="{{ params.chunk_size }}",
        chunks_per_group="{{ params.chunks_per_group }}",
        pack_tables="{{ params.pack_tables }}",
        chunk_keys="{{ params.chunk_keys }}",
        redo_chunks="{{ params.redo_chunks }}",
        startup_mode="{{ params.startup_mode }}",
        only_new="{{ params.only_new }}",
        remove_tables="{{ params.remove_tables }}",
        zero_dates="{{ params.zero_dates }}",
    )
    start_runner = MySqlCdcStartRunnerOperator(
        task_id="start_runner",
        conn_id="{{ params.spark_conn_id }}",
        mysql_conn_id="{{ params.mysql_conn_id }}",
        output_path="{{ params.output }}",
        chunk_store="{{ params.chunk_store }}",
        # no group (or shared_spark_app off): no runner, and each group submits its own application
        chunk_groups="{{ ti.xcom_pull(task_ids='plan') if params.shared_spark_app else [] }}",
    )
    stop_runner = MySqlCdcStopRunnerOperator(
        task_id="stop_runner",
        output_path="{{ params.output }}",
        chunk_store="{{ params.chunk_store }}",
    )
    with TaskGroup("snapshot_phase", tooltip="one mapped task per chunk group") as snapshot_phase:
        MySqlCdcSnapshotOperator.partial(
            task_id="snapshot_chunk_group",
            conn_id="{{ params.spark_conn_id }}",
            mysql_conn_id="{{ params.mysql_conn_id }}",
            output_path="{{ params.output }}",
            chunk_store="{{ params.chunk_store }}",
            exclude_columns="{{ params.exclude_columns }}",
            max_concurrent_reads="{{ params.max_concurrent_reads }}",
            rows_per_second="{{ params.rows_per_second }}",
            query_timeout="{{ params.query_timeout }}",
            map_index_template=MAP_INDEX_TEMPLATE,  # "shop.orders chunks 8-15 (plan generation 3)"
            outlets=[ASSET_ALIAS],  # mapped tasks declare their outlets here: one asset per table (assets.py)
            deferrable=True,  # waits in the triggerer while the run's group runner runs its group
            retries=1,
        ).expand(chunk_group=plan.output)
    stream = MySqlCdcStreamOperator(
        task_id="stream",
        conn_id="{{ params.spark_conn_id }}",
        mysql_conn_id="{{ params.mysql_conn_id }}",
        tables="{{ params.tables }}",
        output_path="{{ params.output }}",
        chunk_store="{{ params.chunk_store }}",
        trigger="{{ params.stream_trigger }}",
        exclude_columns="{{ params.exclude_columns }}",
        startup_mode="{{ params.startup_mode }}",
        catchup_partitions="{{ params.catchup_partitions }}",
        # a table snapshotted again after TRUNCATE/RENAME is read with the snapshot's limits
        max_concurrent_reads="{{ params.max_concurrent_reads }}",
        rows_per_second="{{ params.rows_per_second }}",
        query_timeout="{{ params.query_timeout }}",
        trigger_rule="none_failed",  # a startup mode without a snapshot maps no snapshot task (skipped)
    )
    plan >> start_runner >> snapshot_phase >> stream
    snapshot_phase >> stop_runner.as_teardown(setups=start_runner)
