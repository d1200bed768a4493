"""Waiting for the DAG run's group runner to run one chunk group, in the triggerer: no worker slot is held.

The snapshot task hands its group to the runner (a row in the chunk store) and defers on this trigger, which
looks at the row and at the runner's heartbeat every ``poll_interval`` seconds and fires once the group is
done or failed, or once the runner is gone (stopped, dead, replaced): then the task runs the group itself.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import request_outcome
from airflow_provider_mysqlcdc.pipeline.settings import chunk_store_url


class GroupRequestTrigger(BaseTrigger):
    """Fires ``{"outcome", "detail", "request_id", "echo"}`` when the request is finished or cannot be any
    more.

    :param chunk_store: the chunk store as the task was given it (None: ``$MYSQLCDC_CHUNK_STORE_URL`` or the
        SQLite file of a local ``output_path``, resolved in the triggerer; a password stays out of the
        trigger's arguments that way).
    :param output_path: the output root.
    :param scope: the DAG run's runner scope, ``<dag_id>/<run_id>``.
    :param request_id: the task's request.
    :param poll_interval: seconds between looks at the chunk store.
    :param echo: returned as it is in the event (``"echo"``): what the task needs back when it resumes
        (``dag.test()`` resumes a task with the event only, without the arguments it deferred with).
    """

    def __init__(self, *, chunk_store: str | None, output_path: str, scope: str, request_id: str,
                 poll_interval: float = 2.0, echo: Any = None) -> None:
        super().__init__()
        self.chunk_store, self.output_path = chunk_store, output_path
        self.scope, self.request_id, self.poll_interval = scope, request_id, float(poll_interval)
        self.echo = echo

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "chunk_store": self.chunk_store, "output_path": self.output_path, "scope": self.scope,
            "request_id": self.request_id, "poll_interval": self.poll_interval, "echo": self.echo})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        url = chunk_store_url(self.chunk_store, self.output_path)
        store = await asyncio.to_thread(ChunkStore, url)
        started, state = time.monotonic(), None
        # a first look only after a poll interval: an event that comes before the scheduler has taken the
        # deferral in fails the try on Airflow 3.3 (apache/airflow#67287); the task waited in place first
        try:
            await asyncio.sleep(self.poll_interval)
            while True:
                request, runner = await asyncio.to_thread(self._look, store)
                if request is not None and request.state != state:
                    state = request.state
                    self.log.info("group %s: %s on runner %s (%.0f s)", request.name, state,
                                  request.runner_id or "(not taken yet)", time.monotonic() - started)
                outcome = request_outcome(request, runner)
                if outcome is not None:
                    yield TriggerEvent({"outcome": outcome[0], "detail": outcome[1],
                                        "request_id": self.request_id, "echo": self.echo})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.close)

    def _look(self, store: ChunkStore) -> tuple[Any, Any]:
        return store.group_request(self.request_id), store.runner(self.scope)
