"""Selenium helpers that drive the Airflow 3.3 React UI the way a user does: log in, open pages, clear.

Elements are found by what a user sees or by the UI's own test ids and accessible labels, never by the
generated ``css-*`` class names. The selectors were read off the running 3.3.2 UI (its page source and
screenshots); the clear dialog's option buttons carry no ARIA state, so whether an option is on is read from
the border the UI draws around a selected option (``borderWidth`` 1 when selected, 0 when not).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

UI_TIMEOUT = 90.0

# --- selectors (Airflow 3.3 UI) ----------------------------------------------------------------------------
# The task instance page's clear button is an icon whose accessible label is its tooltip (so at 1366 and at
# 1920 px wide); the UI's text variant "Clear Task Instance" is matched too, should a layout show that.
CLEAR_TI_BUTTON = ("//button[@aria-label='Press shift+c to clear' "
                   "or normalize-space()='Clear Task Instance']")
OPEN_DIALOG = ("//*[@role='dialog' and @data-state='open' "
               "and .//h2[contains(normalize-space(), 'Clear Task Instance')]]")
DIALOG_OPTION = ".//button[@data-group-item and normalize-space()='{label}']"
DIALOG_CONFIRM = ".//button[normalize-space()='Confirm']"
AFFECTED_COUNT = ".//p[starts-with(normalize-space(), 'Affected Tasks:')]"
AFFECTED_ROWS = ".//table[@data-testid='table-list']/tbody/tr"
STATE_BADGE = "following-sibling::*[@data-testid='state-badge'][1]"


class Server(Protocol):
    url: str
    passwords: dict[str, str]


@dataclass(frozen=True)
class PageHeader:
    """A run or task instance page as its header shows it: ``work [beta]``, ``Failed``."""

    title: str
    state: str


@dataclass(frozen=True)
class AffectedTask:
    """One row of the clear dialog's "Affected Tasks" (map index -1 for an unmapped task)."""

    task_id: str
    state: str
    map_index: int


