"""What the stream's executor Python workers import, and their warm-up before the first batch
(``spark/stream/warmup.py``): each new worker pays its imports before the batch's task reads a byte."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# the driver's modules: the changelog commit (Delta, pyarrow.dataset, pandas) and the chunk store (SQLAlchemy)
DRIVER_ONLY = ("sqlalchemy", "pandas", "pyarrow.dataset",
               "airflow_provider_mysqlcdc.engine.lake.changelog_commit")


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True,
                         text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_changelog_writer_imports_no_driver_module():
    """An executor unpickling ``PartitionWriter`` (with its ``ZeroDateLayouts``) imports neither the commit
    nor the chunk store: 0.1 s instead of ~1 s per new Python worker, more under load."""
    loaded = _run(f"""
        import json, sys
        import airflow_provider_mysqlcdc.spark.stream.changelog_sink
        import airflow_provider_mysqlcdc.spark.stream.zero_date_layouts
        print(json.dumps({{m: m in sys.modules for m in {DRIVER_ONLY!r}}}))
    """)
    assert loaded == {m: False for m in DRIVER_ONLY}


def test_warm_executors_leaves_python_workers_with_the_engine_imported():
    """A fresh application: a Python worker has not imported the engine; after ``warm_executors`` the worker a
    job gets (reused) has."""
    seen = _run("""
        import json, sys
        from airflow_provider_mysqlcdc.spark.session import build_session
        from airflow_provider_mysqlcdc.spark.stream.warmup import warm_executors

        spark = build_session("local[1]", "warm-up test", {"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")

        def probe(batches):
            import pyarrow as pa
            for _ in batches:
                pass
            loaded = "airflow_provider_mysqlcdc.engine.stream.change_stream" in sys.modules
            yield pa.RecordBatch.from_pydict({"loaded": [loaded]})

        def loaded():
            return spark.range(1, numPartitions=1).mapInArrow(probe, "loaded boolean").collect()[0][0]

        before = loaded()
        thread = warm_executors(spark)
        thread.join(timeout=240)
        again = warm_executors(spark)
        print(json.dumps({"before": before, "after": loaded(), "again": again is None}))
        spark.stop()
    """)
    assert seen == {"before": False, "after": True, "again": True}
