"""The on-call engineer's worst hour, end to end: a real api-server, scheduler (LocalExecutor) and
dag-processor, the example DAG as users get it, MariaDB with writers, Spark, and Chromium on a 1366 px
screen.

1. The run's two chunk groups fail on both of their tries: the ``spark-submit`` of ``t_nopk`` (no primary key,
   planned through the DAG's ``chunk_keys`` param) is killed before any chunk starts (exit -9), the ``t_ci``
   group's driver mid-chunk. The stream task stays ``upstream_failed``, the run ends failed.
2. The MySQL CDC tab says what failed and why (the real cause, not "planned"), names each failed mapped task
   by map index and group name, links it, and gives a ready-to-paste ``redo_chunks`` value; the task's own
   error says the same once. The map index is named from the try's start, not a bare number.
3. Recovery as the docs say: from the tab's link, clear the first group with Downstream on (the dialog's
   default); the tab shows progress while it runs. The second group is cleared the wrong way (Downstream off):
   the run ends failed again and the tab then says to clear the stream task, which finishes the run
   ``success``.
4. The writers (bounded by volume: a first set over the failing run, a second over the first group's rerun)
   stop before the last rerun, so the stream that finishes the run catches up everything: the mirror equals
   the source row by row. The task logs are quiet: no Spark INFO lines, the result on one line,
   each stream batch and each "planned" line logged once.

Screenshots of each state (running, failed before any chunk started + failed mid-chunk, the clear dialog,
recovered) are kept in ``test-artifacts/screenshots`` (or ``$MYSQLCDC_UI_SCREENSHOTS``).
"""
from __future__ import annotations

import glob
import json
import os
import posixpath
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, RUNNING, ChunkStore, UnknownChunk
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline.settings import CHUNK_STORE_FILE
from tests.conftest import MIGRATED_DB
from tests.support.airflow_services import AirflowServices
from tests.support.airflow_ui import clear_task_instance, login, open_run, open_trigger_form
from tests.support.browser import chromium, screenshot
from tests.support.engine_harness import assert_mirror_equals_source
from tests.support.processes import argv_of, snapshot_tables
from tests.support.servers import airflow_connection
from tests.support.threads import ReportingThread
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

DAG_ID, SNAPSHOT_TASK = "mysqlcdc_replication", "snapshot_phase.snapshot_chunk_group"
SPECS = [s for s in TABLE_SPECS if s.name in ("t_nopk", "t_ci")]
NO_PK = next(s for s in SPECS if s.chunk_key)
SEED = 61


def _spark_processes(output: str, table: str) -> list[tuple[int, list[str]]]:
    """spark-submit (its shell, then its JVM) and the Python driver of a snapshot of ``table`` into
    ``output``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        argv = argv_of(proc.name)
        if int(proc.name) != os.getpid() and output in argv and table in snapshot_tables(argv):
            found.append((int(proc.name), argv))
    return found


class Killer(ReportingThread):
    """While armed: kills every snapshot ``spark-submit`` of the ``unstarted`` table at once (before its
    driver can start a chunk), and the Python driver of the ``midway`` table once one of its chunks is half
    written."""

    def __init__(self, output: str, unstarted: str, midway: str) -> None:
        super().__init__("on-call-killer")
        self.output, self.unstarted, self.midway = output, unstarted, midway
        self.store_path = os.path.join(output, CHUNK_STORE_FILE)
        self.armed = {unstarted: threading.Event(), midway: threading.Event()}
        for event in self.armed.values():
            event.set()
        self.kills: dict[str, int] = {unstarted: 0, midway: 0}

    def _run(self) -> None:
        while not self.halt.is_set():
            if self.armed[self.unstarted].is_set():
                for pid, _argv in _spark_processes(self.output, self.unstarted):
                    self._kill(pid, self.unstarted)
            if self.armed[self.midway].is_set() and self._half_written():
                for pid, argv in _spark_processes(self.output, self.midway):
                    if (not Path(argv[0]).name.startswith("java")
                            and any(a.endswith("snapshot_chunks.py") for a in argv)):
                        self._kill(pid, self.midway)  # the driver only: spark-submit's JVM sees it die
            time.sleep(0.05)

    def _kill(self, pid: int, table: str) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            self.kills[table] += 1
        except ProcessLookupError:
            pass

    def _half_written(self) -> bool:
        if not os.path.exists(self.store_path):
            return False
        with ChunkStore(self.store_path) as store:
            try:
                running = [c for c in store.chunks(self.midway) if c.status == RUNNING]
            except UnknownChunk:  # not planned yet
                return False
        snapshot = posixpath.join(table_dir(self.output, TableId.parse(self.midway)), "snapshot")
        return any(glob.glob(posixpath.join(snapshot, f"generation={c.generation}", f"chunk={c.chunk_id}",
                                            "version=*", "part-*.parquet")) for c in running)

    def disarm(self) -> None:
        for event in self.armed.values():
            event.clear()


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> Path:
    """Where the example DAG's default ``output`` points in these services (``$MYSQLCDC_DEMO_OUTPUT``)."""
    return tmp_path_factory.mktemp("demo") / "lake"


