"""Prints the conformance matrix at the end of the session and writes it to MATRIX_FILE."""
from __future__ import annotations

import pytest

from tests.conformance import matrix
from tests.conformance.matrix import MATRIX_FILE, RESULTS, render


@pytest.fixture(autouse=True)
def _matrix_flavor(server_flavor) -> None:
    """The matrix keeps each flavor's verdicts apart."""
    matrix.flavor = server_flavor


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    text = render()
    terminalreporter.write(text)
    try:
        with open(MATRIX_FILE, "w", encoding="utf-8") as f:
            f.write(text)
        terminalreporter.write(f"(matrix written to {MATRIX_FILE})\n")
    except OSError:
        pass
