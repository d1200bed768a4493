"""Headless Chromium for UI tests, and screenshots of what it showed (``airflow_ui`` drives the Airflow UI).

Debian's Chromium and chromedriver (``make system-deps`` installs them; installed here if missing and allowed,
else the test is skipped). The driver, and the browser it starts, die with the test process. Screenshots go
to ``$MYSQLCDC_UI_SCREENSHOTS`` or else ``<repo>/test-artifacts/screenshots/`` (git-ignored).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_mysqlcdc.testing.mariadb import _die_with_parent

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_WINDOW_SIZE = (1366, 900)
WINDOW_SIZE_ENV = "MYSQLCDC_UI_WINDOW_SIZE"  # e.g. 1600x1100
SCREENSHOTS_ENV = "MYSQLCDC_UI_SCREENSHOTS"


def chromium_or_skip() -> None:
    """Chromium and its driver from Debian; installed with apt-get when missing and allowed, else a skip."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return
    sudo = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if sudo is not None and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium", "chromium-driver"]
        for cmd in (["apt-get", "update", "-q"], install):
            # best effort: the check below skips when the install did not give both
            subprocess.run([*sudo, *cmd], env=env, capture_output=True, timeout=900, check=False)
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"{CHROMIUM} or {CHROMEDRIVER} missing and apt-get could not install chromium and "
                    "chromium-driver (run `make system-deps` as a user who may)")


def window_size(explicit: tuple[int, int] | None = None) -> tuple[int, int]:
    """``explicit``, else ``$MYSQLCDC_UI_WINDOW_SIZE`` (``WIDTHxHEIGHT``), else 1366x900."""
    if explicit is not None:
        return explicit
    value = os.environ.get(WINDOW_SIZE_ENV, "")
    if match := re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", value):
        return int(match[1]), int(match[2])
    return DEFAULT_WINDOW_SIZE


def _dying_chromium(workdir: Path) -> str:
    """A launcher for Chromium that dies with chromedriver: PR_SET_PDEATHSIG does not pass to a forked
    child, so chromedriver's own (see ``chromium``) leaves the browser behind; ``setpriv`` sets it anew."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return CHROMIUM
    launcher = workdir / "chromium"
    launcher.write_text(f'#!/bin/sh\nexec {setpriv} --pdeathsig TERM {CHROMIUM} "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


@contextlib.contextmanager
def chromium(size: tuple[int, int] | None = None) -> Iterator[Any]:
    """A headless Chromium WebDriver with a throwaway profile (skips the test if Chromium is unavailable);
    ``size`` is the window's (width, height), see ``window_size``."""
    chromium_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    width, height = window_size(size)
    workdir = Path(tempfile.mkdtemp(prefix="mysqlcdc-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = _dying_chromium(workdir)
    profile = workdir / "profile"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    # chromedriver, and through the launcher the browser, must not outlive a killed test run either
    service = Service(executable_path=CHROMEDRIVER, popen_kw={"preexec_fn": _die_with_parent})
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(workdir, ignore_errors=True)


def screenshots_dir() -> Path:
    """``$MYSQLCDC_UI_SCREENSHOTS`` or ``<repo>/test-artifacts/screenshots`` (created)."""
    path = Path(os.environ.get(SCREENSHOTS_ENV) or REPO / "test-artifacts" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(driver: Any, name: str) -> Path:
    """Saves what the browser shows as ``<name>.png`` in the screenshots directory; returns the path."""
    path = screenshots_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    driver.save_screenshot(str(path))
    return path
