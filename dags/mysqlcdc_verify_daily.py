"""Daily proof that the lake equals the source: every table of the replication DAG verified chunk by chunk.

A companion of ``mysqlcdc_replication`` (same ``tables``, ``output``, ``chunk_store`` and ``mysql_conn_id``):
for each chunk a digest of the source rows (count and a hash sum the server computes; no row crosses the
wire) is compared with the lake's rows of that chunk as of the digest's binlog position, under the source
limits of the snapshot. The stream must be running (``stream_trigger=continuous``) or run on a schedule: the
task waits, deferred in the triggerer (no worker slot held), until the stream has committed past the digests'
positions, for up to ``wait_timeout`` seconds.

``sample`` verifies a share of each table's chunks (``5%``), another share each day (the seed is the run's
date), so a large table is covered over days at a fraction of a full scan's cost; leave it empty for every
chunk. A chunk that differs fails the task, naming it (table, chunk id, key range, both row counts) with the
commands that repair it; after repairing, clear the task: it verifies again, in the same verify run, only the
chunks that did not match. Every verdict is in the chunk store: ``mysqlcdc status`` and the MySQL CDC tab.
"""
from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_mysqlcdc.operators.verify import MySqlCdcVerifyOperator

DEFAULT_OUTPUT = os.environ.get("MYSQLCDC_DEMO_OUTPUT", "/tmp/mysqlcdc-demo/lake")
SOME_TEXT = r"^[^\u0000-\u001f]*[^\s,][^\u0000-\u001f]*$"  # a non-blank line, not only commas
CONN_ID = r"^[\w.\-#!()/:\\]{1,250}$"
SAMPLE = r"^\s*(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)\s*%\s*$"  # 5%, 0.5%, 100%
CHUNK_IDS = r"^\s*[0-9]+(\s*-\s*[0-9]+)?(\s*,\s*[0-9]+(\s*-\s*[0-9]+)?)*\s*$"  # 3,7 or 0-15

with DAG(
    dag_id="mysqlcdc_verify_daily",
    description="Verify the lake against the source, chunk by chunk (digests computed by the server)",
    schedule="@daily",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["mysqlcdc"],
    doc_md=__doc__,
    params={
        "tables": Param("demo.orders", type="string", minLength=1, maxLength=4096, pattern=SOME_TEXT,
                        description="db.table names or patterns of replicated tables, comma-separated"),
        "output": Param(DEFAULT_OUTPUT, type="string", minLength=1, maxLength=4096, pattern=SOME_TEXT,
                        description="the replication DAG's output root"),
        "chunk_store": Param(None, type=["null", "string"], maxLength=4096,
                             description="chunk store URL (default: a SQLite file in a local output root)"),
        "sample": Param(None, type=["null", "string"], pattern=SAMPLE,
                        description="verify this share of each table's chunks, another share each day "
                                    "(e.g. 5%); empty: every chunk"),
        "chunks": Param(None, type=["null", "string"], pattern=CHUNK_IDS,
                        description="only these chunk ids of each table, e.g. 3,7 or 0-15"),
        "explain": Param(False, type="boolean",
                         description="for a chunk that differs, name its first differing keys (reads that "
                                     "chunk's keys from the source)"),
        "wait_timeout": Param(3600, type="number", minimum=0, maximum=7 * 24 * 3600,
                              description="seconds to wait for the stream to pass the digests' positions"),
        "max_concurrent_reads": Param(4, type="integer", minimum=0, maximum=10_000,
                                      description="reads the source serves at once, shared with the "
                                                  "snapshot's chunk reads (0: no cap)"),
        "rows_per_second": Param(0, type="number", minimum=0, maximum=1e12,
                                 description="rows/s the digests may scan on the source (0: no limit)"),
        "query_timeout": Param(600, type="number", minimum=0, maximum=4_294_967,
                               description="server-side time limit of each chunk's digest, seconds "
                                           "(0: none)"),
        "mysql_conn_id": Param("mysqlcdc_source", type="string", pattern=CONN_ID),
    },
) as dag:
    MySqlCdcVerifyOperator(
        task_id="verify",
        mysql_conn_id="{{ params.mysql_conn_id }}",
        tables="{{ params.tables }}",
        output_path="{{ params.output }}",
        chunk_store="{{ params.chunk_store }}",
        sample="{{ params.sample }}",
        seed="{{ ds_nodash }}",  # another sample each day
        chunks="{{ params.chunks }}",
        explain="{{ params.explain }}",
        wait_timeout="{{ params.wait_timeout }}",
        max_concurrent_reads="{{ params.max_concurrent_reads }}",
        rows_per_second="{{ params.rows_per_second }}",
        query_timeout="{{ params.query_timeout }}",
        deferrable=True,  # waits for the stream in the triggerer (airflow triggerer, part of standalone)
    )
