"""Lint and types hold: ``ruff check .`` and ``mypy`` pass, with the versions pinned in the test extra.

Both read their settings from pyproject.toml (``[tool.ruff]``, ``[tool.mypy]``): ruff's default rules plus the
line length over the whole tree; mypy over the package, ``spark_apps`` and ``dags``. A finding fails the suite
with the tool's own report, which names the file, the line and the rule. mypy keeps its cache in the repo's
``.mypy_cache``, so a run after a small change rechecks only what changed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / tool), *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert result.returncode == 0, f"ruff check . found problems:\n{result.stdout}{result.stderr}"


def test_mypy_finds_nothing() -> None:
    result = _run("mypy")
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"
    assert result.stdout.startswith("Success: no issues found"), result.stdout + result.stderr