@pytest.fixture(scope="module")
def services(mysql_server, airflow_home, demo_output) -> Iterator[AirflowServices]:
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    env = {
        "MYSQLCDC_DEMO_OUTPUT": str(demo_output),
        # the connection as the docs create it: type mysqlcdc (no MySQL provider installed here)
        "AIRFLOW_CONN_MYSQLCDC_SOURCE": airflow_connection(settings, conn_type="mysqlcdc"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        # the example DAG's retries=1 with Airflow's default delay (5 min) would only make the test wait
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
    }
    with AirflowServices(env=env, parallelism=2, template_db=airflow_home / MIGRATED_DB) as running:
        running.wait_for_dag(DAG_ID)
        yield running


def _tis(services: AirflowServices, run_id: str) -> dict[tuple[str, int], Any]:
    return {(ti.task_id, ti.map_index): ti for ti in services.task_instances(DAG_ID, run_id)}


def _group_of(services: AirflowServices, run_id: str, table: str) -> Any:
    groups = [ti for (task, _), ti in _tis(services, run_id).items()
              if task == SNAPSHOT_TASK and (ti.rendered_map_index or "").startswith(f"{table} chunks ")]
    return groups[0] if len(groups) == 1 else None


def _wait_state(services: AirflowServices, run_id: str, key: tuple[str, int], states: tuple[str, ...],
                timeout: float = 300) -> Any:
    return services.wait_until(
        lambda: (ti if (ti := _tis(services, run_id).get(key)) is not None and ti.state in states else None),
        timeout, f"{key} in {states}")


def _open_tab(driver: Any, services: AirflowServices, run_id: str) -> Any:
    """The run page's MySQL CDC tab, switched into its frame."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 90, poll_frequency=0.1)
    driver.switch_to.default_content()
    open_run(driver, services, DAG_ID, run_id)
    tab = "//*[self::a or self::button][.//text()[normalize-space()='MySQL CDC']]"
    wait.until(ec.element_to_be_clickable((By.XPATH, tab))).click()
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='MySQL CDC']")))
    driver.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "table#summary tr[data-table]")))
    return frame


def _shot(driver: Any, name: str) -> None:
    driver.switch_to.default_content()
    screenshot(driver, name)


def _fits(driver: Any) -> None:
    """No horizontal scrolling inside the tab: every column visible on a 1366 px screen."""
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the tab is {width[0]} px wide in a {width[1]} px frame"


def _actions(driver: Any) -> list[tuple[str, str]]:
    from selenium.webdriver.common.by import By

    return [(li.get_attribute("data-action"), li.text)
            for li in driver.find_elements(By.CSS_SELECTOR, "#actions li")]


def _follow_action_link(driver: Any, services: AirflowServices, task_text: str) -> None:
    """Click the tab's link to a task instance: the Airflow UI around the frame opens its page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    link = next(a for a in driver.find_elements(By.CSS_SELECTOR, "#actions a[data-top]")
                if task_text in a.get_attribute("data-task"))
    href = link.get_attribute("href")
    link.click()
    driver.switch_to.default_content()
    WebDriverWait(driver, 60, poll_frequency=0.1).until(lambda d: d.current_url == href,
                                                        f"the UI to open {href}")


