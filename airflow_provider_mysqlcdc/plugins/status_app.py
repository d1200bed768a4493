"""The phase-monitoring page as a FastAPI app the Airflow API server mounts under ``/mysqlcdc``.

``GET /runs/{dag_id}/{run_id}`` (HTML) and ``GET /api/runs/{dag_id}/{run_id}`` (JSON) show, for one DAG run,
where each table of its pipeline stands. The run's plan task records the pipeline (``PipelineRecord``) in
XCom under ``mysqlcdc_pipeline``; this app reads that record from the metadata DB and hands the chunk store
and output root to the engine's ``collect_status``, which owns every number on the page.

Plugin apps get no authentication from Airflow, so each route depends on Airflow's own
``requires_access_dag``: the JWT from ``Authorization: Bearer`` or the UI's ``_token`` cookie, checked by the
configured auth manager for read access to the DAG's runs and XComs. Without a valid token there is a 401/403
and no data.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pymysql
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, Request, status
from fastapi.responses import HTMLResponse, JSONResponse
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, normalize_url
from airflow_provider_mysqlcdc.engine.chunks.groups import ChunkGroup
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import StatusReport, collect_status
from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY, PipelineRecord
from airflow_provider_mysqlcdc.plugins.run_tasks import (
    Action,
    TaskRow,
    load_task_rows,
    on_call_actions,
    planned_groups,
    repair_actions,
)
from airflow_provider_mysqlcdc.plugins.status_page import (
    DEFAULT_REFRESH_S,
    RunRef,
    render_login_required,
    render_no_pipeline,
    render_problem,
    render_status,
)

log = logging.getLogger(__name__)

URL_PREFIX = "/mysqlcdc"
NO_PIPELINE = "this DAG run has no MySQL CDC pipeline: its plan task has not run yet"
# The page must answer even when MySQL does not: cap the wait for the server's binlog position (lag only).
MYSQL_CONNECT_TIMEOUT_S = 5
# A page answers 503 after a short wait for an unreachable chunk store, not after the tasks' outage budget.
CHUNK_STORE_OUTAGE_S = 5.0

app = FastAPI(
    title="MySQL CDC status",
    description="Per DAG run: snapshot phase progress, stream position and lag of a MySQL CDC pipeline.",
    # No unauthenticated surface besides the routes' 401: no docs, no OpenAPI schema.
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)

# Read access to the DAG's runs and to its XComs (the pipeline record is an XCom), as the auth manager
# decides for this dag_id (the path parameter).
_READ_RUN = [
    Depends(requires_access_dag("GET", DagAccessEntity.RUN)),
    Depends(requires_access_dag("GET", DagAccessEntity.XCOM)),
]


class PageProblem(Exception):
    """Something the reader must fix or wait for; shown on the page (never a traceback)."""

    def __init__(self, status_code: int, title: str, message: str, record: PipelineRecord | None = None):
        super().__init__(f"{title}: {message}")
        self.status_code, self.title, self.message, self.record = status_code, title, message, record


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """What the page shows for one DAG run: its pipeline record (None: not planned yet) and the status."""

    record: PipelineRecord | None
    report: StatusReport | None = None
    notes: tuple[str, ...] = ()  # problems of this app (e.g. the MySQL connection), besides the report's
    tasks: tuple[TaskRow, ...] = ()  # the run's task instances (what to clear)
    groups: dict[int, ChunkGroup] = dataclasses.field(default_factory=dict)  # map index -> planned group

    @property
    def actions(self) -> list[Action]:
        """What finishes the run, from the task instances and the chunk store's failures."""
        return on_call_actions(self.tasks, self.report)

    @property
    def repairs(self) -> list[Action]:
        """What repairs the chunks verify found different: the snapshot tasks to clear, the command."""
        return repair_actions(self.tasks, self.report, self.groups)


# --- loading ------------------------------------------------------------------------------------------------


