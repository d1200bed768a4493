"""Loading the compiled module, or saying why it is absent.

The package must import where the extension was not built (no C compiler at install time, an interpreter
it was not built for): callers then keep mysql-replication's pure-Python decoding. That costs ~50x in a
catch-up, so it is said once per process in the log, not silently.
"""
from __future__ import annotations

import logging
import threading
from types import ModuleType

from airflow_provider_mysqlcdc.engine.binlog.rows_decoder.codes import Flag, Out, Wire

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_warned = False

_rows: ModuleType | None
_missing: str | None
try:
    from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import _rows as _built

    _built.check_codes(Wire, Out, Flag)
    _rows, _missing = _built, None
except ImportError as exc:  # not built, built for another interpreter, or codes out of step
    _rows = None
    _missing = (
        f"the compiled rows-event decoder is not available ({exc}); rows events are decoded by "
        "mysql-replication in pure Python, ~50x slower. Reinstall with a C compiler present "
        "(make setup, or pip install -e . with gcc and the Python headers)"
    )


def module() -> ModuleType | None:
    """The compiled module, or None (logged once per process)."""
    global _warned
    if _rows is None and not _warned:
        with _lock:
            if not _warned:
                _warned = True
                _log.warning("%s", _missing)
    return _rows


def missing_reason() -> str | None:
    """Why the compiled module is absent; None when it is loaded."""
    module()
    return _missing
