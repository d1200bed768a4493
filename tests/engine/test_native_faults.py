"""A native abort leaves a readable error (issue 38, point 5): the ``mysqlcdc`` command and our Spark
sessions turn Python's fault handler on, so a SIGABRT from native code (pyarrow's C++ ``terminate called
without an active exception``, delta-rs, connectorx) prints the Python stack of every thread; and a Spark
Python worker that dies so reports its stack in the task's error."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from airflow_provider_mysqlcdc.engine.common.native_faults import WORKER_CONF


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_an_abort_in_a_command_prints_every_threads_python_stack():
    """As when a native library aborts while the mirror refresh runs in a worker thread: the stack names the
    function each thread was in (here the thread's own and the main thread's wait)."""
    done = _run("""
        import os, threading
        from airflow_provider_mysqlcdc.cli.main import main

        try:
            main(["--version"])
        except SystemExit:
            pass

        def refreshing_the_mirror():
            os.abort()  # what libstdc++'s std::terminate ends in

        worker = threading.Thread(target=refreshing_the_mirror)
        worker.start()
        worker.join()
    """)
    assert done.returncode != 0
    assert "Fatal Python error: Aborted" in done.stderr, done.stderr
    assert "in refreshing_the_mirror" in done.stderr, done.stderr
    assert "Current thread" in done.stderr and "Thread 0x" in done.stderr, done.stderr  # both threads


def test_without_the_command_no_stack_is_printed():
    """The control: the same abort outside ``mysqlcdc`` says nothing but the signal."""
    done = _run("""
        import os
        os.abort()
    """)
    assert done.returncode != 0
    assert "Fatal Python error" not in done.stderr


def test_spark_sessions_ask_for_the_workers_stack(spark):
    """Our sessions carry ``WORKER_CONF`` (``build_session``, the CLI's stream session, the operators'
    spark-submit conf), and with it a Python worker that aborts reports its Python stack in the task error."""
    from airflow_provider_mysqlcdc.operators.spark_submit import DEFAULT_CONF

    assert WORKER_CONF.items() <= DEFAULT_CONF.items()
    assert spark.sparkContext.getConf().get("spark.python.worker.faulthandler.enabled") == "true"

    def reading_a_chunk(_):
        import os

        os.abort()

    with pytest.raises(Exception) as failed:
        spark.sparkContext.parallelize([1], 1).map(reading_a_chunk).collect()
    assert "Fatal Python error: Aborted" in str(failed.value), str(failed.value)[:2000]
    assert "reading_a_chunk" in str(failed.value)