def _wait(driver: Any, timeout: float = UI_TIMEOUT) -> Any:
    """Polls every 0.1 s (Selenium's default 0.5 s adds up over a test's dozens of page waits)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1)


def _q(value: str) -> str:
    return quote(value, safe="")


def _xpath_literal(text: str) -> str:
    """``text`` as an XPath 1.0 string literal (which has no escapes)."""
    if "'" not in text:
        return f"'{text}'"
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


def login(driver: Any, server: Server, user: str) -> None:
    """Through the real login page: the UI sends an anonymous visitor there."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    driver.get(server.url + "/")
    wait = _wait(driver)
    wait.until(ec.url_contains("/auth/login"))
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(server.passwords[user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url and d.get_cookie("_token") is not None)


def _header(driver: Any, title_xpath: str) -> PageHeader:
    """Waits for the page's ``h2`` title and its state badge (a page renders them once its data is in)."""
    from selenium.webdriver.common.by import By

    def loaded(d: Any) -> PageHeader | None:
        for h2 in d.find_elements(By.XPATH, title_xpath):
            badges = h2.find_elements(By.XPATH, STATE_BADGE)
            if badges and badges[0].text.strip():
                return PageHeader(h2.text.strip(), badges[0].text.strip())
        return None

    return _wait(driver).until(loaded, f"page header {title_xpath}")


def open_run(driver: Any, server: Server, dag_id: str, run_id: str) -> PageHeader:
    """The DAG run page; returns its header (run id, state)."""
    driver.get(f"{server.url}/dags/{_q(dag_id)}/runs/{_q(run_id)}")
    return _header(driver, f"//h2[normalize-space()={_xpath_literal(run_id)}]")


def open_task_instance(driver: Any, server: Server, dag_id: str, run_id: str, task_id: str,
                       map_index: int = -1) -> PageHeader:
    """A task instance page (one map index of a mapped task); returns its header (``task [name]``, state)."""
    path = f"{server.url}/dags/{_q(dag_id)}/runs/{_q(run_id)}/tasks/{_q(task_id)}"
    driver.get(path if map_index < 0 else f"{path}/mapped/{map_index}")
    literal = _xpath_literal(task_id)
    return _header(driver, f"//h2[normalize-space()={literal} or starts-with(normalize-space(), "
                           f"concat({literal}, ' ['))]")


def _option_selected(button: Any) -> bool:
    return float(button.value_of_css_property("border-top-width").removesuffix("px") or 0) > 0


def _affected(dialog: Any) -> tuple[int, list[AffectedTask]] | None:
    """The dialog's affected-task count and rows once they agree (the list loads by a dry-run request)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        counts = dialog.find_elements(By.XPATH, AFFECTED_COUNT)
        if not counts:
            return None
        count = int(counts[0].text.split(":", 1)[1])
        rows = []
        for tr in dialog.find_elements(By.XPATH, AFFECTED_ROWS):
            cells = [td.text.strip() for td in tr.find_elements(By.TAG_NAME, "td")]
            # checkbox, task id, state, map index, run id
            rows.append(AffectedTask(cells[1], cells[2], int(cells[3])))
    except (StaleElementReferenceException, ValueError, IndexError):
        return None
    return (count, rows) if count == len(rows) and count > 0 else None


def clear_task_instance(driver: Any, server: Server, dag_id: str, run_id: str, task_id: str,
                        map_index: int = -1, *, downstream: bool = True,
                        screenshot_name: str | None = None) -> list[AffectedTask]:
    """Clears one task instance with the UI's own "Clear" button and dialog, "Downstream" set as wanted
    (3.3 turns it on by default); returns the tasks the dialog said it would clear, once it has closed."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    from tests.support.browser import screenshot

    open_task_instance(driver, server, dag_id, run_id, task_id, map_index)
    wait = _wait(driver)
    wait.until(ec.element_to_be_clickable((By.XPATH, CLEAR_TI_BUTTON))).click()
    dialog = wait.until(ec.visibility_of_element_located((By.XPATH, OPEN_DIALOG)))
    option = (By.XPATH, DIALOG_OPTION.format(label="Downstream"))
    button = wait.until(lambda d: dialog.find_element(*option))
    if _option_selected(button) != downstream:
        before = wait.until(lambda d: _affected(dialog), "affected tasks listed")
        button.click()
        wait.until(lambda d: _option_selected(dialog.find_element(*option)) == downstream,
                   f"Downstream {'on' if downstream else 'off'}")
        try:  # the list is asked for again; it stays the same when the task has nothing downstream
            _wait(driver, 10).until(lambda d: (now := _affected(dialog)) is not None and now != before)
        except TimeoutException:
            pass
    _, affected = wait.until(lambda d: _affected(dialog), "affected tasks listed")
    if screenshot_name:
        screenshot(driver, screenshot_name)
    wait.until(ec.element_to_be_clickable(dialog.find_element(By.XPATH, DIALOG_CONFIRM))).click()
    wait.until(ec.invisibility_of_element_located((By.XPATH, OPEN_DIALOG)), "clear dialog closed")
    return affected


def open_trigger_form(driver: Any, server: Server, dag_id: str) -> Any:
    """The DAG page's Trigger dialog, its params form filled with their defaults; returns the dialog's own
    Trigger (submit) button once the form has rendered."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    driver.get(f"{server.url}/dags/{_q(dag_id)}")
    wait = _wait(driver)
    opener = "//button[.//text()[normalize-space()='Trigger']]"
    wait.until(ec.element_to_be_clickable((By.XPATH, opener))).click()
    dialog = "//*[@role='dialog'][.//text()[starts-with(normalize-space(), 'Trigger Dag')]]"
    wait.until(ec.presence_of_element_located((By.XPATH, f"{dialog}//*[normalize-space()='Run Parameters']")))
    return wait.until(ec.presence_of_element_located(
        (By.XPATH, f"{dialog}//button[@data-testid='trigger-dag-submit']")))
