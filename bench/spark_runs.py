"""Where the suite's Spark jobs run: a standalone cluster of single-core executors, or local[n].

Each Spark measurement runs its driver in a fresh Python process (a fresh JVM: no warm caches carried from
one figure to the next); the suite passes it a JSON config and reads a JSON result back. The cluster's
master, worker and executors are started from the suite process, so the client CPU tree is rooted there
(``client_root``), not at the driver process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXECUTOR_MEMORY = "1g"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class SparkSetup:
    """``mode`` is ``cluster`` (standalone: one worker, n executors of one core each) or ``local``."""

    mode: str
    cluster: Any = None  # tests.support.spark_cluster.SparkStandaloneCluster
    note: str = ""

    @classmethod
    def start(cls, mode: str) -> SparkSetup:
        if mode == "local":
            return cls("local")
        from tests.support.spark_cluster import SparkStandaloneCluster

        started = time.perf_counter()
        # Two cores (the machine's), memory for two 1g executors plus their Python workers.
        cluster = SparkStandaloneCluster(worker_cores=os.cpu_count() or 2, worker_memory="4g")
        try:
            cluster.start(timeout=120.0)
        except Exception as exc:  # noqa: BLE001 - fall back to local mode and say so in the table
            cluster.stop()
            say(f"Spark standalone cluster did not start ({exc}); using local[n]")
            return cls("local", note=f"standalone cluster failed to start ({str(exc).splitlines()[0]})")
        say(f"Spark standalone cluster up in {time.perf_counter() - started:.0f}s at {cluster.master_url}")
        return cls("cluster", cluster)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def master(self, executors: int) -> str:
        return self.cluster.master_url if self.mode == "cluster" else f"local[{executors}]"

    def conf(self, executors: int) -> dict[str, str]:
        if self.mode != "cluster":
            return {}
        return {"spark.executor.cores": "1", "spark.cores.max": str(executors),
                "spark.executor.memory": EXECUTOR_MEMORY, "spark.driver.host": "127.0.0.1"}

    def label(self, executors: int) -> str:
        if self.mode == "cluster":
            return f"standalone, {executors} x 1-core executor{'s' if executors > 1 else ''}"
        return f"local[{executors}]"

    def describe(self) -> str:
        if self.mode == "cluster":
            return ("Spark standalone cluster on this machine (1 master, 1 worker; n executors of 1 core and "
                    f"{EXECUTOR_MEMORY} each; driver in its own process)")
        return ("Spark local[n] (driver and n task threads in one JVM)"
                + (f"; {self.note}" if self.note else ""))

    def child_config(self, executors: int) -> dict[str, Any]:
        """What a driver process needs to build its session and measure the client tree."""
        return {"master": self.master(executors), "spark_conf": self.conf(executors),
                "label": self.label(executors), "client_root": os.getpid()}


def run_child(script: Path, cfg: dict[str, Any], run_dir: Path, flag: str = "--child") -> dict[str, Any]:
    """Run ``script flag config.json`` in a fresh interpreter; it writes ``cfg['result']``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {**cfg, "result": str(run_dir / "result.json")}
    cfg_path = run_dir / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    subprocess.run([sys.executable, str(script), flag, str(cfg_path)], check=True)
    return json.loads(Path(cfg["result"]).read_text())


def child_session(cfg: dict[str, Any], app_name: str, conf: dict[str, str] | None = None) -> Any:
    """The driver's session (in the child process), quiet, without UI."""
    from airflow_provider_mysqlcdc.spark.session import build_session

    spark = build_session(master=cfg["master"], app_name=app_name,
                          conf={"spark.ui.enabled": "false", **cfg.get("spark_conf", {}), **(conf or {})})
    spark.sparkContext.setLogLevel("ERROR")
    return spark
