"""Chunk groups handed to an application that is already running: the registry of such *group runners* and
the queue of the groups handed to them.

A DAG run's snapshot tasks (one per chunk group) need not each start a Spark application: one runner per DAG
run (its *scope*, ``<dag_id>/<run_id>``) is started once, registers here, and takes the groups the tasks
request, oldest first, a few at a time. A task waits on its request's row (``queued`` -> ``running`` ->
``done`` | ``failed``), and on the runner's heartbeat: a runner whose heartbeat stops is gone, and so is what
it was running (the task then runs its group some other way). The chunks themselves are recorded as always
(``attempts``): a request's result only says that the runner finished with it.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase, utc_now
from airflow_provider_mysqlcdc.engine.chunk_store.records import aware_utc
from airflow_provider_mysqlcdc.engine.chunk_store.schema import (
    JSON_VERSION,
    MAX_ERROR_CHARS,
    group_requests_table,
    runners_table,
)

# a runner's states
STARTING, SERVING, STOPPING, STOPPED, RUNNER_FAILED = "starting", "serving", "stopping", "stopped", "failed"
RUNNER_ACTIVE = (STARTING, SERVING, STOPPING)  # states a runner leaves by recording its end
# a request's states
QUEUED, TAKEN, DONE, REQUEST_FAILED, WITHDRAWN = "queued", "running", "done", "failed", "withdrawn"
FINISHED = (DONE, REQUEST_FAILED, WITHDRAWN)

HEARTBEAT_S = 2.0  # how often a runner says it is alive
STALE_S = 60.0  # a runner silent for longer is gone (a driver paused that long is as good as dead)
START_S = 600.0  # how long a runner may take to start serving (a Spark application on a busy cluster)


def scope_key(scope: str) -> str:
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GroupRunner:
    """A runner as registered: which incarnation, its state, and when it last said it was alive."""

    scope: str
    runner_id: str
    state: str
    source: str  # the MySQL URL it reads with, without a password
    host: str
    pid: int | None
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    detail: str | None

    def alive(self, now: datetime | None = None) -> bool:
        """Starting (for up to ``START_S``), serving or stopping, and heard from within ``STALE_S``."""
        if self.state not in RUNNER_ACTIVE:
            return False
        age = ((now or aware_utc(utc_now())) - self.heartbeat_at).total_seconds()
        return age < (START_S if self.state == STARTING else STALE_S)

    def takes_groups(self, now: datetime | None = None) -> bool:
        """Alive and not asked to stop: a group handed to it now will be run."""
        return self.state in (STARTING, SERVING) and self.alive(now) and not self.process_gone()

    def process_gone(self) -> bool:
        """Its process ran on this host and has ended (a runner killed hard says nothing: its heartbeat would
        take ``STALE_S`` to tell)."""
        if self.pid is None or self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:  # ended, but its parent has not reaped it yet
            with open(f"/proc/{self.pid}/stat", encoding="ascii", errors="replace") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return False

    def gone_reason(self) -> str:
        """Why it runs no more groups, in words."""
        if self.state in RUNNER_ACTIVE and self.process_gone():
            return f"its process {self.pid} on {self.host} has ended"
        if self.state in (STOPPED, RUNNER_FAILED):
            return f"it {self.state}" + (f": {self.detail}" if self.detail else "")
        limit = START_S if self.state == STARTING else STALE_S
        return (f"it has not been heard from since {self.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC (more than "
                f"{limit:g} s; its process on {self.host} died or hangs)")


@dataclass(frozen=True)
class GroupRequest:
    """One chunk group handed to the runner of a scope, and what became of it."""

    request_id: str
    task: str  # the task instance that asked, e.g. "snapshot_chunk_group[3]"
    name: str  # the group's name
    args: tuple[str, ...]  # the snapshot application's arguments for the group (no secret among them)
    state: str
    runner_id: str | None
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    result: dict[str, Any] | None
    error: str | None
    runner_gone: bool  # failed because its runner went away (stopped, died, replaced), not its group

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class GroupRuns(StoreDatabase):
    """Registering runners, handing them groups, and following both."""

    # --- runners --------------------------------------------------------------------------------------------

    def register_runner(self, scope: str, runner_id: str, *, source: str, host: str, pid: int | None,
                        detail: str | None = None) -> GroupRunner:
        """``runner_id`` is the scope's runner from now on (``starting``); an earlier one of the scope is
        forgotten, and the groups it was running or had not taken yet fail, naming the new runner."""
        key, now = scope_key(scope), utc_now()
        r = runners_table.c

        def work(conn: Connection, _retry: bool) -> None:
            old = conn.execute(sa.select(r.runner_id).where(r.scope_key == key)).scalar()
            if old is not None and old != runner_id:
                self._fail_open_requests(conn, key, f"the scope's runner was replaced by {runner_id}")
            conn.execute(sa.delete(runners_table).where(r.scope_key == key))
            conn.execute(sa.insert(runners_table).values(
                scope_key=key, scope=scope, runner_id=runner_id, state=STARTING, source=source, host=host,
                pid=pid, started_at=now, heartbeat_at=now, finished_at=None, detail=detail))

        self._write(work)
        found = self.runner(scope)
        assert found is not None
        return found

    def note_runner_pid(self, scope: str, runner_id: str, pid: int) -> None:
        """The process the runner runs in, once it is started (on the host it registered)."""
        r = runners_table.c
        self._write(lambda conn, _retry: conn.execute(sa.update(runners_table).where(
            r.scope_key == scope_key(scope), r.runner_id == runner_id).values(pid=int(pid))))

    def runner(self, scope: str) -> GroupRunner | None:
        row = self._read_tx(lambda conn: conn.execute(
            sa.select(runners_table).where(runners_table.c.scope_key == scope_key(scope))).mappings().first())
        return None if row is None else _runner(row)

    def runner_heartbeat(self, scope: str, runner_id: str) -> str | None:
        """The runner is alive (``starting`` becomes ``serving``); returns its state now (``stopping``: asked
        to stop), or None when the scope has another runner now (this one must stop at once)."""
        key = scope_key(scope)
        r = runners_table.c

        def work(conn: Connection, _retry: bool) -> str | None:
            mine = (r.scope_key == key) & (r.runner_id == runner_id)
            state = conn.execute(sa.select(r.state).where(mine)).scalar()
            if state is None:
                return None
            new = SERVING if state == STARTING else state
            conn.execute(sa.update(runners_table).where(mine).values(state=new, heartbeat_at=utc_now()))
            return str(new)

        return self._write(work)

    def stop_runner(self, scope: str) -> GroupRunner | None:
        """Ask the scope's runner to stop once its running groups are done (it takes no new one)."""
        r = runners_table.c
        self._write(lambda conn, _retry: conn.execute(
            sa.update(runners_table).where(r.scope_key == scope_key(scope), r.state.in_((STARTING, SERVING)))
            .values(state=STOPPING)))
        return self.runner(scope)

    def runner_ended(self, scope: str, runner_id: str, *, failed: bool, detail: str | None) -> None:
        """The runner stops (``stopped``, or ``failed`` with why); what it took and did not finish fails."""
        key = scope_key(scope)
        r = runners_table.c

        def work(conn: Connection, _retry: bool) -> None:
            mine = conn.execute(sa.select(r.runner_id).where(r.scope_key == key)).scalar() == runner_id
            if not mine:
                return
            conn.execute(sa.update(runners_table).where(r.scope_key == key, r.runner_id == runner_id).values(
                state=RUNNER_FAILED if failed else STOPPED, finished_at=utc_now(),
                detail=(detail or "")[:MAX_ERROR_CHARS] or None))
            self._fail_open_requests(conn, key, f"its runner {'failed' if failed else 'stopped'}"
                                     + (f": {detail}" if detail else ""), runner_id=runner_id)

        self._write(work)

    # --- requests -------------------------------------------------------------------------------------------

    def request_group(self, scope: str, request_id: str, *, task: str, name: str,
                      args: Sequence[str]) -> GroupRequest:
        """Queue a group for the scope's runner (once: asking again with the same id returns the request as it
        is). Queued requests of the same task that were never taken are withdrawn: only a task's latest try
        counts."""
        key = scope_key(scope)
        q = group_requests_table.c
        payload = json.dumps({"v": JSON_VERSION, "args": list(args)}, separators=(",", ":"))

        def work(conn: Connection, _retry: bool) -> None:
            if conn.execute(sa.select(q.request_id).where(q.request_id == request_id)).first() is not None:
                return
            conn.execute(sa.update(group_requests_table).where(
                q.scope_key == key, q.task == task, q.state == QUEUED).values(
                state=WITHDRAWN, finished_at=utc_now(),
                result_json=_json({"error": "a later try asked again"})))
            conn.execute(sa.insert(group_requests_table).values(
                request_id=request_id, scope_key=key, task=task, name=name, arguments_json=payload,
                state=QUEUED, runner_id=None, requested_at=utc_now()))

        self._write(work)
        found = self.group_request(request_id)
        assert found is not None
        return found

    def group_request(self, request_id: str) -> GroupRequest | None:
        row = self._read_tx(lambda conn: conn.execute(sa.select(group_requests_table).where(
            group_requests_table.c.request_id == request_id)).mappings().first())
        return None if row is None else _request(row)

    def take_groups(self, scope: str, runner_id: str, limit: int) -> list[GroupRequest]:
        """Up to ``limit`` queued requests of the scope, oldest first, now ``running`` on ``runner_id``; none
        if the scope's runner is another one or was asked to stop."""
        if limit <= 0:
            return []
        key = scope_key(scope)
        q, r = group_requests_table.c, runners_table.c

        def work(conn: Connection, _retry: bool) -> list[str]:
            state = conn.execute(self._lock(sa.select(r.state).where(
                r.scope_key == key, r.runner_id == runner_id))).scalar()
            if state not in (STARTING, SERVING):
                return []
            ids = list(conn.execute(self._lock(
                sa.select(q.request_id).where(q.scope_key == key, q.state == QUEUED)
                .order_by(q.requested_at, q.request_id).limit(limit))).scalars())
            if ids:
                conn.execute(sa.update(group_requests_table).where(q.request_id.in_(ids), q.state == QUEUED)
                             .values(state=TAKEN, runner_id=runner_id, started_at=utc_now()))
            return ids

        taken = self._write(work)
        found = [self.group_request(i) for i in taken]
        return [g for g in found if g is not None]

    def finish_group(self, request_id: str, runner_id: str, *, result: dict[str, Any] | None = None,
                     error: str | None = None) -> None:
        """The runner is done with a request: ``done`` with the application's result, or ``failed`` with why
        (a request another runner owns now, or already failed, is left as it is)."""
        q = group_requests_table.c
        body = {"result": result} if error is None else {"error": error[:MAX_ERROR_CHARS], "result": result}
        self._write(lambda conn, _retry: conn.execute(sa.update(group_requests_table).where(
            q.request_id == request_id, q.runner_id == runner_id, q.state == TAKEN).values(
            state=DONE if error is None else REQUEST_FAILED, finished_at=utc_now(), result_json=_json(body))))

    def _fail_open_requests(self, conn: Connection, key: str, why: str, *,
                            runner_id: str | None = None) -> None:
        """Fail the scope's requests not finished (queued ones too when the runner is replaced or ends: nobody
        would take them)."""
        q = group_requests_table.c
        open_ = q.state.in_((QUEUED, TAKEN)) if runner_id is None else sa.or_(
            q.state == QUEUED, sa.and_(q.state == TAKEN, q.runner_id == runner_id))
        conn.execute(sa.update(group_requests_table).where(q.scope_key == key, open_).values(
            state=REQUEST_FAILED, finished_at=utc_now(), result_json=_json({"error": why[:MAX_ERROR_CHARS],
                                                                             "runner_gone": True})))


