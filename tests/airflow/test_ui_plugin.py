"""The UI plugin end to end: a finished DAG run of a real pipeline, a real ``airflow api-server``, Chromium.

One DAG run (``tests/airflow/dags/mysqlcdc_ui_fixture.py``: ``orders`` streaming, ``items`` with a failed
chunk) and one API server per module (its start-up is the slow part). The page must show exactly what the
engine's ``collect_status`` reports for the same chunk store and output, only to a logged-in user allowed to
read the DAG, and never the MySQL password (neither in the page nor in the server's log).
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import StatusReport, collect_status
from airflow_provider_mysqlcdc.engine.status.table_status import SNAPSHOT, STREAM, TableStatus
from airflow_provider_mysqlcdc.plugins.status_page import lag_text, stream_text
from tests.support.airflow_server import AirflowApiServer
from tests.support.airflow_ui import login
from tests.support.browser import chromium
from tests.support.servers import airflow_connection

DATABASE = "t_ui_plugin"
MYSQL_CONN_ID, ADMIN_CONN_ID = "mysqlcdc_ui", "mysqlcdc_ui_admin"
SCREENSHOTS = os.environ.get("MYSQLCDC_UI_SCREENSHOTS")  # a directory: keep what the browser saw
NO_PIPELINE = "this dag run has no mysql cdc pipeline: its plan task has not run yet"


def _run_path(dag_id: str, run_id: str, api: bool = False) -> str:
    return f"/mysqlcdc{'/api' if api else ''}/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


@dataclass(frozen=True)
class FinishedRun:
    dag_id: str
    run_id: str
    store: str
    output: str
    tables: tuple[str, ...]
    settings: MySQLSettings

    def expected(self) -> StatusReport:
        """What the engine says now, for the same store and output (the page must show the same)."""
        with ChunkStore(self.store) as store:
            return collect_status(store, self.output, list(self.tables), lambda: connect(self.settings))

    @property
    def page_path(self) -> str:
        return _run_path(self.dag_id, self.run_id)

    @property
    def api_path(self) -> str:
        return _run_path(self.dag_id, self.run_id, api=True)


def _conn_env(settings: MySQLSettings, **override: Any) -> str:
    """An Airflow connection (type mysql) as the JSON of ``AIRFLOW_CONN_<ID>``."""
    return json.dumps({**json.loads(airflow_connection(settings)), **override})


@pytest.fixture(scope="module")
def finished_run(mysql_server, airflow_home, tmp_path_factory) -> Iterator[FinishedRun]:
    """The fixture DAG run to its end through ``dag.test()``, with the MySQL connections as Airflow
    connections in the environment (which the API server inherits)."""
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        cur.execute(f"CREATE DATABASE `{DATABASE}`")
        cur.execute(
            f"CREATE TABLE `{DATABASE}`.orders (id INT PRIMARY KEY, qty INT NOT NULL, note VARCHAR(40))"
        )
        cur.execute(f"CREATE TABLE `{DATABASE}`.items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL)")
        cur.executemany(f"INSERT INTO `{DATABASE}`.orders VALUES (%s, %s, 'seed')",
                        [(i, i % 7) for i in range(1, 201)])
        cur.executemany(f"INSERT INTO `{DATABASE}`.items VALUES (%s, %s)",
                        [(i, f"item-{i}") for i in range(1, 151)])
    cdc = MySQLSettings.from_url(mysql_server.cdc_url)
    work = tmp_path_factory.mktemp("ui-run")
    store, output = str(work / "chunks.db"), str(work / "out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(f"AIRFLOW_CONN_{MYSQL_CONN_ID.upper()}", _conn_env(cdc))
        admin = MySQLSettings.from_url(mysql_server.admin_url)
        mp.setenv(f"AIRFLOW_CONN_{ADMIN_CONN_ID.upper()}", _conn_env(admin))
        from tests.airflow.dags.mysqlcdc_ui_fixture import dag

        run = dag.test(run_conf={"database": DATABASE, "store": store, "output": output,
                                 "mysql_conn_id": MYSQL_CONN_ID, "admin_conn_id": ADMIN_CONN_ID})
        assert run.state == "success", f"the fixture DAG run ended {run.state}"
        tables = (f"{DATABASE}.orders", f"{DATABASE}.items")
        yield FinishedRun(dag.dag_id, run.run_id, store, output, tables, cdc)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")


@pytest.fixture(scope="module")
def api_server(finished_run) -> Iterator[AirflowApiServer]:
    with AirflowApiServer(users={"admin": "admin", "viewer": "viewer"}) as server:
        yield server


def _token(server: AirflowApiServer, user: str) -> str:
    response = requests.post(f"{server.url}/auth/token", timeout=30,
                             json={"username": user, "password": server.passwords[user]})
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


def _check_against_engine(t: TableStatus, row: dict) -> None:
    """One table as the page (or its JSON) shows it, against the engine's TableStatus."""
    assert row["phase"] == t.phase
    for name in ("chunks", "planned", "running", "committed", "failed", "rows"):
        assert int(str(row[name]).replace(",", "")) == getattr(t, name), name
    for name in ("min_hw", "max_hw", "consistent_from"):
        assert row[name] == (None if getattr(t, name) is None else str(getattr(t, name))), name


