"""A throwaway Spark standalone cluster (one master, one worker) from the installed PySpark, for tests.

Proves that nothing depends on local mode: executors are separate JVMs with their own Python workers, paths
and pickling go over the wire.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from airflow_provider_mysqlcdc.testing.mariadb import _die_with_parent, free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkStandaloneCluster:
    worker_cores: int = 2
    worker_memory: str = "1g"
    workdir: Path | None = None
    port: int = 0
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            PYSPARK_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.workdir),
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _start(self, name: str, args: list[str]) -> Path:
        assert self.workdir is not None
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as handle:  # the child keeps its own copy
            self.processes.append(
                subprocess.Popen(
                    [str(spark_home() / "bin" / "spark-class"), *args], stdout=handle,
                    stderr=subprocess.STDOUT, env=self._env(),
                    preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl(), which takes no lock
                )
            )
        return log

    def start(self, timeout: float = 90.0) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix="mysqlcdc-spark-"))
        self.port = self.port or free_port()
        master_log = self._start(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
             "--webui-port", str(free_port())],
        )
        self._wait(master_log, r"I have been elected leader|Starting Spark master", timeout)
        worker_log = self._start(
            "worker",
            ["org.apache.spark.deploy.worker.Worker", self.master_url, "--cores", str(self.worker_cores),
             "--memory", self.worker_memory, "--webui-port", str(free_port()),
             "--work-dir", str(self.workdir / "work")],
        )
        self._wait(worker_log, r"Successfully registered with master", timeout)
        return self

    def _wait(self, log: Path, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if re.search(pattern, text):
                return
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"a Spark daemon exited:\n{text[-3000:]}")
            time.sleep(0.5)
        raise RuntimeError(f"Spark daemon not ready within {timeout:.0f}s:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        self.processes.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