def _json(body: dict[str, Any]) -> str:
    return json.dumps({"v": JSON_VERSION, **body}, separators=(",", ":"), default=str)


def _runner(row: RowMapping) -> GroupRunner:
    return GroupRunner(
        scope=row["scope"], runner_id=row["runner_id"], state=row["state"], source=row["source"],
        host=row["host"], pid=None if row["pid"] is None else int(row["pid"]),
        started_at=aware_utc(row["started_at"]), heartbeat_at=aware_utc(row["heartbeat_at"]),
        finished_at=aware_utc(row["finished_at"]), detail=row["detail"])


def _request(row: RowMapping) -> GroupRequest:
    args = json.loads(row["arguments_json"])["args"]
    body = json.loads(row["result_json"]) if row["result_json"] else {}
    return GroupRequest(
        request_id=row["request_id"], task=row["task"], name=row["name"], args=tuple(args),
        state=row["state"],
        runner_id=row["runner_id"], requested_at=aware_utc(row["requested_at"]),
        started_at=aware_utc(row["started_at"]), finished_at=aware_utc(row["finished_at"]),
        result=body.get("result"), error=body.get("error"), runner_gone=bool(body.get("runner_gone")))



GONE = "runner_gone"


def request_outcome(request: GroupRequest | None, runner: GroupRunner | None,
                    now: datetime | None = None) -> tuple[str, str] | None:
    """What a task waiting on ``request`` learns now: None (wait on), or (outcome, detail): ``done``,
    ``failed`` (the group's own error), ``withdrawn``, or ``runner_gone`` (nobody will finish it: the task
    must run the group some other way)."""
    if request is None:
        return GONE, "its request is not in the chunk store (was the store replaced?)"
    if request.finished:
        if request.runner_gone:
            return GONE, request.error or "its runner went away"
        return request.state, request.error or ""
    if runner is None:
        return GONE, "the DAG run has no group runner any more"
    mine = request.runner_id is None or request.runner_id == runner.runner_id
    if not mine:
        return GONE, f"the runner that took it ({request.runner_id}) was replaced by {runner.runner_id}"
    if not runner.alive(now) or runner.process_gone() or (
            request.state == QUEUED and not runner.takes_groups(now)):
        return GONE, f"the group runner will not run it: {runner.gone_reason()}"
    return None