def test_a_failed_run_is_recovered_from_the_tab(services, mysql_server, mysql_db, tmp_path):
    from selenium.webdriver.common.by import By

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=160, seed=SEED, specs=SPECS)
    output = str(tmp_path / "lake")
    t_nopk, t_ci = f"{mysql_db}.{NO_PK.name}", f"{mysql_db}.t_ci"
    # one chunk group per table (pack_tables off), each its own Spark application (shared_spark_app off: the
    # killer below kills each group's driver); reads slowed (50 rows/s per read) so a chunk is caught half
    # written
    conf = {"tables": f"{mysql_db}.t_*", "output": output, "chunk_size": 60, "chunks_per_group": 64,
            "pack_tables": False, "shared_spark_app": False,
            "max_concurrent_reads": 2, "rows_per_second": 100, "chunk_keys": {t_nopk: NO_PK.chunk_key}}
    # writers bounded by volume (every row they add is read again, slowly, by each rerun): over the run's
    # start and first tries, then (``rerun_writes``) over the first group's rerun
    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=1, specs=SPECS, pace=0.3,
                        max_transactions=30)
    rerun_writes = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED + 1, writers=1, specs=SPECS,
                            pace=0.1, max_transactions=15)
    rerun_writes_started = False
    workload.start()
    killer = Killer(output, t_nopk, t_ci)
    killer.start()
    try:
        with chromium() as driver:
            login(driver, services, "admin")
            run_id = services.trigger(DAG_ID, conf)

            # 1. both groups fail on both tries; the stream never runs
            group = {t: services.wait_until(lambda t=t: _group_of(services, run_id, t), 300,
                                            f"{t}'s group named")
                     for t in (t_nopk, t_ci)}
            for t in (t_nopk, t_ci):
                ti = _wait_state(services, run_id, (SNAPSHOT_TASK, group[t].map_index), ("failed", "success"),
                                 400)
                assert ti.state == "failed" and killer.error is None, (ti, killer.error, killer.kills)
                killer.armed[t].clear()
            assert services.wait_for_run(DAG_ID, run_id, 120) == "failed"
            tis = _tis(services, run_id)
            assert tis[("stream", -1)].state == "upstream_failed"
            assert killer.kills[t_nopk] >= 2 and killer.kills[t_ci] >= 2, killer.kills
            for t in (t_nopk, t_ci):
                ti = tis[(SNAPSHOT_TASK, group[t].map_index)]
                assert ti.try_number == 2 and ti.rendered_map_index.endswith("(plan generation 1)"), ti
            name = {t: tis[(SNAPSHOT_TASK, group[t].map_index)].rendered_map_index for t in (t_nopk, t_ci)}
            index = {t: group[t].map_index for t in (t_nopk, t_ci)}

            # the task's error: the cause first, once; the mapped task by index and name; a redo value
            log = services.task_log(DAG_ID, run_id, SNAPSHOT_TASK, index[t_nopk], try_number=2)
            assert "the Spark application ended before any chunk started: spark-submit exit code -9" in log
            assert f"clear task instance {SNAPSHOT_TASK} [map index {index[t_nopk]}: {name[t_nopk]}]" in log
            assert f'redo_chunks \\"{t_nopk}=' in log or f'redo_chunks "{t_nopk}=' in log
            assert "chunk 0: planned" not in log
            log = services.task_log(DAG_ID, run_id, SNAPSHOT_TASK, index[t_ci], try_number=2)
            assert ("ended before this chunk committed" in log
                    and f"[map index {index[t_ci]}: {name[t_ci]}]" in log)

            # 2. the tab: what failed, why, and what to do
            _open_tab(driver, services, run_id)
            _fits(driver)
            actions = _actions(driver)
            assert [kind for kind, _ in actions] == ["clear-group", "clear-group", "redo"], actions
            for t in (t_nopk, t_ci):
                assert any(f"[map index {index[t]}: {name[t]}]" in text and "Downstream on" in text
                           for _, text in actions), (t, actions)
            redo = driver.find_element(By.CSS_SELECTOR, "[data-field=redo_chunks]").text
            assert f"{t_nopk}=" in redo and f"{t_ci}=" in redo
            row = driver.find_element(By.CSS_SELECTOR, f"table#summary tr[data-table='{t_nopk}']")
            fields = {e.get_attribute("data-field"): e.text
                      for e in row.find_elements(By.CSS_SELECTOR, "[data-field]")}
            assert fields["failed"] == fields["chunks"] and fields["planned"] == "0", fields
            errors = [e.text for e in driver.find_elements(
                By.CSS_SELECTOR, f"section[data-table='{t_nopk}'] tr[data-chunk] [data-field=error]")]
            assert errors and all(e.startswith("the Spark application ended before this chunk started "
                                               "(spark-submit exit code -9") for e in errors), errors
            states = {r.get_attribute("data-map-index"):
                      r.find_element(By.CSS_SELECTOR, "[data-field=state]").text
                      for r in driver.find_elements(By.CSS_SELECTOR, "table#groups tr[data-map-index]")}
            assert states == {str(index[t_nopk]): "failed", str(index[t_ci]): "failed"}
            _shot(driver, "on_call_1_failed_before_start_and_mid_chunk")

            # 3a. the first group the documented way: the tab's link, Clear with Downstream on
            driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe[title='MySQL CDC']"))
            _follow_action_link(driver, services, f"[map index {index[t_nopk]}:")
            affected = clear_task_instance(driver, services, DAG_ID, run_id, SNAPSHOT_TASK, index[t_nopk],
                                           downstream=True, screenshot_name="on_call_2_clear_dialog")
            # the group runner's setup and teardown are cleared with it (Airflow's rule for setups); with
            # shared_spark_app off this run's start_runner starts none, and the group submits its own
            runner_tasks = {"start_runner", "stop_runner"}
            assert {a.task_id for a in affected} == {SNAPSHOT_TASK, "stream", *runner_tasks}, affected
            _wait_state(services, run_id, (SNAPSHOT_TASK, index[t_nopk]), ("running",), 120)
            store = ChunkStore(os.path.join(output, CHUNK_STORE_FILE))
            services.wait_until(lambda: any(c.status == RUNNING for c in store.chunks(t_nopk)), 120,
                                "a chunk of the rerun reading")
            _open_tab(driver, services, run_id)
            progress = driver.find_element(By.CSS_SELECTOR, "[data-field=progress]").text
            assert " chunks (" in progress and " running" in progress, progress
            assert driver.find_element(By.CSS_SELECTOR, "#refresh").is_displayed()
            _shot(driver, "on_call_3_running")
            # writes once a chunk of the rerun has its HW: the stream that finishes the run then has binlog
            # to take a batch of, past the smallest HW
            services.wait_until(lambda: any(c.status == COMMITTED for c in store.chunks(t_nopk)), 120,
                                "a chunk of the rerun committed")
            rerun_writes.start()
            rerun_writes_started = True
            _wait_state(services, run_id, (SNAPSHOT_TASK, index[t_nopk]), ("success",), 300)
            # the other group is still failed: the stream is upstream_failed again, the run failed
            assert services.wait_for_run(DAG_ID, run_id, 120) == "failed"

            # 3b. the second group the wrong way (Downstream off): the tab then points at the stream task. The
            # writers stop first: the stream that finishes this run then catches up every change
            stats, more = workload.stop(), rerun_writes.stop()
            affected = clear_task_instance(driver, services, DAG_ID, run_id, SNAPSHOT_TASK, index[t_ci],
                                           downstream=False)
            assert {a.task_id for a in affected} == {SNAPSHOT_TASK, *runner_tasks}, affected
            _wait_state(services, run_id, (SNAPSHOT_TASK, index[t_ci]), ("success",), 300)
            assert services.wait_for_run(DAG_ID, run_id, 120) == "failed"
            _open_tab(driver, services, run_id)
            actions = _actions(driver)
            assert [kind for kind, _ in actions] == ["clear-stream"], actions
            _shot(driver, "on_call_4_stream_left_upstream_failed")
            driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe[title='MySQL CDC']"))
            _follow_action_link(driver, services, "stream")
            clear_task_instance(driver, services, DAG_ID, run_id, "stream")
            # the run's state is read once the stream has run: right after the dialog closes it may still
            # read the "failed" of before the clear (seen in CI)
            stream_ti = _wait_state(services, run_id, ("stream", -1), ("success", "failed"), 400)
            if stream_ti.state != "success":
                pytest.fail("the stream did not finish the run; its log:\n" + services.task_log(
                    DAG_ID, run_id, "stream", try_number=stream_ti.try_number)[-6000:])
            assert services.wait_for_run(DAG_ID, run_id, 120) == "success"
            _open_tab(driver, services, run_id)
            assert driver.find_element(By.CSS_SELECTOR, "#actions").text.startswith("Nothing to do")
            assert all(r.get_attribute("data-table") for r in driver.find_elements(
                By.CSS_SELECTOR, "table#summary tr[data-table]"))
            phases = [e.text
                      for e in driver.find_elements(By.CSS_SELECTOR, "table#summary [data-field=phase]")]
            assert phases == ["stream", "stream"], phases
            _shot(driver, "on_call_5_recovered")
    finally:
        killer.halt.set()
        workload.stop()
        if rerun_writes_started:
            rerun_writes.stop()
    assert stats.transactions + more.transactions > 20, (stats, more)

    # 4. the stream that finished the run caught up every change: the mirror equals the source
    assert_mirror_equals_source(settings, output, [TableId.parse(t_nopk), TableId.parse(t_ci)], min_rows=100)

    # quiet logs: Spark's INFO lines stay out, the group's result is one line, each batch is logged once
    snapshot_log = services.task_log(DAG_ID, run_id, SNAPSHOT_TASK, index[t_nopk], try_number=3)
    stream_try = _tis(services, run_id)[("stream", -1)].try_number
    stream_log = services.task_log(DAG_ID, run_id, "stream", try_number=stream_try)
    # Spark's own INFO: only the 3 lines before spark.log.level applies
    for log in (snapshot_log, stream_log):
        assert len(re.findall(r"\d\d:\d\d:\d\d INFO [A-Za-z]+:", log)) <= 3, log[-3000:]
        assert "INFO pymysqlreplication" not in log
    # the result, on one line (the spark-submit command line, with its --chunk-group, is one more)
    assert sum("chunk_id" in line and "--chunk-group" not in line for line in snapshot_log.splitlines()) == 1
    plan_log = services.task_log(DAG_ID, run_id, "plan", try_number=1)
    for t in (t_nopk, t_ci):
        assert sum(f"planned {t}: generation 1" in line
                   for line in plan_log.splitlines()) == 1, plan_log[-3000:]
    batches = [line for line in stream_log.splitlines() if re.search(r"batch \d+: \d+ changes", line)]
    assert batches and len(batches) == len({re.search(r"batch \d+", b)[0] for b in batches}), batches