# --- auth and the JSON route -------------------------------------------------------------------------------


def test_status_requires_a_valid_token(finished_run, api_server):
    base = api_server.url
    for path in (finished_run.page_path, finished_run.api_path):
        anonymous = requests.get(base + path, timeout=30, allow_redirects=False)
        assert anonymous.status_code == 401, (path, anonymous.status_code)
        assert "orders" not in anonymous.text and "chunk" not in anonymous.text.lower()
        for headers, cookies in (({"Authorization": "Bearer not-a-jwt"}, {}), ({}, {"_token": "not-a-jwt"})):
            forged = requests.get(base + path, headers=headers, cookies=cookies, timeout=30,
                                  allow_redirects=False)
            assert forged.status_code in (401, 403), (path, headers, cookies, forged.status_code)
            assert "orders" not in forged.text
    assert "/auth/login" in requests.get(base + finished_run.page_path, timeout=30).text  # a link to log in

    # a viewer may read the DAG's runs: by bearer token (API clients) and by cookie (the UI's iframe)
    token = _token(api_server, "viewer")
    bearer = {"Authorization": f"Bearer {token}"}
    data = requests.get(base + finished_run.api_path, headers=bearer, timeout=60)
    assert data.status_code == 200, data.text
    body = data.json()
    expected = finished_run.expected()
    pipeline = body["pipeline"]
    assert (pipeline["mysql_conn_id"], pipeline["output"]) == (MYSQL_CONN_ID, finished_run.output)
    assert [row["table"] for row in body["tables"]] == [t.table for t in expected.tables]
    for t, row in zip(expected.tables, body["tables"]):
        _check_against_engine(t, row)
        assert row["stream_position"] == (None if t.stream_position is None else str(t.stream_position))
        assert (row["lag_bytes"], row["lag_files"]) == (t.lag_bytes, t.lag_files)
    # the stream's lag in seconds and binlog headroom (issue 40), as the engine has them
    want = expected.health.as_dict()
    assert {k: body["stream"][k] for k in ("needed", "needed_by", "lag_bytes", "expiry")} == {
        k: want[k] for k in ("needed", "needed_by", "lag_bytes", "expiry")}, body["stream"]
    assert set(body["stream"]) >= {"lag_seconds", "headroom_seconds", "headroom", "batch", "totals"}
    page = requests.get(base + finished_run.page_path, cookies={"_token": token}, timeout=60)
    assert page.status_code == 200 and f'data-table="{DATABASE}.orders"' in page.text
    assert 'data-field="lag_seconds"' in page.text and 'data-field="binlog_headroom"' in page.text
    assert finished_run.settings.password not in page.text + data.text


def test_the_api_server_loads_the_plugin_once(api_server):
    headers = {"Authorization": f"Bearer {_token(api_server, 'admin')}"}
    plugins = requests.get(f"{api_server.url}/api/v2/plugins", headers=headers, timeout=60).json()["plugins"]
    ours = [p for p in plugins if p["name"] == "mysqlcdc"]
    assert len(ours) == 1, plugins
    assert [(v["href"], v["destination"]) for v in ours[0]["external_views"]] == [
        ("/mysqlcdc/runs/{DAG_ID}/{RUN_ID}", "dag_run")
    ]
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/mysqlcdc"]
    errors = requests.get(f"{api_server.url}/api/v2/plugins/importErrors", headers=headers, timeout=60).json()
    assert errors["total_entries"] == 0, errors


