"""One Spark application that runs the chunk groups of a DAG run as its snapshot tasks hand them over.

Started once per DAG run (``spark_apps/snapshot_runner.py``), it registers in the chunk store and takes the
groups requested there (``engine/chunk_store/group_runs.py``), a few at once, each as one Spark job on a
thread of its own (``chunk_group.run_snapshot``, exactly as a ``spark-submit`` of the group would run it):
the groups pay for Spark's start once, not once each. A heartbeat thread keeps the registration alive and
learns when the runner is asked to stop; the runner then finishes the groups it has and leaves. It also
leaves after ``idle_s`` with nothing to do, so a DAG run that never stops it holds no cluster forever.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import InheritableThread

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import HEARTBEAT_S, STOPPING, GroupRequest

log = logging.getLogger(__name__)

_STORE_FAILED = "the chunk store failed"
RunGroup = Callable[[Sequence[str]], dict[str, Any]]  # the group's application arguments -> its result


@dataclass(frozen=True)
class RunnerSettings:
    scope: str  # "<dag_id>/<run_id>"
    runner_id: str
    concurrency: int = 4  # groups run at once (each one Spark job; Spark shares the cores among them)
    idle_s: float = 1800.0  # leave after this long with no group to run
    poll_s: float = 0.5  # how often the queue is looked at


class GroupRunnerLoop:
    """Takes the scope's queued groups and runs them with ``run_group`` until asked to stop."""

    def __init__(self, store: ChunkStore, settings: RunnerSettings, run_group: RunGroup,
                 say: Callable[[str], None] = print) -> None:
        self.store, self.settings, self.run_group, self.say = store, settings, run_group, say
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()  # asked to stop, or replaced
        self._why_stop = "asked to stop"
        self.served = 0
        self.failed = 0

    def serve(self) -> str:
        """Run groups until asked to stop (then finish those running) or idle for ``idle_s``; returns why it
        stopped. Records the end in the store (a crash is recorded by the caller)."""
        s = self.settings
        beat = threading.Thread(target=self._heartbeat, daemon=True, name="mysqlcdc-runner-heartbeat")
        self._beat_once()
        beat.start()
        self.say(f"group runner {s.runner_id} serving {s.scope} ({s.concurrency} group(s) at once)")
        idle_since = time.monotonic()
        while True:
            with self._lock:
                running = len(self._running)
            if self._stop.is_set():
                if not running:
                    why = self._why_stop
                    break
            else:
                for request in self.store.take_groups(s.scope, s.runner_id, s.concurrency - running):
                    self._start(request)
                    running += 1
            if running:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > s.idle_s:
                why = f"idle for {s.idle_s:g} s"
                break
            time.sleep(s.poll_s)
        self._stop.set()
        beat.join(timeout=HEARTBEAT_S * 3)
        summary = f"{why}; ran {self.served} group(s), {self.failed} failed"
        self.store.runner_ended(s.scope, s.runner_id, failed=why == _STORE_FAILED, detail=summary)
        self.say(f"group runner {s.runner_id} stopped: {summary}")
        return summary

    def _start(self, request: GroupRequest) -> None:
        self.say(f"running {request.name} for {request.task} (request {request.request_id})")
        thread = InheritableThread(target=self._run, args=(request,), daemon=True,
                                   name=f"mysqlcdc-group-{request.request_id[:8]}")
        with self._lock:
            self._running[request.request_id] = thread
        thread.start()

    def _run(self, request: GroupRequest) -> None:
        started = time.monotonic()
        try:
            try:
                result = self.run_group(request.args)
            except Exception as exc:  # noqa: BLE001 - the group's task reads it and reports it
                with self._lock:
                    self.failed += 1
                error = f"{type(exc).__name__}: {exc}"
                self.store.finish_group(request.request_id, self.settings.runner_id, error=error)
                self.say(f"{request.name} failed after {time.monotonic() - started:.1f}s: {error}")
                return
            with self._lock:
                self.served += 1
            self.store.finish_group(request.request_id, self.settings.runner_id, result=result)
            self.say(f"{request.name} {'done' if result.get('ok') else 'ended with failed chunks'} in "
                     f"{time.monotonic() - started:.1f}s")
        except Exception:  # the store itself failed: the task sees the runner's heartbeat stop
            log.exception("group runner: could not record the end of %s", request.name)
            self._why_stop = _STORE_FAILED
            self._stop.set()
        finally:
            with self._lock:
                self._running.pop(request.request_id, None)

    def _beat_once(self) -> None:
        state = self.store.runner_heartbeat(self.settings.scope, self.settings.runner_id)
        if state is None:
            self._why_stop = "replaced by another runner of the scope"
            self._stop.set()
        elif state == STOPPING:
            self._stop.set()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat_once()
            except Exception:  # the store retries outages itself; this one gave up
                log.exception("group runner: heartbeat failed")
        try:  # while the last groups finish after a stop: keep saying so
            while True:
                with self._lock:
                    if not self._running:
                        return
                self.store.runner_heartbeat(self.settings.scope, self.settings.runner_id)
                time.sleep(HEARTBEAT_S)
        except Exception:
            log.exception("group runner: heartbeat failed")
