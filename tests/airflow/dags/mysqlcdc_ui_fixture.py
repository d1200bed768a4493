"""Test DAG for the UI plugin: a real engine pipeline in every phase, recorded as the plan task records it.

``orders`` is snapshotted and then streamed (stream phase, with lag after the last changes); ``items`` has one
chunk that failed (snapshot phase, with a failure whose error carries markup the page must escape). The plan
task pushes the ``mysqlcdc_pipeline`` XCom as the provider's plan operator does. The engine work is the tests'
``LayoutPipeline`` (the documented output layout without Spark), imported inside the tasks so parsing this
file needs nothing from ``tests``.

Params: ``database`` (holding ``orders`` and ``items``), ``store`` (SQLite path), ``output`` (root),
``mysql_conn_id`` (the CDC user) and ``admin_conn_id`` (a user that may write, for the changes).
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param, task

FAILED_ERROR = "executor lost <script>alert('mysqlcdc')</script>"
CHUNK_SIZE = 40


def _pipeline(params: dict[str, Any], *, tables: tuple[str, ...] = ()) -> Any:
    """A LayoutPipeline over the run's chunk store and output, with the schemas of ``tables`` loaded."""
    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
    from tests.support.layout_pipeline import LayoutPipeline

    settings = MySqlCdcHook(params["mysql_conn_id"]).settings()
    pipe = LayoutPipeline(settings, ChunkStore(params["store"]), params["database"], chunk_size=CHUNK_SIZE,
                          root=params["output"])
    if tables:
        with connect(settings) as conn:
            for name in tables:
                pipe.schemas[TableId.parse(name)] = load_schema(conn, TableId.parse(name))
    return pipe


def _write(params: dict[str, Any], statements: list[str]) -> None:
    import pymysql
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(params["admin_conn_id"])
    with pymysql.connect(host=conn.host, port=int(conn.port), user=conn.login, password=conn.password or "",
                         database=params["database"], autocommit=True) as db, db.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


with DAG(
    dag_id="mysqlcdc_ui_fixture",
    schedule=None,
    catchup=False,
    params={
        "database": Param("demo", type="string"),
        "store": Param("/tmp/mysqlcdc-ui/chunks.db", type="string"),
        "output": Param("/tmp/mysqlcdc-ui/out", type="string"),
        "mysql_conn_id": Param("mysqlcdc_ui", type="string"),
        "admin_conn_id": Param("mysqlcdc_ui_admin", type="string"),
    },
) as dag:

    @task
    def plan(params: dict[str, Any], ti: Any) -> None:
        from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY, PipelineRecord

        pipe = _pipeline(params)
        db = params["database"]
        plans = pipe.plan([f"{db}.orders", f"{db}.items"])
        record = PipelineRecord(
            mysql_conn_id=params["mysql_conn_id"],
            chunk_store=pipe.store.display_url,
            output=params["output"],
            checkpoint=params["output"].rstrip("/") + "/_mysqlcdc_checkpoint",
            tables=tuple(str(p.table) for p in plans),
        )
        pipe.store.close()
        ti.xcom_push(key=XCOM_KEY, value=record.to_dict())

    @task
    def snapshot(params: dict[str, Any]) -> None:
        """Every chunk of ``orders`` (a write between chunks, so HWs differ); ``items`` with its last chunk
        failed."""
        from airflow_provider_mysqlcdc.engine.model.tables import TableId
        from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan

        db = params["database"]
        orders, items = TableId.parse(f"{db}.orders"), TableId.parse(f"{db}.items")
        pipe = _pipeline(params, tables=(str(orders), str(items)))
        orders_plan = load_plan(pipe.store, orders)
        for n, chunk in enumerate(orders_plan.chunks):
            pipe.snapshot(orders_plan, chunk.chunk_id)
            _write(params, [f"UPDATE orders SET qty = qty + 1 WHERE id = {n + 1}"])
        items_plan = load_plan(pipe.store, items)
        *done, failing = [c.chunk_id for c in items_plan.chunks]
        for chunk_id in done:
            pipe.snapshot(items_plan, chunk_id)
        pipe.store.start_chunk(str(items), items_plan.generation, failing)
        pipe.store.fail_chunk(str(items), items_plan.generation, failing, RuntimeError(FAILED_ERROR))
        pipe.store.close()

    @task
    def write_changes(params: dict[str, Any], statements: list[str]) -> None:
        _write(params, statements)

    @task
    def stream(params: dict[str, Any]) -> None:
        """Stream ``orders`` until caught up (the stream phase of the mirror)."""
        from airflow_provider_mysqlcdc.engine.model.tables import TableId

        orders = TableId.parse(f"{params['database']}.orders")
        pipe = _pipeline(params, tables=(str(orders),))
        pipe.tables = [orders]
        pipe.open_stream([orders])
        pipe.drain()
        pipe.store.close()

    before = write_changes.override(task_id="changes_before_stream")(
        statements=[
            "UPDATE orders SET qty = qty + 10 WHERE id <= 30",
            "INSERT INTO orders (id, qty) VALUES (1001, 1), (1002, 2)",
            "DELETE FROM orders WHERE id = 7",
        ]
    )
    after = write_changes.override(task_id="changes_after_stream")(
        statements=["UPDATE orders SET qty = qty + 100 WHERE id > 100"]
    )
    plan() >> snapshot() >> before >> stream() >> after