def test_a_run_without_pipeline_and_an_unknown_run(finished_run, api_server):
    base, dag_id = api_server.url, finished_run.dag_id
    headers = {"Authorization": f"Bearer {_token(api_server, 'admin')}"}
    # a new run of the same DAG: queued, nothing runs it (no scheduler), so its plan task has not run
    created = requests.post(f"{base}/api/v2/dags/{dag_id}/dagRuns", headers=headers, timeout=60,
                            json={"logical_date": None, "conf": {}})
    assert created.status_code == 200, created.text
    run_id = created.json()["dag_run_id"]
    page = requests.get(base + _run_path(dag_id, run_id), headers=headers, timeout=60)
    assert page.status_code == 200 and NO_PIPELINE in page.text.lower()
    data = requests.get(base + _run_path(dag_id, run_id, api=True), headers=headers, timeout=60).json()
    assert data["pipeline"] is None and NO_PIPELINE in data["detail"].lower()
    missing = requests.get(base + _run_path(dag_id, "no-such-run"), headers=headers, timeout=60)
    assert missing.status_code == 404 and "No such DAG run" in missing.text


# --- in process: the DAG-level check, no MySQL, the latest record ------------------------------------------


def test_access_is_decided_per_dag_by_the_auth_manager(finished_run, monkeypatch):
    """The routes ask the auth manager about this very DAG (its runs and XComs): a user it denies gets 403."""
    from airflow.api_fastapi.app import _AuthManagerState, create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from airflow_provider_mysqlcdc.plugins.status_app import app

    monkeypatch.setattr(_AuthManagerState, "instance", None)  # a fresh one, dropped again after the test
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "test-only-" + "k" * 64)
    manager = create_auth_manager()
    asked: list[tuple] = []

    def is_authorized_dag(*, method, user, access_entity=None, details=None) -> bool:
        asked.append((method, access_entity.name if access_entity else None, details.id, user.get_name()))
        return user.get_name() != "outsider"

    monkeypatch.setattr(manager, "is_authorized_dag", is_authorized_dag)
    client = TestClient(app)
    for user, status_code in (("outsider", 403), ("viewer", 200)):
        token = manager.generate_jwt(SimpleAuthManagerUser(username=user, role="viewer"))
        response = client.get(finished_run.page_path.removeprefix("/mysqlcdc"), cookies={"_token": token})
        assert response.status_code == status_code, (user, response.text)
        assert ("orders" in response.text) == (status_code == 200)
    assert ("GET", "RUN", finished_run.dag_id, "outsider") in asked
    assert ("GET", "XCOM", finished_run.dag_id, "viewer") in asked


def test_without_mysql_the_page_shows_everything_but_lag(finished_run, monkeypatch):
    from airflow.utils.session import create_session

    from airflow_provider_mysqlcdc.plugins.status_app import load_run_status
    from airflow_provider_mysqlcdc.plugins.status_page import RunRef, render_status
    from airflow_provider_mysqlcdc.testing.mariadb import free_port

    s = finished_run.settings
    expected = {t.table: t for t in finished_run.expected().tables}
    env = f"AIRFLOW_CONN_{MYSQL_CONN_ID.upper()}"
    monkeypatch.setenv(env, _conn_env(s, port=free_port()))  # nothing listens there
    with create_session() as session:
        unreachable = load_run_status(session, finished_run.dag_id, finished_run.run_id)
    monkeypatch.delenv(env)  # no such connection at all
    with create_session() as session:
        undefined = load_run_status(session, finished_run.dag_id, finished_run.run_id)

    assert any("server position unknown" in n and "cannot reach MySQL" in n for n in unreachable.report.notes)
    assert any(f"MySQL connection {MYSQL_CONN_ID!r} unavailable" in n for n in undefined.notes)
    for loaded in (unreachable, undefined):
        assert loaded.report.server_position is None
        for t in loaded.report.tables:
            want = expected[t.table]
            assert t.lag_bytes is None and t.lag_files is None
            fields = ("phase", "chunks", "committed", "failed", "rows", "min_hw", "max_hw", "stream_position")
            assert [getattr(t, f) for f in fields] == [getattr(want, f) for f in fields]
        html = render_status(RunRef(finished_run.dag_id, finished_run.run_id), loaded.record, loaded.report,
                             notes=loaded.notes)
        assert 'class="notice"' in html and s.password not in html + json.dumps(loaded.report.as_dict())


