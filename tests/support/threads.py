"""Helper threads of the tests: a background thread whose failure the test reports instead of losing."""
from __future__ import annotations

import threading


class ReportingThread(threading.Thread):
    """Runs ``_run`` until it returns or ``halt`` is set; an exception is kept in ``error`` (the test asserts
    it is None) instead of dying unseen in the thread."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.halt = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        raise NotImplementedError