def find_pipeline_record(session: Session, dag_id: str, run_id: str) -> PipelineRecord | None:
    """The latest ``mysqlcdc_pipeline`` XCom of the run, from any task, mapped or not (a rerun of the plan
    task pushes a newer one)."""
    row = session.scalars(
        select(XComModel)
        .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == XCOM_KEY)
        .order_by(XComModel.timestamp.desc(), XComModel.map_index.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    value = XComModel.deserialize_value(row)
    if isinstance(value, str):  # stored as a JSON string by an older or custom XCom path
        value = json.loads(value)
    if not isinstance(value, dict):
        raise PageProblem(
            500, "Unreadable pipeline record",
            f"XCom {XCOM_KEY!r} of task {row.task_id!r} holds a {type(value).__name__}, not a dict",
        )
    try:
        return PipelineRecord.from_dict(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise PageProblem(
            500, "Unreadable pipeline record",
            f"XCom {XCOM_KEY!r} of task {row.task_id!r}: {type(exc).__name__}: {exc}",
        ) from None


def open_chunk_store(recorded: str) -> ChunkStore:
    """The chunk store the run recorded. A recorded URL has its password hidden; the real one then comes
    from ``$MYSQLCDC_CHUNK_STORE_URL`` on the API server, as on the workers. Never creates a store."""
    url = normalize_url(recorded)
    if url.password == "***":
        from_env = os.environ.get(CHUNK_STORE_URL_ENV)
        hidden = url.render_as_string(hide_password=True)
        if not from_env or normalize_url(from_env).render_as_string(hide_password=True) != hidden:
            raise PageProblem(
                503, "Chunk store password unavailable",
                f"the run recorded the chunk store {recorded} with its password hidden: set "
                f"${CHUNK_STORE_URL_ENV} to that URL (with the password) in the API server's environment, as "
                "on the workers",
            )
        url = normalize_url(from_env)
    if url.get_backend_name() == "sqlite" and url.database and not os.path.exists(url.database):
        raise PageProblem(
            503, "No chunk store",
            f"the chunk store {recorded} does not exist on the API server: the page needs the same file "
            "(or a shared database such as PostgreSQL) that the workers use",
        )
    try:
        return ChunkStore(url, outage_s=CHUNK_STORE_OUTAGE_S)
    except (CdcError, SQLAlchemyError) as exc:
        raise PageProblem(503, "Chunk store unavailable", _error_text(exc)) from None


def _error_text(exc: BaseException) -> str:
    """One line for the page: SQLAlchemy's messages carry the SQL and a help link after the first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


ConnFactory = Callable[[], pymysql.connections.Connection]


def mysql_settings(mysql_conn_id: str) -> tuple[MySQLSettings | None, str | None]:
    """The CDC user's settings for the server's binlog position, clock and expiry (lag, headroom), or None and
    why not. They carry the password; it goes to pymysql only, never to a message or a log line."""
    from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook

    try:
        settings = MySqlCdcHook(mysql_conn_id).settings()
    except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException, ConfigurationError: the page goes on
        return None, f"MySQL connection {mysql_conn_id!r} unavailable ({type(exc).__name__}: {exc}): no lag"
    timeout = min(settings.connect_timeout or MYSQL_CONNECT_TIMEOUT_S, MYSQL_CONNECT_TIMEOUT_S)
    return dataclasses.replace(settings, connect_timeout=timeout), None


def mysql_conn_factory(mysql_conn_id: str) -> tuple[ConnFactory | None, str | None]:
    """A connection factory for the server's binlog position (lag), or None and why not."""
    settings, note = mysql_settings(mysql_conn_id)
    if settings is None:
        return None, note
    return functools.partial(connect, settings), None


def run_record(session: Session, dag_id: str, run_id: str) -> PipelineRecord | None:
    """The run's pipeline record (None: its plan task has not run); PageProblem 404 for no such run."""
    exists = session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if exists is None:
        raise PageProblem(404, "No such DAG run", f"DAG {dag_id!r} has no run {run_id!r}")
    return find_pipeline_record(session, dag_id, run_id)


def run_status(record: PipelineRecord | None, dag_id: str = "", run_id: str = "") -> RunStatus:
    """The status of the recorded pipeline (from the chunk store, the output root and MySQL)."""
    if record is None:
        return RunStatus(None)
    try:
        return _collect(record)
    except PageProblem as problem:
        problem.record = record
        log.warning("MySQL CDC status of DAG run %s/%s: %s", dag_id, run_id, problem)
        raise


def load_run_status(session: Session, dag_id: str, run_id: str) -> RunStatus:
    """Everything the page shows for (dag_id, run_id); PageProblem when there is nothing to show."""
    return run_status(run_record(session, dag_id, run_id), dag_id, run_id)


def _collect(record: PipelineRecord) -> RunStatus:
    settings, conn_note = mysql_settings(record.mysql_conn_id)
    store = open_chunk_store(record.chunk_store)
    try:
        report = collect_status(store, record.output or None, list(record.tables) or None, settings=settings)
    except (CdcError, SQLAlchemyError) as exc:
        raise PageProblem(503, "Status unavailable", _error_text(exc)) from None
    except OSError as exc:  # the output root (object store credentials, a missing mount)
        raise PageProblem(503, "Output unreadable", _error_text(exc)) from None
    finally:
        store.close()
    return RunStatus(record, report, (conn_note,) if conn_note else ())


def _load(session: Session, dag_id: str, run_id: str) -> RunStatus:
    """For the routes: the record and task instances from the metadata DB, whose session is then released
    before the slow part (MySQL may take its connect timeout, an object store its time)."""
    record = run_record(session, dag_id, run_id)
    groups = planned_groups(session, dag_id, run_id)
    tasks = tuple(load_task_rows(session, dag_id, run_id, groups))
    session.close()
    return dataclasses.replace(run_status(record, dag_id, run_id), tasks=tasks, groups=groups)


# --- routes -------------------------------------------------------------------------------------------------


def _run_ref(dag_id: str, run_id: str) -> RunRef:
    json_url = f"{URL_PREFIX}/api/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"
    return RunRef(dag_id, run_id, json_url=json_url)


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse, dependencies=_READ_RUN)
def run_page(dag_id: str, run_id: str, session: SessionDep, refresh: int = DEFAULT_REFRESH_S) -> HTMLResponse:
    """The page for one DAG run (the UI's "MySQL CDC" tab of the run); it refreshes itself every ``refresh``
    seconds (at least 5; ``?refresh=0``: never)."""
    run = _run_ref(dag_id, run_id)
    try:
        loaded = _load(session, dag_id, run_id)
    except PageProblem as problem:
        return HTMLResponse(render_problem(run, problem.title, problem.message, problem.record),
                            status_code=problem.status_code)
    if loaded.record is None or loaded.report is None:
        return HTMLResponse(render_no_pipeline(run), status_code=status.HTTP_200_OK)
    page = render_status(run, loaded.record, loaded.report, notes=loaded.notes,
                         refresh=max(refresh, 5) if refresh > 0 else None, tasks=loaded.tasks,
                         actions=loaded.actions, repairs=loaded.repairs)
    return HTMLResponse(page)


@app.get("/api/runs/{dag_id}/{run_id:path}", dependencies=_READ_RUN)
def run_status_json(dag_id: str, run_id: str, session: SessionDep) -> JSONResponse:
    """The same as JSON: ``pipeline`` (the record; null before the plan task ran) and the status report."""
    head: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id}
    try:
        loaded = _load(session, dag_id, run_id)
    except PageProblem as problem:
        return JSONResponse(
            {**head, "pipeline": problem.record.to_dict() if problem.record else None,
             "error": {"title": problem.title, "detail": problem.message}},
            status_code=problem.status_code,
        )
    if loaded.record is None or loaded.report is None:
        return JSONResponse({**head, "pipeline": None, "detail": NO_PIPELINE})
    return JSONResponse({**head, "pipeline": loaded.record.to_dict(), **loaded.report.as_dict(),
                         "page_notes": list(loaded.notes),
                         "task_instances": [dataclasses.asdict(t) for t in loaded.tasks],
                         "actions": [a.as_dict() for a in loaded.actions],
                         "repair_actions": [a.as_dict() for a in loaded.repairs]})


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> HTMLResponse | JSONResponse:
    """401/403 from the auth dependency: JSON for the API route, a page with a login link for the HTML one."""
    root, path = request.scope.get("root_path", ""), request.url.path
    is_api = (path[len(root):] if root and path.startswith(root) else path).startswith("/api/")
    if is_api or exc.status_code not in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    from airflow.api_fastapi.app import get_auth_manager

    try:
        login = get_auth_manager().get_url_login(next_url=str(request.url))
    except Exception:  # noqa: BLE001 - an auth manager without a login URL: the link points at the UI
        login = "/"
    detail = "Log in to see this page." if exc.status_code == status.HTTP_401_UNAUTHORIZED else (
        "You may not read this DAG's runs." if exc.detail == "Forbidden" else str(exc.detail))
    return HTMLResponse(render_login_required(login, detail), status_code=exc.status_code)

