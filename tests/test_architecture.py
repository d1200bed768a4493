"""The import contracts (``[tool.importlinter]`` in pyproject.toml) hold: imports point downward only.

Engine below Spark below the CLI and the Airflow layer; inside the engine, its rooms in their order; no cycle
among the modules of any folder; the engine imports neither pyspark nor airflow. Breaking one fails the suite
with import-linter's report, which names the import and the line.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lint_imports(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache", *args],
                          check=False, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept() -> None:
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "Contracts: 5 kept, 0 broken." in result.stdout, result.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The check can fail: a copy of the package whose engine imports the Spark layer breaks the layers."""
    copy = tmp_path / "repo"
    copy.mkdir()
    subprocess.run(["cp", "-r", str(REPO / "airflow_provider_mysqlcdc"), str(copy)], check=True)
    (copy / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    bad = copy / "airflow_provider_mysqlcdc" / "engine" / "model" / "upward.py"
    bad.write_text("from airflow_provider_mysqlcdc.spark.session import build_session  # noqa: F401\n")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], check=False, cwd=copy,
        capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    if "Could not find package" in result.stdout + result.stderr:
        pytest.fail(f"lint-imports did not analyse the copy: {result.stdout}{result.stderr}")
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout + result.stderr
    report = " ".join(result.stdout.split())  # rich wraps long lines
    assert ("airflow_provider_mysqlcdc.engine.model.upward -> "
            "airflow_provider_mysqlcdc.spark.session (l.1)") in report
    assert "Layers: the Airflow layer and the CLI above Spark above the engine" in report
