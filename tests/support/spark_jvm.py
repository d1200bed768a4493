"""JVM options for every Spark JVM the suite starts: a Spark start costs less than half its CPU time.

The suite starts dozens of Spark applications (``spark-submit`` from Airflow tasks and stream apps, the shared
session, a standalone cluster). In ours the JVM only schedules: chunks are read and written in Python
workers. Measured here on an empty ``spark-submit`` (local[2]): 6.3 s and 8.3 CPU-s with the JVM's defaults,
5.3 s / 4.8 CPU-s with the client compiler only and the serial collector, 4.4 s / 4.0 CPU-s with a class data
sharing archive of Spark's classes besides. The archive is made once per PySpark and Java version, under the
environment's prefix (about 110 MB, 15 s); an unusable one is ignored by the JVM, quietly.

``SPARK_SUBMIT_OPTS`` reaches the JVM of ``spark-submit`` (the driver in client mode, so local[n] executors
too), ``SPARK_LAUNCHER_OPTS`` its command builder, ``SPARK_DAEMON_JAVA_OPTS`` a standalone master and worker.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FAST_START = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xlog:cds*=off"]
ENV_VARS = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS")
_ARCHIVE_DIR = Path(sys.prefix) / "share" / "mysqlcdc-tests"

# Loads the classes a typical run of ours needs: a session, an RDD job, a DataFrame through mapInArrow.
_WARM_UP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("class-archive").getOrCreate()
spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
spark.range(10).mapInArrow(lambda batches: batches, "id long").collect()
spark.stop()
"""


def archive_path() -> Path:
    import pyspark

    java = subprocess.run(["java", "-version"], check=False, capture_output=True, text=True).stderr
    key = hashlib.sha256(f"{pyspark.__version__}\n{java}\n{FAST_START}".encode()).hexdigest()[:12]
    return _ARCHIVE_DIR / f"spark-{pyspark.__version__}-{key}.jsa"


def ensure_archive() -> Path | None:
    """The class archive, made now if missing; None if it cannot be made (Spark then starts without it)."""
    path = archive_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    with tempfile.TemporaryDirectory() as work:
        app = Path(work) / "warm_up.py"
        app.write_text(_WARM_UP)
        env = {**os.environ,
               "SPARK_SUBMIT_OPTS": " ".join([*FAST_START, f"-XX:ArchiveClassesAtExit={partial}"]),
               "PYSPARK_PYTHON": sys.executable}
        spark_submit = Path(sys.executable).parent / "spark-submit"
        done = subprocess.run([str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                               str(app)], check=False, env=env, capture_output=True, cwd=work, timeout=300)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        return None
    partial.replace(path)  # atomic: a concurrent run sees the whole archive or none
    return path


def jvm_environment() -> dict[str, str]:
    """The variables to set for the suite (an existing value of one is kept in front)."""
    options = list(FAST_START)
    archive = ensure_archive()
    if archive is not None:
        options.append(f"-XX:SharedArchiveFile={archive}")
    return {name: " ".join([os.environ.get(name, ""), *options]).strip() for name in ENV_VARS}


if __name__ == "__main__":  # make setup: build the archive ahead of the first test run
    print(ensure_archive() or "no class archive (Spark starts without one)")