def test_the_example_dag_triggers_from_the_ui_form_with_its_defaults(services, mysql_server, demo_output):
    """A new user's first click: the DAG page's Trigger dialog, every param at its default, is accepted (its
    Trigger button enabled) and the run it starts succeeds, here on the default table ``demo.orders``."""
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS demo")
        cur.execute("CREATE TABLE demo.orders (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20))")
        cur.executemany("INSERT INTO demo.orders VALUES (%s, %s, %s)",
                        [(i, i * 1.25, f"order {i}") for i in range(1, 201)])
    try:
        with chromium() as driver:
            login(driver, services, "admin")
            services.unpause(DAG_ID)
            before = set(services.run_ids(DAG_ID))
            button = open_trigger_form(driver, services, DAG_ID)
            screenshot(driver, "trigger-form-defaults")
            assert button.is_enabled(), "the Trigger button is disabled with the DAG's defaults"
            button.click()
            run_id = services.wait_until(lambda: next(iter(set(services.run_ids(DAG_ID)) - before), None), 60,
                                         "the run the form started")
        assert services.wait_for_run(DAG_ID, run_id, 300) == "success", _tis(services, run_id)
        assert_mirror_equals_source(settings, str(demo_output), [TableId("demo", "orders")], min_rows=200)
    finally:
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS demo")