def test_the_latest_pipeline_record_of_the_run_wins(finished_run, tmp_path):
    """A rerun of the plan task (or a record pushed by another, possibly mapped, task) replaces the first;
    a chunk store the API server cannot see is a problem the page names (and never creates)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY
    from airflow_provider_mysqlcdc.plugins.status_app import (
        PageProblem,
        find_pipeline_record,
        load_run_status,
    )

    dag_id, run_id = finished_run.dag_id, finished_run.run_id
    missing = tmp_path / "elsewhere" / "chunks.db"
    with create_session() as session:
        first = find_pipeline_record(session, dag_id, run_id)
        assert first is not None and first.tables == finished_run.tables
        newer = dataclasses.replace(first, tables=first.tables[:1], chunk_store=str(missing))
        XComModel.set(XCOM_KEY, newer.to_dict(), dag_id=dag_id, task_id="stream", run_id=run_id,
                      session=session)
        session.flush()
        try:
            assert find_pipeline_record(session, dag_id, run_id) == newer
            assert find_pipeline_record(session, dag_id, "no-such-run") is None
            with pytest.raises(PageProblem, match="does not exist on the API server") as problem:
                load_run_status(session, dag_id, run_id)
            assert problem.value.status_code == 503 and problem.value.record == newer
            assert not missing.parent.exists()
        finally:
            session.execute(delete(XComModel).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == "stream",
                XComModel.key == XCOM_KEY,
            ))


# --- the browser -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium((1600, 1100)) as driver:
        yield driver


def _page_rows(driver: Any) -> dict[str, dict]:
    """The summary table of the page (in the current frame) as {table: {field: text}}."""
    from selenium.webdriver.common.by import By

    rows = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "table#summary tr[data-table]"):
        cells = {td.get_attribute("data-field"): td.text.strip()
                 for td in tr.find_elements(By.CSS_SELECTOR, "[data-field]")}
        for name in ("min_hw", "max_hw", "consistent_from"):
            cells[name] = None if cells.get(name, "-") == "-" else cells[name]
        rows[tr.get_attribute("data-table")] = cells
    return rows


def test_browser_shows_the_run_status_in_the_dag_run_tab(finished_run, api_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.airflow.dags.mysqlcdc_ui_fixture import FAILED_ERROR

    driver = browser
    wait = WebDriverWait(driver, 90)
    login(driver, api_server, "admin")

    # the DAG run page of the Airflow UI has a "MySQL CDC" tab (the plugin's external view)
    dag_id, run_id = quote(finished_run.dag_id, safe=""), quote(finished_run.run_id, safe="")
    driver.get(f"{api_server.url}/dags/{dag_id}/runs/{run_id}")
    tab_text = "//*[self::a or self::button][.//text()[normalize-space()='MySQL CDC']]"
    wait.until(ec.element_to_be_clickable((By.XPATH, tab_text))).click()
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='MySQL CDC']")))
    # the UI filled in {DAG_ID} and {RUN_ID} of the href, URL-encoded
    assert frame.get_attribute("src") == api_server.url + finished_run.page_path
    driver.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "table#summary tr[data-table]")))
    html = driver.page_source
    if SCREENSHOTS:
        Path(SCREENSHOTS, "status_page.html").write_text(html)
        driver.switch_to.default_content()
        driver.save_screenshot(str(Path(SCREENSHOTS, "dag_run_tab.png")))
        driver.switch_to.frame(frame)
    rows = _page_rows(driver)
    expected = finished_run.expected()

    assert list(rows) == [t.table for t in expected.tables] == list(finished_run.tables)
    for t in expected.tables:
        row = rows[t.table]
        _check_against_engine(t, row)
        assert row["stream_position"] == stream_text(t) and row["lag"] == lag_text(t)
    orders, items = (next(t for t in expected.tables if t.table.endswith(n)) for n in (".orders", ".items"))
    assert orders.phase == STREAM and orders.committed == orders.chunks > 1 and orders.lag_bytes > 0
    assert orders.stream_position is not None
    assert rows[orders.table]["stream_position"] == str(orders.stream_position)
    assert items.phase == SNAPSHOT and items.failed == 1 and items.committed == items.chunks - 1
    assert items.rows > 0 and items.lag_from == "min_hw"
    assert driver.find_element(By.CSS_SELECTOR, "[data-field=server_position]").text == str(
        expected.server_position)

    # the failed chunk with its error, escaped: shown as text, never run as markup
    failure = driver.find_element(By.CSS_SELECTOR, f"section[data-table='{items.table}'] tr[data-chunk]")
    assert failure.get_attribute("data-chunk") == str(items.failures[0].chunk_id)
    assert failure.find_element(By.CSS_SELECTOR, "[data-field=error]").text == f"RuntimeError: {FAILED_ERROR}"
    scripts = driver.find_elements(By.TAG_NAME, "script")  # only the page's own (refresh, task links)
    assert len(scripts) == 1 and "PopStateEvent" in scripts[0].get_attribute("innerHTML")
    assert "alert(" not in scripts[0].get_attribute("innerHTML")
    notes = driver.find_element(By.CSS_SELECTOR, f"section[data-table='{items.table}'] ul.notes").text
    assert "failed chunks" in notes

    password = finished_run.settings.password
    assert password and password not in html
    driver.switch_to.default_content()
    assert password not in driver.page_source
    log = api_server.log_text()
    assert "/mysqlcdc/runs/" in log, "the server log should show the page requests"
    assert password not in log


def test_the_tab_shows_the_verification_and_the_repair_action(finished_run, api_server, browser):
    """What ``mysqlcdc verify`` recorded for ``orders`` (one chunk differs, the others match) in the tab's
    summary, in the table's section with the chunk that differs, as the repair action (the fixture DAG maps
    no snapshot groups, so the command to copy), and in the JSON route. Reuses the browser's session."""
    import sqlalchemy as sa
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from airflow_provider_mysqlcdc.engine.chunk_store import Verification
    from airflow_provider_mysqlcdc.engine.chunk_store.schema import verifications_table

    orders = f"{DATABASE}.orders"
    with ChunkStore(finished_run.store) as store:
        view = store.mirror_view(orders)
        assert view is not None and len(view.chunks) > 1
        differs, position = view.chunks[1].chunk_id, str(max(c.hw for c in view.chunks))
        for c in view.chunks:
            bad = c.chunk_id == differs
            store.record_verification(Verification(
                "ui-verify", orders, view.generation, c.chunk_id, "mismatch" if bad else "match", position,
                c.rows, c.rows - 1 if bad else c.rows, {"why": "rows differ <i>"} if bad else {}))
    command = f"mysqlcdc verify --table {orders} --chunks {differs} --repair"
    try:
        driver = browser
        driver.switch_to.default_content()
        if driver.get_cookie("_token") is None:  # run on its own: log in first
            login(driver, api_server, "admin")
        driver.get(f"{api_server.url}{finished_run.page_path}?refresh=0")
        section = f"section[data-table='{orders}']"
        WebDriverWait(driver, 60).until(ec.presence_of_element_located(
            (By.CSS_SELECTOR, f"{section} tr[data-mismatch='{differs}']")))
        summary = driver.find_element(By.CSS_SELECTOR, f"table#summary tr[data-table='{orders}']")
        n = len(view.chunks)
        assert summary.find_element(By.CSS_SELECTOR, "[data-field=verified]").text == f"{n - 1}/{n} match"
        assert summary.find_element(By.CSS_SELECTOR, "[data-field=differing]").text == "1 differ"
        assert summary.find_element(By.CSS_SELECTOR, "[data-field=verified_position]").text == position
        sentence = driver.find_element(By.CSS_SELECTOR, f"{section} [data-field=verification]").text
        assert f"at {position} (verify ui-verify, generation {view.generation}): {n - 1} chunks match, " \
               f"1 differs (chunk {differs})" in sentence, sentence
        row = driver.find_element(By.CSS_SELECTOR, f"{section} tr[data-mismatch='{differs}']")
        assert row.get_attribute("data-state") == "open"
        assert row.find_element(By.CSS_SELECTOR, "[data-field=key_range]").text.startswith("id in [")
        assert row.find_element(By.CSS_SELECTOR, "[data-field=why]").text == "rows differ <i>"
        repair = driver.find_element(By.CSS_SELECTOR, "#repair li[data-action=repair]")
        assert repair.find_element(By.CSS_SELECTOR, "[data-field=command]").text == command
        assert finished_run.settings.password not in driver.page_source
        if SCREENSHOTS:
            driver.save_screenshot(str(Path(SCREENSHOTS, "verification.png")))

        headers = {"Authorization": f"Bearer {_token(api_server, 'viewer')}"}
        body = requests.get(api_server.url + finished_run.api_path, headers=headers, timeout=60).json()
        verification = next(t for t in body["tables"] if t["table"] == orders)["verification"]
        assert (verification["verify_id"], verification["differing"], verification["matched"]) == (
            "ui-verify", 1, n - 1)
        assert [(m["chunk_id"], m["state"]) for m in verification["mismatches"]] == [(differs, "open")]
        assert [(a["kind"], a["value"]) for a in body["repair_actions"]] == [("repair", command)]
    finally:
        with ChunkStore(finished_run.store) as store, store.engine.begin() as conn:
            conn.execute(sa.delete(verifications_table).where(verifications_table.c.verify_id == "ui-verify"))
